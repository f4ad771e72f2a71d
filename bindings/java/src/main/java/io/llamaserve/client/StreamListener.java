package io.llamaserve.client;

import io.llamaserve.ToolCall;

/**
 * Receives a streamed generation. Called on the HTTP client's threads, one call at a time per
 * stream; a slow callback slows the stream (the connection is not read meanwhile), it does
 * not buffer without bound. An exception thrown from {@link #onText} or {@link #onToolCall}
 * cancels the stream and is passed to {@link #onError}.
 */
public interface StreamListener {
  /** A piece of generated text (never empty). */
  void onText(String text);

  /**
   * A function call of the answer, put together from the stream's pieces, once it is
   * complete (a later call started, or the answer finished), in order. {@code
   * result.toolCalls()} of {@link #onComplete} lists them all again.
   */
  default void onToolCall(ToolCall call) {}

  /** The stream ended normally; {@code result.text()} is all the text passed to onText. */
  default void onComplete(CompletionResult result) {}

  /**
   * The stream failed: a {@link LlamaApiException} (refused, or an error event), {@link
   * LlamaTimeoutException} or {@link LlamaConnectionException}. Not called after cancel().
   */
  default void onError(Throwable error) {}
}
