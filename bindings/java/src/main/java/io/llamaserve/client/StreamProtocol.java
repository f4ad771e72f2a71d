package io.llamaserve.client;

import io.llamaserve.json.Json;
import io.llamaserve.json.JsonException;
import java.util.Map;
import java.util.function.Consumer;

/**
 * How each streaming endpoint encodes text, the end and errors in its events:
 *
 * <ul>
 *   <li>CHAT (/v1/chat/completions): {@code data: {chunk}} with choices[0].delta.content, the
 *       finish_reason in the last chunk, usage in a chunk with no choices, then
 *       {@code data: [DONE]}; an error is {@code data: {"error": {...}}} then [DONE].
 *   <li>COMPLETION (/v1/completions): the same, with choices[0].text.
 *   <li>SIMPLE_CHAT (/chat): {@code event: token} whose data is the text itself, then
 *       {@code event: done} with {id, model, finish_reason, usage, timings}, or
 *       {@code event: error} with the error JSON.
 * </ul>
 */
enum StreamProtocol {
  CHAT,
  COMPLETION,
  SIMPLE_CHAT;

  /** What one stream has seen so far; owned by the thread feeding the parser. */
  static final class State {
    String id;
    String model;
    String finishReason;
    Usage usage;
    final StringBuilder text = new StringBuilder();
    boolean done;

    CompletionResult result() {
      return new CompletionResult(id, model, text.toString(), finishReason, usage);
    }
  }

  /**
   * Applies one event to {@code state}, passing new text to {@code onText}. Throws the
   * server's error (LlamaApiException) or LlamaConnectionException for a malformed event.
   */
  void apply(SseEvent event, State state, Consumer<String> onText) {
    if (state.done) return; // nothing may follow the end marker
    try {
      if (this == SIMPLE_CHAT) {
        applySimple(event, state, onText);
      } else {
        applyOpenAi(event, state, onText);
      }
    } catch (JsonException e) {
      throw new LlamaConnectionException("malformed event from the server: " + e.getMessage(), e);
    }
  }

  private void applyOpenAi(SseEvent event, State state, Consumer<String> onText) {
    if (event.data().equals("[DONE]")) {
      state.done = true;
      return;
    }
    Map<String, Object> chunk = Json.parseObject(event.data());
    Map<String, Object> error = JsonFields.objectOrNull(chunk, "error");
    if (error != null) throw ApiErrors.fromError(0, error, null);
    if (chunk.get("id") != null) state.id = JsonFields.string(chunk, "id");
    if (chunk.get("model") != null) state.model = JsonFields.string(chunk, "model");
    Usage usage = JsonFields.usage(chunk);
    if (usage != null) state.usage = usage;
    Map<String, Object> choice = JsonFields.firstChoice(chunk);
    if (choice == null) return; // the usage chunk
    String text;
    if (this == CHAT) {
      Map<String, Object> delta = JsonFields.objectOrNull(choice, "delta");
      text = delta == null ? null : JsonFields.string(delta, "content");
    } else {
      text = JsonFields.string(choice, "text");
    }
    String finish = JsonFields.string(choice, "finish_reason");
    if (finish != null) state.finishReason = finish;
    emit(text, state, onText);
  }

  private static void applySimple(SseEvent event, State state, Consumer<String> onText) {
    switch (event.event()) {
      case "token":
        emit(event.data(), state, onText);
        break;
      case "done": {
        Map<String, Object> summary = Json.parseObject(event.data());
        state.id = JsonFields.string(summary, "id");
        state.model = JsonFields.string(summary, "model");
        state.finishReason = JsonFields.string(summary, "finish_reason");
        state.usage = JsonFields.usage(summary);
        state.done = true;
        break;
      }
      case "error": {
        Map<String, Object> body = Json.parseObject(event.data());
        Map<String, Object> error = JsonFields.objectOrNull(body, "error");
        if (error == null) throw new LlamaConnectionException("error event without 'error'");
        throw ApiErrors.fromError(0, error, null);
      }
      default:
        break; // unknown events are skipped, as the SSE format intends
    }
  }

  private static void emit(String text, State state, Consumer<String> onText) {
    if (text == null || text.isEmpty()) return;
    state.text.append(text);
    onText.accept(text);
  }
}
