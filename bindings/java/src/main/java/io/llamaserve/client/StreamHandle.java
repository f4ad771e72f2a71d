package io.llamaserve.client;

import java.util.concurrent.CompletableFuture;

/** A running streamed generation started with a {@link StreamListener}. Thread-safe. */
public final class StreamHandle {
  private final StreamingCall call;

  StreamHandle(StreamingCall call) {
    this.call = call;
  }

  /**
   * Stops the stream: closes the connection, which makes the server cancel the generation.
   * No listener method is called afterwards (one already running finishes). Idempotent.
   */
  public void cancel() {
    call.cancel();
  }

  /**
   * Completes with the result when the stream ends, exceptionally with the stream's error, or
   * is cancelled by {@link #cancel()}.
   */
  public CompletableFuture<CompletionResult> result() {
    return call.result();
  }

  public boolean isDone() {
    return call.result().isDone();
  }
}
