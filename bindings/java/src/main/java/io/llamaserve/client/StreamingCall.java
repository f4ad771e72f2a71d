package io.llamaserve.client;

import io.llamaserve.ToolCall;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Flow;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Consumer;

/**
 * One streamed generation: an HTTP exchange whose event-stream body is parsed as it arrives
 * and handed to one {@link Flow.Subscriber} as text pieces, with back-pressure. Completed
 * tool calls go, in stream order with the text, to an optional callback; they take no demand.
 *
 * <p>Back-pressure: the response body is read one chunk at a time, and the next chunk is only
 * requested when every piece parsed so far has been delivered and the subscriber wants more.
 * A subscriber that stops requesting therefore stops the reading; TCP flow control then
 * holds the server back.
 *
 * <p>Threads: body chunks arrive on the HttpClient's threads (one at a time); request() and
 * cancel() may come from any thread. Delivery to the subscriber is serialised by the drain
 * loop ({@code wip}), the usual non-blocking way of honouring Reactive Streams' rule that
 * signals never overlap.
 *
 * <p>Ending: the stream's end marker completes the subscriber; an error event, a refusal, a
 * timeout or a broken connection fails it; cancel() closes the connection (so the server
 * cancels the generation) and stops all signals.
 */
final class StreamingCall implements Flow.Subscription {
  private static final Object STREAMING = new Object(); // the body "value" of a 200 answer

  private final Transport transport;
  private final HttpRequest request;
  private final StreamProtocol protocol;
  private final Flow.Subscriber<? super String> subscriber;
  private final Consumer<ToolCall> onToolCall; // null: calls are only in the result
  private final CompletableFuture<CompletionResult> result = new CompletableFuture<>();
  // LlamaClient.close() fails open calls (a cancel would leave their subscribers waiting).
  private final Runnable closeHook =
      () -> fail(new LlamaClientException("the LlamaClient was closed"));

  // Written only by the thread delivering body chunks (the HttpClient serialises them).
  private final StreamProtocol.State state = new StreamProtocol.State();
  private final SseParser parser;

  // Text pieces (String) and completed tool calls (ToolCall), in stream order.
  private final ConcurrentLinkedQueue<Object> pending = new ConcurrentLinkedQueue<>();
  private final AtomicLong demand = new AtomicLong();
  private final AtomicInteger wip = new AtomicInteger();
  private final AtomicReference<Throwable> failure = new AtomicReference<>();
  private final AtomicReference<CompletableFuture<?>> inFlight = new AtomicReference<>();
  private final AtomicBoolean connectionClosed = new AtomicBoolean();
  private volatile Flow.Subscription body; // the response body, once the headers are in
  private volatile boolean bodyRequested; // a chunk has been asked for and not yet arrived
  private volatile boolean ended; // the end marker was parsed
  private volatile boolean cancelled;
  private boolean terminated; // the subscriber has had onComplete/onError (drain loop only)

  private final long deadlineNanos;
  private volatile long lastProgressNanos; // start, or the last chunk / chunk request
  private volatile ScheduledFuture<?> watchdog;

  StreamingCall(Transport transport, HttpRequest request, StreamProtocol protocol,
      Flow.Subscriber<? super String> subscriber) {
    this(transport, request, protocol, subscriber, null);
  }

  StreamingCall(Transport transport, HttpRequest request, StreamProtocol protocol,
      Flow.Subscriber<? super String> subscriber, Consumer<ToolCall> onToolCall) {
    this.transport = transport;
    this.request = request;
    this.protocol = protocol;
    this.subscriber = subscriber;
    this.onToolCall = onToolCall;
    this.parser = new SseParser(event -> protocol.apply(event, state, pending::add,
        onToolCall == null ? call -> {} : pending::add));
    this.deadlineNanos = transport.deadlineNanos();
  }

  CompletableFuture<CompletionResult> result() {
    return result;
  }

