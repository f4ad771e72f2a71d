package io.llamaserve.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.llamaserve.ToolCall;
import io.llamaserve.json.Json;
import io.llamaserve.testing.ServerProcess;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Tool calling, structured output and model aliases against a real server with the default
 * model, started with {@code --model-alias gpt-4o-mini} (the default model name of many
 * OpenAI clients).
 */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class LlamaClientToolsTest {
  private static final String MODEL = "SmolLM2-135M-Instruct.Q4_1";
  private static final String ALIAS = "gpt-4o-mini";
  private static final Tool WEATHER = Tool.function("get_weather",
      "The current weather of a city",
      "{\"type\": \"object\", \"additionalProperties\": false,"
          + " \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 30},"
          + "  \"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"]}},"
          + " \"required\": [\"city\", \"unit\"]}");
  private static final Tool TIME = Tool.function("get_time", "The current time in a time zone",
      Map.of("type", "object",
          "properties", Map.of("timezone", Map.of("type", "string", "maxLength", 40)),
          "required", List.of("timezone")));
  private static ServerProcess server;
  private static LlamaClient client;

  @BeforeAll
  static void startServer() throws Exception {
    server = ServerProcess.start("client-tools-test", "--threads", "1", "--ctx-size", "1024",
        "--max-running", "4", "--model-alias", ALIAS);
    client = LlamaClient.builder(server.url()).build();
  }

  @AfterAll
  static void stopServer() throws Exception {
    if (client != null) client.close();
    if (server != null) server.close();
  }

  private static ChatRequest.Builder weatherQuestion() {
    return ChatRequest.builder().user("What is the weather in Paris?").tool(WEATHER).tool(TIME)
        .temperature(0).maxTokens(80);
  }

  private static void assertArguments(ToolCall call, String... requiredKeys) {
    Map<String, Object> arguments = call.parsedArguments(); // throws unless a JSON object
    for (String key : requiredKeys) {
      assertInstanceOf(String.class, arguments.get(key), key + " in " + call.arguments());
    }
  }

  @Test
  void requiredCallRoundTrip() {
    ChatRequest first = weatherQuestion().toolChoice("required").parallelToolCalls(false).build();
    CompletionResult call = client.chat(first);
    assertEquals("tool_calls", call.finishReason());
    assertEquals("", call.text());
    assertEquals(1, call.toolCalls().size(), "one call without parallel calls: " + call);
    ToolCall toolCall = call.toolCalls().get(0);
    assertFalse(toolCall.id().isEmpty());
    if (toolCall.name().equals("get_weather")) {
      assertArguments(toolCall, "city", "unit");
      assertTrue(List.of("celsius", "fahrenheit").contains(toolCall.parsedArguments().get("unit")));
    } else {
      assertEquals("get_time", toolCall.name());
      assertArguments(toolCall, "timezone");
    }

    // The call goes back as the assistant turn, its result as a tool message.
    CompletionResult answer = client.chat(ChatRequest.builder()
        .messages(first.messages())
        .message(call.toMessage())
        .toolResult(toolCall.id(),
            "{\"temperature\": 21, \"unit\": \"celsius\", \"sky\": \"sunny\"}")
        .tools(first.tools())
        .temperature(0).maxTokens(40).build());
    assertFalse(answer.hasToolCalls(), "answered in text: " + answer);
    assertTrue(List.of("stop", "length").contains(answer.finishReason()));
    assertFalse(answer.text().isBlank());
  }

  @Test
  void namedFunctionIsCalled() {
    CompletionResult result = client.chat(weatherQuestion()
        .toolChoice(ToolChoice.function("get_time")).build());
    assertEquals("tool_calls", result.finishReason());
    assertEquals(1, result.toolCalls().size());
    assertEquals("get_time", result.toolCalls().get(0).name());
    assertArguments(result.toolCalls().get(0), "timezone");
  }

  @Test
  void streamedCallsAreAssembled() throws Exception {
    ChatRequest request = weatherQuestion().toolChoice(ToolChoice.function("get_weather")).build();
    CompletionResult blocking = client.chat(request);

    List<ToolCall> heard = Collections.synchronizedList(new ArrayList<>());
    StringBuilder text = new StringBuilder();
    CompletableFuture<CompletionResult> completed = new CompletableFuture<>();
    StreamHandle handle = client.chatAsync(request, new StreamListener() {
      @Override
      public void onText(String piece) {
        text.append(piece);
      }

      @Override
      public void onToolCall(ToolCall call) {
        heard.add(call);
      }

      @Override
      public void onComplete(CompletionResult result) {
        completed.complete(result);
      }

      @Override
      public void onError(Throwable error) {
        completed.completeExceptionally(error);
      }
    });
    CompletionResult streamed = completed.get(60, TimeUnit.SECONDS);
    assertEquals(streamed, handle.result().get());
    assertEquals("tool_calls", streamed.finishReason());
    assertEquals("", text.toString());
    assertEquals(streamed.toolCalls(), heard);
    assertEquals(1, heard.size());
    ToolCall call = heard.get(0);
    assertEquals("get_weather", call.name());
    assertTrue(call.id().startsWith("call_"), call.id());
    assertArguments(call, "city", "unit");
    // Greedy: the same call as the blocking answer (ids differ per request).
    assertEquals(blocking.toolCalls().get(0).arguments(), call.arguments());
    assertEquals(blocking.usage(), streamed.usage());
  }

  @Test
  void toolChoiceNoneAnswersInText() {
    CompletionResult result = client.chat(weatherQuestion().toolChoice("none").maxTokens(24)
        .build());
    assertFalse(result.hasToolCalls());
    assertTrue(List.of("stop", "length").contains(result.finishReason()));
    assertFalse(result.text().isBlank());
  }

  @Test
  void malformedToolsAreBadRequests() {
    ChatRequest duplicate = ChatRequest.builder().user("hi").maxTokens(4)
        .tool(Tool.function("lookup", null, (String) null))
        .tool(Tool.function("lookup", "again", "{\"type\": \"object\"}")).build();
    BadRequestException e = assertThrows(BadRequestException.class, () -> client.chat(duplicate));
    assertTrue(e.getMessage().contains("\"lookup\" is defined twice"), e.getMessage());
    assertEquals(400, e.statusCode());
    // The same refusal reaches a stream's listener.
    CompletableFuture<CompletionResult> streamed = client.chatAsync(duplicate, text -> {})
        .result();
    ExecutionException failed = assertThrows(ExecutionException.class,
        () -> streamed.get(30, TimeUnit.SECONDS));
    assertInstanceOf(BadRequestException.class, failed.getCause());

    BadRequestException unknown = assertThrows(BadRequestException.class,
        () -> client.chat(weatherQuestion().toolChoice(ToolChoice.function("nope")).build()));
    assertTrue(unknown.getMessage().contains("nope"), unknown.getMessage());
  }

  @Test
  void jsonSchemaOutputParses() {
    ResponseFormat person = ResponseFormat.jsonSchema("person",
        "{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"name\", \"age\"],"
            + " \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 20},"
            + "  \"age\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 120}}}", true);
    ChatRequest request = ChatRequest.builder().user("Invent a person.").responseFormat(person)
        .temperature(0).maxTokens(60).build();
    CompletionResult result = client.chat(request);
    assertEquals("stop", result.finishReason(), result.text());
    Map<String, Object> document = Json.parseObject(result.text());
    assertEquals(List.of("name", "age"), new ArrayList<>(document.keySet()));
    assertInstanceOf(String.class, document.get("name"));
    long age = (Long) document.get("age");
    assertTrue(age >= 0 && age <= 120, "age " + age);

    // Streamed pieces make the same document.
    try (Stream<String> pieces = client.chatStream(request)) {
      assertEquals(result.text(), pieces.collect(Collectors.joining()));
    }

    // Completions take it too (an extension of the OpenAI API).
    CompletionResult completion = client.complete(CompletionRequest.builder("A person:")
        .responseFormat(ResponseFormat.jsonObject()).temperature(0).maxTokens(60).build());
    if (completion.finishReason().equals("stop")) Json.parseObject(completion.text());
    assertTrue(completion.text().startsWith("{"), completion.text());
  }

  @Test
  void unsupportedSchemaIsABadRequest() {
    BadRequestException e = assertThrows(BadRequestException.class, () -> client.chat(
        ChatRequest.builder().user("x").maxTokens(4).responseFormat(ResponseFormat.jsonSchema(
            "tags", "{\"type\": \"array\", \"uniqueItems\": true}", true)).build()));
    assertEquals("unsupported_schema", e.code());
    assertTrue(e.getMessage().contains("uniqueItems"), e.getMessage());
  }

  @Test
  void aliasServesTheModel() {
    CompletionResult result = client.chat(ChatRequest.builder().model(ALIAS)
        .user("Say hello.").temperature(0).maxTokens(8).build());
    assertEquals(MODEL, result.model()); // answers carry the model's own id
    assertFalse(result.text().isBlank());

    List<ModelInfo> models = client.listModels();
    ModelInfo alias = models.stream().filter(m -> m.id().equals(ALIAS)).findFirst()
        .orElseThrow();
    assertEquals(MODEL, alias.aliasOf());
    assertTrue(alias.isAlias());
    ModelInfo model = models.stream().filter(m -> m.id().equals(MODEL)).findFirst().orElseThrow();
    assertNull(model.aliasOf());

    assertThrows(NotFoundException.class, () -> client.chat(ChatRequest.builder()
        .model("gpt-4o").user("x").maxTokens(4).build()));
  }
}
