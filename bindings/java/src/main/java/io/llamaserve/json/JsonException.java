package io.llamaserve.json;

/** Malformed JSON text, or a value that JSON cannot represent. */
public final class JsonException extends IllegalArgumentException {
  private static final long serialVersionUID = 1L;

  public JsonException(String message) {
    super(message);
  }
}
