package io.llamaserve.client;

import io.llamaserve.ToolCall;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.Executor;
import java.util.concurrent.Flow;
import java.util.stream.Stream;
import java.util.stream.StreamSupport;

/**
 * Client of a llamaserve server's HTTP API (OpenAI-compatible routes and the simple /chat),
 * on {@code java.net.http.HttpClient}, with no other dependency.
 *
 * <p>Each generation comes in three forms: blocking ({@link #chat}), a blocking
 * {@code Stream<String>} of text pieces ({@link #chatStream}; close it, e.g. with
 * try-with-resources, to stop early), and asynchronous ({@link #chatAsync} with a
 * {@link StreamListener}, or {@link #chatPublisher} as a {@code Flow.Publisher<String>} with
 * back-pressure). Stopping a stream early closes its connection, and the server cancels the
 * generation at its next step.
 *
 * <p>Tool calls ({@link ChatRequest.Builder#tool}) come in {@link CompletionResult#toolCalls()}
 * of {@link #chat} and of a {@link #chatAsync} stream's result, and one by one to {@link
 * StreamListener#onToolCall}; the text-only forms ({@link #chatStream}, {@link
 * #chatPublisher}) pass text alone.
 *
 * <p>Time limits (see {@link Builder}): connect; read (longest wait for the next bytes: for a
 * blocking call that is the whole generation, as the server answers at the end); request
 * (the whole call, retries included). Errors are typed: {@link BadRequestException} (400),
 * {@link AuthenticationException} (401), {@link NotFoundException} (404), {@link
 * PayloadTooLargeException} (413), {@link RateLimitException} (429), {@link
 * ServiceUnavailableException} (503), other statuses as {@link LlamaApiException}, and
 * {@link LlamaTimeoutException} / {@link LlamaConnectionException} on this side. 429 and 503
 * are retried only if a {@link RetryPolicy} allows.
 *
 * <p>Thread-safe: create one per server and share it. {@link #close()} cancels open calls.
 */
public final class LlamaClient implements AutoCloseable {
  private final Transport transport;

  private LlamaClient(Transport transport) {
    this.transport = transport;
  }

  /** A client of the server at {@code baseUri} (e.g. "http://127.0.0.1:8080"). */
  public static Builder builder(String baseUri) {
    return new Builder(URI.create(baseUri));
  }

  public static Builder builder(URI baseUri) {
    return new Builder(baseUri);
  }

  // ---------------------------------------------------------------------------------------
  // POST /v1/chat/completions

  /**
   * Generates the whole reply, then returns it: text, or with finish reason "tool_calls" the
   * function calls ({@link CompletionResult#toolCalls()}).
   */
  public CompletionResult chat(ChatRequest request) {
    Map<String, Object> body =
        transport.callJson(transport.postJson("/v1/chat/completions", request.toJson(false), false));
    Map<String, Object> choice = JsonFields.firstChoice(body);
    if (choice == null) throw new LlamaConnectionException("the answer has no choices");
    Map<String, Object> message = JsonFields.object(choice.get("message"), "choices[0].message");
    return result(body, JsonFields.string(message, "content"), choice,
        JsonFields.toolCalls(message));
  }

  /** The reply as it is generated. Close the stream to stop early. */
  public Stream<String> chatStream(ChatRequest request) {
    return blockingStream(chatPublisher(request));
  }

  /**
   * Streams the reply to {@code listener}; returns at once. Tool calls go to {@link
   * StreamListener#onToolCall} as each is complete, and are in the result.
   */
  public StreamHandle chatAsync(ChatRequest request, StreamListener listener) {
    return async(post("/v1/chat/completions", request.toJson(true)), StreamProtocol.CHAT,
        listener);
  }

  /** The reply as a Publisher; each subscription sends the request anew. */
  public Flow.Publisher<String> chatPublisher(ChatRequest request) {
    return publisher("/v1/chat/completions", request.toJson(true), StreamProtocol.CHAT);
  }

  // ---------------------------------------------------------------------------------------
  // POST /v1/embeddings

  /** Embeddings of {@code inputs} with the server's default model; see {@link #embed(String, List)}. */
  public EmbeddingResult embed(List<String> inputs) {
    return embed(null, inputs);
  }

