package io.llamaserve.client;

import java.time.Duration;

/** An unknown path or model (HTTP 404). */
public final class NotFoundException extends LlamaApiException {
  private static final long serialVersionUID = 1L;

  public NotFoundException(String message, String type, String code, String param, Duration retryAfter) {
    super(404, message, type, code, param, retryAfter);
  }
}
