package io.llamaserve.json;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small, strict JSON (RFC 8259) reader and writer for the client's request and response
 * bodies, so that the library has no runtime dependency.
 *
 * <p>Values map to Java as: object → {@code Map<String, Object>} (insertion-ordered, unmodifiable),
 * array → {@code List<Object>} (unmodifiable), string → {@code String}, number → {@code Long}
 * when it is an integer that fits, {@code BigInteger} for larger integers, otherwise
 * {@code Double}, true/false → {@code Boolean}, null → {@code null}.
 *
 * <p>The writer accepts those types plus any {@code Number}, {@code CharSequence}, {@code
 * Map} with string keys and {@code Iterable}; it rejects NaN and infinities, which JSON cannot
 * represent.
 */
public final class Json {
  /** Deeper nesting is refused, so hostile input cannot exhaust the stack. */
  public static final int MAX_DEPTH = 512;

  private Json() {}

  /** Parses one JSON text (surrounding whitespace allowed). */
  public static Object parse(String text) {
    Reader reader = new Reader(text);
    reader.skipWhitespace();
    Object value = reader.readValue(0);
    reader.skipWhitespace();
    if (reader.pos != text.length()) throw reader.error("unexpected text after the JSON value");
    return value;
  }

  /** Parses a JSON text that must be an object. */
  @SuppressWarnings("unchecked")
  public static Map<String, Object> parseObject(String text) {
    Object value = parse(text);
    if (!(value instanceof Map)) {
      throw new JsonException("expected a JSON object, got " + typeName(value));
    }
    return (Map<String, Object>) value;
  }

  /** The compact JSON text of a value. */
  public static String write(Object value) {
    StringBuilder out = new StringBuilder();
    writeValue(out, value, 0);
    return out.toString();
  }

  /** "an object", "a string", ... for error messages. */
  public static String typeName(Object value) {
    if (value == null) return "null";
    if (value instanceof Map) return "an object";
    if (value instanceof List) return "an array";
    if (value instanceof String) return "a string";
    if (value instanceof Number) return "a number";
    if (value instanceof Boolean) return "a boolean";
    return value.getClass().getSimpleName();
  }

  // ---------------------------------------------------------------------------------------
  // Writing

