package io.llamaserve.client;

/** Base of every exception the HTTP client throws. Unchecked, like java.net.http's. */
public class LlamaClientException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public LlamaClientException(String message) {
    super(message);
  }

  public LlamaClientException(String message, Throwable cause) {
    super(message, cause);
  }
}
