package io.llamaserve.client;

import io.llamaserve.ChatMessage;
import io.llamaserve.ToolCall;
import java.util.List;

/**
 * The outcome of one generation, blocking or streamed.
 *
 * @param id the server's request id (also in its logs)
 * @param model the served model's id
 * @param text the whole generated text ("" when the answer is only tool calls)
 * @param finishReason "stop" (end of generation or a stop string), "length" (max tokens) or
 *     "tool_calls" (the model called functions: see {@code toolCalls})
 * @param usage token counts; null only if the server sent none
 * @param toolCalls the function calls of a chat answer, in order (never null; empty without)
 */
public record CompletionResult(String id, String model, String text, String finishReason,
    Usage usage, List<ToolCall> toolCalls) {
  public CompletionResult {
    toolCalls = toolCalls == null ? List.of() : List.copyOf(toolCalls);
  }

  /** A result without tool calls. */
  public CompletionResult(String id, String model, String text, String finishReason,
      Usage usage) {
    this(id, model, text, finishReason, usage, List.of());
  }

  /** True when the model called functions. */
  public boolean hasToolCalls() {
    return !toolCalls.isEmpty();
  }

  /**
   * This answer as the assistant turn of a conversation, to send back with the next request:
   * the text, or for tool calls the calls (with the text, or null content when there is none).
   */
  public ChatMessage toMessage() {
    if (toolCalls.isEmpty()) return ChatMessage.assistant(text);
    return ChatMessage.assistant(text.isEmpty() ? null : text, toolCalls);
  }
}
