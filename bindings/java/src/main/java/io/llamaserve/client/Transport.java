package io.llamaserve.client;

import io.llamaserve.json.Json;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;

/**
 * What every call of one LlamaClient shares: the HttpClient, the base URI and key, the time
 * limits, the retry policy, a timer thread, and the set of open calls (for close()).
 * Immutable apart from that set and the closed flag; safe for any number of threads.
 */
final class Transport {
  final HttpClient http;
  final URI baseUri;
  final String apiKey; // null = none
  final Duration readTimeout; // ZERO = none
  final Duration requestTimeout; // ZERO = none
  final RetryPolicy retryPolicy;
  final ScheduledExecutorService timer;
  private final Set<Runnable> openCalls = ConcurrentHashMap.newKeySet(); // each one's cancel
  private volatile boolean closed;

  Transport(HttpClient http, URI baseUri, String apiKey, Duration readTimeout,
      Duration requestTimeout, RetryPolicy retryPolicy) {
    this.http = http;
    this.baseUri = baseUri;
    this.apiKey = apiKey;
    this.readTimeout = readTimeout;
    this.requestTimeout = requestTimeout;
    this.retryPolicy = retryPolicy;
    ScheduledThreadPoolExecutor executor = new ScheduledThreadPoolExecutor(1, runnable -> {
      Thread thread = new Thread(runnable, "llamaserve-client-timer");
      thread.setDaemon(true);
      return thread;
    });
    executor.setRemoveOnCancelPolicy(true);
    this.timer = executor;
  }

  // ---------------------------------------------------------------------------------------
  // Requests

  HttpRequest.Builder request(String path) {
    if (closed) throw new IllegalStateException("the LlamaClient is closed");
    HttpRequest.Builder builder = HttpRequest.newBuilder(baseUri.resolve(path));
    if (apiKey != null) builder.header("Authorization", "Bearer " + apiKey);
    return builder;
  }

  HttpRequest postJson(String path, Map<String, Object> body, boolean stream) {
    return request(path)
        .header("Content-Type", "application/json")
        .header("Accept", stream ? "text/event-stream" : "application/json")
        .POST(HttpRequest.BodyPublishers.ofByteArray(
            Json.write(body).getBytes(StandardCharsets.UTF_8)))
        .build();
  }

  /** System.nanoTime() by which the whole call must end; 0 = no limit. */
  long deadlineNanos() {
    if (requestTimeout.isZero()) return 0;
    long deadline = System.nanoTime() + requestTimeout.toNanos();
    return deadline == 0 ? 1 : deadline;
  }

  /** How long the next attempt may wait for the response headers. */
  Duration headerTimeout(long deadlineNanos) {
    Duration limit = readTimeout;
    if (deadlineNanos != 0) {
      Duration left = Duration.ofNanos(Math.max(1_000_000, deadlineNanos - System.nanoTime()));
      if (limit.isZero() || left.compareTo(limit) < 0) limit = left;
    }
    return limit;
  }

  /**
   * Sends {@code request}, retrying 429/503 answers as the retry policy allows and the
   * deadline leaves time for. The future completes with the final response (any status).
   * {@code inFlight} always holds the attempt or wait in progress, for cancellation;
   * {@code cancelled} stops the chain between attempts.
   */
  <T> CompletableFuture<HttpResponse<T>> send(HttpRequest request,
      HttpResponse.BodyHandler<T> handler, long deadlineNanos,
      AtomicReference<CompletableFuture<?>> inFlight, BooleanSupplier cancelled) {
    return attempt(request, handler, deadlineNanos, inFlight, cancelled, 0);
  }