  /** Subscribes the subscriber and sends the request. */
  void start() {
    lastProgressNanos = System.nanoTime();
    try {
      subscriber.onSubscribe(this);
    } catch (Throwable t) {
      fail(t);
      return;
    }
    transport.register(closeHook); // after onSubscribe: a closed client fails the call at once
    if (terminatedOrFailed()) {
      transport.unregister(closeHook);
      return;
    }
    armWatchdog(nextCheckNanos());
    CompletableFuture<HttpResponse<Object>> response;
    try {
      response = transport.send(request, this::bodyHandler, deadlineNanos, inFlight,
          () -> cancelled);
    } catch (RuntimeException e) {
      fail(Transport.translate(e));
      return;
    }
    response.whenComplete((answer, error) -> {
      if (error != null) {
        fail(Transport.translate(error));
      } else if (answer.body() != STREAMING) {
        byte[] bytes = (byte[]) answer.body();
        fail(ApiErrors.fromResponse(answer.statusCode(), answer.headers(), bytes));
      }
    });
  }

  private HttpResponse.BodySubscriber<Object> bodyHandler(HttpResponse.ResponseInfo info) {
    if (info.statusCode() == 200) return new BodyReader();
    return HttpResponse.BodySubscribers.mapping(HttpResponse.BodySubscribers.ofByteArray(),
        bytes -> bytes);
  }

  // ---------------------------------------------------------------------------------------
  // Flow.Subscription (called by the subscriber)

  @Override
  public void request(long n) {
    if (n <= 0) {
      fail(new IllegalArgumentException("request(" + n + "): demand must be positive (rule 3.9)"));
      return;
    }
    long current;
    long next;
    do {
      current = demand.get();
      if (current == Long.MAX_VALUE) break;
      next = current + n < 0 ? Long.MAX_VALUE : current + n;
    } while (!demand.compareAndSet(current, next));
    drain();
  }

  @Override
  public void cancel() {
    if (cancelled) return;
    cancelled = true;
    closeConnection();
    result.cancel(false);
    drain(); // drops what is pending
  }

  // ---------------------------------------------------------------------------------------
  // The response body

  /** Reads the event-stream body of a 200 answer; its value is known at once (STREAMING). */
  private final class BodyReader implements HttpResponse.BodySubscriber<Object> {
    @Override
    public CompletionStage<Object> getBody() {
      return CompletableFuture.completedFuture(STREAMING);
    }

    @Override
    public void onSubscribe(Flow.Subscription subscription) {
      body = subscription;
      if (cancelled || failure.get() != null) {
        subscription.cancel();
        return;
      }
      lastProgressNanos = System.nanoTime();
      drain();
    }

    @Override
    public void onNext(List<ByteBuffer> chunks) {
      lastProgressNanos = System.nanoTime();
      try {
        for (ByteBuffer chunk : chunks) {
          if (ended) break;
          parser.feed(chunk);
        }
      } catch (Throwable t) {
        fail(t); // an error event, or a malformed stream
        return;
      }
      if (state.done && !ended) {
        ended = true;
        // Read the rest of the body (the chunked terminator) so the connection can be
        // reused; nothing after the end marker is parsed.
        body.request(Long.MAX_VALUE);
      }
      bodyRequested = false;
      drain();
    }

    @Override
    public void onError(Throwable error) {
      if (!ended) fail(Transport.translate(error));
    }

    @Override
    public void onComplete() {
      if (!ended) {
        fail(new LlamaConnectionException("the stream ended before its end marker"));
      }
    }
  }

  // ---------------------------------------------------------------------------------------
  // Delivery

  private void drain() {
    if (wip.getAndIncrement() != 0) return;
    int missed = 1;
    do {
      if (!terminated) deliver();
      missed = wip.addAndGet(-missed);
    } while (missed != 0);
  }

