package io.llamaserve.engine;

import java.nio.file.Path;
import java.util.Objects;

/**
 * How to open a {@link LlamaEngine}: the model, where it runs (the CPU by default, one CUDA
 * device, or several split by tensor and pipeline parallelism, as replicas) and what its
 * engines admit. Immutable; build with {@link #builder(Path)}. The builder checks ranges; the
 * model file and the devices are checked by {@link LlamaEngine#open}.
 *
 * <p>The options are those of {@code llamaserve serve}: {@code device("0,1")} with
 * {@code tensorParallel(2)} is {@code --devices 0,1 --tp 2}.
 */
public final class EngineConfig {
  private final Path modelPath;
  private final String device;
  private final int tensorParallel;
  private final int pipelineParallel;
  private final int replicas;
  private final double gpuMemoryUtilization;
  private final int threads;
  private final int contextTokens;
  private final int kvSequences;
  private final int maxRunning;
  private final int maxWaiting;
  private final int maxBatchTokens;
  private final String chatTemplate;

  private EngineConfig(Builder b) {
    this.modelPath = b.modelPath;
    this.device = b.device;
    this.tensorParallel = b.tensorParallel;
    this.pipelineParallel = b.pipelineParallel;
    this.replicas = b.replicas;
    this.gpuMemoryUtilization = b.gpuMemoryUtilization;
    this.threads = b.threads;
    this.contextTokens = b.contextTokens;
    this.kvSequences = b.kvSequences;
    this.maxRunning = b.maxRunning;
    this.maxWaiting = b.maxWaiting;
    this.maxBatchTokens = b.maxBatchTokens;
    this.chatTemplate = b.chatTemplate;
  }

  public static Builder builder(Path modelPath) {
    return new Builder(modelPath);
  }

  public Path modelPath() {
    return modelPath;
  }

  public String device() {
    return device;
  }

  public int tensorParallel() {
    return tensorParallel;
  }

  public int pipelineParallel() {
    return pipelineParallel;
  }

  public int replicas() {
    return replicas;
  }

  public double gpuMemoryUtilization() {
    return gpuMemoryUtilization;
  }

  public int threads() {
    return threads;
  }

  public int contextTokens() {
    return contextTokens;
  }

  public int kvSequences() {
    return kvSequences;
  }

  public int maxRunning() {
    return maxRunning;
  }

  public int maxWaiting() {
    return maxWaiting;
  }

  public int maxBatchTokens() {
    return maxBatchTokens;
  }

  public String chatTemplate() {
    return chatTemplate;
  }

  public static final class Builder {
    private final Path modelPath;
    private String device = "cpu";
    private int tensorParallel = 1;
    private int pipelineParallel = 1;
    private int replicas = 1;
    private double gpuMemoryUtilization = 0.90;
    private int threads;
    private int contextTokens;
    private int kvSequences;
    private int maxRunning = 8;
    private int maxWaiting = 256;
    private int maxBatchTokens = 512;
    private String chatTemplate = "";

    private Builder(Path modelPath) {
      this.modelPath = Objects.requireNonNull(modelPath, "modelPath");
    }

    /**
     * Where the model runs: "cpu" (default), "cuda:N" or "N" for one CUDA device, or a list
     * "0,1,2,3" of replicas x tensorParallel x pipelineParallel CUDA devices, consecutive
     * groups per replica. Checked when the engine opens; a build without CUDA refuses CUDA
     * devices with UNSUPPORTED.
     */
    public Builder device(String device) {
      Objects.requireNonNull(device, "device");
      if (device.isBlank()) throw new IllegalArgumentException("device must not be blank");
      this.device = device;
      return this;
    }

    /** GPUs that split every layer's heads and FFN columns (default 1; --tp). */
    public Builder tensorParallel(int ranks) {
      this.tensorParallel = atLeast(ranks, 1, "tensorParallel");
      return this;
    }

    /** GPUs that each run a contiguous block of layers (default 1; --pp). */
    public Builder pipelineParallel(int stages) {
      this.pipelineParallel = atLeast(stages, 1, "pipelineParallel");
      return this;
    }

    /**
     * Whole-model engines behind a least-loaded router (default 1; --replicas). Each has its
     * own KV cache and runs up to maxRunning requests; on the CPU they share the threads.
     */
    public Builder replicas(int replicas) {
      this.replicas = atLeast(replicas, 1, "replicas");
      return this;
    }

    /** CUDA: the fraction of each device's memory this model may use, in (0, 1] (default 0.9). */
    public Builder gpuMemoryUtilization(double fraction) {
      if (!(fraction > 0 && fraction <= 1)) {
        throw new IllegalArgumentException(
            "gpuMemoryUtilization must be in (0, 1], got " + fraction);
      }
      this.gpuMemoryUtilization = fraction;
      return this;
    }

    /** CPU threads of the forward pass over all replicas; 0 (default) = all online cores. */
    public Builder threads(int threads) {
      this.threads = atLeast(threads, 0, "threads");
      return this;
    }

    /** Tokens per sequence, prompt plus output; 0 (default) = min(model's context, 4096). */
    public Builder contextTokens(int tokens) {
      this.contextTokens = atLeast(tokens, 0, "contextTokens");
      return this;
    }

    /**
     * Sequences of contextTokens the KV cache of each replica holds. 0 (default) = maxRunning,
     * as {@code llamaserve serve} sizes it, so that running requests never wait for KV space.
     * A smaller count saves memory: concurrent requests share the cache, and when it runs out
     * the engine pauses the newest ones and recomputes them later. A count above 0 needs an
     * explicit {@link #contextTokens}.
     */
    public Builder kvSequences(int sequences) {
      this.kvSequences = atLeast(sequences, 0, "kvSequences");
      return this;
    }

    /** Requests decoded together by each replica (default 8). */
    public Builder maxRunning(int requests) {
      this.maxRunning = atLeast(requests, 1, "maxRunning");
      return this;
    }

    /** Requests queued beyond maxRunning before submissions fail with RESOURCE_EXHAUSTED. */
    public Builder maxWaiting(int requests) {
      this.maxWaiting = atLeast(requests, 0, "maxWaiting");
      return this;
    }

    /** Token rows per forward pass; long prompts are processed in chunks of this size. */
    public Builder maxBatchTokens(int tokens) {
      this.maxBatchTokens = atLeast(tokens, 1, "maxBatchTokens");
      return this;
    }

    /** "llama2", "llama3" or "chatml"; empty (default) = the model's own template. */
    public Builder chatTemplate(String name) {
      this.chatTemplate = Objects.requireNonNull(name, "chatTemplate");
      return this;
    }

    /** @throws IllegalArgumentException kvSequences above 0 without contextTokens */
    public EngineConfig build() {
      if (kvSequences > 0 && contextTokens == 0) {
        throw new IllegalArgumentException("kvSequences(" + kvSequences
            + ") needs contextTokens; leave kvSequences at 0 to size the KV cache as "
            + "contextTokens x maxRunning");
      }
      return new EngineConfig(this);
    }

    private static int atLeast(int value, int min, String name) {
      if (value < min) {
        throw new IllegalArgumentException(name + " must be >= " + min + ", got " + value);
      }
      return value;
    }
  }
}
