package io.llamaserve;

import java.util.List;
import java.util.Objects;

/**
 * One message of a conversation, for both the HTTP client and the embedded engine.
 *
 * <p>Besides text, a message can carry the function calls of an assistant turn ({@link
 * #assistant(String, List)}, content may then be null) and the result of one call ({@link
 * #tool(String, String)}). The embedded engine takes text messages only.
 *
 * @param role "system", "user", "assistant" or "tool"
 * @param content the message text; null only for an assistant turn with tool calls
 * @param toolCalls the calls an assistant turn made (never null; empty for other messages)
 * @param toolCallId for a "tool" message, the id of the call it answers; else null
 */
public record ChatMessage(String role, String content, List<ToolCall> toolCalls,
    String toolCallId) {
  public ChatMessage {
    Objects.requireNonNull(role, "role");
    toolCalls = toolCalls == null ? List.of() : List.copyOf(toolCalls);
    if (content == null && toolCalls.isEmpty()) {
      throw new NullPointerException("content (null only for an assistant turn with tool calls)");
    }
    if (!toolCalls.isEmpty() && !role.equals("assistant")) {
      throw new IllegalArgumentException("only an assistant message has tool calls, not " + role);
    }
  }

  /** A text message. */
  public ChatMessage(String role, String content) {
    this(role, content, List.of(), null);
  }

  public static ChatMessage system(String content) {
    return new ChatMessage("system", content);
  }

  public static ChatMessage user(String content) {
    return new ChatMessage("user", content);
  }

  public static ChatMessage assistant(String content) {
    return new ChatMessage("assistant", content);
  }

  /**
   * An assistant turn that called functions, as the answer returned it, to send back with
   * the conversation before the {@link #tool} results.
   *
   * @param content the text of the turn, or null (usual for a turn that only calls)
   */
  public static ChatMessage assistant(String content, List<ToolCall> toolCalls) {
    Objects.requireNonNull(toolCalls, "toolCalls");
    return new ChatMessage("assistant", content, toolCalls, null);
  }

  /** The result of the call {@code toolCallId}: a "tool" message, usually JSON text. */
  public static ChatMessage tool(String toolCallId, String content) {
    Objects.requireNonNull(toolCallId, "toolCallId");
    Objects.requireNonNull(content, "content");
    return new ChatMessage("tool", content, List.of(), toolCallId);
  }

  /** True for an assistant turn that called functions. */
  public boolean hasToolCalls() {
    return !toolCalls.isEmpty();
  }
}
