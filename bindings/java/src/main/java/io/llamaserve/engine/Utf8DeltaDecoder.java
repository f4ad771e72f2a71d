package io.llamaserve.engine;

import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharsetDecoder;
import java.nio.charset.CoderResult;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;

/**
 * Decodes a stream of UTF-8 byte pieces into text, keeping an incomplete character at the
 * end of one piece until the next piece completes it. The engine already cuts its deltas at
 * character boundaries; this decoder makes the Java side correct even for pieces that are
 * not (and turns ill-formed bytes into U+FFFD instead of failing). Not thread-safe: one per
 * stream.
 */
public final class Utf8DeltaDecoder {
  private final CharsetDecoder decoder = StandardCharsets.UTF_8.newDecoder()
      .onMalformedInput(CodingErrorAction.REPLACE)
      .onUnmappableCharacter(CodingErrorAction.REPLACE);
  private final ByteBuffer carry = ByteBuffer.allocate(8); // at most 3 bytes of a character
  private CharBuffer out = CharBuffer.allocate(64);

  /** The text completed by {@code bytes}; "" when they only extend an open character. */
  public String decode(byte[] bytes) {
    return run(bytes, false);
  }

  /**
   * Ends the stream: the text of any bytes still held (an incomplete character becomes
   * U+FFFD). The decoder can then be used for a new stream.
   */
  public String finish() {
    String tail = run(new byte[0], true);
    decoder.reset();
    return tail;
  }

  private String run(byte[] bytes, boolean endOfInput) {
    ByteBuffer in;
    if (carry.position() > 0) {
      carry.flip();
      in = ByteBuffer.allocate(carry.remaining() + bytes.length);
      in.put(carry).put(bytes).flip();
      carry.clear();
    } else {
      in = ByteBuffer.wrap(bytes);
    }
    out.clear();
    while (true) {
      CoderResult result = decoder.decode(in, out, endOfInput);
      if (result.isOverflow()) {
        CharBuffer bigger = CharBuffer.allocate(out.capacity() * 2 + in.remaining());
        out.flip();
        bigger.put(out);
        out = bigger;
        continue;
      }
      break; // underflow: all consumed except an incomplete trailing character
    }
    if (endOfInput) {
      while (decoder.flush(out).isOverflow()) {
        CharBuffer bigger = CharBuffer.allocate(out.capacity() * 2);
        out.flip();
        bigger.put(out);
        out = bigger;
      }
    }
    carry.put(in); // the bytes of an incomplete character (fewer than 4)
    out.flip();
    return out.toString();
  }
}
