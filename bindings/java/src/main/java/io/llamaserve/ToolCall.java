package io.llamaserve;

import io.llamaserve.json.Json;
import java.util.Map;
import java.util.Objects;

/**
 * One function call of an assistant turn: what a chat answer with {@code finish_reason
 * "tool_calls"} carries, and what an assistant {@link ChatMessage} sends back with the
 * conversation.
 *
 * @param id the call's id, which the tool result names ({@link ChatMessage#tool})
 * @param name the function's name
 * @param arguments the arguments object as JSON text, as the model wrote it
 */
public record ToolCall(String id, String name, String arguments) {
  public ToolCall {
    Objects.requireNonNull(id, "id");
    Objects.requireNonNull(name, "name");
    Objects.requireNonNull(arguments, "arguments");
  }

  /**
   * The arguments parsed as a JSON object, unmodifiable (values as {@link Json} reads them:
   * String, Long, BigInteger, Double, Boolean, List, Map or null).
   *
   * @throws io.llamaserve.json.JsonException when the arguments are not a JSON object (a
   *     model may write invalid JSON unless the call was forced, with tool choice "required"
   *     or a named function)
   */
  public Map<String, Object> parsedArguments() {
    return Json.parseObject(arguments);
  }
}
