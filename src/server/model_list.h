// The models of `serve`: `-m PATH` (one model, as always), `--model NAME=PATH[,key=value...]`
// repeated, or a "models" list in the --config file. Every model starts from the values of
// the flags (device, context, max-running, ...) and overrides what its entry names:
//   path name device tp pp replicas threads cpu-isa (auto|avx512|avx2) ctx-size max-running
//   max-batch-tokens prefill-chunk-tokens prefill-context-per-row no-prefix-cache (true|false)
//   kv-cache-tokens chat-template warmup-tokens keep-alive (seconds, or 30s/5m/2h)
//   required (true|false; default false: /ready waits only for required models, and one that
//   fails to load does not stop the others) load (start|on-demand)
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "service/config.h"

namespace llamaserve::server {

// One --model value "NAME=PATH[,key=value...]".
Result<ModelSpec> parse_model_arg(std::string_view arg, const ModelSpec& defaults);
// One object of a config file's "models" list: {"name": ..., "path": ..., key: value...}.
Result<ModelSpec> parse_model_object(const nlohmann::json& object, const ModelSpec& defaults);
// The "models" list of a config file (empty when it has none); for SIGHUP.
Result<std::vector<ModelSpec>> read_models_config(const std::string& path,
                                                  const ModelSpec& defaults);

}  // namespace llamaserve::server
