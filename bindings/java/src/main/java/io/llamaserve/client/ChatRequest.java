package io.llamaserve.client;

import io.llamaserve.ChatMessage;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/** A POST /v1/chat/completions request. Immutable; build with {@link #builder()}. */
public final class ChatRequest extends GenerationOptions {
  private final List<ChatMessage> messages;

  private ChatRequest(Builder b) {
    super(b);
    if (b.messages.isEmpty()) throw new IllegalArgumentException("a chat needs at least one message");
    this.messages = List.copyOf(b.messages);
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

  Map<String, Object> toJson(boolean stream) {
    Map<String, Object> body = new LinkedHashMap<>();
    List<Object> list = new ArrayList<>();
    for (ChatMessage m : messages) list.add(Map.of("role", m.role(), "content", m.content()));
    body.put("messages", list);
    writeOptions(body, false);
    if (stream) {
      body.put("stream", true);
      body.put("stream_options", Map.of("include_usage", true)); // usage for the result
    }
    return body;
  }

  public static final class Builder extends GenerationOptions.Builder<Builder> {
    private final List<ChatMessage> messages = new ArrayList<>();

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

    public ChatRequest build() {
      return new ChatRequest(this);
    }
  }
}
