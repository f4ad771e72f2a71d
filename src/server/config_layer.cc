#include "server/config_layer.h"

#include <cctype>
#include <fstream>
#include <sstream>
#include <vector>

#include "server/request_parser.h"

namespace llamaserve::server {
namespace {

using nlohmann::json;

Result<std::string> scalar_to_string(const json& value) {
  if (value.is_string()) return value.get<std::string>();
  if (value.is_boolean()) return std::string(value.get<bool>() ? "true" : "false");
  if (value.is_number()) return value.dump();
  return Status(StatusCode::kInvalidArgument,
                fmt::format("expected a string, number or boolean, got {}", value.dump()));
}

}  // namespace

std::string env_var_name(std::string_view prefix, std::string_view long_name) {
  std::string name(prefix);
  for (char c : long_name) {
    name.push_back(c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c))));
  }
  return name;
}

void bind_env_vars(CLI::App& app, std::string_view prefix) {
  for (CLI::Option* option : app.get_options()) {
    if (!option->get_envname().empty() || option->get_lnames().empty()) continue;
    const std::string& long_name = option->get_lnames().front();
    if (long_name == "help") continue;
    option->envname(env_var_name(prefix, long_name));
  }
}

Status apply_json_config(CLI::App& app, const nlohmann::json& config, std::string_view source) {
  if (!config.is_object()) {
    return make_error(StatusCode::kInvalidArgument, "{}: expected a JSON object of options",
                      source);
  }
  for (const auto& [key, value] : config.items()) {
    CLI::Option* option = app.get_option_no_throw("--" + key);
    // The program's own options (--log-level, --log-format) may be set by a command's file.
    if (option == nullptr && app.get_parent() != nullptr) {
      option = app.get_parent()->get_option_no_throw("--" + key);
    }
    if (option == nullptr || key == "help" || key == "config" || key == "version") {
      return make_error(StatusCode::kInvalidArgument,
                        "{}: unknown key '{}' (keys are option names without the leading dashes, "
                        "see --help)",
                        source, key);
    }
    if (value.is_null()) continue;
    std::vector<std::string> results;
    if (value.is_array()) {
      if (option->get_items_expected_max() <= 1) {
        return make_error(StatusCode::kInvalidArgument,
                          "{}: key '{}' takes a single value, got an array", source, key);
      }
      for (const json& item : value) {
        auto text = scalar_to_string(item);
        if (!text) return text.status().with_context(fmt::format("{}: key '{}'", source, key));
        results.push_back(std::move(text).value());
      }
    } else {
      auto text = scalar_to_string(value);
      if (!text) return text.status().with_context(fmt::format("{}: key '{}'", source, key));
      results.push_back(std::move(text).value());
    }
    if (option->count() > 0) continue;  // the command line or the environment set it: they win
    try {
      option->add_result(results);
      option->run_callback();
    } catch (const CLI::Error& e) {
      return make_error(StatusCode::kInvalidArgument, "{}: key '{}': {}", source, key, e.what());
    }
  }
  return Status::ok();
}

Result<nlohmann::json> read_json_config_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error(StatusCode::kIo, "cannot open config file '{}'", path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  auto parsed = parse_json_object(buffer.str());
  if (!parsed) return parsed.status().with_context(fmt::format("config file '{}'", path));
  return std::move(parsed).value();
}

Status apply_json_config_file(CLI::App& app, const std::string& path) {
  auto parsed = read_json_config_file(path);
  if (!parsed) return parsed.status();
  return apply_json_config(app, *parsed, fmt::format("config file '{}'", path));
}

}  // namespace llamaserve::server
