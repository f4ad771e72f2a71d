package io.llamaserve.client;

import io.llamaserve.ToolCall;
import io.llamaserve.json.Json;
import io.llamaserve.json.JsonException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/** Typed access to parsed response JSON; a wrong shape is a LlamaConnectionException. */
final class JsonFields {
  private JsonFields() {}

  @SuppressWarnings("unchecked")
  static Map<String, Object> object(Object value, String what) {
    if (value instanceof Map) return (Map<String, Object>) value;
    throw new LlamaConnectionException("unexpected response: " + what + " is "
        + Json.typeName(value) + ", expected an object");
  }

  static Map<String, Object> objectOrNull(Map<String, Object> map, String key) {
    Object value = map.get(key);
    return value == null ? null : object(value, key);
  }

  @SuppressWarnings("unchecked")
  static List<Object> list(Map<String, Object> map, String key) {
    Object value = map.get(key);
    if (value instanceof List) return (List<Object>) value;
    throw new LlamaConnectionException("unexpected response: '" + key + "' is "
        + Json.typeName(value) + ", expected an array");
  }

  /** The string field, or null when absent or null. */
  static String string(Map<String, Object> map, String key) {
    Object value = map.get(key);
    if (value == null || value instanceof String) return (String) value;
    throw new LlamaConnectionException("unexpected response: '" + key + "' is "
        + Json.typeName(value) + ", expected a string");
  }

  static long integer(Map<String, Object> map, String key) {
    Object value = map.get(key);
    if (value instanceof Number) return ((Number) value).longValue();
    throw new LlamaConnectionException("unexpected response: '" + key + "' is "
        + Json.typeName(value) + ", expected a number");
  }

  static Usage usage(Map<String, Object> body) {
    Map<String, Object> usage = objectOrNull(body, "usage");
    if (usage == null) return null;
    return new Usage(integer(usage, "prompt_tokens"), integer(usage, "completion_tokens"),
        integer(usage, "total_tokens"));
  }

  /**
   * A JSON object given by the caller for a request (a schema) as JSON text, parsed
   * (unmodifiable); anything else is an IllegalArgumentException naming {@code what}.
   */
  static Map<String, Object> requestObject(String json, String what) {
    try {
      return Json.parseObject(json);
    } catch (JsonException e) {
      throw new IllegalArgumentException(what + " must be a JSON object: " + e.getMessage(), e);
    }
  }

  /** The same for a map of JSON values, copied through its JSON text. */
  static Map<String, Object> requestObject(Map<String, ?> map, String what) {
    try {
      return Json.parseObject(Json.write(map));
    } catch (JsonException e) {
      throw new IllegalArgumentException(what + ": " + e.getMessage(), e);
    }
  }

  /** The calls of an answer's message.tool_calls (empty when there are none). */
  static List<ToolCall> toolCalls(Map<String, Object> message) {
    if (message.get("tool_calls") == null) return List.of();
    List<ToolCall> calls = new ArrayList<>();
    for (Object item : list(message, "tool_calls")) {
      Map<String, Object> call = object(item, "tool_calls[]");
      Map<String, Object> function = object(call.get("function"), "tool_calls[].function");
      String name = string(function, "name");
      if (name == null) throw new LlamaConnectionException("unexpected response: a tool call "
          + "without a function name");
      String id = string(call, "id");
      calls.add(new ToolCall(id == null ? "" : id, name, arguments(function.get("arguments"))));
    }
    return List.copyOf(calls);
  }

  /** Arguments as JSON text: a string as it is (OpenAI's form), an object written out. */
  static String arguments(Object value) {
    if (value == null) return "{}";
    if (value instanceof String text) return text;
    if (value instanceof Map) return Json.write(value);
    throw new LlamaConnectionException("unexpected response: tool call arguments are "
        + Json.typeName(value) + ", expected a string");
  }

  /** choices[0], which every generation response has. */
  static Map<String, Object> firstChoice(Map<String, Object> body) {
    List<Object> choices = list(body, "choices");
    if (choices.isEmpty()) return null;
    return object(choices.get(0), "choices[0]");
  }
}
