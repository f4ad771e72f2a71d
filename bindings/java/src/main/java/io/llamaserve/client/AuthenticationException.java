package io.llamaserve.client;

import java.time.Duration;

/** A missing or wrong API key (HTTP 401). */
public final class AuthenticationException extends LlamaApiException {
  private static final long serialVersionUID = 1L;

  public AuthenticationException(String message, String type, String code, String param, Duration retryAfter) {
    super(401, message, type, code, param, retryAfter);
  }
}