  private <T> CompletableFuture<HttpResponse<T>> attempt(HttpRequest request,
      HttpResponse.BodyHandler<T> handler, long deadlineNanos,
      AtomicReference<CompletableFuture<?>> inFlight, BooleanSupplier cancelled, int retries) {
    if (cancelled.getAsBoolean()) return CompletableFuture.failedFuture(new CancellationException());
    Duration timeout = headerTimeout(deadlineNanos);
    HttpRequest timed = timeout.isZero() ? request
        : HttpRequest.newBuilder(request, (name, value) -> true).timeout(timeout).build();
    CompletableFuture<HttpResponse<T>> sent = http.sendAsync(timed, handler);
    inFlight.set(sent);
    return sent.thenCompose(response -> {
      int status = response.statusCode();
      if (status != 429 && status != 503) return CompletableFuture.completedFuture(response);
      Duration retryAfter = response.headers().firstValue("Retry-After")
          .map(ApiErrors::parseRetryAfter).orElse(null);
      Duration delay = retryPolicy.delayBeforeRetry(retries, retryAfter);
      if (delay == null || cancelled.getAsBoolean()) {
        return CompletableFuture.completedFuture(response);
      }
      if (deadlineNanos != 0 && deadlineNanos - System.nanoTime() <= delay.toNanos()) {
        return CompletableFuture.completedFuture(response); // no time left to wait and retry
      }
      CompletableFuture<Void> wait = new CompletableFuture<>();
      timer.schedule(() -> wait.complete(null), delay.toNanos(), TimeUnit.NANOSECONDS);
      inFlight.set(wait);
      return wait.thenCompose(ignored ->
          attempt(request, handler, deadlineNanos, inFlight, cancelled, retries + 1));
    });
  }

  /**
   * A non-streaming call: sends, waits, and returns the JSON object of a 200 answer. Throws
   * the typed exception of any other answer or failure.
   */
  Map<String, Object> callJson(HttpRequest request) {
    HttpResponse<byte[]> response = call(request, HttpResponse.BodyHandlers.ofByteArray());
    String body = new String(response.body(), StandardCharsets.UTF_8);
    try {
      return Json.parseObject(body);
    } catch (IllegalArgumentException e) {
      throw new LlamaConnectionException("the server's answer is not a JSON object: "
          + e.getMessage(), e);
    }
  }

  /** Sends, waits (interruptibly), and throws for any status but 200. */
  HttpResponse<byte[]> call(HttpRequest request, HttpResponse.BodyHandler<byte[]> handler) {
    AtomicReference<CompletableFuture<?>> inFlight = new AtomicReference<>();
    CompletableFuture<HttpResponse<byte[]>> future =
        send(request, handler, deadlineNanos(), inFlight, () -> closed);
    Runnable cancel = () -> {
      CompletableFuture<?> current = inFlight.get();
      if (current != null) current.cancel(true); // aborts the exchange, closing the socket
      future.cancel(true);
    };
    openCalls.add(cancel);
    HttpResponse<byte[]> response;
    try {
      response = future.get();
    } catch (InterruptedException e) {
      cancel.run();
      Thread.currentThread().interrupt();
      throw new LlamaClientException("interrupted while waiting for the server", e);
    } catch (ExecutionException e) {
      throw translate(e.getCause());
    } catch (CancellationException e) {
      throw new LlamaClientException("the LlamaClient was closed during the call", e);
    } finally {
      openCalls.remove(cancel);
    }
    if (response.statusCode() != 200) {
      throw ApiErrors.fromResponse(response.statusCode(), response.headers(), response.body());
    }
    return response;
  }

  /** The client exception for a failure of the HTTP layer. */
  static RuntimeException translate(Throwable error) {
    while ((error instanceof CompletionException || error instanceof ExecutionException)
        && error.getCause() != null) {
      error = error.getCause();
    }
    if (error instanceof LlamaClientException) return (LlamaClientException) error;
    if (error instanceof CancellationException) return (CancellationException) error;
    if (error instanceof HttpConnectTimeoutException) {
      return new LlamaTimeoutException("connect timeout: " + error.getMessage(), error);
    }
    if (error instanceof HttpTimeoutException) {
      return new LlamaTimeoutException("no response within the timeout: " + error.getMessage(),
          error);
    }
    if (error instanceof IOException) {
      return new LlamaConnectionException("connection failed: " + error, error);
    }
    if (error instanceof RuntimeException) return (RuntimeException) error;
    return new LlamaClientException("unexpected failure: " + error, error);
  }

  // ---------------------------------------------------------------------------------------
  // Open calls

  void register(Runnable cancel) {
    openCalls.add(cancel);
    if (closed) cancel.run(); // close() may have swept the set before the add
  }

  void unregister(Runnable cancel) {
    openCalls.remove(cancel);
  }

  boolean isClosed() {
    return closed;
  }

  void close() {
    closed = true;
    for (Runnable cancel : openCalls) cancel.run();
    openCalls.clear();
    timer.shutdownNow();
  }
}
