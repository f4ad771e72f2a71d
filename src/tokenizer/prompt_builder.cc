#include "tokenizer/prompt_builder.h"

namespace llamaserve {

Result<std::vector<int32_t>> encode_chat_prompt(const ChatTemplate& chat_template,
                                                const Tokenizer& tokenizer,
                                                const std::vector<ChatMessage>& messages,
                                                bool add_generation_prompt) {
  LS_ASSIGN_OR_RETURN(ChatPrompt prompt, chat_template.render(messages, add_generation_prompt));
  return tokenizer.encode_guarded(prompt.text, /*add_special=*/true, prompt.content_ranges);
}

std::vector<int32_t> encode_text_prompt(const Tokenizer& tokenizer, std::string_view text) {
  return tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/true);
}

}  // namespace llamaserve