  /** One pass of the drain loop. PRECONDITION: only the drain loop calls it. */
  private void deliver() {
    if (cancelled) {
      pending.clear();
      terminated = true;
      finish();
      return;
    }
    Throwable error = failure.get();
    if (error != null) {
      pending.clear();
      terminated = true;
      finish();
      subscriber.onError(error);
      return;
    }
    while (true) {
      Object item = pending.peek();
      if (item == null || (item instanceof String && demand.get() <= 0)) break;
      pending.poll();
      try {
        if (item instanceof ToolCall call) {
          onToolCall.accept(call); // only queued when there is a callback
        } else {
          if (demand.get() != Long.MAX_VALUE) demand.decrementAndGet();
          subscriber.onNext((String) item);
        }
      } catch (Throwable t) {
        failure.compareAndSet(null, t); // rule 2.13 violated: treat as a failure of the call
        closeConnection();
        result.completeExceptionally(t);
        pending.clear();
        terminated = true;
        finish();
        subscriber.onError(t);
        return;
      }
      if (cancelled || failure.get() != null) return; // the next pass handles it
    }
    if (pending.isEmpty() && ended) {
      result.complete(state.result());
      terminated = true;
      finish();
      subscriber.onComplete();
      return;
    }
    Flow.Subscription source = body;
    if (pending.isEmpty() && demand.get() > 0 && source != null && !ended && !bodyRequested) {
      bodyRequested = true;
      lastProgressNanos = System.nanoTime();
      source.request(1);
    }
  }

  /** Records the first failure, closes the connection and lets the drain loop report it. */
  private void fail(Throwable error) {
    if (!failure.compareAndSet(null, error)) return;
    closeConnection();
    result.completeExceptionally(error);
    drain();
  }

  private void closeConnection() {
    if (!connectionClosed.compareAndSet(false, true)) return;
    Flow.Subscription source = body;
    if (source != null) source.cancel(); // an unread body: the HttpClient closes the socket
    CompletableFuture<?> attempt = inFlight.get();
    if (attempt != null) attempt.cancel(true); // still waiting for headers: abort the exchange
  }

  private void finish() {
    ScheduledFuture<?> timer = watchdog;
    if (timer != null) timer.cancel(false);
    transport.unregister(closeHook);
    if (!result.isDone()) result.completeExceptionally(new CancellationException());
  }

  // ---------------------------------------------------------------------------------------
  // Time limits

  /** True while the call waits for the server (headers, or a chunk it asked for). */
  private boolean waitingForServer() {
    return body == null || bodyRequested;
  }

  private long nextCheckNanos() {
    long now = System.nanoTime();
    long next = Long.MAX_VALUE;
    if (deadlineNanos != 0) next = Math.max(0, deadlineNanos - now);
    long read = transport.readTimeout.toNanos();
    if (read > 0) next = Math.min(next, Math.max(0, lastProgressNanos + read - now));
    return next;
  }

  private void armWatchdog(long delayNanos) {
    if (delayNanos == Long.MAX_VALUE || terminatedOrFailed()) return;
    try {
      watchdog = transport.timer.schedule(this::checkTime, delayNanos, TimeUnit.NANOSECONDS);
    } catch (RejectedExecutionException closed) {
      fail(new LlamaClientException("the LlamaClient was closed"));
    }
  }

  private void checkTime() {
    if (terminatedOrFailed()) return;
    long now = System.nanoTime();
    if (deadlineNanos != 0 && now - deadlineNanos >= 0) {
      fail(new LlamaTimeoutException("the request took longer than the request timeout of "
          + transport.requestTimeout.toMillis() + " ms"));
      return;
    }
    long read = transport.readTimeout.toNanos();
    if (read > 0 && waitingForServer() && now - lastProgressNanos >= read) {
      fail(new LlamaTimeoutException("no data from the server for "
          + transport.readTimeout.toMillis() + " ms (read timeout)"));
      return;
    }
    if (read > 0 && !waitingForServer()) lastProgressNanos = now; // idle by our own choice
    armWatchdog(nextCheckNanos());
  }

  private boolean terminatedOrFailed() {
    return cancelled || failure.get() != null || result.isDone();
  }
}
