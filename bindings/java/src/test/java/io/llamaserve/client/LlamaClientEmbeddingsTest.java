package io.llamaserve.client;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.llamaserve.json.Json;
import io.llamaserve.testing.ServerProcess;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** POST /v1/embeddings through the client, against a real server with the default model. */
@Timeout(value = 120, unit = TimeUnit.SECONDS)
class LlamaClientEmbeddingsTest {
  private static final List<String> TEXTS =
      List.of("Invoices are due in 30 days.", "Der Vertrag endet im März.", "短い文");
  private static ServerProcess server;
  private static LlamaClient client;

  @BeforeAll
  static void startServer() throws Exception {
    server = ServerProcess.start("client-embeddings-test", "--threads", "1", "--ctx-size", "512",
        "--max-running", "4", "--model-alias", "text-embedding-3-small");
    client = LlamaClient.builder(server.url()).build();
  }

  @AfterAll
  static void stopServer() throws Exception {
    if (client != null) client.close();
    if (server != null) server.close();
  }

  @Test
  void vectorsAreUnitLengthInInputOrderAndEqualTheFloatAnswer() throws Exception {
    EmbeddingResult result = client.embed(TEXTS);
    assertEquals(3, result.embeddings().size());
    assertEquals(576, result.dimensions()); // SmolLM2-135M's hidden size
    assertTrue(result.usage().promptTokens() > 3);
    for (float[] vector : result.embeddings()) {
      double norm = 0;
      for (float x : vector) norm += (double) x * x;
      assertEquals(1.0, Math.sqrt(norm), 1e-4);
    }
    // Each input alone gives its vector; the same as the float encoding's numbers.
    for (int i = 0; i < TEXTS.size(); ++i) {
      float[] alone = client.embed(List.of(TEXTS.get(i))).embeddings().get(0);
      float[] batched = result.embeddings().get(i);
      assertEquals(1.0, cosine(alone, batched), 1e-5);
      assertArrayEquals(floatAnswer(TEXTS.get(i)), alone, 0.0f);
    }
  }

  @Test
  void anAliasNamesTheModelAndBadInputIsTheServersMessage() {
    EmbeddingResult result = client.embed("text-embedding-3-small", List.of("hello"));
    assertEquals("SmolLM2-135M-Instruct.Q4_1", result.model());
    assertThrows(IllegalArgumentException.class, () -> client.embed(List.of()));
    BadRequestException error =
        assertThrows(BadRequestException.class, () -> client.embed(List.of("ok", "")));
    assertTrue(error.getMessage().contains("input[1]"), error.getMessage());
  }

  private static double cosine(float[] a, float[] b) {
    double dot = 0, na = 0, nb = 0;
    for (int i = 0; i < a.length; ++i) {
      dot += (double) a[i] * b[i];
      na += (double) a[i] * a[i];
      nb += (double) b[i] * b[i];
    }
    return dot / Math.sqrt(na * nb);
  }

  /** The same input over plain HTTP with encoding_format float. */
  private static float[] floatAnswer(String text) throws Exception {
    HttpRequest request = HttpRequest.newBuilder(URI.create(server.url() + "/v1/embeddings"))
        .header("Content-Type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(Json.write(Map.of("input", text))))
        .build();
    HttpResponse<String> response =
        HttpClient.newHttpClient().send(request, HttpResponse.BodyHandlers.ofString());
    assertEquals(200, response.statusCode(), response.body());
    @SuppressWarnings("unchecked")
    Map<String, Object> body = (Map<String, Object>) Json.parse(response.body());
    @SuppressWarnings("unchecked")
    Map<String, Object> first = (Map<String, Object>) ((List<Object>) body.get("data")).get(0);
    @SuppressWarnings("unchecked")
    List<Object> numbers = (List<Object>) first.get("embedding");
    float[] vector = new float[numbers.size()];
    for (int i = 0; i < vector.length; ++i) vector[i] = ((Number) numbers.get(i)).floatValue();
    return vector;
  }
}
