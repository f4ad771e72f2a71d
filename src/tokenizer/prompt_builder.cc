#include "tokenizer/prompt_builder.h"

namespace llamaserve {

Result<std::vector<int32_t>> encode_chat_prompt(const ChatTemplate& chat_template,
                                                const Tokenizer& tokenizer,
                                                const std::vector<ChatMessage>& messages,
                                                bool add_generation_prompt,
                                                const ChatRenderExtras& extras) {
  LS_ASSIGN_OR_RETURN(ChatPrompt prompt,
                      chat_template.render(messages, add_generation_prompt, extras));
  if (tokenizer.add_bos() && tokenizer.bos_id()) {
    const std::string_view bos = tokenizer.token_piece(*tokenizer.bos_id());
    const bool bos_is_client_text =
        !prompt.content_ranges.empty() && prompt.content_ranges.front().begin < bos.size();
    if (!bos.empty() && std::string_view(prompt.text).starts_with(bos) && !bos_is_client_text) {
      prompt.text.erase(0, bos.size());
      for (TextRange& range : prompt.content_ranges) {
        range.begin -= bos.size();
        range.end -= bos.size();
      }
    }
  }
  return tokenizer.encode_guarded(prompt.text, /*add_special=*/true, prompt.content_ranges);
}

std::vector<int32_t> encode_text_prompt(const Tokenizer& tokenizer, std::string_view text) {
  return tokenizer.encode(text, /*add_special=*/true, /*parse_special=*/true);
}

}  // namespace llamaserve
