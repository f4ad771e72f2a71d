# Build settings shared by every directory with CUDA targets (src/backend/cuda, tests/gpu,
# bench/cuda_kernels).

# CMake 3.25 has no CUDA20 flag for nvcc; this makes CMAKE_CUDA_STANDARD 20 (set at the top
# level) resolve to -std=c++20.
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()

# fmt 9 turns constexpr off under nvcc, and then its C++20 code does not compile (a constexpr
# function calling a non-constexpr one). nvcc's host pass handles relaxed constexpr fine.
add_compile_definitions($<$<COMPILE_LANGUAGE:CUDA>:FMT_USE_CONSTEXPR=1>)

# Executables that run on the GPU machine, which has the NVIDIA driver and cuBLAS but maybe not
# this machine's C++ runtime or other libraries: libstdc++/libgcc are linked statically (the
# CUDA runtime is already static), and every other shared library they need (fmt, spdlog, and
# for the llamaserve binary cpp-httplib, OpenSSL, zlib, ...) is copied into
# <build>/runtime-libs, which scripts/device_run.sh puts on LD_LIBRARY_PATH.
set(LLAMASERVE_COPY_RUNTIME_LIBS ${CMAKE_CURRENT_LIST_DIR}/copy_runtime_libs.cmake)
# Each is also listed in the global property LLAMASERVE_GPU_EXECUTABLES (the cuda_check target).
function(llamaserve_gpu_executable target)
  set_property(GLOBAL APPEND PROPERTY LLAMASERVE_GPU_EXECUTABLES ${target})
  target_link_options(${target} PRIVATE -static-libstdc++ -static-libgcc)
  add_custom_command(TARGET ${target} POST_BUILD
    COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:${target}>
            -DDEST=${CMAKE_BINARY_DIR}/runtime-libs -P ${LLAMASERVE_COPY_RUNTIME_LIBS}
    VERBATIM)
endfunction()

# NCCL (tensor parallelism): the CUDA toolkit's copy on the build machine; the GPU machine has
# its own (copy_runtime_libs.cmake leaves it out).
find_path(LLAMASERVE_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} REQUIRED)
find_library(LLAMASERVE_NCCL_LIBRARY nccl
  HINTS ${CUDAToolkit_LIBRARY_ROOT}/lib ${CUDAToolkit_LIBRARY_DIR} /usr/lib/x86_64-linux-gnu
  REQUIRED)
