package io.llamaserve.engine;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.llamaserve.ChatMessage;
import io.llamaserve.testing.TestPaths;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The embedded engine with the real JNI library and the default model. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class LlamaEngineTest {
  private static LlamaEngine engine;

  static EngineConfig.Builder config() {
    System.setProperty(NativeLibrary.PATH_PROPERTY, TestPaths.jniLibrary().toString());
    return EngineConfig.builder(TestPaths.model()).threads(1).contextTokens(512).kvSequences(4)
        .maxRunning(4);
  }

  @BeforeAll
  static void open() {
    engine = LlamaEngine.open(config().build());
  }

  @AfterAll
  static void close() {
    if (engine != null) engine.close();
  }

  private static GenerationRequest.Builder greedy(String message, int maxTokens) {
    return GenerationRequest.user(message).temperature(0).maxTokens(maxTokens);
  }

  /**
   * Every piece is well-formed UTF-16 (no unpaired surrogate) without U+FFFD, except that a
   * generation cut by its token limit inside a character ends with one U+FFFD (the engine
   * flushes the incomplete bytes as the replacement character).
   */
  private static void assertPiecesWellFormed(List<String> pieces, Generation g) {
    for (int i = 0; i < pieces.size(); i++) {
      String piece = pieces.get(i);
      boolean last = i == pieces.size() - 1;
      if (last && g.finishReason() == FinishReason.LENGTH && piece.endsWith("\uFFFD")) {
        piece = piece.substring(0, piece.length() - 1);
      }
      assertWellFormed(piece);
    }
  }

  private static void assertWellFormed(String text) {
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (Character.isHighSurrogate(c)) {
        assertTrue(i + 1 < text.length() && Character.isLowSurrogate(text.charAt(i + 1)),
            "unpaired high surrogate at " + i + " in " + text);
        i++;
      } else {
        assertFalse(Character.isLowSurrogate(c), "unpaired low surrogate at " + i);
      }
    }
    assertFalse(text.contains("\uFFFD"), "replacement character in: " + text);
  }

  @Test
  void generatesAndStreamsTheSameGreedyText() {
    GenerationRequest request = greedy("What is the capital of France?", 12).build();
    Generation generated = engine.generate(request);
    assertFalse(generated.text().isBlank());
    assertTrue(generated.completionTokens() >= 1 && generated.completionTokens() <= 12);
    assertTrue(generated.promptTokens() > 5, "the chat template adds tokens");
    assertTrue(generated.finishReason() == FinishReason.STOP
        || generated.finishReason() == FinishReason.LENGTH);
    assertTrue(generated.totalMs() > 0);

    List<String> pieces = new ArrayList<>();
    Generation streamed = engine.stream(request, pieces::add);
    assertTrue(pieces.size() > 1, "streamed in pieces: " + pieces);
    assertEquals(String.join("", pieces), streamed.text());
    assertEquals(generated.text(), streamed.text());
    assertEquals(generated.completionTokens(), streamed.completionTokens());
  }

  @Test
  void rawPromptsAndLengthLimit() {
    Generation g = engine.generate(GenerationRequest.prompt("1, 2, 3, 4, 5,").temperature(0)
        .ignoreEos(true).maxTokens(6).build());
    assertEquals(FinishReason.LENGTH, g.finishReason());
    assertEquals(6, g.completionTokens());
    assertTrue(g.text().contains("6"), g.text());
  }

  @Test
  void stopStringsEndTheGeneration() {
    Generation g = engine.generate(GenerationRequest.prompt("1, 2, 3, 4, 5,").temperature(0)
        .ignoreEos(true).stop("8").maxTokens(32).build());
    assertEquals(FinishReason.STOP, g.finishReason());
    assertFalse(g.text().contains("8"), g.text());
    assertTrue(g.text().contains("7"), g.text());
  }

  @Test
  void chineseOutputStreamsIntact() {
    // Greedy SmolLM2 answers this in Chinese; every piece must decode on its own and the
    // pieces must join to the final text.
    List<String> pieces = new ArrayList<>();
    Generation g = engine.stream(greedy("Translate to Chinese: Good morning", 24).build(),
        pieces::add);
    String joined = String.join("", pieces);
    assertEquals(g.text(), joined);
    assertTrue(joined.codePoints().anyMatch(cp -> Character.UnicodeScript.of(cp)
        == Character.UnicodeScript.HAN), "no Chinese in: " + joined);
    assertPiecesWellFormed(pieces, g);
  }

  @Test
  void emojiOutputStreamsIntact() {
    List<String> pieces = new ArrayList<>();
    Generation g = engine.stream(greedy("Reply with three emoji.", 16).build(), pieces::add);
    String joined = String.join("", pieces);
    assertEquals(g.text(), joined);
    assertTrue(joined.codePoints().anyMatch(cp -> cp >= 0x1F300), "no emoji in: " + joined);
    assertPiecesWellFormed(pieces, g); // a 4-byte character never splits between pieces
  }

  @Test
  void sampledMultiByteTextIsWellFormed() {
    // High temperature over a Chinese prompt: many byte-level tokens that are pieces of
    // characters. The engine holds them back until the character is complete.
    List<String> pieces = new ArrayList<>();
    Generation g = engine.stream(GenerationRequest.user("用中文写一首关于大海的诗。🌊")
        .temperature(1.2f).seed(7).ignoreEos(true).maxTokens(48).build(), pieces::add);
    assertEquals(48, g.completionTokens());
    assertEquals(g.text(), String.join("", pieces));
    for (String piece : pieces) {
      assertFalse(Character.isHighSurrogate(piece.charAt(piece.length() - 1)), piece);
      assertFalse(Character.isLowSurrogate(piece.charAt(0)), piece);
    }
  }

  @Test
  void tokenizeAndDetokenizeRoundTripUnicode() {
    String text = "Grüße 你好，世界！🙂🎉 naïve 𝄞";
    int[] tokens = engine.tokenize(text);
    assertTrue(tokens.length > 5);
    assertEquals(text, engine.detokenize(tokens));
    // Byte-level BPE spells this emoji with several tokens; a list cut inside it decodes to
    // U+FFFD for the incomplete character instead of failing.
    int[] smile = engine.tokenize("🙂");
    assertTrue(smile.length > 1, "tokens: " + smile.length);
    assertEquals("🙂", engine.detokenize(smile));
    assertEquals("a\uFFFD", engine.detokenize(new int[] {engine.tokenize("a")[0], smile[0]}));
    assertArrayEquals(engine.tokenize(text), tokens);
    LlamaEngineException e = assertThrows(LlamaEngineException.class,
        () -> engine.detokenize(new int[] {1, 1 << 30}));
    assertEquals(LlamaEngineException.Code.INVALID_ARGUMENT, e.code());
  }

  @Test
  void manyThreadsShareOneEngine() throws Exception {
    assertEquals(0, waitIdle());
    EngineStats before = engine.stats();
    int threads = 8;
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    CountDownLatch start = new CountDownLatch(1);
    List<Future<Generation>> results = new ArrayList<>();
    List<List<String>> pieces = new ArrayList<>();
    for (int i = 0; i < threads; i++) {
      List<String> mine = new ArrayList<>();
      pieces.add(mine);
      int n = i;
      results.add(pool.submit(() -> {
        start.await();
        GenerationRequest request = GenerationRequest.prompt("Count: " + n + ",").temperature(0)
            .ignoreEos(true).maxTokens(6).build();
        return n % 2 == 0 ? engine.generate(request) : engine.stream(request, mine::add);
      }));
    }
    start.countDown();
    for (int i = 0; i < threads; i++) {
      Generation g = results.get(i).get(60, TimeUnit.SECONDS);
      assertEquals(FinishReason.LENGTH, g.finishReason());
      assertEquals(6, g.completionTokens());
      if (i % 2 == 1) assertEquals(g.text(), String.join("", pieces.get(i)));
    }
    pool.shutdown();
    // Stats are published after each engine step, so they may trail the finish events.
    assertEquals(0, waitIdle());
    EngineStats after = engine.stats();
    assertEquals(threads, after.requestsFinished() - before.requestsFinished());
    assertEquals(after.kvBlocksTotal(), after.kvBlocksFree(), "every KV block returned");
  }

  @Test
  void cancelStopsAGeneration() {
    GenerationRequest request = GenerationRequest.prompt("Once upon a time").ignoreEos(true)
        .maxTokens(400).id("to-cancel").build();
    try (GenerationHandle handle = engine.submit(request)) {
      assertEquals("to-cancel", handle.id());
      assertTrue(handle.next() != null);
      assertTrue(engine.cancel("to-cancel"));
      while (handle.next() != null) {
        // drain what was generated before the cancel took effect
      }
      Generation g = handle.result();
      assertEquals(FinishReason.CANCELLED, g.finishReason());
      assertTrue(g.completionTokens() < 400);
    }
    assertFalse(engine.cancel("to-cancel"), "finished generations are forgotten");
  }

  @Test
  void anExceptionInTheCallbackCancels() {
    RuntimeException boom = new RuntimeException("stop here");
    RuntimeException thrown = assertThrows(RuntimeException.class, () -> engine.stream(
        GenerationRequest.prompt("Once upon a time").ignoreEos(true).maxTokens(400).build(),
        piece -> {
          throw boom;
        }));
    assertEquals(boom, thrown);
    assertEquals(0, waitIdle(), "the generation was cancelled");
  }

  /** 0 once nothing runs or waits and every KV block is free (polled up to 5 s), else 1. */
  private static int waitIdle() {
    for (int i = 0; i < 250; i++) {
      EngineStats s = engine.stats();
      if (s.running() == 0 && s.waiting() == 0 && s.kvBlocksFree() == s.kvBlocksTotal()) {
        return 0;
      }
      try {
        Thread.sleep(20);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        break;
      }
    }
    return 1;
  }

  @Test
  void invalidRequestsThrow() {
    LlamaEngineException e = assertThrows(LlamaEngineException.class,
        () -> engine.generate(greedy("hi", 0).build()));
    assertEquals(LlamaEngineException.Code.INVALID_ARGUMENT, e.code());
    e = assertThrows(LlamaEngineException.class,
        () -> engine.generate(greedy("hi", 100_000).build()));
    assertEquals(LlamaEngineException.Code.OUT_OF_RANGE, e.code());
    e = assertThrows(LlamaEngineException.class,
        () -> engine.generate(greedy("hi", 4).temperature(-1).build()));
    assertEquals(LlamaEngineException.Code.INVALID_ARGUMENT, e.code());
    e = assertThrows(LlamaEngineException.class, () -> engine.generate(GenerationRequest
        .chat(List.of(new ChatMessage("wizard", "hi"))).maxTokens(4).build()));
    assertEquals(LlamaEngineException.Code.INVALID_ARGUMENT, e.code());
    assertThrows(IllegalArgumentException.class, () -> GenerationRequest.chat(List.of()));
    assertThrows(IllegalArgumentException.class,
        () -> GenerationRequest.prompt("x").timeout(java.time.Duration.ofSeconds(-1)));
  }

  @Test
  void invalidConfigurationsThrow() throws Exception {
    assertThrows(IllegalArgumentException.class, () -> config().threads(-1));
    assertThrows(IllegalArgumentException.class, () -> config().maxRunning(0));
    assertThrows(IllegalArgumentException.class, () -> config().kvSequences(-1));
    assertThrows(IllegalArgumentException.class,
        () -> EngineConfig.builder(TestPaths.model()).kvSequences(2).build());
    assertThrows(NullPointerException.class, () -> EngineConfig.builder(null));

    LlamaEngineException missing = assertThrows(LlamaEngineException.class, () -> LlamaEngine
        .open(EngineConfig.builder(TestPaths.logDir().resolve("no-such-模型.gguf")).build()));
    assertTrue(missing.getMessage().contains("no-such-模型.gguf"), missing.getMessage());

    java.nio.file.Path garbage = TestPaths.logDir().resolve("not-a-model.gguf");
    java.nio.file.Files.write(garbage, "GGUF but not really".getBytes(StandardCharsets.UTF_8));
    assertThrows(LlamaEngineException.class,
        () -> LlamaEngine.open(EngineConfig.builder(garbage).build()));

    LlamaEngineException template = assertThrows(LlamaEngineException.class,
        () -> LlamaEngine.open(config().chatTemplate("jinja-of-my-own").build()));
    assertTrue(template.getMessage().contains("jinja-of-my-own"), template.getMessage());
  }

  @Test
  void layoutOptionsValidateRanges() {
    EngineConfig defaults = EngineConfig.builder(TestPaths.model()).build();
    assertEquals("cpu", defaults.device());
    assertEquals(1, defaults.tensorParallel());
    assertEquals(1, defaults.pipelineParallel());
    assertEquals(1, defaults.replicas());
    assertEquals(0.90, defaults.gpuMemoryUtilization());
    assertEquals(0, defaults.kvSequences());

    EngineConfig gpus = config().device("0,1").tensorParallel(2).pipelineParallel(1).replicas(1)
        .gpuMemoryUtilization(0.5).build();
    assertEquals("0,1", gpus.device());
    assertEquals(2, gpus.tensorParallel());
    assertEquals(0.5, gpus.gpuMemoryUtilization());

    assertThrows(NullPointerException.class, () -> config().device(null));
    assertThrows(IllegalArgumentException.class, () -> config().device(" "));
    assertThrows(IllegalArgumentException.class, () -> config().tensorParallel(0));
    assertThrows(IllegalArgumentException.class, () -> config().pipelineParallel(0));
    assertThrows(IllegalArgumentException.class, () -> config().replicas(0));
    assertThrows(IllegalArgumentException.class, () -> config().gpuMemoryUtilization(0));
    assertThrows(IllegalArgumentException.class, () -> config().gpuMemoryUtilization(1.01));
    assertThrows(IllegalArgumentException.class,
        () -> config().gpuMemoryUtilization(Double.NaN));
    config().gpuMemoryUtilization(1.0);
  }

  @Test
  void devicesTheBuildCannotServeAreRefused() {
    // This build has no CUDA support (the CPU preset); a CUDA build would open the device.
    LlamaEngineException cuda = assertThrows(LlamaEngineException.class,
        () -> LlamaEngine.open(config().device("cuda:0").build()));
    assertEquals(LlamaEngineException.Code.UNSUPPORTED, cuda.code());
    assertTrue(cuda.getMessage().contains("CUDA"), cuda.getMessage());

    LlamaEngineException invalid = assertThrows(LlamaEngineException.class,
        () -> LlamaEngine.open(config().device("gpu7").build()));
    assertEquals(LlamaEngineException.Code.INVALID_ARGUMENT, invalid.code());
    assertTrue(invalid.getMessage().contains("gpu7"), invalid.getMessage());

    LlamaEngineException parallel = assertThrows(LlamaEngineException.class,
        () -> LlamaEngine.open(config().tensorParallel(2).build()));
    assertEquals(LlamaEngineException.Code.INVALID_ARGUMENT, parallel.code());
    assertTrue(parallel.getMessage().contains("CUDA devices"), parallel.getMessage());
  }

  @Test
  void replicasShareTheCpu() throws Exception {
    try (LlamaEngine two = LlamaEngine.open(config().replicas(2).build())) {
      assertTrue(two.describe().contains("2 replicas"), two.describe());
      Generation g = two.generate(greedy("Hi", 4).ignoreEos(true).build());
      assertEquals(4, g.completionTokens());
      assertEquals(FinishReason.LENGTH, g.finishReason());
    }
  }

  @Test
  void closeTwiceAndUseAfterClose() throws Exception {
    LlamaEngine own = LlamaEngine.open(config().build());
    assertTrue(own.describe().contains("chat template: jinja"), own.describe());
    assertEquals(512, own.maxContext());
    GenerationHandle leftOpen = own.submit(greedy("Hello", 200).ignoreEos(true).build());
    own.close();
    own.close(); // no-op
    assertTrue(own.isClosed());
    // A generation still open at close() ends as cancelled.
    while (leftOpen.next() != null) {
      // pieces generated before the close
    }
    assertEquals(FinishReason.CANCELLED, leftOpen.result().finishReason());
    leftOpen.close();
    assertThrows(IllegalStateException.class, () -> own.generate(greedy("Hello", 4).build()));
    assertThrows(IllegalStateException.class, () -> own.submit(greedy("Hello", 4).build()));
    assertThrows(IllegalStateException.class, () -> own.tokenize("Hello"));
    assertThrows(IllegalStateException.class, own::stats);
    assertThrows(IllegalStateException.class, own::describe);
    assertThrows(IllegalStateException.class, () -> own.cancel("x"));
  }

  @Test
  void closeWhileOtherThreadsGenerate() throws Exception {
    LlamaEngine own = LlamaEngine.open(config().build());
    ExecutorService pool = Executors.newFixedThreadPool(3);
    CountDownLatch started = new CountDownLatch(3);
    List<Future<Generation>> running = new ArrayList<>();
    for (int i = 0; i < 3; i++) {
      running.add(pool.submit(() -> own.stream(GenerationRequest.prompt("Long story:")
          .ignoreEos(true).maxTokens(400).build(), piece -> started.countDown())));
    }
    assertTrue(started.await(60, TimeUnit.SECONDS));
    own.close();
    for (Future<Generation> f : running) {
      Generation g = f.get(30, TimeUnit.SECONDS);
      assertEquals(FinishReason.CANCELLED, g.finishReason());
    }
    pool.shutdown();
  }

  @Test
  void holdsTwoModelsAtOnce() {
    try (LlamaEngine second = LlamaEngine.open(config().build())) {
      Generation first = engine.generate(greedy("What is the capital of France?", 8).build());
      Generation other = second.generate(greedy("What is the capital of France?", 8).build());
      // The same file and greedy decoding: each engine answers the same, independently.
      assertEquals(first.text(), other.text());
    }
    assertFalse(engine.generate(greedy("Hi", 2).build()).text().isEmpty());
  }

  @Test
  void handleAfterItsOwnerClosedItThrows() {
    GenerationHandle handle = engine.submit(greedy("Hi", 4).build());
    handle.close();
    handle.close();
    assertThrows(IllegalStateException.class, handle::next);
    assertThrows(IllegalStateException.class, handle::result);
    handle.cancel(); // harmless

    GenerationHandle done = engine.submit(greedy("Hi", 2).build());
    Generation g = done.await();
    assertNull(done.next());
    assertEquals(g, done.result());
    done.close();
  }
}
