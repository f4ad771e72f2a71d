package io.llamaserve.engine;

/**
 * The native methods of libllamaserve_jni (bindings/java/native/jni_exports.cc). Text is
 * UTF-8 byte[] both ways. Pointers are owned by LlamaEngine (engine) and GenerationHandle
 * (request), which guarantee that each is live while used and released exactly once.
 */
final class NativeBridge {
  private NativeBridge() {}

  /** kvSequences: 0 = contextTokens x maxRunning per replica; n &gt; 0 needs contextTokens. */
  static native long open(byte[] modelPath, byte[] chatTemplate, byte[] device,
      int tensorParallel, int pipelineParallel, int replicas, double gpuMemoryUtilization,
      int threads, long contextTokens, int kvSequences, int maxRunning, int maxWaiting,
      int maxBatchTokens);

  static native void close(long engine);

  static native byte[] describe(long engine);

  static native int maxContext(long engine);

  /** {waiting, running, kvBlocksTotal, kvBlocksFree, finished, promptTokens, generatedTokens,
   *  preemptions, steps}. */
  static native long[] stats(long engine);

  /**
   * A chat when {@code roles} is non-null (roles[i] with contents[i]), else a raw prompt.
   * sampling = {temperature, topP, minP, repetitionPenalty, presencePenalty,
   * frequencyPenalty}.
   */
  static native long submit(long engine, byte[] id, byte[][] roles, byte[][] contents,
      byte[] promptText, int maxTokens, float[] sampling, int topK, boolean hasSeed, long seed,
      byte[][] stopStrings, boolean ignoreEos, long timeoutMs);

  /** The next event, or null when none came within timeoutMs (or the stream has ended). */
  static native NativeEvent next(long request, long timeoutMs);

  static native void cancel(long request);

  static native void release(long request);

  static native int[] tokenize(long engine, byte[] text, boolean addSpecial);

  static native byte[] detokenize(long engine, int[] tokens);
}
