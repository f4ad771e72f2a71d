package io.llamaserve.client;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * A POST /chat request: one user prompt (and an optional system message) through the model's
 * chat template; field names are camelCase (maxTokens, topP).
 */
public final class SimpleChatRequest extends GenerationOptions {
  private final String prompt;
  private final String system;

  private SimpleChatRequest(Builder b) {
    super(b);
    this.prompt = b.prompt;
    this.system = b.system;
  }

  public static Builder builder(String prompt) {
    return new Builder(prompt);
  }

  public static SimpleChatRequest of(String prompt, int maxTokens) {
    return builder(prompt).maxTokens(maxTokens).build();
  }

  public String prompt() {
    return prompt;
  }

  Map<String, Object> toJson(boolean stream) {
    Map<String, Object> body = new LinkedHashMap<>();
    body.put("prompt", prompt);
    if (system != null) body.put("system", system);
    writeOptions(body, true);
    body.put("stream", stream);
    return body;
  }

  public static final class Builder extends GenerationOptions.Builder<Builder> {
    private final String prompt;
    private String system;

    private Builder(String prompt) {
      this.prompt = Objects.requireNonNull(prompt, "prompt");
    }

    @Override
    protected Builder self() {
      return this;
    }

    public Builder system(String system) {
      this.system = system;
      return this;
    }

    public SimpleChatRequest build() {
      return new SimpleChatRequest(this);
    }
  }
}
