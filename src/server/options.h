// The flags of `llamaserve serve`, declared in one place and bound straight into the
// configuration tree (service/config.h). Every flag can also come from LLAMASERVE_<NAME> and
// from the JSON config file given by --config (see config_layer.h): flag > env > file > default.
#pragma once

#include <CLI/CLI.hpp>

#include "core/status.h"
#include "service/config.h"

namespace llamaserve::server {

// Declares every option on `app`, bound to config.server and to config.models.front() (added
// when `config` has no model yet; the references stay valid while `config` is not resized),
// and gives each an LLAMASERVE_* environment variable. --model is not marked required here
// because it may come from the config file; finalize_service_config() checks it.
void add_service_options(CLI::App& app, ServiceConfig& config);

// --cpu-isa auto|avx512|avx2, bound to layout.cpu_isa: serve, run, chat and bench declare it here.
void add_cpu_isa_option(CLI::App& app, LayoutSpec& layout);

// --kv-cache-type f16|q8_0 into m.kv_cache_type (serve, run, chat and bench share it).
void add_kv_cache_type_option(CLI::App& app, ModelSpec& m);

// The kernel and tensor-parallel flags (--tp-sums, --tp-gemm-sums, --no-pdl, --op-times),
// bound to `model`'s layout and tuning: serve and bench declare them here.
void add_kernel_options(CLI::App& app, ModelSpec& model);

// After parsing: applies --config (to options neither flag nor env set), reads
// --api-key-file, fills derived defaults and checks the options against each other.
Status finalize_service_config(CLI::App& app, ServiceConfig& config);

}  // namespace llamaserve::server
