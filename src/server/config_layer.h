// One generic layer that lets every command-line option also come from an environment
// variable and from a JSON config file, with the precedence flag > env > file > default.
//
// CLI11 reads a config file before the environment, which would make the file win over env,
// so the file is applied here, after parsing, and only to options that neither the command
// line nor the environment set.
#pragma once

#include <string>
#include <string_view>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/status.h"

namespace llamaserve::server {

// The environment variable of a long option: ("LLAMASERVE_", "max-running") ->
// "LLAMASERVE_MAX_RUNNING".
std::string env_var_name(std::string_view prefix, std::string_view long_name);

// Gives every long option of `app` that has none yet an environment variable. Call after all
// options are added and before parsing; CLI11 then reads the variable when the flag is absent.
void bind_env_vars(CLI::App& app, std::string_view prefix);

// Applies {"long-name": value, ...} to the options of `app`, or of its parent program, not
// already set (count() == 0).
// Values: string, number, boolean, or an array of those for repeatable options. Unknown keys,
// nested objects and values an option rejects are errors that name the key and `source`.
Status apply_json_config(CLI::App& app, const nlohmann::json& config, std::string_view source);

// Reads `path`, which must hold a JSON object; errors name the file.
Result<nlohmann::json> read_json_config_file(const std::string& path);

// Reads `path` (a JSON object) and applies it as above.
Status apply_json_config_file(CLI::App& app, const std::string& path);

}  // namespace llamaserve::server
