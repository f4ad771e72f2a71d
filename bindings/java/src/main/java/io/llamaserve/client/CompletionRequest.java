package io.llamaserve.client;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/** A POST /v1/completions request: continue a raw prompt. Build with {@link #builder(String)}. */
public final class CompletionRequest extends GenerationOptions {
  private final String prompt;
  private final ResponseFormat responseFormat;

  private CompletionRequest(Builder b) {
    super(b);
    this.prompt = b.prompt;
    this.responseFormat = b.responseFormat;
  }

  public static Builder builder(String prompt) {
    return new Builder(prompt);
  }

  public static CompletionRequest of(String prompt, int maxTokens) {
    return builder(prompt).maxTokens(maxTokens).build();
  }

  public String prompt() {
    return prompt;
  }

  /** The response format, or null when unset (text). */
  public ResponseFormat responseFormat() {
    return responseFormat;
  }

  Map<String, Object> toJson(boolean stream) {
    Map<String, Object> body = new LinkedHashMap<>();
    body.put("prompt", prompt);
    writeOptions(body, false);
    if (responseFormat != null) body.put("response_format", responseFormat.toJson());
    if (stream) {
      body.put("stream", true);
      body.put("stream_options", Map.of("include_usage", true));
    }
    return body;
  }

  public static final class Builder extends GenerationOptions.Builder<Builder> {
    private final String prompt;
    private ResponseFormat responseFormat;

    private Builder(String prompt) {
      this.prompt = Objects.requireNonNull(prompt, "prompt");
    }

    @Override
    protected Builder self() {
      return this;
    }

    /**
     * Structured output: the continuation is JSON, or JSON valid against a schema (an
     * extension of llamaserve; OpenAI's completions have no such field).
     */
    public Builder responseFormat(ResponseFormat format) {
      this.responseFormat = Objects.requireNonNull(format, "format");
      return this;
    }

    public CompletionRequest build() {
      return new CompletionRequest(this);
    }
  }
}
