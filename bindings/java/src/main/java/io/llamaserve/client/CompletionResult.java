package io.llamaserve.client;

/**
 * The outcome of one generation, blocking or streamed.
 *
 * @param id the server's request id (also in its logs)
 * @param model the served model's id
 * @param text the whole generated text
 * @param finishReason "stop" (end of generation or a stop string) or "length" (max tokens)
 * @param usage token counts; null only if the server sent none
 */
public record CompletionResult(String id, String model, String text, String finishReason,
    Usage usage) {}
