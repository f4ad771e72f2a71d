package io.llamaserve.engine;

import io.llamaserve.ChatMessage;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.ReentrantReadWriteLock;
import java.util.function.Consumer;

/**
 * The llamaserve engine in this process, through JNI: one model on the CPU or on CUDA devices
 * ({@link EngineConfig.Builder#device}) serving any number of concurrent generations with
 * continuous batching, as the server does.
 *
 * <pre>{@code
 * try (LlamaEngine engine = LlamaEngine.open(EngineConfig.builder(Path.of("model.gguf")).build())) {
 *   Generation g = engine.generate(GenerationRequest.user("Hello").maxTokens(32).build());
 *   engine.stream(GenerationRequest.user("Tell a story").build(), System.out::print);
 * }
 * }</pre>
 *
 * <p>Thread-safe: many threads may generate at once (each call waits only for its own
 * tokens). {@link #close()} cancels what is running, frees the model, the KV cache and the
 * device memory at once (no finalizers), and may be called twice; any other use after it throws
 * IllegalStateException. Engine errors are {@link LlamaEngineException}s; invalid arguments
 * are IllegalArgumentExceptions.
 *
 * <p>The native library is loaded on first use, see {@link NativeLibrary}.
 */
public final class LlamaEngine implements AutoCloseable {
  // Native calls on the engine pointer hold the read lock; close() takes the write lock, so
  // the engine is never freed under a running call. Generations read through their own
  // handles and do not hold this lock while they wait for tokens.
  private final ReentrantReadWriteLock lock = new ReentrantReadWriteLock();
  private long pointer; // 0 once closed; guarded by lock
  private volatile boolean closed;
  private final Set<GenerationHandle> open = ConcurrentHashMap.newKeySet();
  private final AtomicLong nextId = new AtomicLong(1);
  private final EngineConfig config;

  private LlamaEngine(long pointer, EngineConfig config) {
    this.pointer = pointer;
    this.config = config;
  }

  /**
   * Loads the model, starts the engines of the configured layout and warms them up with a
   * two-token generation (counted in {@link #stats()}).
   *
   * @throws LlamaEngineException if the model cannot be loaded (NOT_FOUND, IO,
   *     INVALID_ARGUMENT with what is wrong with the file) or the options are refused
   *     (INVALID_ARGUMENT naming the device or option; UNSUPPORTED for a CUDA device in a
   *     build without CUDA; RESOURCE_EXHAUSTED when the model does not fit the devices)
   * @throws UnsatisfiedLinkError if libllamaserve_jni cannot be loaded
   */
  public static LlamaEngine open(EngineConfig config) {
    Objects.requireNonNull(config, "config");
    NativeLibrary.load();
    long pointer = NativeBridge.open(utf8(config.modelPath().toString()),
        utf8(config.chatTemplate()), utf8(config.device()), config.tensorParallel(),
        config.pipelineParallel(), config.replicas(), config.gpuMemoryUtilization(),
        config.threads(), config.contextTokens(), config.kvSequences(), config.maxRunning(),
        config.maxWaiting(), config.maxBatchTokens());
    return new LlamaEngine(pointer, config);
  }

  public EngineConfig config() {
    return config;
  }

  /**
   * Submits a generation and returns its handle at once. The caller reads and closes it.
   *
   * @throws LlamaEngineException INVALID_ARGUMENT (bad sampling values, maxTokens < 1),
   *     OUT_OF_RANGE (prompt + maxTokens longer than the context), RESOURCE_EXHAUSTED (the
   *     queue is full), UNSUPPORTED (a chat on a model without a chat template)
   */
  public GenerationHandle submit(GenerationRequest request) {
    Objects.requireNonNull(request, "request");
    String id = request.id().isEmpty() ? "java-" + nextId.getAndIncrement() : request.id();
    byte[][] roles = null;
    byte[][] contents = null;
    if (request.isChat()) {
      List<ChatMessage> messages = request.messages();
      roles = new byte[messages.size()][];
      contents = new byte[messages.size()][];
      for (int i = 0; i < messages.size(); i++) {
        roles[i] = utf8(messages.get(i).role());
        contents[i] = utf8(messages.get(i).content());
      }
    }
    byte[][] stops = new byte[request.stop().size()][];
    for (int i = 0; i < stops.length; i++) stops[i] = utf8(request.stop().get(i));
    Long seed = request.seed();
    lock.readLock().lock();
    try {
      long engine = livePointer();
      long handle = NativeBridge.submit(engine, utf8(id), roles, contents,
          request.isChat() ? null : utf8(request.prompt()), request.maxTokens(),
          request.samplingFloats(), request.topK(), seed != null, seed == null ? 0 : seed,
          stops, request.ignoreEos(), request.timeout().toMillis());
      GenerationHandle generation = new GenerationHandle(this, id, handle);
      open.add(generation); // under the read lock, so close() sees it
      return generation;
    } finally {
      lock.readLock().unlock();
    }
  }

