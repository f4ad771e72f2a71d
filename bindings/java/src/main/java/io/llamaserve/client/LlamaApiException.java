package io.llamaserve.client;

import java.time.Duration;
import java.util.Optional;

/**
 * The server answered with an error: an HTTP status other than 200 with the error body
 * {"error": {"message", "type", "code", "param"}}, or an error event inside a stream.
 * Subclasses name the statuses a caller usually handles differently.
 */
public class LlamaApiException extends LlamaClientException {
  private static final long serialVersionUID = 1L;

  private final int statusCode;
  private final String type;
  private final String code;
  private final String param;
  private final Duration retryAfter;

  public LlamaApiException(int statusCode, String message, String type, String code, String param,
      Duration retryAfter) {
    super("HTTP " + statusCode + (code == null ? "" : " " + code) + ": " + message);
    this.statusCode = statusCode;
    this.type = type;
    this.code = code;
    this.param = param;
    this.retryAfter = retryAfter;
  }

  /** The HTTP status (for an error event inside a stream: the status its type stands for). */
  public int statusCode() {
    return statusCode;
  }

  /** error.type, e.g. "invalid_request_error"; null if the body had none. */
  public String type() {
    return type;
  }

  /** error.code, e.g. "queue_full", "context_length_exceeded"; null if the body had none. */
  public String code() {
    return code;
  }

  /** error.param: the request field at fault, when the server names one. */
  public String param() {
    return param;
  }

  /** The server's Retry-After, when it sent one. */
  public Optional<Duration> retryAfter() {
    return Optional.ofNullable(retryAfter);
  }
}
