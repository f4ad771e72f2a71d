// llamaserve chat: talk to a model through its chat template.
//
//   llamaserve chat -m MODEL [-p MESSAGE] [--system S] [--template NAME] [-n N] [--temp T] ...
//
// With -p: answers the one message and exits. Without: an interactive conversation on stdin,
// one user message per line, keeping the history (oldest turns are dropped when the context
// fills up); EOF or "/exit" ends it. Replies stream to stdout; the "> " prompt goes to stderr.
#include <unistd.h>

#include <cstdio>
#include <iostream>

#include "cli/command.h"
#include "cli/generation_options.h"
#include "service/model_service.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/prompt_builder.h"
#include "tokenizer/tokenizer.h"

namespace llamaserve::cli {
namespace {

struct ChatOptions {
  GenerationOptions generation;
  std::string message;
  std::string system;
};

class ChatSession {
 public:
  ChatSession(const ChatOptions& options, std::unique_ptr<ModelService> model,
              ChatTemplate chat_template)
      : options_(options), model_(std::move(model)), template_(std::move(chat_template)) {
    if (!options_.system.empty()) history_.push_back({"system", options_.system});
  }

  // Answers `message`, streaming the reply to stdout, and keeps both in the history.
  Status turn(const std::string& message) {
    history_.push_back({"user", message});
    auto prompt = fit_prompt();
    if (!prompt.is_ok()) {
      history_.pop_back();
      return prompt.status();
    }
    GenerationRequest request;
    request.id = "chat";
    request.prompt_tokens = std::move(prompt).value();
    auto budget = budget_new_tokens(options_.generation, request.prompt_tokens.size(),
                                    model_->engines().max_context());
    if (!budget.is_ok()) {
      history_.pop_back();
      return budget.status();
    }
    request.max_new_tokens = *budget;
    request.sampling = sampling_params(options_.generation);
    request.ignore_eos = options_.generation.ignore_eos;

    auto completion = generate(model_->engines(), std::move(request), [](std::string_view text) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    });
    if (!completion.is_ok()) {
      history_.pop_back();
      return completion.status();
    }
    std::fputs("\n", stdout);
    std::fflush(stdout);
    if (options_.generation.verbose) print_speed(completion->usage);
    if (completion->finish_reason == FinishReason::kError ||
        completion->finish_reason == FinishReason::kTimeout) {
      history_.pop_back();
      return completion->error;
    }
    history_.push_back({"assistant", completion->text});
    return Status::ok();
  }

 private:
  // The templated conversation, dropping the oldest exchanges (never the system message or
  // the newest user message) until the prompt leaves room to answer.
  Result<std::vector<int32_t>> fit_prompt() {
    const int32_t max_context = model_->engines().max_context();
    const int32_t wanted =
        options_.generation.max_new_tokens > 0 ? options_.generation.max_new_tokens : 1;
    while (true) {
      // Only the template's markup becomes control tokens; text typed into a message stays text.
      LS_ASSIGN_OR_RETURN(std::vector<int32_t> tokens,
                          encode_chat_prompt(template_, model_->tokenizer(), history_));
      const size_t first_turn = !history_.empty() && history_.front().role == "system" ? 1 : 0;
      const bool can_drop = history_.size() > first_turn + 1;
      if (static_cast<int64_t>(tokens.size()) + wanted <= max_context || !can_drop) return tokens;
      // Drop the oldest turn, and its reply with it so the roles keep alternating.
      history_.erase(history_.begin() + static_cast<ptrdiff_t>(first_turn));
      if (history_.size() > first_turn + 1 && history_[first_turn].role == "assistant") {
        history_.erase(history_.begin() + static_cast<ptrdiff_t>(first_turn));
      }
    }
  }

  const ChatOptions& options_;
  std::unique_ptr<ModelService> model_;
  ChatTemplate template_;
  std::vector<ChatMessage> history_;
};

Status run_chat(const ChatOptions& options) {
  const std::string& template_name = options.generation.model.chat_template;
  if (!template_name.empty()) {
    // A wrong name is refused before the model loads.
    LS_RETURN_IF_ERROR(ChatTemplate::from_name(template_name).status().with_context("--template"));
  }
  LS_ASSIGN_OR_RETURN(std::unique_ptr<ModelService> model,
                      ModelService::open(options.generation.model));
  if (!model->chat_template()) {
    return Status(StatusCode::kUnsupported,
                  "the model has no chat template that llamaserve knows; choose one with "
                  "--template");
  }
  ChatTemplate chat_template = *model->chat_template();
  ChatSession session(options, std::move(model), std::move(chat_template));
  if (!options.message.empty()) return session.turn(options.message);

  const bool interactive = isatty(STDIN_FILENO);
  std::string line;
  while (true) {
    if (interactive) std::fputs("> ", stderr);
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line.empty()) continue;
    if (Status status = session.turn(line); !status.is_ok()) {
      // One failed turn (too long, say) does not end the conversation.
      std::fprintf(stderr, "llamaserve chat: %s\n", status.to_string().c_str());
    }
  }
  return Status::ok();
}

std::function<int()> setup_chat(CLI::App& sub) {
  auto options = std::make_shared<ChatOptions>();
  add_generation_options(sub, options->generation);
  sub.add_option("-p,--prompt", options->message, "one user message: answer it and exit");
  sub.add_option("--system", options->system, "system message");
  sub.add_option("--template", options->generation.model.chat_template,
                 "chat format: llama2, llama3 or chatml (default: detected from the model)");
  return [options] {
    Status status = run_chat(*options);
    if (!status.is_ok()) {
      std::fprintf(stderr, "llamaserve chat: %s\n", status.to_string().c_str());
      return 1;
    }
    return 0;
  };
}

}  // namespace

LLAMASERVE_COMMAND(chat, "chat", "Chat with a model through its chat template", setup_chat);

}  // namespace llamaserve::cli
