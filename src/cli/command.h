// Subcommand registry: each cmd_*.cc registers itself with LLAMASERVE_COMMAND, main() adds
// every registered command to the CLI11 app. A command's run function returns the exit code.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace llamaserve::cli {

struct Command {
  std::string name;
  std::string description;
  // Adds options to `sub` and returns the function to call when the subcommand is chosen.
  std::function<std::function<int()>(CLI::App& sub)> setup;
};

std::vector<Command>& command_registry();

struct CommandRegistrar {
  explicit CommandRegistrar(Command command) { command_registry().push_back(std::move(command)); }
};

}  // namespace llamaserve::cli

#define LLAMASERVE_COMMAND(ident, name, description, setup_fn) \
  static ::llamaserve::cli::CommandRegistrar ident##_registrar({name, description, setup_fn})
