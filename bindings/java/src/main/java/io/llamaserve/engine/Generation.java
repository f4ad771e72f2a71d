package io.llamaserve.engine;

/**
 * The outcome of one generation.
 *
 * @param text the whole generated text
 * @param finishReason STOP, LENGTH or CANCELLED (errors and timeouts are thrown)
 * @param promptTokens tokens of the prompt after templating
 * @param completionTokens tokens generated
 * @param queueMs submit to first scheduled
 * @param timeToFirstTokenMs submit to first token
 * @param totalMs submit to finish
 * @param decodeTokensPerSecond generated tokens per second after the first
 */
public record Generation(String text, FinishReason finishReason, int promptTokens,
    int completionTokens, double queueMs, double timeToFirstTokenMs, double totalMs,
    double decodeTokensPerSecond) {}
