package io.llamaserve.client;

import java.time.Duration;

/** The server is loading or shutting down (HTTP 503); retry after {@link #retryAfter()} if given. */
public final class ServiceUnavailableException extends LlamaApiException {
  private static final long serialVersionUID = 1L;

  public ServiceUnavailableException(String message, String type, String code, String param, Duration retryAfter) {
    super(503, message, type, code, param, retryAfter);
  }
}
