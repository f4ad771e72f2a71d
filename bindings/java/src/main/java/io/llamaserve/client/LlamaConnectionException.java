package io.llamaserve.client;

/**
 * The transport failed: connection refused or reset, or a stream that ended before its end
 * marker, or a response that is not what the API defines.
 */
public final class LlamaConnectionException extends LlamaClientException {
  private static final long serialVersionUID = 1L;

  public LlamaConnectionException(String message) {
    super(message);
  }

  public LlamaConnectionException(String message, Throwable cause) {
    super(message, cause);
  }
}
