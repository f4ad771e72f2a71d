package io.llamaserve.client;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.function.Consumer;

/**
 * Incremental Server-Sent Events parser (the WHATWG event-stream format): feed it the body
 * bytes in chunks of any size and it emits each event once its terminating blank line has
 * arrived.
 *
 * <p>Lines are split on the bytes CR, LF or CRLF before decoding, so a UTF-8 character cut
 * between chunks is never decoded in halves (those bytes cannot occur inside a multi-byte
 * sequence). Comment lines (":...") and the id/retry fields are ignored. Not thread-safe:
 * one parser per stream, fed by one thread at a time.
 */
final class SseParser {
  /** A longer line is refused, so a broken server cannot make the client buffer forever. */
  static final int MAX_LINE_BYTES = 8 << 20;

  private final Consumer<SseEvent> sink;
  private byte[] line = new byte[256];
  private int lineLength;
  private boolean skipLf; // the previous line ended with CR; a following LF belongs to it
  private String eventType = "";
  private StringBuilder data; // null = no data line in this event yet

  SseParser(Consumer<SseEvent> sink) {
    this.sink = sink;
  }

  void feed(ByteBuffer buffer) {
    while (buffer.hasRemaining()) {
      byte b = buffer.get();
      if (skipLf) {
        skipLf = false;
        if (b == '\n') continue;
      }
      if (b == '\n' || b == '\r') {
        skipLf = b == '\r';
        endLine();
      } else {
        append(b);
      }
    }
  }

  void feed(byte[] bytes) {
    feed(ByteBuffer.wrap(bytes));
  }

  private void append(byte b) {
    if (lineLength == line.length) {
      if (line.length >= MAX_LINE_BYTES) {
        throw new LlamaConnectionException("an event-stream line is longer than " + MAX_LINE_BYTES
            + " bytes");
      }
      line = Arrays.copyOf(line, Math.min(line.length * 2, MAX_LINE_BYTES));
    }
    line[lineLength++] = b;
  }

  private void endLine() {
    String text = new String(line, 0, lineLength, StandardCharsets.UTF_8);
    lineLength = 0;
    if (text.isEmpty()) {
      dispatch();
      return;
    }
    if (text.charAt(0) == ':') return; // comment
    int colon = text.indexOf(':');
    String field = colon < 0 ? text : text.substring(0, colon);
    String value = "";
    if (colon >= 0) {
      int start = colon + 1;
      if (start < text.length() && text.charAt(start) == ' ') start++; // one space only
      value = text.substring(start);
    }
    switch (field) {
      case "event":
        eventType = value;
        break;
      case "data":
        if (data == null) {
          data = new StringBuilder(value);
        } else {
          data.append('\n').append(value);
        }
        break;
      default:
        break; // id, retry and unknown fields do not matter here
    }
  }

  private void dispatch() {
    if (data != null) sink.accept(new SseEvent(eventType, data.toString()));
    data = null;
    eventType = "";
  }
}
