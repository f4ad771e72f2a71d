package io.llamaserve.engine;

/**
 * One engine event as the native side builds it: a text delta ({@code finishReason == 0}) or
 * the finish event. Text and messages are UTF-8 bytes.
 */
final class NativeEvent {
  // FinishReason numbers of src/engine/request.h.
  static final int DELTA = 0;

  final byte[] text;
  final int tokenCount;
  final int finishReason;
  final int errorCode;
  final byte[] errorMessage;
  final int promptTokens;
  final int completionTokens;
  final double queueMs;
  final double ttftMs;
  final double totalMs;
  final double decodeTokensPerSecond;

  // Called from native code; the signature is fixed in jni_support.cc.
  NativeEvent(byte[] text, int tokenCount, int finishReason, int errorCode, byte[] errorMessage,
      int promptTokens, int completionTokens, double queueMs, double ttftMs, double totalMs,
      double decodeTokensPerSecond) {
    this.text = text;
    this.tokenCount = tokenCount;
    this.finishReason = finishReason;
    this.errorCode = errorCode;
    this.errorMessage = errorMessage;
    this.promptTokens = promptTokens;
    this.completionTokens = completionTokens;
    this.queueMs = queueMs;
    this.ttftMs = ttftMs;
    this.totalMs = totalMs;
    this.decodeTokensPerSecond = decodeTokensPerSecond;
  }

  boolean isDelta() {
    return finishReason == DELTA;
  }
}
