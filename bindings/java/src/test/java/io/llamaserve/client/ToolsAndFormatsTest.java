package io.llamaserve.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.llamaserve.ChatMessage;
import io.llamaserve.ToolCall;
import io.llamaserve.engine.GenerationRequest;
import io.llamaserve.json.Json;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Tools, tool calls and response formats: request bodies and streamed calls, no server. */
class ToolsAndFormatsTest {
  private static final String WEATHER_SCHEMA = "{\"type\":\"object\",\"properties\":"
      + "{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}";

  @Test
  void chatRequestWritesToolsChoiceAndFormat() {
    ToolCall call = new ToolCall("call_1", "get_weather", "{\"city\":\"Paris\"}");
    ChatRequest request = ChatRequest.builder()
        .user("Weather in Paris?")
        .message(ChatMessage.assistant(null, List.of(call)))
        .toolResult("call_1", "{\"sky\":\"sunny\"}")
        .tool(Tool.function("get_weather", "Current weather", WEATHER_SCHEMA))
        .tool(Tool.function("now", null, Map.of("type", "object")))
        .toolChoice(ToolChoice.function("get_weather"))
        .parallelToolCalls(false)
        .responseFormat(ResponseFormat.jsonObject())
        .maxTokens(5)
        .build();
    String json = Json.write(request.toJson(false));
    assertEquals("{\"messages\":[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
        + "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\","
        + "\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        + "\"arguments\":\"{\\\"city\\\":\\\"Paris\\\"}\"}}]},"
        + "{\"role\":\"tool\",\"content\":\"{\\\"sky\\\":\\\"sunny\\\"}\","
        + "\"tool_call_id\":\"call_1\"}],"
        + "\"max_tokens\":5,"
        + "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
        + "\"description\":\"Current weather\",\"parameters\":" + WEATHER_SCHEMA + "}},"
        + "{\"type\":\"function\",\"function\":{\"name\":\"now\","
        + "\"parameters\":{\"type\":\"object\"}}}],"
        + "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
        + "\"parallel_tool_calls\":false,"
        + "\"response_format\":{\"type\":\"json_object\"}}", json);

    // Unset options stay out of the body, as before.
    String plain = Json.write(ChatRequest.of("hi", 3).toJson(false));
    assertEquals("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_tokens\":3}",
        plain);
  }

  @Test
  void toolChoiceModesAndResponseFormats() {
    assertSame(ToolChoice.NONE, ToolChoice.of("none"));
    assertSame(ToolChoice.AUTO, ToolChoice.of("auto"));
    assertSame(ToolChoice.REQUIRED, ToolChoice.of("required"));
    assertThrows(IllegalArgumentException.class, () -> ToolChoice.of("get_weather"));
    assertEquals("required", ChatRequest.builder().user("x").toolChoice("required").build()
        .toJson(false).get("tool_choice"));

    ResponseFormat schema = ResponseFormat.jsonSchema("person",
        "{\"type\":\"object\",\"required\":[\"name\"],"
            + "\"properties\":{\"name\":{\"type\":\"string\"}}}", true);
    assertEquals("{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"person\","
        + "\"schema\":{\"type\":\"object\",\"required\":[\"name\"],"
        + "\"properties\":{\"name\":{\"type\":\"string\"}}},\"strict\":true}}",
        Json.write(schema.toJson()));
    assertEquals(schema, ResponseFormat.jsonSchema("person", Map.of("type", "object",
        "required", List.of("name"),
        "properties", Map.of("name", Map.of("type", "string"))), true));
    assertEquals("{\"prompt\":\"p\",\"response_format\":{\"type\":\"text\"}}", Json.write(
        CompletionRequest.builder("p").responseFormat(ResponseFormat.text()).build()
            .toJson(false)));

    assertThrows(IllegalArgumentException.class,
        () -> ResponseFormat.jsonSchema("x", "[1]", true));
    assertThrows(IllegalArgumentException.class,
        () -> Tool.function("f", null, "{\"type\": \"object\""));
    assertEquals(WEATHER_SCHEMA, Tool.function("f", null, WEATHER_SCHEMA).parametersJson());
    assertNull(Tool.function("f", null, (String) null).parametersJson());
  }

