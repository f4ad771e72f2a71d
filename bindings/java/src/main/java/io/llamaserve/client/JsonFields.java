package io.llamaserve.client;

import io.llamaserve.json.Json;
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

  /** choices[0], which every generation response has. */
  static Map<String, Object> firstChoice(Map<String, Object> body) {
    List<Object> choices = list(body, "choices");
    if (choices.isEmpty()) return null;
    return object(choices.get(0), "choices[0]");
  }
}
