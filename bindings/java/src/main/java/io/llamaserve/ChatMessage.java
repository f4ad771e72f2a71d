package io.llamaserve;

import java.util.Objects;

/**
 * One message of a conversation, for both the HTTP client and the embedded engine.
 *
 * @param role "system", "user", "assistant" (or "tool" where the chat format has it)
 * @param content the message text
 */
public record ChatMessage(String role, String content) {
  public ChatMessage {
    Objects.requireNonNull(role, "role");
    Objects.requireNonNull(content, "content");
  }

  public static ChatMessage system(String content) {
    return new ChatMessage("system", content);
  }

  public static ChatMessage user(String content) {
    return new ChatMessage("user", content);
  }

  public static ChatMessage assistant(String content) {
    return new ChatMessage("assistant", content);
  }
}
