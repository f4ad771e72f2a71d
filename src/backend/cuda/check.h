// Error checks for every CUDA runtime, cuBLAS and NCCL call, and for kernel launches.
//
// Host code in this folder returns Status; these macros turn a failed call into a Status that
// names the call, the library's error string, the file and the line, and return it from the
// enclosing function (which must therefore return Status or Result<T>). Kernel launchers
// follow every launch with LS_CUDA_CHECK_LAUNCH() and check their preconditions with
// LS_CUDA_REQUIRE, so a bad shape is a Status and not a wild read on the device.
//
// This header needs only the CUDA runtime API header, so g++ and nvcc both include it. The
// cuBLAS and NCCL macros expand to library calls the caller's translation unit declares.
#pragma once

#include <cuda_runtime_api.h>

#include "core/status.h"

namespace llamaserve::cuda {

// "cudaMalloc(&p, n) failed: out of memory (cudaErrorMemoryAllocation) at file:line".
Status cuda_error(cudaError_t error, const char* call, const char* file, int line);

// The same for a library whose status is an integer with an error string (cuBLAS, NCCL).
Status library_error(const char* library, int code, const char* message, const char* call,
                     const char* file, int line);

// A launcher's input contract did not hold: "precondition `cond` failed at file:line".
Status precondition_error(const char* condition, const char* file, int line);

// For destructors and other places that cannot return a Status: logs a failed call.
void log_cuda_error(cudaError_t error, const char* call, const char* file, int line);

}  // namespace llamaserve::cuda

#define LS_CUDA_CHECK(call)                                                             \
  do {                                                                                  \
    const cudaError_t ls_cuda_error_ = (call);                                          \
    if (ls_cuda_error_ != cudaSuccess) {                                                \
      return ::llamaserve::cuda::cuda_error(ls_cuda_error_, #call, __FILE__, __LINE__); \
    }                                                                                   \
  } while (0)

// After a kernel launch: catches bad launch configurations (and, with
// CUDA_LAUNCH_BLOCKING=1, faults of the kernel itself).
#define LS_CUDA_CHECK_LAUNCH()                                                                    \
  do {                                                                                            \
    const cudaError_t ls_cuda_error_ = cudaGetLastError();                                        \
    if (ls_cuda_error_ != cudaSuccess) {                                                          \
      return ::llamaserve::cuda::cuda_error(ls_cuda_error_, "kernel launch", __FILE__, __LINE__); \
    }                                                                                             \
  } while (0)

// Logs instead of returning; for destructors.
#define LS_CUDA_LOG_ERROR(call)                                                      \
  do {                                                                               \
    const cudaError_t ls_cuda_error_ = (call);                                       \
    if (ls_cuda_error_ != cudaSuccess) {                                             \
      ::llamaserve::cuda::log_cuda_error(ls_cuda_error_, #call, __FILE__, __LINE__); \
    }                                                                                \
  } while (0)

// PRECONDITION: the translation unit includes <cublas_v2.h>.
#define LS_CUBLAS_CHECK(call)                                                                   \
  do {                                                                                          \
    const cublasStatus_t ls_cublas_status_ = (call);                                            \
    if (ls_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                           \
      return ::llamaserve::cuda::library_error("cuBLAS", static_cast<int>(ls_cublas_status_),   \
                                               cublasGetStatusString(ls_cublas_status_), #call, \
                                               __FILE__, __LINE__);                             \
    }                                                                                           \
  } while (0)

// PRECONDITION: the translation unit includes <nccl.h>.
#define LS_NCCL_CHECK(call)                                                                \
  do {                                                                                     \
    const ncclResult_t ls_nccl_result_ = (call);                                           \
    if (ls_nccl_result_ != ncclSuccess) {                                                  \
      return ::llamaserve::cuda::library_error("NCCL", static_cast<int>(ls_nccl_result_),  \
                                               ncclGetErrorString(ls_nccl_result_), #call, \
                                               __FILE__, __LINE__);                        \
    }                                                                                      \
  } while (0)

#define LS_CUDA_REQUIRE(condition)                                                   \
  do {                                                                               \
    if (!(condition)) {                                                              \
      return ::llamaserve::cuda::precondition_error(#condition, __FILE__, __LINE__); \
    }                                                                                \
  } while (0)
