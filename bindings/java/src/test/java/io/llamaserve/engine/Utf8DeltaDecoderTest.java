package io.llamaserve.engine;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Random;
import org.junit.jupiter.api.Test;

class Utf8DeltaDecoderTest {
  private static final String TEXT = "Grüße, 你好，世界！🙂🎉 𝄞 done";

  @Test
  void everyTwoWaySplitDecodesToTheSameText() {
    byte[] bytes = TEXT.getBytes(StandardCharsets.UTF_8);
    for (int cut = 0; cut <= bytes.length; cut++) {
      Utf8DeltaDecoder decoder = new Utf8DeltaDecoder();
      String first = decoder.decode(Arrays.copyOfRange(bytes, 0, cut));
      String second = decoder.decode(Arrays.copyOfRange(bytes, cut, bytes.length));
      assertEquals(TEXT, first + second + decoder.finish(), "cut at byte " + cut);
      // A piece never ends inside a character: no unpaired surrogate at its end.
      if (!first.isEmpty()) {
        assertEquals(false, Character.isHighSurrogate(first.charAt(first.length() - 1)));
      }
    }
  }

  @Test
  void byteByByteAndRandomPieces() {
    byte[] bytes = TEXT.getBytes(StandardCharsets.UTF_8);
    Utf8DeltaDecoder decoder = new Utf8DeltaDecoder();
    StringBuilder out = new StringBuilder();
    for (byte b : bytes) out.append(decoder.decode(new byte[] {b}));
    assertEquals(TEXT, out.append(decoder.finish()).toString());

    Random random = new Random(42);
    for (int round = 0; round < 200; round++) {
      out.setLength(0);
      int pos = 0;
      while (pos < bytes.length) {
        int len = Math.min(bytes.length - pos, random.nextInt(6));
        out.append(decoder.decode(Arrays.copyOfRange(bytes, pos, pos + len)));
        pos += len;
      }
      assertEquals(TEXT, out.append(decoder.finish()).toString(), "round " + round);
    }
  }

  @Test
  void illFormedBytesBecomeReplacementCharacters() {
    Utf8DeltaDecoder decoder = new Utf8DeltaDecoder();
    // 0xFF is never UTF-8; 0xE4 0xBD starts a 3-byte character that 'A' interrupts.
    String text = decoder.decode(new byte[] {'a', (byte) 0xFF, 'b', (byte) 0xE4, (byte) 0xBD})
        + decoder.decode(new byte[] {'A'}) + decoder.finish();
    assertEquals("a\uFFFDb\uFFFDA", text);
  }

  @Test
  void anIncompleteCharacterAtTheEndIsReplacedAndTheDecoderIsReusable() {
    Utf8DeltaDecoder decoder = new Utf8DeltaDecoder();
    byte[] smile = "🙂".getBytes(StandardCharsets.UTF_8);
    assertEquals("x", decoder.decode(new byte[] {'x', smile[0], smile[1]}));
    assertEquals("\uFFFD", decoder.finish());
    assertEquals("🙂", decoder.decode(smile) + decoder.finish());
  }

  @Test
  void longPiecesGrowTheBuffer() {
    String big = "漢字🙂".repeat(5000);
    Utf8DeltaDecoder decoder = new Utf8DeltaDecoder();
    assertEquals(big, decoder.decode(big.getBytes(StandardCharsets.UTF_8)) + decoder.finish());
  }
}
