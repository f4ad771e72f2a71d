#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

namespace llamaserve {
namespace {

// SmolLM2-135M-Instruct's tokenizer.chat_template, verbatim.
constexpr std::string_view kSmolLm2Template =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
    "Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\n' }}{% endif %}";

// A plain ChatML template (no built-in system prompt).
constexpr std::string_view kChatMlTemplate =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] "
    "+ '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|im_start|>assistant\\n' "
    "}}{% endif %}";

constexpr std::string_view kLlama3Template =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
    "trim "
    "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif "
    "%}{{ "
    "content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}";

constexpr std::string_view kLlama2Template =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
    "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set "
    "system_message = false %}{% endif %}{% for message in loop_messages %}{% if loop.index0 == 0 "
    "and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% "
    "endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' "
    "[/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + "
    "eos_token }}{% endif %}{% endfor %}";

const std::vector<ChatMessage> kConversation = {
    {"system", "Be brief."},
    {"user", " Hi there "},
    {"assistant", "Hello! "},
    {"user", "What is 2+2?"},
};

std::string apply(const ChatTemplate& tmpl, const std::vector<ChatMessage>& messages, bool gen) {
  Result<ChatPrompt> out = tmpl.render(messages, gen);
  EXPECT_TRUE(out.is_ok()) << out.status().to_string();
  return out.is_ok() ? out->text : std::string();
}

TEST(ChatTemplate, DetectsFormats) {
  EXPECT_EQ(ChatTemplate::detect(kSmolLm2Template)->kind(), ChatTemplateKind::kChatML);
  EXPECT_EQ(ChatTemplate::detect(kChatMlTemplate)->kind(), ChatTemplateKind::kChatML);
  EXPECT_EQ(ChatTemplate::detect(kLlama3Template)->kind(), ChatTemplateKind::kLlama3);
  EXPECT_EQ(ChatTemplate::detect(kLlama2Template)->kind(), ChatTemplateKind::kLlama2);
  EXPECT_EQ(ChatTemplate::detect("").status().code(), StatusCode::kNotFound);
  EXPECT_EQ(ChatTemplate::detect("{{ messages }}").status().code(), StatusCode::kUnsupported);
}

TEST(ChatTemplate, DefaultSystemPromptOnlyWhenTheTemplateHasOne) {
  EXPECT_EQ(ChatTemplate::detect(kSmolLm2Template)->default_system_prompt(),
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  EXPECT_EQ(ChatTemplate::detect(kChatMlTemplate)->default_system_prompt(), "");
  // Escaped newlines inside a Jinja string literal count too.
  const std::string escaped =
      "{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are "
      "a helpful assistant.<|im_end|>\\n' }}{% endif %}";
  EXPECT_EQ(ChatTemplate::detect(escaped)->default_system_prompt(), "You are a helpful assistant.");
}

TEST(ChatTemplate, ChatMlWithDefaultSystem) {
  const ChatTemplate smol = *ChatTemplate::detect(kSmolLm2Template);
  EXPECT_EQ(apply(smol, {{"user", "Hi"}}, true),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  // A conversation with its own system message replaces the default; content is verbatim.
  EXPECT_EQ(apply(smol, kConversation, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi there <|im_end|>\n"
            "<|im_start|>assistant\nHello! <|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n");
}

TEST(ChatTemplate, ChatMlByName) {
  const ChatTemplate chatml = *ChatTemplate::from_name("chatml");
  EXPECT_EQ(apply(chatml, {{"user", "Hi"}}, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(apply(chatml, {{"user", "Hi"}, {"tool", "42"}}, false),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>tool\n42<|im_end|>\n");
}

TEST(ChatTemplate, Llama3) {
  const ChatTemplate llama3 = *ChatTemplate::from_name("llama3");
  EXPECT_EQ(apply(llama3, kConversation, true),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nWhat is 2+2?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(apply(llama3, {{"user", "x"}}, false),
            "<|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>");
}

TEST(ChatTemplate, Llama2) {
  const ChatTemplate llama2 = *ChatTemplate::from_name("llama2");
  EXPECT_EQ(apply(llama2, kConversation, true),
            // The reference template strips the system block + user text as a whole, so the
            // user's leading space stays.
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi there [/INST] Hello! </s>"
            "<s>[INST] What is 2+2? [/INST]");
  EXPECT_EQ(apply(llama2, {{"user", "Hi"}}, false), "[INST] Hi [/INST]");
  EXPECT_EQ(llama2.render({{"user", "a"}, {"system", "late"}}, true).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(ChatTemplate, RenderMarksMessageContents) {
  for (std::string_view name : {"llama2", "llama3", "chatml"}) {
    const ChatTemplate tmpl = *ChatTemplate::from_name(name);
    const std::vector<ChatMessage> messages = {
        {"system", "Sys <|im_end|>"}, {"user", " Hi <|eot_id|> "}, {"assistant", "[/INST] ok"}};
    const Result<ChatPrompt> prompt = tmpl.render(messages, true);
    ASSERT_TRUE(prompt.is_ok()) << prompt.status().to_string();
    std::vector<std::string> contents;
    size_t previous_end = 0;
    for (const TextRange& range : prompt->content_ranges) {
      EXPECT_LE(previous_end, range.begin);
      EXPECT_LT(range.begin, range.end);
      contents.push_back(prompt->text.substr(range.begin, range.end - range.begin));
      previous_end = range.end;
    }
    // Contents as the format trims them (Llama 2 keeps the user's leading space after <<SYS>>).
    const std::vector<std::string> expected =
        name == "chatml"
            ? std::vector<std::string>{"Sys <|im_end|>", " Hi <|eot_id|> ", "[/INST] ok"}
        : name == "llama3"
            ? std::vector<std::string>{"Sys <|im_end|>", "Hi <|eot_id|>", "[/INST] ok"}
            : std::vector<std::string>{"Sys <|im_end|>", " Hi <|eot_id|>", "[/INST] ok"};
    EXPECT_EQ(contents, expected) << name;
  }
}

TEST(ChatTemplate, Errors) {
  for (std::string_view name : {"llama2", "llama3", "chatml"}) {
    const ChatTemplate tmpl = *ChatTemplate::from_name(name);
    EXPECT_EQ(tmpl.name(), name);
    EXPECT_EQ(tmpl.render({}, true).status().code(), StatusCode::kInvalidArgument) << name;
    const Result<ChatPrompt> unknown = tmpl.render({{"user", "a"}, {"wizard", "b"}}, true);
    ASSERT_FALSE(unknown.is_ok());
    EXPECT_EQ(unknown.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(unknown.status().message().find("wizard"), std::string::npos);
    EXPECT_NE(unknown.status().message().find("message 1"), std::string::npos);
  }
  EXPECT_EQ(ChatTemplate::from_name("jinja").status().code(), StatusCode::kInvalidArgument);
}

TEST(ChatTemplate, OverrideByName) {
  // Naming the model's own format keeps its default system prompt; another format replaces it.
  EXPECT_EQ(ChatTemplate::for_model(kSmolLm2Template, "chatml")->default_system_prompt().empty(),
            false);
  EXPECT_EQ(ChatTemplate::for_model(kSmolLm2Template, "llama3")->kind(), ChatTemplateKind::kLlama3);
  EXPECT_EQ(ChatTemplate::for_model("", "llama2")->kind(), ChatTemplateKind::kLlama2);
  EXPECT_FALSE(ChatTemplate::for_model("", "").is_ok());
}

TEST(ChatTemplate, TheModelsOwnTemplateIsRendered) {
  // Without a name, the model's template itself is rendered (by the Jinja engine).
  EXPECT_EQ(ChatTemplate::for_model(kLlama3Template)->kind(), ChatTemplateKind::kJinja);
  EXPECT_EQ(ChatTemplate::for_model(kSmolLm2Template)->name(), "jinja");
  // SmolLM2's own template gives the text of the built-in ChatML format with its default
  // system prompt, with and without a system message and generation prompt.
  const ChatTemplate own = *ChatTemplate::for_model(kSmolLm2Template);
  const ChatTemplate builtin = *ChatTemplate::detect(kSmolLm2Template);
  const std::vector<ChatMessage> no_system(kConversation.begin() + 1, kConversation.end());
  for (const auto* messages : {&kConversation, &no_system}) {
    for (const bool gen : {true, false}) {
      const Result<ChatPrompt> a = own.render(*messages, gen);
      const Result<ChatPrompt> b = builtin.render(*messages, gen);
      ASSERT_TRUE(a.is_ok() && b.is_ok()) << a.status().to_string();
      EXPECT_EQ(a->text, b->text);
      // Every message content is client text in both.
      for (const TextRange& range : b->content_ranges) {
        bool covered = false;
        for (const TextRange& r : a->content_ranges) {
          covered = covered || (r.begin <= range.begin && range.end <= r.end);
        }
        EXPECT_TRUE(covered) << b->text.substr(range.begin, range.end - range.begin);
      }
    }
  }
}

TEST(ChatTemplate, ModelTemplateVariablesAndErrors) {
  const Result<ChatTemplate> tmpl = ChatTemplate::from_jinja(
      "{{ bos_token }}{% for m in messages %}{% if m.role == 'critic' %}"
      "{{ raise_exception('no critics here') }}{% endif %}[{{ m.role }}:{{ m.content }}"
      "{% if m.tool_calls %} calls {{ m.tool_calls[0].function.name }}{% endif %}]{% endfor %}"
      "{% if tools %} tools={{ tools|length }}{% endif %}{{ eos_token if not add_generation_prompt "
      "}}{{ mood }}",
      {"<s>", "</s>"});
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().to_string();
  ChatMessage call{"assistant", ""};
  call.fields = {{"content", nullptr},
                 {"tool_calls", {{{"function", {{"name", "lookup"}, {"arguments", "{}"}}}}}}};
  ChatRenderExtras extras;
  extras.tools = nlohmann::ordered_json::array({{{"type", "function"}}});
  extras.variables = {{"mood", " calm"}};
  const Result<ChatPrompt> out = tmpl->render({{"user", "hi"}, call}, false, extras);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ(out->text, "<s>[user:hi][assistant:None calls lookup] tools=1</s> calm");

  const Result<ChatPrompt> refused = tmpl->render({{"critic", "meh"}}, true);
  EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
  // Roles outside the API's are refused before the template sees them (the template's own
  // raise_exception for them is covered by tests/py/test_chat_templates.py and the jinja tests).
  EXPECT_EQ(refused.status().message(),
            "message 0: unknown role 'critic' for the jinja chat format (expected system, user, "
            "assistant, tool, ipython)");
}

TEST(ChatTemplate, ATemplateThatDoesNotParseFallsBackToABuiltIn) {
  const std::string broken = "{% for message in messages %}<|im_start|>{{ message.content }}";
  EXPECT_EQ(ChatTemplate::from_jinja(broken, {}).status().code(), StatusCode::kInvalidArgument);
  const Result<ChatTemplate> fallback = ChatTemplate::for_model(broken);
  ASSERT_TRUE(fallback.is_ok());
  EXPECT_EQ(fallback->kind(), ChatTemplateKind::kChatML);
  EXPECT_EQ(ChatTemplate::for_model("{% if %}").status().code(), StatusCode::kUnsupported);
}

}  // namespace
}  // namespace llamaserve
