package io.llamaserve.client;

import io.llamaserve.json.Json;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * A function the model may call: an entry of a chat request's {@code tools}. Immutable;
 * create with {@link #function(String, String, String)} or {@link #function(String, String,
 * Map)}.
 *
 * <p>The server checks the definitions (a name of 1 to 64 of {@code a-z A-Z 0-9 _ . -},
 * unique among the tools; see docs/api.md) and refuses malformed ones with a {@link
 * BadRequestException}; this class checks only that the parameters are a JSON object.
 */
public final class Tool {
  private final String name;
  private final String description;
  private final Map<String, Object> parameters; // parsed, unmodifiable; null = none

  private Tool(String name, String description, Map<String, Object> parameters) {
    this.name = Objects.requireNonNull(name, "name");
    this.description = description;
    this.parameters = parameters;
  }

  /**
   * A function whose arguments are described by a JSON Schema given as JSON text, such as
   * {@code {"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}.
   *
   * @param description what the function does, for the model; may be null
   * @param parametersJson a JSON Schema of the arguments object; may be null (no parameters)
   * @throws IllegalArgumentException when {@code parametersJson} is not a JSON object
   */
  public static Tool function(String name, String description, String parametersJson) {
    return new Tool(name, description,
        parametersJson == null ? null : JsonFields.requestObject(parametersJson, "parameters"));
  }

  /**
   * The same with the schema as a map of JSON values (Map, List, String, Number, Boolean,
   * null), copied.
   */
  public static Tool function(String name, String description, Map<String, ?> parameters) {
    return new Tool(name, description,
        parameters == null ? null : JsonFields.requestObject(parameters, "parameters"));
  }

  public String name() {
    return name;
  }

  /** The description, or null. */
  public String description() {
    return description;
  }

  /** The parameters' JSON Schema as compact JSON text, or null when there is none. */
  public String parametersJson() {
    return parameters == null ? null : Json.write(parameters);
  }

  Map<String, Object> toJson() {
    Map<String, Object> function = new LinkedHashMap<>();
    function.put("name", name);
    if (description != null) function.put("description", description);
    if (parameters != null) function.put("parameters", parameters);
    Map<String, Object> tool = new LinkedHashMap<>();
    tool.put("type", "function");
    tool.put("function", function);
    return tool;
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof Tool other && name.equals(other.name)
        && Objects.equals(description, other.description)
        && Objects.equals(parameters, other.parameters);
  }

  @Override
  public int hashCode() {
    return Objects.hash(name, description, parameters);
  }

  @Override
  public String toString() {
    return "Tool[function " + name + "]";
  }
}
