package io.llamaserve.client;

import io.llamaserve.json.Json;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * The form of the answer (a request's {@code response_format}), enforced by the server's
 * constrained decoding: every token that could not continue a valid document is excluded.
 * With finish reason "stop" the text is then a complete JSON document ({@link #jsonObject()})
 * or one valid against the schema ({@link #jsonSchema}); with "length" it is cut short, so
 * leave room in maxTokens or bound the schema. The supported schema keywords are listed in
 * docs/api.md; an unsupported one is a {@link BadRequestException} with code {@code
 * unsupported_schema}. Immutable.
 */
public final class ResponseFormat {
  private static final ResponseFormat TEXT = new ResponseFormat("text", null, null, false);
  private static final ResponseFormat JSON_OBJECT =
      new ResponseFormat("json_object", null, null, false);

  private final String type;
  private final String name;
  private final Map<String, Object> schema; // parsed, unmodifiable; json_schema only
  private final boolean strict;

  private ResponseFormat(String type, String name, Map<String, Object> schema, boolean strict) {
    this.type = type;
    this.name = name;
    this.schema = schema;
    this.strict = strict;
  }

  /** No constraint (the default). */
  public static ResponseFormat text() {
    return TEXT;
  }

  /** Any JSON object. */
  public static ResponseFormat jsonObject() {
    return JSON_OBJECT;
  }

  /**
   * A JSON document valid against {@code schemaJson}.
   *
   * @param name the schema's name (at most 64 of {@code a-zA-Z0-9_-}); may be null
   * @param schemaJson a JSON Schema as JSON text; object properties are generated in the
   *     order it lists them
   * @param strict sent as given; the server enforces the schema either way
   * @throws IllegalArgumentException when {@code schemaJson} is not a JSON object
   */
  public static ResponseFormat jsonSchema(String name, String schemaJson, boolean strict) {
    Objects.requireNonNull(schemaJson, "schemaJson");
    return new ResponseFormat("json_schema", name, JsonFields.requestObject(schemaJson, "schema"),
        strict);
  }

  /** The same with the schema as a map of JSON values, copied. */
  public static ResponseFormat jsonSchema(String name, Map<String, ?> schema, boolean strict) {
    Objects.requireNonNull(schema, "schema");
    return new ResponseFormat("json_schema", name, JsonFields.requestObject(schema, "schema"),
        strict);
  }

  /** "text", "json_object" or "json_schema". */
  public String type() {
    return type;
  }

  /** The schema's name, or null. */
  public String name() {
    return name;
  }

  /** The schema as compact JSON text; null unless the type is "json_schema". */
  public String schemaJson() {
    return schema == null ? null : Json.write(schema);
  }

  public boolean strict() {
    return strict;
  }

  Map<String, Object> toJson() {
    Map<String, Object> format = new LinkedHashMap<>();
    format.put("type", type);
    if (schema != null) {
      Map<String, Object> spec = new LinkedHashMap<>();
      if (name != null) spec.put("name", name);
      spec.put("schema", schema);
      spec.put("strict", strict);
      format.put("json_schema", spec);
    }
    return format;
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof ResponseFormat other && type.equals(other.type)
        && Objects.equals(name, other.name) && Objects.equals(schema, other.schema)
        && strict == other.strict;
  }

  @Override
  public int hashCode() {
    return Objects.hash(type, name, schema, strict);
  }

  @Override
  public String toString() {
    return schema == null ? "ResponseFormat[" + type + "]"
        : "ResponseFormat[json_schema " + name + ": " + Json.write(schema) + "]";
  }
}
