package io.llamaserve.engine;

import java.nio.file.Path;
import java.util.Objects;

/**
 * How to open a {@link LlamaEngine}. Immutable; build with {@link #builder(Path)}. The
 * builder checks ranges; the model file itself is checked by {@link LlamaEngine#open}.
 */
public final class EngineConfig {
  private final Path modelPath;
  private final int threads;
  private final int contextTokens;
  private final int kvSequences;
  private final int maxRunning;
  private final int maxWaiting;
  private final int maxBatchTokens;
  private final String chatTemplate;

  private EngineConfig(Builder b) {
    this.modelPath = b.modelPath;
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
    private int threads;
    private int contextTokens;
    private int kvSequences = 1;
    private int maxRunning = 8;
    private int maxWaiting = 256;
    private int maxBatchTokens = 512;
    private String chatTemplate = "";

    private Builder(Path modelPath) {
      this.modelPath = Objects.requireNonNull(modelPath, "modelPath");
    }

    /** CPU threads of the forward pass; 0 (default) = all online cores. */
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
     * Sequences of contextTokens the KV cache holds (default 1). Concurrent requests share it;
     * when it runs out, the engine pauses and later recomputes the newest ones.
     */
    public Builder kvSequences(int sequences) {
      this.kvSequences = atLeast(sequences, 1, "kvSequences");
      return this;
    }

    /** Requests decoded together (default 8). */
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

    /** "llama2", "llama3" or "chatml"; empty (default) = detect from the model. */
    public Builder chatTemplate(String name) {
      this.chatTemplate = Objects.requireNonNull(name, "chatTemplate");
      return this;
    }

    public EngineConfig build() {
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
