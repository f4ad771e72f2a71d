# cmake -DEXE=<executable> -DDEST=<dir> -P copy_runtime_libs.cmake
#
# Copies the shared libraries EXE needs from this machine into DEST, except those the GPU
# machine provides itself (C runtime, the NVIDIA driver, cuBLAS and NCCL). Used after linking the
# executables that run there (see cuda_build.cmake).
file(GET_RUNTIME_DEPENDENCIES
  EXECUTABLES ${EXE}
  RESOLVED_DEPENDENCIES_VAR deps
  UNRESOLVED_DEPENDENCIES_VAR missing
  PRE_EXCLUDE_REGEXES
    "^ld-linux" "^linux-vdso" "^libc\\.so" "^libm\\.so" "^libdl\\.so" "^librt\\.so"
    "^libpthread\\.so" "^libgcc_s\\.so" "^libstdc\\+\\+\\.so" "^libcuda\\.so" "^libcublas"
    "^libnvidia" "^libnccl")
if(missing)
  message(WARNING "${EXE}: unresolved libraries: ${missing}")
endif()
file(MAKE_DIRECTORY ${DEST})
foreach(dep IN LISTS deps)
  file(COPY ${dep} DESTINATION ${DEST} FOLLOW_SYMLINK_CHAIN)
endforeach()
