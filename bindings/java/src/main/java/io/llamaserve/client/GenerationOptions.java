package io.llamaserve.client;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * Sampling and length options shared by every generation request. Unset options are left out
 * of the request body, so the server's defaults apply.
 */
public abstract class GenerationOptions {
  private final String model;
  private final Integer maxTokens;
  private final Double temperature;
  private final Double topP;
  private final Integer topK;
  private final Double minP;
  private final Double presencePenalty;
  private final Double frequencyPenalty;
  private final Double repetitionPenalty;
  private final Long seed;
  private final List<String> stop;
  private final boolean ignoreEos;

  protected GenerationOptions(Builder<?> b) {
    this.model = b.model;
    this.maxTokens = b.maxTokens;
    this.temperature = b.temperature;
    this.topP = b.topP;
    this.topK = b.topK;
    this.minP = b.minP;
    this.presencePenalty = b.presencePenalty;
    this.frequencyPenalty = b.frequencyPenalty;
    this.repetitionPenalty = b.repetitionPenalty;
    this.seed = b.seed;
    this.stop = List.copyOf(b.stop);
    this.ignoreEos = b.ignoreEos;
  }

  public Integer maxTokens() {
    return maxTokens;
  }

  /**
   * Adds the set options to a request body. {@code camelCase} selects the field names of
   * POST /chat (maxTokens, topP) instead of the OpenAI ones (max_tokens, top_p).
   */
  void writeOptions(Map<String, Object> body, boolean camelCase) {
    put(body, "model", model);
    put(body, camelCase ? "maxTokens" : "max_tokens", maxTokens);
    put(body, "temperature", temperature);
    put(body, camelCase ? "topP" : "top_p", topP);
    put(body, camelCase ? "topK" : "top_k", topK);
    put(body, camelCase ? "minP" : "min_p", minP);
    put(body, camelCase ? "presencePenalty" : "presence_penalty", presencePenalty);
    put(body, camelCase ? "frequencyPenalty" : "frequency_penalty", frequencyPenalty);
    put(body, camelCase ? "repetitionPenalty" : "repetition_penalty", repetitionPenalty);
    put(body, "seed", seed);
    if (!stop.isEmpty()) body.put("stop", stop);
    if (ignoreEos) body.put(camelCase ? "ignoreEos" : "ignore_eos", true);
  }

  private static void put(Map<String, Object> body, String key, Object value) {
    if (value != null) body.put(key, value);
  }

  /** Builder of the shared options; {@code B} is the concrete builder. */
  public abstract static class Builder<B extends Builder<B>> {
    private String model;
    private Integer maxTokens;
    private Double temperature;
    private Double topP;
    private Integer topK;
    private Double minP;
    private Double presencePenalty;
    private Double frequencyPenalty;
    private Double repetitionPenalty;
    private Long seed;
    private final List<String> stop = new ArrayList<>();
    private boolean ignoreEos;

    protected abstract B self();

    /** The served model's id; the server refuses any other with 404. Optional. */
    public B model(String model) {
      this.model = model;
      return self();
    }

    public B maxTokens(int maxTokens) {
      if (maxTokens < 1) throw new IllegalArgumentException("maxTokens must be >= 1");
      this.maxTokens = maxTokens;
      return self();
    }

    /** 0 = greedy (deterministic). */
    public B temperature(double temperature) {
      this.temperature = temperature;
      return self();
    }

    public B topP(double topP) {
      this.topP = topP;
      return self();
    }

    public B topK(int topK) {
      this.topK = topK;
      return self();
    }

    public B minP(double minP) {
      this.minP = minP;
      return self();
    }

    public B presencePenalty(double penalty) {
      this.presencePenalty = penalty;
      return self();
    }

    public B frequencyPenalty(double penalty) {
      this.frequencyPenalty = penalty;
      return self();
    }

    public B repetitionPenalty(double penalty) {
      this.repetitionPenalty = penalty;
      return self();
    }

    /** Same seed, prompt and options → same output. */
    public B seed(long seed) {
      this.seed = seed;
      return self();
    }

    /** Adds a stop string (not included in the output). */
    public B stop(String stop) {
      this.stop.add(Objects.requireNonNull(stop, "stop"));
      return self();
    }

    /** Keep generating past end-of-generation tokens, up to maxTokens. */
    public B ignoreEos(boolean ignoreEos) {
      this.ignoreEos = ignoreEos;
      return self();
    }
  }
}
