package io.llamaserve.client;

/**
 * A client-side time limit passed: connect, read (no bytes for that long) or the whole
 * request. The connection has been closed, which also stops the server's generation.
 */
public final class LlamaTimeoutException extends LlamaClientException {
  private static final long serialVersionUID = 1L;

  public LlamaTimeoutException(String message) {
    super(message);
  }

  public LlamaTimeoutException(String message, Throwable cause) {
    super(message, cause);
  }
}
