package io.llamaserve.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import org.junit.jupiter.api.Test;

class SseParserTest {
  private static List<SseEvent> parseInChunks(byte[] bytes, int... cuts) {
    List<SseEvent> events = new ArrayList<>();
    SseParser parser = new SseParser(events::add);
    int start = 0;
    for (int cut : cuts) {
      parser.feed(ByteBuffer.wrap(Arrays.copyOfRange(bytes, start, cut)));
      start = cut;
    }
    parser.feed(ByteBuffer.wrap(Arrays.copyOfRange(bytes, start, bytes.length)));
    return events;
  }

  @Test
  void parsesTheServersStreams() {
    String stream = "data: {\"a\":1}\n\n"
        + "event: token\ndata:  leading space kept\n\n"
        + "event: token\ndata: line one\ndata: line two\n\n"
        + ": a comment\n\n"
        + "event: done\ndata: {}\n\n"
        + "data: [DONE]\n\n";
    List<SseEvent> events = parseInChunks(stream.getBytes(StandardCharsets.UTF_8));
    assertEquals(List.of(new SseEvent("", "{\"a\":1}"),
        new SseEvent("token", " leading space kept"),
        new SseEvent("token", "line one\nline two"),
        new SseEvent("done", "{}"),
        new SseEvent("", "[DONE]")), events);
  }

  @Test
  void everySplitOfMultiByteTextGivesTheSameEvents() {
    // 2-, 3- and 4-byte UTF-8 characters; a chunk boundary may fall inside any of them.
    String stream = "event: token\ndata: é中文🙂🎉 ok\n\ndata: [DONE]\n\n";
    byte[] bytes = stream.getBytes(StandardCharsets.UTF_8);
    List<SseEvent> expected = List.of(new SseEvent("token", "é中文🙂🎉 ok"),
        new SseEvent("", "[DONE]"));
    for (int cut = 0; cut <= bytes.length; cut++) {
      assertEquals(expected, parseInChunks(bytes, cut), "cut at " + cut);
    }
    // and one byte at a time
    int[] everyByte = new int[bytes.length];
    for (int i = 0; i < bytes.length; i++) everyByte[i] = i;
    assertEquals(expected, parseInChunks(bytes, everyByte));
  }

  @Test
  void acceptsCrLfAndCrLineEnds() {
    for (String eol : List.of("\r\n", "\r", "\n")) {
      String stream = "event: token" + eol + "data: x" + eol + "data: y" + eol + eol
          + "data: z" + eol + eol;
      byte[] bytes = stream.getBytes(StandardCharsets.UTF_8);
      for (int cut = 0; cut <= bytes.length; cut++) {
        assertEquals(List.of(new SseEvent("token", "x\ny"), new SseEvent("", "z")),
            parseInChunks(bytes, cut), "eol " + eol.replace("\r", "CR").replace("\n", "LF"));
      }
    }
  }

  @Test
  void emptyDataIsAnEventButNoDataIsNot() {
    String stream = "event: token\ndata:\n\nevent: lonely\n\nid: 7\nretry: 10\ndata: after\n\n";
    assertEquals(List.of(new SseEvent("token", ""), new SseEvent("", "after")),
        parseInChunks(stream.getBytes(StandardCharsets.UTF_8)));
  }

  @Test
  void anIncompleteEventIsHeldBack() {
    assertEquals(List.of(), parseInChunks("data: partial\n".getBytes(StandardCharsets.UTF_8)));
  }

  @Test
  void refusesEndlessLines() {
    SseParser parser = new SseParser(event -> {});
    byte[] chunk = new byte[1 << 20];
    Arrays.fill(chunk, (byte) 'a');
    assertThrows(LlamaConnectionException.class, () -> {
      for (int i = 0; i < 9; i++) parser.feed(ByteBuffer.wrap(chunk));
    });
  }
}
