package io.llamaserve.client;

import io.llamaserve.ChatMessage;
import io.llamaserve.ToolCall;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * A POST /v1/chat/completions request. Immutable; build with {@link #builder()}.
 *
 * <p>Besides messages and the sampling options it can carry {@link Tool}s the model may call
 * (with a {@link ToolChoice} and {@code parallelToolCalls}), and a {@link ResponseFormat}
 * for structured output.
 */
public final class ChatRequest extends GenerationOptions {
  private final List<ChatMessage> messages;
  private final List<Tool> tools;
  private final ToolChoice toolChoice;
  private final Boolean parallelToolCalls;
  private final ResponseFormat responseFormat;

  private ChatRequest(Builder b) {
    super(b);
    if (b.messages.isEmpty()) throw new IllegalArgumentException("a chat needs at least one message");
    this.messages = List.copyOf(b.messages);
    this.tools = List.copyOf(b.tools);
    this.toolChoice = b.toolChoice;
    this.parallelToolCalls = b.parallelToolCalls;
    this.responseFormat = b.responseFormat;
  }

  public static Builder builder() {
    return new Builder();
  }

  /** A one-message chat. */
  public static ChatRequest of(String userMessage, int maxTokens) {
    return builder().user(userMessage).maxTokens(maxTokens).build();
  }

  public List<ChatMessage> messages() {
    return messages;
  }

  /** The functions the model may call (empty: none). */
  public List<Tool> tools() {
    return tools;
  }

  /** The tool choice, or null when unset (the server's default: auto with tools). */
  public ToolChoice toolChoice() {
    return toolChoice;
  }

  /** Whether the model may make several calls in one turn, or null when unset (true). */
  public Boolean parallelToolCalls() {
    return parallelToolCalls;
  }

  /** The response format, or null when unset (text). */
  public ResponseFormat responseFormat() {
    return responseFormat;
  }

  Map<String, Object> toJson(boolean stream) {
    Map<String, Object> body = new LinkedHashMap<>();
    List<Object> list = new ArrayList<>();
    for (ChatMessage m : messages) list.add(messageJson(m));
    body.put("messages", list);
    writeOptions(body, false);
    if (!tools.isEmpty()) {
      List<Object> defined = new ArrayList<>();
      for (Tool tool : tools) defined.add(tool.toJson());
      body.put("tools", defined);
    }
    if (toolChoice != null) body.put("tool_choice", toolChoice.toJson());
    if (parallelToolCalls != null) body.put("parallel_tool_calls", parallelToolCalls);
    if (responseFormat != null) body.put("response_format", responseFormat.toJson());
    if (stream) {
      body.put("stream", true);
      body.put("stream_options", Map.of("include_usage", true)); // usage for the result
    }
    return body;
  }

  private static Map<String, Object> messageJson(ChatMessage m) {
    Map<String, Object> json = new LinkedHashMap<>();
    json.put("role", m.role());
    json.put("content", m.content()); // null for an assistant turn of calls only
    if (m.hasToolCalls()) {
      List<Object> calls = new ArrayList<>();
      for (ToolCall call : m.toolCalls()) {
        Map<String, Object> function = new LinkedHashMap<>();
        function.put("name", call.name());
        function.put("arguments", call.arguments());
        Map<String, Object> entry = new LinkedHashMap<>();
        entry.put("id", call.id());
        entry.put("type", "function");
        entry.put("function", function);
        calls.add(entry);
      }
      json.put("tool_calls", calls);
    }
    if (m.toolCallId() != null) json.put("tool_call_id", m.toolCallId());
    return json;
  }

  public static final class Builder extends GenerationOptions.Builder<Builder> {
    private final List<ChatMessage> messages = new ArrayList<>();
    private final List<Tool> tools = new ArrayList<>();
    private ToolChoice toolChoice;
    private Boolean parallelToolCalls;
    private ResponseFormat responseFormat;

    @Override
    protected Builder self() {
      return this;
    }

    public Builder message(ChatMessage message) {
      messages.add(Objects.requireNonNull(message, "message"));
      return this;
    }

    public Builder messages(List<ChatMessage> list) {
      list.forEach(this::message);
      return this;
    }

    public Builder system(String content) {
      return message(ChatMessage.system(content));
    }

    public Builder user(String content) {
      return message(ChatMessage.user(content));
    }

    public Builder assistant(String content) {
      return message(ChatMessage.assistant(content));
    }

    /** Adds the result of the call {@code toolCallId}: {@link ChatMessage#tool}. */
    public Builder toolResult(String toolCallId, String content) {
      return message(ChatMessage.tool(toolCallId, content));
    }

    /** Adds a function the model may call. */
    public Builder tool(Tool tool) {
      tools.add(Objects.requireNonNull(tool, "tool"));
      return this;
    }

    public Builder tools(List<Tool> list) {
      list.forEach(this::tool);
      return this;
    }

    /** Whether and which tools the model calls; unset: the server's default (auto). */
    public Builder toolChoice(ToolChoice choice) {
      this.toolChoice = Objects.requireNonNull(choice, "choice");
      return this;
    }

    /** "none", "auto" or "required": {@link ToolChoice#of(String)}. */
    public Builder toolChoice(String mode) {
      return toolChoice(ToolChoice.of(mode));
    }

    /** false: at most one call per turn (with "required": exactly one). */
    public Builder parallelToolCalls(boolean parallel) {
      this.parallelToolCalls = parallel;
      return this;
    }

    /** Structured output: JSON, or JSON valid against a schema. */
    public Builder responseFormat(ResponseFormat format) {
      this.responseFormat = Objects.requireNonNull(format, "format");
      return this;
    }

    public ChatRequest build() {
      return new ChatRequest(this);
    }
  }
}
