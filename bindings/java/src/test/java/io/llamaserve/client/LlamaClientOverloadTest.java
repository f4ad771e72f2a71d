package io.llamaserve.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.llamaserve.testing.ServerProcess;
import java.time.Duration;
import java.util.Iterator;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * A server that runs one request at a time and queues none (--max-running 1 --max-queue 0),
 * so a second request gets 429 while one is running; it also requires an API key.
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class LlamaClientOverloadTest {
  private static final String KEY = "test-key-7f3a";
  private static ServerProcess server;
  private static LlamaClient client;

  @BeforeAll
  static void startServer() throws Exception {
    server = ServerProcess.startWithKey("client-overload", KEY, "--threads", "1", "--ctx-size", "512",
        "--max-tokens-limit", "256", "--max-running", "1", "--max-queue", "0");
    client = LlamaClient.builder(server.url()).apiKey(KEY).build();
  }

  @AfterAll
  static void stopServer() throws Exception {
    if (client != null) client.close();
    if (server != null) server.close();
  }

  @AfterEach
  void serverIsIdle() throws Exception {
    server.waitFor(server::idle, Duration.ofSeconds(10), "idle after the test");
  }

  /** A generation that keeps the only slot busy until its stream is closed. */
  private static Stream<String> holdTheSlot() {
    Stream<String> stream = client.completeStream(CompletionRequest.builder("Once upon a time")
        .ignoreEos(true).maxTokens(256).build());
    Iterator<String> it = stream.iterator();
    assertTrue(it.hasNext()); // running now
    it.next();
    return stream;
  }

  private static CompletionRequest small() {
    return CompletionRequest.builder("Hello").temperature(0).maxTokens(2).build();
  }

  @Test
  void apiKeyIsRequired() {
    try (LlamaClient anonymous = LlamaClient.builder(server.url()).build();
        LlamaClient wrong = LlamaClient.builder(server.url()).apiKey("wrong").build()) {
      AuthenticationException e = assertThrows(AuthenticationException.class,
          () -> anonymous.complete(small()));
      assertEquals(401, e.statusCode());
      assertThrows(AuthenticationException.class, () -> wrong.models());
      assertTrue(anonymous.isHealthy(), "/health needs no key");
      assertFalse(anonymous.isReady());
    }
    assertTrue(client.isReady());
  }

  @Test
  void overloadGives429WithRetryAfter() {
    try (Stream<String> held = holdTheSlot()) {
      long start = System.nanoTime();
      RateLimitException e = assertThrows(RateLimitException.class, () -> client.complete(small()));
      assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(2), "429 comes at once");
      assertEquals(429, e.statusCode());
      assertEquals("queue_full", e.code());
      assertEquals(Duration.ofSeconds(1), e.retryAfter().orElseThrow());

      try (Stream<String> refused = client.chatStream(ChatRequest.of("hi", 2))) {
        assertThrows(RateLimitException.class, () -> refused.iterator().hasNext());
      }
    }
  }

  @Test
  void closingAStreamCancelsTheGeneration() throws Exception {
    Stream<String> held = holdTheSlot();
    double before = server.metric("llamaserve_generated_tokens_total");
    held.close();
    // The server notices the closed connection and frees the slot at its next step.
    server.waitFor(server::idle, Duration.ofSeconds(3), "idle after the stream was closed");
    double after = server.metric("llamaserve_generated_tokens_total");
    System.out.println("tokens generated after the stream was closed: " + (after - before));
    assertTrue(after - before < 48, "generation did not stop: " + (after - before));
    assertEquals(2, client.complete(small()).usage().completionTokens());
  }

  @Test
  void cancellingAnAsyncStream() throws Exception {
    CountDownLatch firstPiece = new CountDownLatch(1);
    AtomicBoolean endSignalled = new AtomicBoolean();
    StreamHandle handle = client.completeAsync(CompletionRequest.builder("Once upon a time")
        .ignoreEos(true).maxTokens(256).build(), new StreamListener() {
          @Override
          public void onText(String text) {
            firstPiece.countDown();
          }

          @Override
          public void onComplete(CompletionResult result) {
            endSignalled.set(true);
          }

          @Override
          public void onError(Throwable error) {
            endSignalled.set(true);
          }
        });
    assertTrue(firstPiece.await(60, TimeUnit.SECONDS));
    handle.cancel();
    handle.cancel();
    assertThrows(CancellationException.class, () -> handle.result().join());
    server.waitFor(server::idle, Duration.ofSeconds(3), "idle after cancel");
    assertFalse(endSignalled.get(), "no end signal after cancel");
  }

  @Test
  void retryPolicyHonoursRetryAfter() throws Exception {
    Stream<String> held = holdTheSlot();
    // Free the slot after 1.2 s; the first attempt gets 429 with Retry-After: 1.
    CompletableFuture.delayedExecutor(1200, TimeUnit.MILLISECONDS).execute(held::close);
    try (LlamaClient patient = LlamaClient.builder(server.url()).apiKey(KEY)
        .retryPolicy(RetryPolicy.retryAfter(4, Duration.ofSeconds(2))).build()) {
      long start = System.nanoTime();
      CompletionResult result = patient.complete(small());
      assertEquals(2, result.usage().completionTokens());
      assertTrue(System.nanoTime() - start >= TimeUnit.MILLISECONDS.toNanos(900),
          "waited for Retry-After");
    }
  }

  @Test
  void retryAfterLongerThanThePolicyAllowsIsThrown() {
    try (Stream<String> held = holdTheSlot();
        LlamaClient hasty = LlamaClient.builder(server.url()).apiKey(KEY)
            .retryPolicy(RetryPolicy.retryAfter(4, Duration.ofMillis(500))).build()) {
      long start = System.nanoTime();
      assertThrows(RateLimitException.class, () -> hasty.complete(small()));
      assertTrue(System.nanoTime() - start < TimeUnit.MILLISECONDS.toNanos(900), "no retry");
    }
  }
}
