#include "server/model_list.h"

#include <charconv>

#include "model/config.h"
#include "server/config_layer.h"

namespace llamaserve::server {
namespace {

using nlohmann::json;

Result<int64_t> to_int(std::string_view key, std::string_view value, int64_t min, int64_t max) {
  int64_t number = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
  if (error != std::errc() || end != value.data() + value.size() || number < min || number > max) {
    return make_error(StatusCode::kInvalidArgument, "'{}' must be an integer in [{}, {}], got '{}'",
                      key, min, max, value);
  }
  return number;
}

// Seconds, or a number with s/m/h: milliseconds.
Result<int64_t> to_duration_ms(std::string_view key, std::string_view value) {
  std::string_view digits = value;
  int64_t scale = 1000;
  if (!digits.empty() && (digits.back() == 's' || digits.back() == 'm' || digits.back() == 'h')) {
    scale = digits.back() == 'h' ? 3600000 : digits.back() == 'm' ? 60000 : 1000;
    digits.remove_suffix(1);
  }
  auto number = to_int(key, digits, 0, int64_t{366} * 24 * 3600);
  if (!number) return number.status();
  return *number * scale;
}

Result<bool> to_bool(std::string_view key, std::string_view value) {
  if (value == "true" || value == "1") return true;
  if (value == "false" || value == "0") return false;
  return make_error(StatusCode::kInvalidArgument, "'{}' must be true or false, got '{}'", key,
                    value);
}

Status apply_key(ModelSpec& spec, std::string_view key, std::string_view value) {
  auto set_int = [&](auto& field, int64_t min, int64_t max) -> Status {
    auto number = to_int(key, value, min, max);
    if (!number) return number.status();
    field = static_cast<std::remove_reference_t<decltype(field)>>(*number);
    return Status::ok();
  };
  if (key == "path") {
    spec.path = value;
  } else if (key == "name") {
    spec.name = value;
  } else if (key == "alias") {
    spec.aliases.emplace_back(value);
  } else if (key == "device" || key == "devices") {
    spec.layout.device = value;
  } else if (key == "tp") {
    return set_int(spec.layout.tensor_parallel, 1, 64);
  } else if (key == "pp") {
    return set_int(spec.layout.pipeline_parallel, 1, 64);
  } else if (key == "replicas") {
    return set_int(spec.layout.replicas, 1, 64);
  } else if (key == "threads") {
    return set_int(spec.layout.threads, 0, 1024);
  } else if (key == "cpu-isa") {
    auto isa = cpu::parse_cpu_isa(value);
    if (!isa) return isa.status();
    spec.layout.cpu_isa = *isa;
  } else if (key == "ctx-size") {
    return set_int(spec.context_tokens, 0, 1 << 24);
  } else if (key == "max-running") {
    return set_int(spec.engine.max_running, 1, 1024);
  } else if (key == "prefill-chunk-tokens") {
    return set_int(spec.engine.prefill_chunk_tokens, -1, 1 << 20);
  } else if (key == "prefill-context-per-row") {
    return set_int(spec.engine.prefill_context_per_row, -1, 1 << 30);
  } else if (key == "no-prefix-cache") {
    auto off = to_bool(key, value);
    if (!off) return off.status();
    spec.engine.prefix_caching = !*off;
  } else if (key == "max-batch-tokens") {
    return set_int(spec.engine.max_batch_tokens, 0, 1 << 20);
  } else if (key == "kv-cache-tokens") {
    return set_int(spec.kv_cache_tokens, 0, int64_t{1} << 30);
  } else if (key == "kv-cache-type") {
    auto type = parse_kv_cache_type(value);
    if (!type) return type.status();
    spec.kv_cache_type = *type;
  } else if (key == "warmup-tokens") {
    return set_int(spec.warmup_tokens, 0, 64);
  } else if (key == "chat-template") {
    if (value != "llama2" && value != "llama3" && value != "chatml" && !value.empty()) {
      return make_error(StatusCode::kInvalidArgument,
                        "'chat-template' must be llama2, llama3 or chatml, got '{}'", value);
    }
    spec.chat_template = value;
  } else if (key == "embedding-pooling") {
    const std::optional<EmbeddingPooling> pooling = parse_embedding_pooling(value);
    if (!pooling) {
      return make_error(StatusCode::kInvalidArgument,
                        "'embedding-pooling' must be mean or last, got '{}'", value);
    }
    spec.embedding_pooling = *pooling;
  } else if (key == "keep-alive") {
    auto ms = to_duration_ms(key, value);
    if (!ms) return ms.status();
    spec.keep_alive_ms = *ms;
  } else if (key == "required") {
    auto flag = to_bool(key, value);
    if (!flag) return flag.status();
    spec.required = *flag;
  } else if (key == "load") {
    if (value != "start" && value != "on-demand") {
      return make_error(StatusCode::kInvalidArgument, "'load' must be start or on-demand, got '{}'",
                        value);
    }
    spec.load_at_start = value == "start";
  } else {
    return make_error(StatusCode::kInvalidArgument,
                      "unknown model key '{}' (keys: path name alias device tp pp replicas threads "
                      "cpu-isa ctx-size max-running max-batch-tokens prefill-chunk-tokens "
                      "prefill-context-per-row no-prefix-cache "
                      "kv-cache-tokens kv-cache-type chat-template "
                      "warmup-tokens embedding-pooling keep-alive required load)",
                      key);
  }
  return Status::ok();
}

Status check_named(const ModelSpec& spec, std::string_view source) {
  if (spec.name.empty() || spec.path.empty()) {
    return make_error(StatusCode::kInvalidArgument, "{}: a model needs a name and a path", source);
  }
  return Status::ok();
}

}  // namespace

// A named model is not required unless its entry says so: one that fails to load must not
// keep the others from serving.
Result<ModelSpec> parse_model_arg(std::string_view arg, const ModelSpec& defaults) {
  ModelSpec spec = defaults;
  spec.required = false;
  spec.aliases.clear();
  const size_t equals = arg.find('=');
  const size_t comma = arg.find(',');
  if (equals == std::string_view::npos || (comma != std::string_view::npos && comma < equals)) {
    return make_error(StatusCode::kInvalidArgument,
                      "--model '{}': expected NAME=PATH[,key=value...] (or -m PATH alone)", arg);
  }
  spec.name = arg.substr(0, equals);
  std::string_view rest = arg.substr(equals + 1);
  const size_t path_end = rest.find(',');
  spec.path = rest.substr(0, path_end);
  rest = path_end == std::string_view::npos ? std::string_view() : rest.substr(path_end + 1);
  while (!rest.empty()) {
    const size_t end = rest.find(',');
    const std::string_view item = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return make_error(StatusCode::kInvalidArgument, "--model '{}': '{}' is not key=value", arg,
                        item);
    }
    if (Status s = apply_key(spec, item.substr(0, eq), item.substr(eq + 1)); !s.is_ok()) {
      return s.with_context(fmt::format("--model '{}'", arg));
    }
  }
  LS_RETURN_IF_ERROR(check_named(spec, fmt::format("--model '{}'", arg)));
  return spec;
}

