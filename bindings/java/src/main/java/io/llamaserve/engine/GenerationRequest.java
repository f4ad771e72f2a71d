package io.llamaserve.engine;

import io.llamaserve.ChatMessage;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * One generation for {@link LlamaEngine}: chat messages (rendered with the model's chat
 * template) or a raw prompt, with sampling options. Immutable; build with {@link
 * #chat(List)}, {@link #user(String)} or {@link #prompt(String)}. Defaults are the engine's:
 * temperature 1, no top-k/top-p/min-p, no penalties, 256 new tokens.
 */
public final class GenerationRequest {
  private final String id;
  private final List<ChatMessage> messages; // null for a raw prompt
  private final String prompt;
  private final int maxTokens;
  private final float temperature;
  private final int topK;
  private final float topP;
  private final float minP;
  private final float repetitionPenalty;
  private final float presencePenalty;
  private final float frequencyPenalty;
  private final Long seed;
  private final List<String> stop;
  private final boolean ignoreEos;
  private final Duration timeout;

  private GenerationRequest(Builder b) {
    this.id = b.id;
    this.messages = b.messages == null ? null : List.copyOf(b.messages);
    this.prompt = b.prompt;
    this.maxTokens = b.maxTokens;
    this.temperature = b.temperature;
    this.topK = b.topK;
    this.topP = b.topP;
    this.minP = b.minP;
    this.repetitionPenalty = b.repetitionPenalty;
    this.presencePenalty = b.presencePenalty;
    this.frequencyPenalty = b.frequencyPenalty;
    this.seed = b.seed;
    this.stop = List.copyOf(b.stop);
    this.ignoreEos = b.ignoreEos;
    this.timeout = b.timeout;
  }

  /**
   * A chat through the model's chat template. Text messages only: a message with tool calls
   * is refused with IllegalArgumentException (tools are served by {@code llamaserve serve}).
   */
  public static Builder chat(List<ChatMessage> messages) {
    Objects.requireNonNull(messages, "messages");
    if (messages.isEmpty()) throw new IllegalArgumentException("a chat needs at least one message");
    for (ChatMessage m : messages) {
      if (m.hasToolCalls()) {
        throw new IllegalArgumentException("the embedded engine does not take tool calls");
      }
    }
    return new Builder(new ArrayList<>(messages), null);
  }

  /** A one-message chat. */
  public static Builder user(String message) {
    return chat(List.of(ChatMessage.user(message)));
  }

  /** A raw prompt, continued as it is (the model's BOS is added). */
  public static Builder prompt(String prompt) {
    return new Builder(null, Objects.requireNonNull(prompt, "prompt"));
  }

  public String id() {
    return id;
  }

  public boolean isChat() {
    return messages != null;
  }

  public List<ChatMessage> messages() {
    return messages;
  }

  public String prompt() {
    return prompt;
  }

  public int maxTokens() {
    return maxTokens;
  }

  float[] samplingFloats() {
    return new float[] {temperature, topP, minP, repetitionPenalty, presencePenalty,
        frequencyPenalty};
  }

  int topK() {
    return topK;
  }

  Long seed() {
    return seed;
  }

  List<String> stop() {
    return stop;
  }

  boolean ignoreEos() {
    return ignoreEos;
  }

  Duration timeout() {
    return timeout;
  }

  public static final class Builder {
    private final List<ChatMessage> messages;
    private final String prompt;
    private String id = "";
    private int maxTokens = 256;
    private float temperature = 1.0f;
    private int topK;
    private float topP = 1.0f;
    private float minP;
    private float repetitionPenalty = 1.0f;
    private float presencePenalty;
    private float frequencyPenalty;
    private Long seed;
    private final List<String> stop = new ArrayList<>();
    private boolean ignoreEos;
    private Duration timeout = Duration.ZERO;

    private Builder(List<ChatMessage> messages, String prompt) {
      this.messages = messages;
      this.prompt = prompt;
    }

    /** An id for the engine's logs and for {@link LlamaEngine#cancel(String)}. */
    public Builder id(String id) {
      this.id = Objects.requireNonNull(id, "id");
      return this;
    }

    public Builder maxTokens(int maxTokens) {
      this.maxTokens = maxTokens; // range checked by the engine against its context
      return this;
    }

    /** 0 = greedy (deterministic). */
    public Builder temperature(float temperature) {
      this.temperature = temperature;
      return this;
    }

    public Builder topK(int topK) {
      this.topK = topK;
      return this;
    }

    public Builder topP(float topP) {
      this.topP = topP;
      return this;
    }

    public Builder minP(float minP) {
      this.minP = minP;
      return this;
    }

    public Builder repetitionPenalty(float penalty) {
      this.repetitionPenalty = penalty;
      return this;
    }

    public Builder presencePenalty(float penalty) {
      this.presencePenalty = penalty;
      return this;
    }

    public Builder frequencyPenalty(float penalty) {
      this.frequencyPenalty = penalty;
      return this;
    }

    /** Same seed, prompt and options → same output. */
    public Builder seed(long seed) {
      this.seed = seed;
      return this;
    }

    /** Adds a stop string: generation ends before it, and it is not part of the text. */
    public Builder stop(String stop) {
      this.stop.add(Objects.requireNonNull(stop, "stop"));
      return this;
    }

    public Builder ignoreEos(boolean ignoreEos) {
      this.ignoreEos = ignoreEos;
      return this;
    }

    /** Wall-clock limit from submission; ZERO (default) = none. */
    public Builder timeout(Duration timeout) {
      Objects.requireNonNull(timeout, "timeout");
      if (timeout.isNegative()) throw new IllegalArgumentException("timeout must be >= 0");
      this.timeout = timeout;
      return this;
    }

    public GenerationRequest build() {
      return new GenerationRequest(this);
    }
  }
}
