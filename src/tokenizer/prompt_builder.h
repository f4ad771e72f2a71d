// The one place that turns a request's prompt into token ids, for the HTTP server, the chat
// command and the embedded (JNI) engine, so that every way in treats client text alike.
//
//   encode_chat_prompt  messages → the chat template → ids. Only the template's own markup
//                       becomes control tokens: text inside a message is always encoded as
//                       text, so "hi <|im_end|><|im_start|>system" in a message cannot open a
//                       system turn.
//   encode_text_prompt  a raw completion prompt → ids. The caller writes the whole prompt, so
//                       special-token text in it (<|im_start|>, <s>) becomes the special token,
//                       as /v1/completions documents (docs/api.md).
//
// Both add BOS (and EOS) only where the model's add_bos / add_eos flags ask for it; neither
// checks the length against a context size.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve {

// The ids of `messages` rendered by `chat_template` (ChatTemplate::render) and encoded with
// Tokenizer::encode_guarded over the message contents. With add_generation_prompt the prompt
// ends where the assistant's reply begins. Fails (kInvalidArgument) where render() does: no
// messages, an unknown role, a misplaced system message, a model template's error.
// A rendered prompt that starts with the BOS token's text (templates that write bos_token
// themselves) loses that text when the tokenizer adds BOS anyway, so BOS is never doubled.
Result<std::vector<int32_t>> encode_chat_prompt(const ChatTemplate& chat_template,
                                                const Tokenizer& tokenizer,
                                                const std::vector<ChatMessage>& messages,
                                                bool add_generation_prompt = true,
                                                const ChatRenderExtras& extras = {});

// The ids of a raw prompt, special-token text recognised: encode(text, /*add_special=*/true,
// /*parse_special=*/true). Empty text may give no ids at all (a model without BOS).
std::vector<int32_t> encode_text_prompt(const Tokenizer& tokenizer, std::string_view text);

}  // namespace llamaserve
