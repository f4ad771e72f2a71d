package io.llamaserve.client;

import java.time.Duration;

/** The request was invalid (HTTP 400): a field's type or range, or a prompt longer than the context. */
public final class BadRequestException extends LlamaApiException {
  private static final long serialVersionUID = 1L;

  public BadRequestException(String message, String type, String code, String param, Duration retryAfter) {
    super(400, message, type, code, param, retryAfter);
  }
}