  /** Generates to the end and returns the result (CANCELLED if cancelled meanwhile). */
  public Generation generate(GenerationRequest request) {
    try (GenerationHandle handle = submit(request)) {
      return handle.await();
    }
  }

  /**
   * Generates to the end, passing each piece of text to {@code onText} on this thread as it
   * is produced. An exception from onText cancels the generation and propagates.
   */
  public Generation stream(GenerationRequest request, Consumer<String> onText) {
    Objects.requireNonNull(onText, "onText");
    try (GenerationHandle handle = submit(request)) {
      for (String piece = handle.next(); piece != null; piece = handle.next()) {
        onText.accept(piece);
      }
      return handle.result();
    }
  }

  /**
   * Cancels the running generations with this id (see GenerationRequest.Builder.id); their
   * readers then end with CANCELLED. Returns whether any was found.
   */
  public boolean cancel(String requestId) {
    ensureOpen();
    boolean found = false;
    for (GenerationHandle handle : open) {
      if (handle.id().equals(requestId)) {
        handle.cancel();
        found = true;
      }
    }
    return found;
  }

  /** Token ids of {@code text}, without special tokens. */
  public int[] tokenize(String text) {
    return tokenize(text, false);
  }

  /** Token ids of {@code text}; addSpecial adds BOS/EOS as the model asks. */
  public int[] tokenize(String text, boolean addSpecial) {
    byte[] bytes = utf8(Objects.requireNonNull(text, "text"));
    lock.readLock().lock();
    try {
      return NativeBridge.tokenize(livePointer(), bytes, addSpecial);
    } finally {
      lock.readLock().unlock();
    }
  }

  /**
   * The text of {@code tokens} (special tokens skipped); a character cut by the end of the
   * list becomes U+FFFD.
   */
  public String detokenize(int[] tokens) {
    Objects.requireNonNull(tokens, "tokens");
    byte[] bytes;
    lock.readLock().lock();
    try {
      bytes = NativeBridge.detokenize(livePointer(), tokens);
    } finally {
      lock.readLock().unlock();
    }
    Utf8DeltaDecoder decoder = new Utf8DeltaDecoder();
    return decoder.decode(bytes) + decoder.finish();
  }

  /** Counters and gauges summed over the replicas. */
  public EngineStats stats() {
    lock.readLock().lock();
    try {
      return EngineStats.of(NativeBridge.stats(livePointer()));
    } finally {
      lock.readLock().unlock();
    }
  }

  /** Tokens per sequence (prompt + output). */
  public int maxContext() {
    lock.readLock().lock();
    try {
      return NativeBridge.maxContext(livePointer());
    } finally {
      lock.readLock().unlock();
    }
  }

  /** One line about the model, the executor, the KV cache and the chat template. */
  public String describe() {
    lock.readLock().lock();
    try {
      return new String(NativeBridge.describe(livePointer()), StandardCharsets.UTF_8);
    } finally {
      lock.readLock().unlock();
    }
  }

  public boolean isClosed() {
    return closed;
  }

  /**
   * Cancels every running generation (their readers end with CANCELLED), stops the engine
   * thread and frees the model and KV cache before returning. Idempotent.
   */
  @Override
  public void close() {
    if (lock.getReadHoldCount() > 0) {
      throw new IllegalStateException("close() called from inside an engine call");
    }
    lock.writeLock().lock();
    try {
      if (closed) return;
      closed = true;
      for (GenerationHandle handle : open) handle.closeForEngine();
      open.clear();
      NativeBridge.close(pointer);
      pointer = 0;
    } finally {
      lock.writeLock().unlock();
    }
  }

  void forget(GenerationHandle handle) {
    open.remove(handle);
  }

  // PRECONDITION: the caller holds the read lock.
  private long livePointer() {
    if (pointer == 0) throw new IllegalStateException("the LlamaEngine is closed");
    return pointer;
  }

  private void ensureOpen() {
    if (closed) throw new IllegalStateException("the LlamaEngine is closed");
  }

  private static byte[] utf8(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }
}