  /**
   * Embeddings of {@code inputs} (POST /v1/embeddings): one L2-normalized vector per input, in
   * input order, pooled as the server's model is configured ({@code --embedding-pooling}). The
   * vectors travel as base64 little-endian floats, exactly as computed. {@code model} may be
   * null (the server's default model) or an alias.
   */
  public EmbeddingResult embed(String model, List<String> inputs) {
    if (inputs.isEmpty()) throw new IllegalArgumentException("no inputs to embed");
    Map<String, Object> request = new LinkedHashMap<>();
    if (model != null) request.put("model", model);
    request.put("input", List.copyOf(inputs));
    request.put("encoding_format", "base64");
    Map<String, Object> body =
        transport.callJson(transport.postJson("/v1/embeddings", request, false));
    List<Object> data = JsonFields.list(body, "data");
    float[][] vectors = new float[data.size()][];
    for (Object item : data) {
      Map<String, Object> entry = JsonFields.object(item, "data[]");
      int index = (int) JsonFields.integer(entry, "index");
      if (index < 0 || index >= vectors.length) {
        throw new LlamaConnectionException("embedding index " + index + " out of range");
      }
      ByteBuffer bytes = ByteBuffer.wrap(Base64.getDecoder().decode(JsonFields.string(entry,
          "embedding"))).order(ByteOrder.LITTLE_ENDIAN);
      float[] vector = new float[bytes.remaining() / Float.BYTES];
      bytes.asFloatBuffer().get(vector);
      vectors[index] = vector;
    }
    if (vectors.length != inputs.size() || Arrays.asList(vectors).contains(null)) {
      throw new LlamaConnectionException(
          "the answer has " + data.size() + " embeddings for " + inputs.size() + " inputs");
    }
    Map<String, Object> counts = JsonFields.objectOrNull(body, "usage");
    long promptTokens = counts == null ? 0 : JsonFields.integer(counts, "prompt_tokens");
    Usage usage = new Usage(promptTokens, 0, promptTokens);
    return new EmbeddingResult(JsonFields.string(body, "model"), List.of(vectors), usage);
  }

  // ---------------------------------------------------------------------------------------
  // POST /v1/completions

  public CompletionResult complete(CompletionRequest request) {
    Map<String, Object> body =
        transport.callJson(transport.postJson("/v1/completions", request.toJson(false), false));
    Map<String, Object> choice = JsonFields.firstChoice(body);
    if (choice == null) throw new LlamaConnectionException("the answer has no choices");
    return result(body, JsonFields.string(choice, "text"), choice, List.of());
  }

  public Stream<String> completeStream(CompletionRequest request) {
    return blockingStream(completePublisher(request));
  }

  public StreamHandle completeAsync(CompletionRequest request, StreamListener listener) {
    return async(post("/v1/completions", request.toJson(true)), StreamProtocol.COMPLETION,
        listener);
  }

  public Flow.Publisher<String> completePublisher(CompletionRequest request) {
    return publisher("/v1/completions", request.toJson(true), StreamProtocol.COMPLETION);
  }

  // ---------------------------------------------------------------------------------------
  // POST /chat

  public CompletionResult simpleChat(SimpleChatRequest request) {
    Map<String, Object> body = transport.callJson(transport.postJson("/chat", request.toJson(false),
        false));
    return new CompletionResult(JsonFields.string(body, "id"), JsonFields.string(body, "model"),
        JsonFields.string(body, "text"), JsonFields.string(body, "finish_reason"),
        JsonFields.usage(body));
  }

  public Stream<String> simpleChatStream(SimpleChatRequest request) {
    return blockingStream(simpleChatPublisher(request));
  }

  public StreamHandle simpleChatAsync(SimpleChatRequest request, StreamListener listener) {
    return async(post("/chat", request.toJson(true)), StreamProtocol.SIMPLE_CHAT, listener);
  }

  public Flow.Publisher<String> simpleChatPublisher(SimpleChatRequest request) {
    return publisher("/chat", request.toJson(true), StreamProtocol.SIMPLE_CHAT);
  }

  // ---------------------------------------------------------------------------------------
  // Other routes

  /** The ids of the served models (GET /v1/models). */
  public List<String> models() {
    List<String> ids = new ArrayList<>();
    for (ModelInfo model : listModels()) ids.add(model.id());
    return ids;
  }

  /**
   * The served models with their state and context length (GET /v1/models). A request names
   * one with {@code GenerationOptions.model}; one that is not loaded is loaded for it.
   */
  public List<ModelInfo> listModels() {
    Map<String, Object> body = transport.callJson(transport.request("/v1/models").GET().build());
    List<ModelInfo> models = new ArrayList<>();
    for (Object item : JsonFields.list(body, "data")) {
      Map<String, Object> entry = JsonFields.object(item, "data[]");
      Object state = entry.get("state");
      Object context = entry.get("context_length");
      Object error = entry.get("error");
      Object aliasOf = entry.get("alias_of");
      models.add(new ModelInfo(JsonFields.string(entry, "id"),
          state instanceof String text ? text : "loaded",
          context instanceof Number number ? number.longValue() : 0,
          error instanceof String text ? text : null,
          aliasOf instanceof String text ? text : null));
    }
    return models;
  }

  /** GET /health answers 200: the process is up. False for any other answer or no answer. */
  public boolean isHealthy() {
    return probe("/health");
  }

  /** GET /ready answers 200: the model is loaded and warmed up. */
  public boolean isReady() {
    return probe("/ready");
  }

  /** The Prometheus text of GET /metrics. */
  public String metrics() {
    HttpResponse<byte[]> response = transport.call(transport.request("/metrics").GET().build(),
        HttpResponse.BodyHandlers.ofByteArray());
    return new String(response.body(), StandardCharsets.UTF_8);
  }

  /** Cancels every open call (streams get no further signals). Idempotent. */
  @Override
  public void close() {
    transport.close();
  }

  // ---------------------------------------------------------------------------------------

