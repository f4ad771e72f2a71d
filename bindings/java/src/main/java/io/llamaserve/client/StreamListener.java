package io.llamaserve.client;

/**
 * Receives a streamed generation. Called on the HTTP client's threads, one call at a time per
 * stream; a slow callback slows the stream (the connection is not read meanwhile), it does
 * not buffer without bound. An exception thrown from {@link #onText} cancels the stream and
 * is passed to {@link #onError}.
 */
public interface StreamListener {
  /** A piece of generated text (never empty). */
  void onText(String text);

  /** The stream ended normally; {@code result.text()} is all the text passed to onText. */
  default void onComplete(CompletionResult result) {}

  /**
   * The stream failed: a {@link LlamaApiException} (refused, or an error event), {@link
   * LlamaTimeoutException} or {@link LlamaConnectionException}. Not called after cancel().
   */
  default void onError(Throwable error) {}
}
