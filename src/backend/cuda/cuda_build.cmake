# CMake 3.25 has no CUDA20 flag for nvcc; every directory with CUDA targets includes this so
# that CMAKE_CUDA_STANDARD 20 (set at the top level) resolves to -std=c++20.
if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
endif()

# fmt 9 turns constexpr off under nvcc, and then its C++20 code does not compile (a constexpr
# function calling a non-constexpr one). nvcc's host pass handles relaxed constexpr fine.
add_compile_definitions($<$<COMPILE_LANGUAGE:CUDA>:FMT_USE_CONSTEXPR=1>)
