#include <algorithm>
#include <cstdio>

#include "cli/command.h"
#include "core/build_info.h"
#include "core/log.h"

namespace llamaserve::cli {

std::vector<Command>& command_registry() {
  static std::vector<Command> commands;
  return commands;
}

}  // namespace llamaserve::cli

int main(int argc, char** argv) {
  using namespace llamaserve;
  CLI::App app{"llamaserve: LLaMA-family inference server"};
  app.require_subcommand(1);
  // Logging follows every change at once, so that a command's config file (applied after
  // parsing) and the environment can set it as well as the flag.
  LogSettings logging;
  setup_logging(logging);
  app.add_option_function<std::string>(
         "--log-level",
         [&logging](const std::string& level) {
           logging.level = level;
           setup_logging(logging);
         },
         "trace|debug|info|warn|error|off")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->envname("LLAMASERVE_LOG_LEVEL")
      ->default_str(logging.level);
  app.add_option_function<std::string>(
         "--log-format",
         [&logging](const std::string& format) {
           logging.format = parse_log_format(format).value();
           setup_logging(logging);
         },
         "text, or json: one JSON object a line")
      ->check(CLI::IsMember({"text", "json"}))
      ->envname("LLAMASERVE_LOG_FORMAT")
      ->default_str("text");
  // Options of the program given after the command's name are the program's too.
  app.fallthrough();
  app.set_version_flag(
      "--version", fmt::format("llamaserve {} ({})", build_info().version, build_info().commit));

  auto& commands = cli::command_registry();
  std::sort(commands.begin(), commands.end(),
            [](const cli::Command& a, const cli::Command& b) { return a.name < b.name; });
  std::function<int()> chosen;
  for (auto& command : commands) {
    CLI::App* sub = app.add_subcommand(command.name, command.description);
    auto run = command.setup(*sub);
    sub->callback([&chosen, run] { chosen = run; });
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return chosen ? chosen() : 1;
}
