package io.llamaserve.client;

import io.llamaserve.ToolCall;
import io.llamaserve.json.Json;
import io.llamaserve.json.JsonException;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.Consumer;

/**
 * How each streaming endpoint encodes text, the end and errors in its events:
 *
 * <ul>
 *   <li>CHAT (/v1/chat/completions): {@code data: {chunk}} with choices[0].delta.content, the
 *       finish_reason in the last chunk, usage in a chunk with no choices, then
 *       {@code data: [DONE]}; an error is {@code data: {"error": {...}}} then [DONE]. Tool
 *       calls come as choices[0].delta.tool_calls: pieces of calls, each with the call's
 *       {@code index} and some of id, function.name and a piece of function.arguments, put
 *       together by index. A call is complete when a later index starts or the choice
 *       finishes.
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
    // Tool calls by their index, as the deltas build them, and those complete so far.
    final TreeMap<Integer, PartialCall> partialCalls = new TreeMap<>();
    final List<ToolCall> toolCalls = new ArrayList<>();

    CompletionResult result() {
      return new CompletionResult(id, model, text.toString(), finishReason, usage, toolCalls);
    }
  }

  /** One streamed tool call being put together. */
  static final class PartialCall {
    String id;
    String name;
    final StringBuilder arguments = new StringBuilder();
    boolean complete;
  }

  /** {@link #apply(SseEvent, State, Consumer, Consumer)} ignoring completed tool calls. */
  void apply(SseEvent event, State state, Consumer<String> onText) {
    apply(event, state, onText, call -> {});
  }

  /**
   * Applies one event to {@code state}, passing new text to {@code onText} and each tool call,
   * once complete, to {@code onToolCall}. Throws the server's error (LlamaApiException) or
   * LlamaConnectionException for a malformed event.
   */
  void apply(SseEvent event, State state, Consumer<String> onText,
      Consumer<ToolCall> onToolCall) {
    if (state.done) return; // nothing may follow the end marker
    try {
      if (this == SIMPLE_CHAT) {
        applySimple(event, state, onText);
      } else {
        applyOpenAi(event, state, onText, onToolCall);
      }
    } catch (JsonException e) {
      throw new LlamaConnectionException("malformed event from the server: " + e.getMessage(), e);
    }
  }

  private void applyOpenAi(SseEvent event, State state, Consumer<String> onText,
      Consumer<ToolCall> onToolCall) {
    if (event.data().equals("[DONE]")) {
      completeCalls(state, Integer.MAX_VALUE, onToolCall);
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
    Map<String, Object> delta = null;
    if (this == CHAT) {
      delta = JsonFields.objectOrNull(choice, "delta");
      text = delta == null ? null : JsonFields.string(delta, "content");
    } else {
      text = JsonFields.string(choice, "text");
    }
    String finish = JsonFields.string(choice, "finish_reason");
    if (finish != null) state.finishReason = finish;
    emit(text, state, onText);
    if (delta != null && delta.get("tool_calls") != null) {
      applyToolCalls(JsonFields.list(delta, "tool_calls"), state, onToolCall);
    }
    if (finish != null) completeCalls(state, Integer.MAX_VALUE, onToolCall);
  }

  /** Adds the pieces of one delta's tool_calls; a new index completes the calls before it. */
  private static void applyToolCalls(List<Object> pieces, State state,
      Consumer<ToolCall> onToolCall) {
    for (int i = 0; i < pieces.size(); i++) {
      Map<String, Object> piece = JsonFields.object(pieces.get(i), "delta.tool_calls[]");
      // OpenAI's chunks always carry the index; without one, take the piece's position.
      int index = piece.get("index") == null ? i : (int) JsonFields.integer(piece, "index");
      PartialCall call = state.partialCalls.get(index);
      if (call == null) {
        completeCalls(state, index, onToolCall);
        call = new PartialCall();
        state.partialCalls.put(index, call);
      } else if (call.complete) {
        throw new LlamaConnectionException("malformed stream: tool call " + index
            + " continues after a later one started");
      }
      String id = JsonFields.string(piece, "id");
      if (id != null) call.id = id;
      Map<String, Object> function = JsonFields.objectOrNull(piece, "function");
      if (function != null) {
        String name = JsonFields.string(function, "name");
        if (name != null) call.name = name;
        Object arguments = function.get("arguments");
        if (arguments != null) call.arguments.append(JsonFields.arguments(arguments));
      }
    }
  }

  /** Completes, in index order, the calls with an index below {@code before}. */
  private static void completeCalls(State state, int before, Consumer<ToolCall> onToolCall) {
    for (Map.Entry<Integer, PartialCall> entry : state.partialCalls.headMap(before).entrySet()) {
      PartialCall partial = entry.getValue();
      if (partial.complete) continue;
      partial.complete = true;
      if (partial.name == null) {
        throw new LlamaConnectionException("malformed stream: tool call " + entry.getKey()
            + " has no function name");
      }
      ToolCall call = new ToolCall(partial.id == null ? "" : partial.id, partial.name,
          partial.arguments.toString());
      state.toolCalls.add(call);
      onToolCall.accept(call);
    }
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
