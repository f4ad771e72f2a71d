#include "backend/cuda/check.h"

#include <spdlog/spdlog.h>

namespace llamaserve::cuda {
namespace {

// Paths relative to the source tree read better in logs than absolute build paths.
const char* short_path(const char* file) {
  const std::string_view path(file);
  const size_t src = path.rfind("/src/");
  return src == std::string_view::npos ? file : file + src + 1;
}

}  // namespace

Status cuda_error(cudaError_t error, const char* call, const char* file, int line) {
  const StatusCode code =
      error == cudaErrorMemoryAllocation ? StatusCode::kResourceExhausted : StatusCode::kInternal;
  return make_error(code, "{} failed: {} ({}) at {}:{}", call, cudaGetErrorString(error),
                    cudaGetErrorName(error), short_path(file), line);
}

Status library_error(const char* library, int code, const char* message, const char* call,
                     const char* file, int line) {
  return make_error(StatusCode::kInternal, "{} failed: {} error {} ({}) at {}:{}", call, library,
                    code, message != nullptr ? message : "no description", short_path(file), line);
}

Status precondition_error(const char* condition, const char* file, int line) {
  return make_error(StatusCode::kInvalidArgument, "precondition `{}` failed at {}:{}", condition,
                    short_path(file), line);
}

void log_cuda_error(cudaError_t error, const char* call, const char* file, int line) {
  spdlog::error("{}", cuda_error(error, call, file, line).message());
}

}  // namespace llamaserve::cuda
