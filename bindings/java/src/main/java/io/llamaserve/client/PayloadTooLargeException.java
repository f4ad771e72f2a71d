package io.llamaserve.client;

import java.time.Duration;

/** The request body is larger than the server accepts (HTTP 413). */
public final class PayloadTooLargeException extends LlamaApiException {
  private static final long serialVersionUID = 1L;

  public PayloadTooLargeException(String message, String type, String code, String param, Duration retryAfter) {
    super(413, message, type, code, param, retryAfter);
  }
}
