package io.llamaserve.json;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class JsonTest {
  @Test
  void parsesEveryValueKind() {
    Map<String, Object> value = Json.parseObject(
        " {\"s\":\"x\",\"i\":-42,\"f\":1.5e2,\"t\":true,\"n\":null,\"a\":[1,[],{}],\"o\":{\"k\":false}} ");
    assertEquals("x", value.get("s"));
    assertEquals(-42L, value.get("i"));
    assertEquals(150.0, value.get("f"));
    assertEquals(Boolean.TRUE, value.get("t"));
    assertTrue(value.containsKey("n"));
    assertNull(value.get("n"));
    assertEquals(List.of(1L, List.of(), Map.of()), value.get("a"));
    assertEquals(Map.of("k", false), value.get("o"));
    assertEquals(List.of("s", "i", "f", "t", "n", "a", "o"), new ArrayList<>(value.keySet()));
  }

  @Test
  void numbersKeepTheirPrecision() {
    assertEquals(Long.MAX_VALUE, Json.parse("9223372036854775807"));
    assertEquals(Long.MIN_VALUE, Json.parse("-9223372036854775808"));
    assertEquals(new BigInteger("9223372036854775808"), Json.parse("9223372036854775808"));
    assertEquals(0L, Json.parse("0"));
    assertEquals(-0.25, Json.parse("-0.25"));
    assertEquals(1e-7, Json.parse("1E-7"));
  }

  @Test
  void decodesEscapesAndSurrogatePairs() {
    assertEquals("a\"b\\c/\b\f\n\r\t", Json.parse("\"a\\\"b\\\\c\\/\\b\\f\\n\\r\\t\""));
    assertEquals("é中🙂", Json.parse("\"\\u00e9\\u4E2D\\ud83d\\ude42\""));
    assertEquals("é中🙂", Json.parse("\"é中🙂\"")); // raw UTF-16 text passes through
  }

  @Test
  void writesWhatItReads() {
    Map<String, Object> value = new LinkedHashMap<>();
    value.put("text", "line\nquote\" back\\ tab\t ctrl\u0001 中文 🙂 \u2028");
    value.put("int", 7);
    value.put("long", -9007199254740993L);
    value.put("double", 0.1);
    value.put("whole", 2.0);
    value.put("null", null);
    value.put("list", Arrays.asList(true, null, "x"));
    String text = Json.write(value);
    assertEquals("{\"text\":\"line\\nquote\\\" back\\\\ tab\\t ctrl\\u0001 中文 🙂 \\u2028\","
        + "\"int\":7,\"long\":-9007199254740993,\"double\":0.1,\"whole\":2,\"null\":null,"
        + "\"list\":[true,null,\"x\"]}", text);
    Map<String, Object> back = Json.parseObject(text);
    assertEquals(value.get("text"), back.get("text"));
    assertEquals(-9007199254740993L, back.get("long"));
    assertEquals(0.1, back.get("double"));
    assertEquals(Arrays.asList(true, null, "x"), back.get("list"));
  }

  @Test
  void refusesMalformedText() {
    String[] bad = {"", " ", "{", "}", "[1,]", "[1 2]", "{\"a\"}", "{\"a\":1,}", "{a:1}",
        "'x'", "\"unterminated", "\"bad \\x escape\"", "\"\\u12\"", "\"\\uZZZZ\"", "01",
        "1.", ".5", "-", "1e", "+1", "tru", "nul", "[1] x", "\"tab\tinside\"", "NaN",
        "{\"a\":1}}"};
    for (String text : bad) {
      assertThrows(JsonException.class, () -> Json.parse(text), () -> "accepted: " + text);
    }
  }

  @Test
  void limitsNesting() {
    String deep = "[".repeat(Json.MAX_DEPTH + 2) + "]".repeat(Json.MAX_DEPTH + 2);
    JsonException e = assertThrows(JsonException.class, () -> Json.parse(deep));
    assertTrue(e.getMessage().contains("nesting"), e.getMessage());
    String ok = "[".repeat(100) + "]".repeat(100);
    assertInstanceOf(List.class, Json.parse(ok));
  }

  @Test
  void refusesValuesJsonCannotHold() {
    assertThrows(JsonException.class, () -> Json.write(Double.NaN));
    assertThrows(JsonException.class, () -> Json.write(Double.POSITIVE_INFINITY));
    assertThrows(JsonException.class, () -> Json.write(new Object()));
    assertThrows(JsonException.class, () -> Json.write(Map.of(1, "x")));
    assertThrows(JsonException.class, () -> Json.parseObject("[1]"));
  }

  @Test
  void parsedContainersAreImmutable() {
    Map<String, Object> value = Json.parseObject("{\"a\":[1]}");
    assertThrows(UnsupportedOperationException.class, () -> value.put("b", 1));
    @SuppressWarnings("unchecked")
    List<Object> list = (List<Object>) value.get("a");
    assertThrows(UnsupportedOperationException.class, () -> list.add(2));
  }
}
