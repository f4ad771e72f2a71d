package io.llamaserve.client;

import java.time.Duration;
import java.util.Objects;

/**
 * When to retry a request the server refused with 429 (at capacity) or 503 (loading,
 * draining). Only refusals are retried: they come before any output, so a retry never
 * duplicates text. The wait is the server's Retry-After, or {@code defaultDelay} when it sent
 * none; a Retry-After longer than {@code maxDelay}, or one that would pass the request
 * timeout, ends the retries and the refusal is thrown.
 *
 * @param maxRetries retries after the first attempt (0 = never retry)
 * @param maxDelay the longest wait honoured
 * @param defaultDelay the wait when the response has no Retry-After
 */
public record RetryPolicy(int maxRetries, Duration maxDelay, Duration defaultDelay) {
  public RetryPolicy {
    if (maxRetries < 0) throw new IllegalArgumentException("maxRetries must be >= 0");
    Objects.requireNonNull(maxDelay, "maxDelay");
    Objects.requireNonNull(defaultDelay, "defaultDelay");
    if (maxDelay.isNegative() || defaultDelay.isNegative()) {
      throw new IllegalArgumentException("delays must not be negative");
    }
  }

  /** Never retry (the default). */
  public static RetryPolicy none() {
    return new RetryPolicy(0, Duration.ZERO, Duration.ZERO);
  }

  /** Up to {@code maxRetries} retries, honouring Retry-After up to {@code maxDelay}. */
  public static RetryPolicy retryAfter(int maxRetries, Duration maxDelay) {
    return new RetryPolicy(maxRetries, maxDelay, Duration.ofSeconds(1));
  }

  /**
   * The wait before retry number {@code retriesSoFar + 1} after a 429/503 with the given
   * Retry-After (null = none), or null when the policy says to give up.
   */
  Duration delayBeforeRetry(int retriesSoFar, Duration retryAfter) {
    if (retriesSoFar >= maxRetries) return null;
    Duration delay = retryAfter != null ? retryAfter : defaultDelay;
    return delay.compareTo(maxDelay) > 0 ? null : delay;
  }
}