  private static void writeValue(StringBuilder out, Object value, int depth) {
    if (depth > MAX_DEPTH) throw new JsonException("value nested deeper than " + MAX_DEPTH);
    if (value == null) {
      out.append("null");
    } else if (value instanceof CharSequence) {
      writeString(out, value.toString());
    } else if (value instanceof Boolean) {
      out.append(value.toString());
    } else if (value instanceof Double || value instanceof Float) {
      double d = ((Number) value).doubleValue();
      if (Double.isNaN(d) || Double.isInfinite(d)) {
        throw new JsonException("JSON cannot represent " + d);
      }
      if (d == Math.rint(d) && Math.abs(d) < 1e15) {
        out.append((long) d); // 1.0 -> 1: same number, and what integer fields expect
      } else {
        out.append(d);
      }
    } else if (value instanceof BigDecimal) {
      out.append(((BigDecimal) value).toString());
    } else if (value instanceof Number) {
      out.append(value.toString()); // Long, Integer, Short, Byte, BigInteger
    } else if (value instanceof Map) {
      out.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> entry : ((Map<?, ?>) value).entrySet()) {
        if (!(entry.getKey() instanceof String)) {
          throw new JsonException("object keys must be strings, got " + entry.getKey());
        }
        if (!first) out.append(',');
        first = false;
        writeString(out, (String) entry.getKey());
        out.append(':');
        writeValue(out, entry.getValue(), depth + 1);
      }
      out.append('}');
    } else if (value instanceof Iterable) {
      out.append('[');
      boolean first = true;
      for (Object item : (Iterable<?>) value) {
        if (!first) out.append(',');
        first = false;
        writeValue(out, item, depth + 1);
      }
      out.append(']');
    } else {
      throw new JsonException("cannot write " + value.getClass().getName() + " as JSON");
    }
  }

  private static final char[] HEX = "0123456789abcdef".toCharArray();

  private static void writeString(StringBuilder out, String s) {
    out.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"': out.append("\\\""); break;
        case '\\': out.append("\\\\"); break;
        case '\n': out.append("\\n"); break;
        case '\r': out.append("\\r"); break;
        case '\t': out.append("\\t"); break;
        case '\b': out.append("\\b"); break;
        case '\f': out.append("\\f"); break;
        default:
          // Control characters must be escaped; U+2028/2029 are escaped too so the text is
          // also safe inside JavaScript. Everything else (surrogate pairs included) is
          // written as is and encoded as UTF-8 by the caller.
          if (c < 0x20 || c == '\u2028' || c == '\u2029') {
            out.append("\\u").append(HEX[c >> 12]).append(HEX[(c >> 8) & 15])
                .append(HEX[(c >> 4) & 15]).append(HEX[c & 15]);
          } else {
            out.append(c);
          }
      }
    }
    out.append('"');
  }

  // ---------------------------------------------------------------------------------------
  // Reading

  private static final class Reader {
    final String text;
    int pos;

    Reader(String text) {
      if (text == null) throw new JsonException("no JSON text (null)");
      this.text = text;
    }

    JsonException error(String message) {
      return new JsonException(message + " at offset " + pos);
    }

    void skipWhitespace() {
      while (pos < text.length()) {
        char c = text.charAt(pos);
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') return;
        pos++;
      }
    }

    Object readValue(int depth) {
      if (depth > MAX_DEPTH) throw error("nesting deeper than " + MAX_DEPTH + " levels");
      if (pos >= text.length()) throw error("unexpected end of input");
      char c = text.charAt(pos);
      switch (c) {
        case '{': return readObject(depth);
        case '[': return readArray(depth);
        case '"': return readString();
        case 't': expectWord("true"); return Boolean.TRUE;
        case 'f': expectWord("false"); return Boolean.FALSE;
        case 'n': expectWord("null"); return null;
        default:
          if (c == '-' || (c >= '0' && c <= '9')) return readNumber();
          throw error("unexpected character '" + c + "'");
      }
    }

    void expectWord(String word) {
      if (!text.startsWith(word, pos)) throw error("expected '" + word + "'");
      pos += word.length();
    }

    Map<String, Object> readObject(int depth) {
      pos++; // '{'
      Map<String, Object> out = new LinkedHashMap<>();
      skipWhitespace();
      if (pos < text.length() && text.charAt(pos) == '}') {
        pos++;
        return Collections.unmodifiableMap(out);
      }
      while (true) {
        skipWhitespace();
        if (pos >= text.length() || text.charAt(pos) != '"') throw error("expected a string key");
        String key = readString();
        skipWhitespace();
        if (pos >= text.length() || text.charAt(pos) != ':') throw error("expected ':'");
        pos++;
        skipWhitespace();
        out.put(key, readValue(depth + 1)); // a repeated key keeps the last value
        skipWhitespace();
        if (pos >= text.length()) throw error("unterminated object");
        char c = text.charAt(pos++);
        if (c == '}') return Collections.unmodifiableMap(out);
        if (c != ',') {
          pos--;
          throw error("expected ',' or '}'");
        }
      }
    }

    List<Object> readArray(int depth) {
      pos++; // '['
      List<Object> out = new ArrayList<>();
      skipWhitespace();
      if (pos < text.length() && text.charAt(pos) == ']') {
        pos++;
        return Collections.unmodifiableList(out);
      }
      while (true) {
        skipWhitespace();
        out.add(readValue(depth + 1));
        skipWhitespace();
        if (pos >= text.length()) throw error("unterminated array");
        char c = text.charAt(pos++);
        if (c == ']') return Collections.unmodifiableList(out);
        if (c != ',') {
          pos--;
          throw error("expected ',' or ']'");
        }
      }
    }

    String readString() {
      pos++; // opening quote
      StringBuilder out = null; // only needed once an escape appears
      int runStart = pos;
      while (true) {
        if (pos >= text.length()) throw error("unterminated string");
        char c = text.charAt(pos);
        if (c == '"') {
          String tail = text.substring(runStart, pos);
          pos++;
          return out == null ? tail : out.append(tail).toString();
        }
        if (c < 0x20) throw error("unescaped control character in a string");
        if (c != '\\') {
          pos++;
          continue;
        }
        if (out == null) out = new StringBuilder();
        out.append(text, runStart, pos);
        pos++;
        if (pos >= text.length()) throw error("unterminated escape");
        char e = text.charAt(pos++);
        switch (e) {
          case '"': out.append('"'); break;
          case '\\': out.append('\\'); break;
          case '/': out.append('/'); break;
          case 'b': out.append('\b'); break;
          case 'f': out.append('\f'); break;
          case 'n': out.append('\n'); break;
          case 'r': out.append('\r'); break;
          case 't': out.append('\t'); break;
          case 'u': out.append(readHex4()); break; // surrogate pairs arrive as two escapes
          default:
            pos--;
            throw error("invalid escape '\\" + e + "'");
        }
        runStart = pos;
      }
    }

    char readHex4() {
      if (pos + 4 > text.length()) throw error("truncated \\u escape");
      int value = 0;
      for (int i = 0; i < 4; i++) {
        int digit = Character.digit(text.charAt(pos), 16);
        if (digit < 0) throw error("invalid hex digit in \\u escape");
        value = value * 16 + digit;
        pos++;
      }
      return (char) value;
    }

    Number readNumber() {
      int start = pos;
      if (text.charAt(pos) == '-') pos++;
      if (pos >= text.length()) throw error("truncated number");
      if (text.charAt(pos) == '0') {
        pos++;
      } else if (isDigit()) {
        while (isDigit()) pos++;
      } else {
        throw error("expected a digit");
      }
      boolean integral = true;
      if (pos < text.length() && text.charAt(pos) == '.') {
        integral = false;
        pos++;
        if (!isDigit()) throw error("expected a digit after '.'");
        while (isDigit()) pos++;
      }
      if (pos < text.length() && (text.charAt(pos) == 'e' || text.charAt(pos) == 'E')) {
        integral = false;
        pos++;
        if (pos < text.length() && (text.charAt(pos) == '+' || text.charAt(pos) == '-')) pos++;
        if (!isDigit()) throw error("expected a digit in the exponent");
        while (isDigit()) pos++;
      }
      String literal = text.substring(start, pos);
      if (!integral) return Double.parseDouble(literal);
      // Up to 18 digits always fit in a long; longer ones may not.
      if (literal.length() <= 18) return Long.parseLong(literal);
      BigInteger big = new BigInteger(literal);
      return big.bitLength() < 64 ? (Number) big.longValue() : big;
    }

    boolean isDigit() {
      return pos < text.length() && text.charAt(pos) >= '0' && text.charAt(pos) <= '9';
    }
  }
}
