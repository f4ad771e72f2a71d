package io.llamaserve.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.llamaserve.testing.ServerProcess;
import java.net.ServerSocket;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Flow;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The HTTP client against a real server with the default model. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class LlamaClientTest {
  private static final String MODEL = "SmolLM2-135M-Instruct.Q4_1";
  private static ServerProcess server;
  private static LlamaClient client;

  @BeforeAll
  static void startServer() throws Exception {
    server = ServerProcess.start("client-test", "--threads", "1", "--ctx-size", "512",
        "--max-tokens-limit", "256", "--max-running", "4", "--max-queue", "8",
        "--max-body-bytes", "65536");
    client = LlamaClient.builder(server.url()).build();
  }

  @AfterAll
  static void stopServer() throws Exception {
    if (client != null) client.close();
    if (server != null) server.close();
  }

  private static ChatRequest greedyChat(String message, int maxTokens) {
    return ChatRequest.builder().user(message).temperature(0).maxTokens(maxTokens).build();
  }

  /** "1, 2, 3, 4, 5," never ends on its own; ignoreEos makes the length exactly maxTokens. */
  private static CompletionRequest counting(int maxTokens) {
    return CompletionRequest.builder("1, 2, 3, 4, 5,").temperature(0).ignoreEos(true)
        .maxTokens(maxTokens).build();
  }

  @Test
  void modelsHealthReadinessAndMetrics() {
    assertEquals(List.of(MODEL), client.models());
    assertTrue(client.isHealthy());
    assertTrue(client.isReady());
    assertTrue(client.metrics().contains("llamaserve_running_sequences"));
  }

  @Test
  void chatInEveryForm() throws Exception {
    ChatRequest request = greedyChat("What is the capital of France?", 12);
    CompletionResult blocking = client.chat(request);
    assertFalse(blocking.text().isBlank());
    assertEquals(MODEL, blocking.model());
    assertNotNull(blocking.id());
    assertTrue(List.of("stop", "length").contains(blocking.finishReason()));
    Usage usage = blocking.usage();
    assertTrue(usage.completionTokens() >= 1 && usage.completionTokens() <= 12);
    assertEquals(usage.promptTokens() + usage.completionTokens(), usage.totalTokens());

    List<String> pieces;
    try (Stream<String> stream = client.chatStream(request)) {
      pieces = stream.collect(Collectors.toList());
    }
    assertTrue(pieces.size() > 1, "streamed in pieces: " + pieces);
    assertEquals(blocking.text(), String.join("", pieces));

    List<String> heard = Collections.synchronizedList(new ArrayList<>());
    CompletableFuture<CompletionResult> completed = new CompletableFuture<>();
    StreamHandle handle = client.chatAsync(request, new StreamListener() {
      @Override
      public void onText(String text) {
        heard.add(text);
      }

      @Override
      public void onComplete(CompletionResult result) {
        completed.complete(result);
      }

      @Override
      public void onError(Throwable error) {
        completed.completeExceptionally(error);
      }
    });
    CompletionResult streamed = completed.get(60, TimeUnit.SECONDS);
    assertEquals(streamed, handle.result().get());
    assertTrue(handle.isDone());
    assertEquals(blocking.text(), streamed.text());
    assertEquals(blocking.text(), String.join("", heard));
    assertEquals(blocking.finishReason(), streamed.finishReason());
    assertEquals(usage, streamed.usage());
  }

  @Test
  void publisherHonoursBackPressure() throws Exception {
    CompletableFuture<String> done = new CompletableFuture<>();
    AtomicLong outstanding = new AtomicLong();
    AtomicInteger violations = new AtomicInteger();
    StringBuilder text = new StringBuilder();
    client.completePublisher(counting(10)).subscribe(new Flow.Subscriber<String>() {
      private Flow.Subscription subscription;

      @Override
      public void onSubscribe(Flow.Subscription s) {
        subscription = s;
        outstanding.set(1);
        s.request(1);
      }

      @Override
      public void onNext(String item) {
        if (outstanding.decrementAndGet() < 0) violations.incrementAndGet();
        text.append(item);
        // Ask for the next piece later, from another thread.
        CompletableFuture.delayedExecutor(20, TimeUnit.MILLISECONDS).execute(() -> {
          outstanding.incrementAndGet();
          subscription.request(1);
        });
      }

      @Override
      public void onError(Throwable error) {
        done.completeExceptionally(error);
      }

      @Override
      public void onComplete() {
        done.complete(text.toString());
      }
    });
    String streamed = done.get(60, TimeUnit.SECONDS);
    assertEquals(0, violations.get(), "onNext beyond demand");
    assertEquals(client.complete(counting(10)).text(), streamed);
  }

  @Test
  void nonPositiveDemandIsAnError() throws Exception {
    CompletableFuture<Throwable> error = new CompletableFuture<>();
    client.completePublisher(counting(4)).subscribe(new Flow.Subscriber<String>() {
      @Override
      public void onSubscribe(Flow.Subscription s) {
        s.request(0);
      }

      @Override
      public void onNext(String item) {
        error.completeExceptionally(new AssertionError("onNext without demand"));
      }

      @Override
      public void onError(Throwable e) {
        error.complete(e);
      }

      @Override
      public void onComplete() {
        error.completeExceptionally(new AssertionError("completed"));
      }
    });
    assertInstanceOf(IllegalArgumentException.class, error.get(30, TimeUnit.SECONDS));
  }

  @Test
  void completionsBlockingAndStreamed() {
    CompletionResult blocking = client.complete(counting(8));
    assertEquals("length", blocking.finishReason());
    assertEquals(8, blocking.usage().completionTokens());
    assertTrue(blocking.text().contains("6"), blocking.text());
    try (Stream<String> stream = client.completeStream(counting(8))) {
      assertEquals(blocking.text(), stream.collect(Collectors.joining()));
    }
  }

  @Test
  void simpleChatEndpoint() throws Exception {
    SimpleChatRequest request = SimpleChatRequest.builder("Say hello.").temperature(0)
        .maxTokens(10).build();
    CompletionResult blocking = client.simpleChat(request);
    assertFalse(blocking.text().isBlank());
    assertEquals(MODEL, blocking.model());
    assertTrue(blocking.usage().completionTokens() <= 10);
    try (Stream<String> stream = client.simpleChatStream(request)) {
      assertEquals(blocking.text(), stream.collect(Collectors.joining()));
    }
    CompletableFuture<CompletionResult> done = new CompletableFuture<>();
    StringBuilder heard = new StringBuilder();
    client.simpleChatAsync(request, new StreamListener() {
      @Override
      public void onText(String text) {
        heard.append(text);
      }

      @Override
      public void onComplete(CompletionResult result) {
        done.complete(result);
      }

      @Override
      public void onError(Throwable error) {
        done.completeExceptionally(error);
      }
    });
    CompletionResult streamed = done.get(60, TimeUnit.SECONDS);
    assertEquals(blocking.text(), streamed.text());
    assertEquals(blocking.text(), heard.toString());
    assertEquals(blocking.usage(), streamed.usage());
  }

  @Test
  void unicodeRoundTripsThroughJsonAndSse() {
    // The prompt goes out as JSON with raw UTF-8; the Chinese reply comes back in SSE pieces.
    ChatRequest request = greedyChat("Translate to Chinese: Good morning", 24);
    CompletionResult blocking = client.chat(request);
    assertTrue(blocking.text().codePoints()
        .anyMatch(cp -> Character.UnicodeScript.of(cp) == Character.UnicodeScript.HAN),
        blocking.text());
    try (Stream<String> stream = client.chatStream(request)) {
      assertEquals(blocking.text(), stream.collect(Collectors.joining()));
    }
  }

  @Test
  void errorAnswersAreTyped() {
    BadRequestException bad = assertThrows(BadRequestException.class, () -> client.chat(
        ChatRequest.builder().user("hi").temperature(5).maxTokens(4).build()));
    assertEquals(400, bad.statusCode());
    assertEquals("invalid_request_error", bad.type());
    assertTrue(bad.getMessage().contains("temperature"), bad.getMessage());

    assertThrows(BadRequestException.class, () -> client.complete(counting(10_000)));

    NotFoundException notFound = assertThrows(NotFoundException.class, () -> client.chat(
        ChatRequest.builder().user("hi").model("no-such-model").maxTokens(4).build()));
    assertEquals("model_not_found", notFound.code());

    assertThrows(PayloadTooLargeException.class,
        () -> client.complete(CompletionRequest.of("x".repeat(70_000), 4)));

    // The same refusals in the streaming forms: thrown by the Stream, passed to the listener.
    try (Stream<String> stream = client.chatStream(
        ChatRequest.builder().user("hi").temperature(5).maxTokens(4).build())) {
      assertThrows(BadRequestException.class, () -> stream.iterator().hasNext());
    }
    CompletableFuture<Throwable> error = new CompletableFuture<>();
    StreamHandle handle = client.completeAsync(counting(10_000), new StreamListener() {
      @Override
      public void onText(String text) {}

      @Override
      public void onError(Throwable e) {
        error.complete(e);
      }
    });
    assertInstanceOf(BadRequestException.class, error.join());
    ExecutionException failed = assertThrows(ExecutionException.class, () -> handle.result().get());
    assertInstanceOf(BadRequestException.class, failed.getCause());
  }

  @Test
  void readTimeoutClosesTheConnectionAndStopsTheGeneration() throws Exception {
    try (LlamaClient impatient = LlamaClient.builder(server.url())
        .readTimeout(Duration.ofMillis(300)).build()) {
      long start = System.nanoTime();
      // A blocking answer comes only at the end, which 200 tokens on one thread cannot reach
      // within 300 ms.
      assertThrows(LlamaTimeoutException.class, () -> impatient.complete(counting(200)));
      assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(3));
    }
    server.waitFor(server::idle, Duration.ofSeconds(5), "idle after the client gave up");
  }

  @Test
  void requestTimeoutEndsAStream() throws Exception {
    try (LlamaClient impatient = LlamaClient.builder(server.url())
        .requestTimeout(Duration.ofMillis(1500)).build()) {
      List<String> pieces = new ArrayList<>();
      long start = System.nanoTime();
      try (Stream<String> stream = impatient.completeStream(counting(250))) {
        Iterator<String> it = stream.iterator();
        // A slow reader: 250 pieces take at least 2.5 s however fast the server is.
        LlamaTimeoutException e = assertThrows(LlamaTimeoutException.class, () -> {
          while (it.hasNext()) {
            pieces.add(it.next());
            Thread.sleep(10);
          }
        });
        assertTrue(e.getMessage().contains("request timeout"), e.getMessage());
      }
      assertFalse(pieces.isEmpty(), "tokens arrived before the timeout");
      assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(5));
    }
    server.waitFor(server::idle, Duration.ofSeconds(5), "idle after the timeout");
  }

  @Test
  void refusedConnectionsAreConnectionErrors() throws Exception {
    int port;
    try (ServerSocket socket = new ServerSocket(0)) {
      port = socket.getLocalPort();
    }
    try (LlamaClient nobody = LlamaClient.builder("http://127.0.0.1:" + port).build()) {
      assertThrows(LlamaConnectionException.class, () -> nobody.chat(greedyChat("hi", 2)));
      assertFalse(nobody.isHealthy());
      try (Stream<String> stream = nobody.chatStream(greedyChat("hi", 2))) {
        assertThrows(LlamaConnectionException.class, () -> stream.findFirst());
      }
    }
  }

  @Test
  void oneClientManyThreads() throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(6);
    List<Future<String>> results = new ArrayList<>();
    for (int i = 0; i < 6; i++) {
      int n = i;
      results.add(pool.submit(() -> {
        CompletionRequest request = CompletionRequest.builder("Count from " + n + ":")
            .temperature(0).ignoreEos(true).maxTokens(5).build();
        if (n % 2 == 0) return client.complete(request).text();
        try (Stream<String> stream = client.completeStream(request)) {
          return stream.collect(Collectors.joining());
        }
      }));
    }
    for (Future<String> result : results) assertFalse(result.get(60, TimeUnit.SECONDS).isEmpty());
    pool.shutdown();
  }

  @Test
  void closingTheClientEndsOpenStreams() throws Exception {
    LlamaClient own = LlamaClient.builder(server.url()).build();
    try (Stream<String> stream = own.completeStream(counting(250))) {
      Iterator<String> it = stream.iterator();
      assertTrue(it.hasNext());
      it.next();
      own.close();
      LlamaClientException e = assertThrows(LlamaClientException.class, () -> {
        while (it.hasNext()) it.next();
      });
      assertTrue(e.getMessage().contains("closed"), e.getMessage());
    }
    assertThrows(IllegalStateException.class, () -> own.chat(greedyChat("hi", 2)));
    own.close(); // idempotent
    server.waitFor(server::idle, Duration.ofSeconds(5), "idle after the client closed");
  }
}
