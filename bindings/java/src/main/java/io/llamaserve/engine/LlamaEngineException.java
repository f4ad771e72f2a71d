package io.llamaserve.engine;

import java.nio.charset.StandardCharsets;

/**
 * An error reported by the native engine: a model that cannot be loaded, a request the
 * engine refuses, a generation that failed or timed out. {@link #code()} says which kind.
 */
public final class LlamaEngineException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** The engine's status codes (src/core/status.h), with the same numbers. */
  public enum Code {
    INVALID_ARGUMENT(1),
    NOT_FOUND(2),
    OUT_OF_RANGE(3),
    UNSUPPORTED(4),
    RESOURCE_EXHAUSTED(5),
    UNAVAILABLE(6),
    CANCELLED(7),
    DEADLINE_EXCEEDED(8),
    INTERNAL(9),
    IO(10);

    final int number;

    Code(int number) {
      this.number = number;
    }

    static Code of(int number) {
      for (Code code : values()) {
        if (code.number == number) return code;
      }
      return INTERNAL;
    }
  }

  private final Code code;

  public LlamaEngineException(Code code, String message) {
    super(code + ": " + message);
    this.code = code;
  }

  // Thrown from native code (jni_support.cc): the message arrives as UTF-8 bytes.
  LlamaEngineException(int code, byte[] messageUtf8) {
    this(Code.of(code), new String(messageUtf8, StandardCharsets.UTF_8));
  }

  public Code code() {
    return code;
  }
}
