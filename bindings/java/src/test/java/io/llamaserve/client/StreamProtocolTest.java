package io.llamaserve.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.http.HttpHeaders;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class StreamProtocolTest {
  @Test
  void chatChunksGiveTextFinishReasonAndUsage() {
    StreamProtocol.State state = new StreamProtocol.State();
    List<String> pieces = new ArrayList<>();
    String head = "{\"id\":\"r1\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",";
    for (String data : List.of(
        head + "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
            + "\"finish_reason\":null}]}",
        head + "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"},\"finish_reason\":null}]}",
        head + "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo 🙂\"},\"finish_reason\":null}]}",
        head + "\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}",
        head + "\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,"
            + "\"total_tokens\":7}}",
        "[DONE]", "{\"ignored\": \"after the end\"}")) {
      StreamProtocol.CHAT.apply(new SseEvent("", data), state, pieces::add);
    }
    assertEquals(List.of("Hel", "lo 🙂"), pieces);
    assertTrue(state.done);
    assertEquals(new CompletionResult("r1", "m", "Hello 🙂", "length", new Usage(5, 2, 7)),
        state.result());
  }

  @Test
  void completionChunksUseText() {
    StreamProtocol.State state = new StreamProtocol.State();
    List<String> pieces = new ArrayList<>();
    StreamProtocol.COMPLETION.apply(new SseEvent("", "{\"id\":\"c\",\"model\":\"m\","
        + "\"choices\":[{\"index\":0,\"text\":\" 6,\",\"finish_reason\":null}]}"), state, pieces::add);
    assertEquals(List.of(" 6,"), pieces);
  }

  @Test
  void errorEventsBecomeTypedExceptions() {
    StreamProtocol.State state = new StreamProtocol.State();
    LlamaApiException e = assertThrows(LlamaApiException.class, () -> StreamProtocol.CHAT.apply(
        new SseEvent("", "{\"error\":{\"message\":\"too slow\",\"type\":\"timeout_error\","
            + "\"code\":\"request_timeout\",\"param\":null}}"), state, s -> {}));
    assertEquals(408, e.statusCode());
    assertEquals("request_timeout", e.code());

    RateLimitException limited = assertThrows(RateLimitException.class,
        () -> StreamProtocol.SIMPLE_CHAT.apply(new SseEvent("error", "{\"error\":{\"message\":"
            + "\"busy\",\"type\":\"rate_limit_error\",\"code\":\"queue_timeout\"}}"), state,
            s -> {}));
    assertEquals("busy", limited.getMessage().substring(limited.getMessage().indexOf(": ") + 2));
  }

  @Test
  void simpleChatTokensAndDone() {
    StreamProtocol.State state = new StreamProtocol.State();
    List<String> pieces = new ArrayList<>();
    StreamProtocol.SIMPLE_CHAT.apply(new SseEvent("token", "a\nb"), state, pieces::add);
    StreamProtocol.SIMPLE_CHAT.apply(new SseEvent("ping", "x"), state, pieces::add);
    StreamProtocol.SIMPLE_CHAT.apply(new SseEvent("done", "{\"id\":\"s\",\"model\":\"m\","
        + "\"finish_reason\":\"stop\",\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1,"
        + "\"total_tokens\":2},\"timings\":{}}"), state, pieces::add);
    assertEquals(List.of("a\nb"), pieces);
    assertEquals(new CompletionResult("s", "m", "a\nb", "stop", new Usage(1, 1, 2)),
        state.result());
  }

  @Test
  void malformedEventsAreConnectionErrors() {
    StreamProtocol.State state = new StreamProtocol.State();
    assertThrows(LlamaConnectionException.class,
        () -> StreamProtocol.CHAT.apply(new SseEvent("", "{not json"), state, s -> {}));
    assertThrows(LlamaConnectionException.class, () -> StreamProtocol.CHAT.apply(
        new SseEvent("", "{\"choices\":[{\"delta\":{\"content\":5}}]}"), state, s -> {}));
  }

  @Test
  void statusesMapToExceptionTypes() {
    HttpHeaders retry = HttpHeaders.of(Map.of("Retry-After", List.of("3")), (a, b) -> true);
    HttpHeaders none = HttpHeaders.of(Map.of(), (a, b) -> true);
    byte[] body = ("{\"error\":{\"message\":\"m\",\"type\":\"t\",\"code\":\"c\","
        + "\"param\":\"max_tokens\"}}").getBytes(StandardCharsets.UTF_8);
    assertInstanceOf(BadRequestException.class, ApiErrors.fromResponse(400, none, body));
    assertInstanceOf(AuthenticationException.class, ApiErrors.fromResponse(401, none, body));
    assertInstanceOf(NotFoundException.class, ApiErrors.fromResponse(404, none, body));
    assertInstanceOf(PayloadTooLargeException.class, ApiErrors.fromResponse(413, none, body));
    LlamaApiException limited = ApiErrors.fromResponse(429, retry, body);
    assertInstanceOf(RateLimitException.class, limited);
    assertEquals(Duration.ofSeconds(3), limited.retryAfter().orElseThrow());
    assertInstanceOf(ServiceUnavailableException.class, ApiErrors.fromResponse(503, none, body));
    LlamaApiException other = ApiErrors.fromResponse(500, none, body);
    assertEquals(LlamaApiException.class, other.getClass());
    assertEquals("max_tokens", other.param());
    assertEquals("c", other.code());
    assertEquals("t", other.type());

    LlamaApiException html = ApiErrors.fromResponse(502, none,
        "<html>bad gateway</html>".getBytes(StandardCharsets.UTF_8));
    assertTrue(html.getMessage().contains("bad gateway"));
    assertNull(html.code());
  }

  @Test
  void retryAfterAndRetryPolicy() {
    assertEquals(Duration.ofSeconds(2), ApiErrors.parseRetryAfter(" 2 "));
    assertNull(ApiErrors.parseRetryAfter("-1"));
    assertNull(ApiErrors.parseRetryAfter("soon"));
    assertEquals(Duration.ZERO, ApiErrors.parseRetryAfter("Wed, 21 Oct 2015 07:28:00 GMT"));

    RetryPolicy policy = RetryPolicy.retryAfter(2, Duration.ofSeconds(5));
    assertEquals(Duration.ofSeconds(3), policy.delayBeforeRetry(0, Duration.ofSeconds(3)));
    assertEquals(Duration.ofSeconds(1), policy.delayBeforeRetry(1, null)); // default delay
    assertNull(policy.delayBeforeRetry(2, Duration.ofSeconds(1))); // retries used up
    assertNull(policy.delayBeforeRetry(0, Duration.ofSeconds(6))); // longer than allowed
    assertNull(RetryPolicy.none().delayBeforeRetry(0, Duration.ZERO));
  }
}