  @Test
  void chatMessagesOfToolCalls() {
    ToolCall call = new ToolCall("c", "f", "{\"a\":1}");
    assertEquals(Map.of("a", 1L), call.parsedArguments());
    ChatMessage turn = ChatMessage.assistant(null, List.of(call));
    assertTrue(turn.hasToolCalls());
    assertNull(turn.content());
    ChatMessage result = ChatMessage.tool("c", "42");
    assertEquals("tool", result.role());
    assertEquals("c", result.toolCallId());
    assertFalse(result.hasToolCalls());
    assertEquals(new ChatMessage("user", "x"), ChatMessage.user("x"));

    assertThrows(NullPointerException.class, () -> ChatMessage.user(null));
    assertThrows(NullPointerException.class, () -> ChatMessage.assistant(null, List.of()));
    assertThrows(IllegalArgumentException.class,
        () -> new ChatMessage("user", "x", List.of(call), null));
    // The embedded engine takes text messages only.
    assertThrows(IllegalArgumentException.class, () -> GenerationRequest.chat(List.of(turn)));

    CompletionResult answer = new CompletionResult("r", "m", "", "tool_calls", null,
        List.of(call));
    assertEquals(turn, answer.toMessage());
    assertEquals(ChatMessage.assistant("hi"),
        new CompletionResult("r", "m", "hi", "stop", null).toMessage());
  }

  @Test
  void streamedToolCallsAreAssembledByIndex() {
    StreamProtocol.State state = new StreamProtocol.State();
    List<Object> events = new ArrayList<>(); // text pieces and calls, in delivery order
    String head = "{\"id\":\"r\",\"model\":\"m\",\"choices\":[{\"index\":0,";
    for (String data : List.of(
        head + "\"delta\":{\"role\":\"assistant\",\"content\":\"Let me check.\"},"
            + "\"finish_reason\":null}]}",
        head + "\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\","
            + "\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]},"
            + "\"finish_reason\":null}]}",
        head + "\"delta\":{\"tool_calls\":[{\"index\":0,"
            + "\"function\":{\"arguments\":\"{\\\"city\\\":\"}}]},\"finish_reason\":null}]}",
        head + "\"delta\":{\"tool_calls\":[{\"index\":0,"
            + "\"function\":{\"arguments\":\"\\\"Paris\\\"}\"}}]},\"finish_reason\":null}]}",
        head + "\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\",\"type\":\"function\","
            + "\"function\":{\"name\":\"now\",\"arguments\":\"{}\"}}]},"
            + "\"finish_reason\":null}]}")) {
      StreamProtocol.CHAT.apply(new SseEvent("", data), state, events::add, events::add);
    }
    ToolCall first = new ToolCall("call_a", "get_weather", "{\"city\":\"Paris\"}");
    ToolCall second = new ToolCall("call_b", "now", "{}");
    // The first call is complete once the second starts; the second when the choice ends.
    assertEquals(List.of("Let me check.", first), events);
    StreamProtocol.CHAT.apply(new SseEvent("", head + "\"delta\":{},"
        + "\"finish_reason\":\"tool_calls\"}]}"), state, events::add, events::add);
    assertEquals(List.of("Let me check.", first, second), events);
    StreamProtocol.CHAT.apply(new SseEvent("", "[DONE]"), state, events::add, events::add);
    assertEquals(3, events.size());
    assertEquals(new CompletionResult("r", "m", "Let me check.", "tool_calls", null,
        List.of(first, second)), state.result());

    StreamProtocol.State broken = new StreamProtocol.State();
    assertThrows(LlamaConnectionException.class, () -> StreamProtocol.CHAT.apply(
        new SseEvent("", head + "\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"x\"}]},"
            + "\"finish_reason\":\"tool_calls\"}]}"), broken, s -> {}, c -> {}));
  }
}