Result<ModelSpec> parse_model_object(const json& object, const ModelSpec& defaults) {
  if (!object.is_object()) {
    return Status(StatusCode::kInvalidArgument, "each entry of \"models\" must be an object");
  }
  ModelSpec spec = defaults;
  spec.name.clear();
  spec.path.clear();
  spec.aliases.clear();
  spec.required = false;
  for (const auto& [key, value] : object.items()) {
    if (key == "aliases" && value.is_array()) {
      for (const json& alias : value) {
        if (!alias.is_string()) {
          return Status(StatusCode::kInvalidArgument, "\"models\": 'aliases' must be strings");
        }
        spec.aliases.push_back(alias.get<std::string>());
      }
      continue;
    }
    std::string text;
    if (value.is_string()) {
      text = value.get<std::string>();
    } else if (value.is_boolean()) {
      text = value.get<bool>() ? "true" : "false";
    } else if (value.is_number_integer()) {
      text = std::to_string(value.get<int64_t>());
    } else {
      return make_error(StatusCode::kInvalidArgument,
                        "\"models\": key '{}' must be a string, an integer or a boolean", key);
    }
    if (Status s = apply_key(spec, key, text); !s.is_ok()) {
      return s.with_context(fmt::format("\"models\" entry '{}'", object.value("name", "?")));
    }
  }
  LS_RETURN_IF_ERROR(check_named(spec, "\"models\""));
  return spec;
}

Result<std::vector<ModelSpec>> read_models_config(const std::string& path,
                                                  const ModelSpec& defaults) {
  auto parsed = read_json_config_file(path);
  if (!parsed) return parsed.status();
  std::vector<ModelSpec> specs;
  if (auto it = parsed->find("models"); it != parsed->end()) {
    if (!it->is_array()) {
      return make_error(StatusCode::kInvalidArgument, "config file '{}': \"models\" must be a list",
                        path);
    }
    for (const json& object : *it) {
      auto spec = parse_model_object(object, defaults);
      if (!spec) return spec.status().with_context(fmt::format("config file '{}'", path));
      specs.push_back(std::move(spec).value());
    }
  }
  return specs;
}

}  // namespace llamaserve::server
