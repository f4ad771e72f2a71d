package io.llamaserve.client;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * Whether and which tools the model calls (a chat request's {@code tool_choice}):
 *
 * <ul>
 *   <li>{@link #AUTO} (the server's default with tools): the model decides; its calls are
 *       read from its output.
 *   <li>{@link #REQUIRED}: the model must call one or more of the tools; the server decodes
 *       the answer under the tools' schemas, so every call's arguments are valid JSON that
 *       match the function's parameters ({@code parallelToolCalls(false)}: exactly one call).
 *   <li>{@link #function(String)}: the model must call that function, likewise enforced.
 *   <li>{@link #NONE}: the tools are not shown to the model; it answers in text.
 * </ul>
 */
public final class ToolChoice {
  public static final ToolChoice NONE = new ToolChoice("none", null);
  public static final ToolChoice AUTO = new ToolChoice("auto", null);
  public static final ToolChoice REQUIRED = new ToolChoice("required", null);

  private final String mode; // "none", "auto", "required" or "function"
  private final String functionName;

  private ToolChoice(String mode, String functionName) {
    this.mode = mode;
    this.functionName = functionName;
  }

  /** Forces a call of the function {@code name} (which must be among the request's tools). */
  public static ToolChoice function(String name) {
    return new ToolChoice("function", Objects.requireNonNull(name, "name"));
  }

  /**
   * {@link #NONE}, {@link #AUTO} or {@link #REQUIRED} by their wire names "none", "auto" and
   * "required"; for a named function use {@link #function(String)}.
   */
  public static ToolChoice of(String mode) {
    switch (Objects.requireNonNull(mode, "mode")) {
      case "none": return NONE;
      case "auto": return AUTO;
      case "required": return REQUIRED;
      default:
        throw new IllegalArgumentException("tool choice must be none, auto or required, got \""
            + mode + "\" (a function: ToolChoice.function(name))");
    }
  }

  /** "none", "auto", "required" or "function". */
  public String mode() {
    return mode;
  }

  /** The forced function's name, or null unless {@link #mode()} is "function". */
  public String functionName() {
    return functionName;
  }

  Object toJson() {
    if (functionName == null) return mode;
    Map<String, Object> choice = new LinkedHashMap<>(); // ordered as OpenAI writes it
    choice.put("type", "function");
    choice.put("function", Map.of("name", functionName));
    return choice;
  }

  @Override
  public boolean equals(Object o) {
    return o instanceof ToolChoice other && mode.equals(other.mode)
        && Objects.equals(functionName, other.functionName);
  }

  @Override
  public int hashCode() {
    return Objects.hash(mode, functionName);
  }

  @Override
  public String toString() {
    return functionName == null ? mode : "function " + functionName;
  }
}