  private boolean probe(String path) {
    try {
      transport.call(transport.request(path).GET().build(), HttpResponse.BodyHandlers.ofByteArray());
      return true;
    } catch (LlamaClientException e) {
      return false;
    }
  }

  private HttpRequest post(String path, Map<String, Object> body) {
    return transport.postJson(path, body, true);
  }

  private Flow.Publisher<String> publisher(String path, Map<String, Object> body,
      StreamProtocol protocol) {
    HttpRequest request = post(path, body);
    return subscriber -> {
      Objects.requireNonNull(subscriber, "subscriber");
      new StreamingCall(transport, request, protocol, subscriber).start();
    };
  }

  private StreamHandle async(HttpRequest request, StreamProtocol protocol,
      StreamListener listener) {
    Objects.requireNonNull(listener, "listener");
    ListenerSubscriber subscriber = new ListenerSubscriber(listener);
    StreamingCall call = new StreamingCall(transport, request, protocol, subscriber,
        subscriber::onToolCall);
    subscriber.attach(call);
    call.start();
    return new StreamHandle(call);
  }

  private static Stream<String> blockingStream(Flow.Publisher<String> publisher) {
    BlockingTextStream adapter = new BlockingTextStream();
    publisher.subscribe(adapter);
    return StreamSupport.stream(adapter, false).onClose(adapter::cancel);
  }

  private static CompletionResult result(Map<String, Object> body, String text,
      Map<String, Object> choice, List<ToolCall> toolCalls) {
    return new CompletionResult(JsonFields.string(body, "id"), JsonFields.string(body, "model"),
        text == null ? "" : text, JsonFields.string(choice, "finish_reason"),
        JsonFields.usage(body), toolCalls);
  }

  /** Configures a LlamaClient. Every setting has a default. */
  public static final class Builder {
    private final URI baseUri;
    private String apiKey;
    private Duration connectTimeout = Duration.ofSeconds(10);
    private Duration readTimeout = Duration.ofSeconds(60);
    private Duration requestTimeout = Duration.ofMinutes(10);
    private RetryPolicy retryPolicy = RetryPolicy.none();
    private Executor executor;

    private Builder(URI baseUri) {
      Objects.requireNonNull(baseUri, "baseUri");
      String scheme = baseUri.getScheme();
      if (!"http".equals(scheme) && !"https".equals(scheme)) {
        throw new IllegalArgumentException("baseUri must be http:// or https://, got " + baseUri);
      }
      this.baseUri = baseUri;
    }

    /** Sent as "Authorization: Bearer KEY" (servers started with --api-key require it). */
    public Builder apiKey(String apiKey) {
      if (apiKey != null && !apiKey.chars().allMatch(c -> c > 0x20 && c < 0x7f)) {
        throw new IllegalArgumentException("an API key must be printable ASCII without spaces");
      }
      this.apiKey = apiKey;
      return this;
    }

    /** Longest wait for the TCP connection (default 10 s). */
    public Builder connectTimeout(Duration timeout) {
      this.connectTimeout = positive(timeout, "connectTimeout");
      return this;
    }

    /**
     * Longest wait for the next bytes from the server: the first token of a stream, the gap
     * between tokens, or the whole answer of a blocking call (default 60 s; ZERO = none).
     */
    public Builder readTimeout(Duration timeout) {
      this.readTimeout = nonNegative(timeout, "readTimeout");
      return this;
    }

    /** Longest time for a whole call, retries included (default 10 min; ZERO = none). */
    public Builder requestTimeout(Duration timeout) {
      this.requestTimeout = nonNegative(timeout, "requestTimeout");
      return this;
    }

    /** Retries of 429/503 refusals (default: none). */
    public Builder retryPolicy(RetryPolicy policy) {
      this.retryPolicy = Objects.requireNonNull(policy, "policy");
      return this;
    }

    /**
     * Threads on which the HttpClient runs, and on which StreamListener and Flow subscriber
     * methods are called (default: the HttpClient's own pool).
     */
    public Builder executor(Executor executor) {
      this.executor = Objects.requireNonNull(executor, "executor");
      return this;
    }

    public LlamaClient build() {
      HttpClient.Builder http = HttpClient.newBuilder()
          // The server speaks HTTP/1.1; asking for h2c upgrades would only add a round trip.
          .version(HttpClient.Version.HTTP_1_1)
          .connectTimeout(connectTimeout)
          .followRedirects(HttpClient.Redirect.NEVER);
      if (executor != null) http.executor(executor);
      return new LlamaClient(new Transport(http.build(), baseUri, apiKey, readTimeout,
          requestTimeout, retryPolicy));
    }

    private static Duration positive(Duration d, String name) {
      Objects.requireNonNull(d, name);
      if (d.isNegative() || d.isZero()) throw new IllegalArgumentException(name + " must be > 0");
      return d;
    }

    private static Duration nonNegative(Duration d, String name) {
      Objects.requireNonNull(d, name);
      if (d.isNegative()) throw new IllegalArgumentException(name + " must be >= 0");
      return d;
    }
  }
}
