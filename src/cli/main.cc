#include <algorithm>
#include <cstdio>

#include "cli/command.h"
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
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off")
      ->capture_default_str();
  app.set_version_flag("--version", "llamaserve 0.1.0");

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
  setup_logging(log_level);
  return chosen ? chosen() : 1;
}
