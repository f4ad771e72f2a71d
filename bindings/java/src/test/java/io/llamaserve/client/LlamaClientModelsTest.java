package io.llamaserve.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.llamaserve.testing.ServerProcess;
import io.llamaserve.testing.TestPaths;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** The client against a real server of two models: listing them, picking one per request. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class LlamaClientModelsTest {
  private static ServerProcess server;
  private static LlamaClient client;

  @BeforeAll
  static void startServer() throws Exception {
    String model = TestPaths.model().toString();
    server = ServerProcess.startModels("client-models-test",
        List.of("--model", "chat=" + model + ",required=true", "--model",
            "fast=" + model + ",load=on-demand"),
        "--threads", "1", "--ctx-size", "512", "--max-running", "2");
    client = LlamaClient.builder(server.url()).build();
  }

  @AfterAll
  static void stopServer() throws Exception {
    if (client != null) client.close();
    if (server != null) server.close();
  }

  private static CompletionRequest hello(String model) {
    return CompletionRequest.builder("Hello").temperature(0).maxTokens(3).model(model).build();
  }

  @Test
  void listsEveryModelWithItsState() {
    List<ModelInfo> models = client.listModels();
    assertEquals(List.of("chat", "fast"), models.stream().map(ModelInfo::id).toList());
    ModelInfo chat = models.get(0);
    assertTrue(chat.loaded());
    assertEquals(512, chat.contextLength());
    assertEquals(List.of("chat", "fast"), client.models());
  }

  @Test
  void requestsPickTheirModel() {
    CompletionResult chat = client.complete(hello("chat"));
    assertEquals("chat", chat.model());
    // "fast" loads on demand for its first request.
    CompletionResult fast = client.complete(hello("fast"));
    assertEquals("fast", fast.model());
    assertFalse(fast.text().isEmpty());
    assertTrue(client.listModels().stream().allMatch(ModelInfo::loaded));
    LlamaApiException unknown =
        assertThrows(LlamaApiException.class, () -> client.complete(hello("nope")));
    assertInstanceOf(NotFoundException.class, unknown);
    assertTrue(unknown.getMessage().contains("'chat'"), unknown.getMessage());
  }
}
