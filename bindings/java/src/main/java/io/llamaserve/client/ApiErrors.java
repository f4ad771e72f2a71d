package io.llamaserve.client;

import io.llamaserve.json.Json;
import io.llamaserve.json.JsonException;
import java.net.http.HttpHeaders;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeParseException;
import java.util.Map;

/** Turns the server's error answers into typed exceptions. */
final class ApiErrors {
  private ApiErrors() {}

  /** The exception for a non-200 answer with the given headers and body. */
  static LlamaApiException fromResponse(int status, HttpHeaders headers, byte[] body) {
    Duration retryAfter = headers.firstValue("Retry-After").map(ApiErrors::parseRetryAfter)
        .orElse(null);
    String text = new String(body, StandardCharsets.UTF_8);
    try {
      Map<String, Object> error = JsonFields.objectOrNull(Json.parseObject(text), "error");
      if (error != null) return fromError(status, error, retryAfter);
    } catch (JsonException | LlamaConnectionException notTheErrorShape) {
      // Not the API's error JSON (a proxy's page, say): keep the text as the message.
    }
    String message = text.isBlank() ? "(empty body)" : text.strip();
    if (message.length() > 500) message = message.substring(0, 500) + "...";
    return create(status, message, null, null, null, retryAfter);
  }

  /**
   * The exception for an error object {"message", "type", "code", "param"}; status 0 (an error
   * event inside a stream, which has no status of its own) is inferred from the type.
   */
  static LlamaApiException fromError(int status, Map<String, Object> error, Duration retryAfter) {
    String message = JsonFields.string(error, "message");
    String type = JsonFields.string(error, "type");
    Object code = error.get("code");
    String param = JsonFields.string(error, "param");
    if (status == 0) status = statusOfType(type);
    return create(status, message == null ? "(no message)" : message, type,
        code == null ? null : code.toString(), param, retryAfter);
  }

  static LlamaApiException create(int status, String message, String type, String code,
      String param, Duration retryAfter) {
    switch (status) {
      case 400: return new BadRequestException(message, type, code, param, retryAfter);
      case 401: return new AuthenticationException(message, type, code, param, retryAfter);
      case 404: return new NotFoundException(message, type, code, param, retryAfter);
      case 413: return new PayloadTooLargeException(message, type, code, param, retryAfter);
      case 429: return new RateLimitException(message, type, code, param, retryAfter);
      case 503: return new ServiceUnavailableException(message, type, code, param, retryAfter);
      default: return new LlamaApiException(status, message, type, code, param, retryAfter);
    }
  }

  private static int statusOfType(String type) {
    if (type == null) return 500;
    switch (type) {
      case "invalid_request_error": return 400;
      case "authentication_error": return 401;
      case "not_found_error": return 404;
      case "timeout_error": return 408;
      case "rate_limit_error": return 429;
      case "service_unavailable_error": return 503;
      default: return 500;
    }
  }

  /** Retry-After as delay-seconds or an HTTP date; null when it is neither. */
  static Duration parseRetryAfter(String value) {
    String v = value.strip();
    try {
      long seconds = Long.parseLong(v);
      return seconds < 0 ? null : Duration.ofSeconds(seconds);
    } catch (NumberFormatException notSeconds) {
      try {
        ZonedDateTime at = ZonedDateTime.parse(v, DateTimeFormatter.RFC_1123_DATE_TIME);
        Duration delay = Duration.between(ZonedDateTime.now(at.getZone()), at);
        return delay.isNegative() ? Duration.ZERO : delay;
      } catch (DateTimeParseException notADate) {
        return null;
      }
    }
  }
}
