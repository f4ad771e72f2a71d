package io.llamaserve.client;

import java.time.Duration;

/** The server is at capacity (HTTP 429); retry after {@link #retryAfter()}. */
public final class RateLimitException extends LlamaApiException {
  private static final long serialVersionUID = 1L;

  public RateLimitException(String message, String type, String code, String param, Duration retryAfter) {
    super(429, message, type, code, param, retryAfter);
  }
}
