# The cuda backend's real half, included by runtime/CMakeLists.txt after
# partita_runtime exists (the emulated half is in its sources always).
#
# PARTITA_CUDA=AUTO (default) builds it when nvcc is found, ON requires it,
# OFF leaves it out (NoCudaApi.cpp says so at run time). Kernels are built
# for sm_80 and sm_90 (A100, H100), never `native`: CI has no GPU to ask.
# Every nvcc warning and every register spill or local-memory use reported
# by ptxas is an error. The runtime links the CUDA runtime statically and
# cuBLASLt and NCCL as shared libraries, never the driver library libcuda:
# a binary must start without a driver and report CUDA's error.
set(PARTITA_CUDA AUTO CACHE STRING
  "Build the CUDA device layer: AUTO (when nvcc is found), ON, OFF")
set_property(CACHE PARTITA_CUDA PROPERTY STRINGS AUTO ON OFF)
# CI builds both; a GPU machine may build its own alone (gpu-check.sh: 90).
set(PARTITA_CUDA_ARCHITECTURES "80;90" CACHE STRING
  "CUDA architectures of the kernels (never native: CI has no GPU)")
set(PARTITA_HAVE_CUDA OFF)
if(NOT PARTITA_CUDA STREQUAL "OFF")
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX}
     AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(CMAKE_CUDA_ARCHITECTURES ${PARTITA_CUDA_ARCHITECTURES})
    enable_language(CUDA)
    find_package(CUDAToolkit)
    find_path(PARTITA_NCCL_INCLUDE_DIR nccl.h
      HINTS ${CUDAToolkit_INCLUDE_DIRS} PATHS /usr/include)
    find_library(PARTITA_NCCL_LIBRARY nccl
      HINTS ${CUDAToolkit_LIBRARY_DIR} PATHS /usr/lib/x86_64-linux-gnu)
    if(CUDAToolkit_FOUND AND TARGET CUDA::cublasLt AND PARTITA_NCCL_LIBRARY
       AND PARTITA_NCCL_INCLUDE_DIR)
      set(PARTITA_HAVE_CUDA ON)
    endif()
  endif()
  if(PARTITA_CUDA STREQUAL "ON" AND NOT PARTITA_HAVE_CUDA)
    message(FATAL_ERROR "PARTITA_CUDA=ON, but nvcc, the CUDA runtime, "
      "cuBLASLt or NCCL was not found (nvcc: '${CMAKE_CUDA_COMPILER}', NCCL: "
      "'${PARTITA_NCCL_LIBRARY}'); set CMAKE_CUDA_COMPILER or "
      "-DPARTITA_CUDA=OFF")
  endif()
endif()
message(STATUS "Partita runtime: CUDA=${PARTITA_HAVE_CUDA}")

if(PARTITA_HAVE_CUDA)
  # The __global__ kernels: a static library of position-independent code
  # inside the shared runtime, so the runtime's C++ flags stay C++ only.
  add_library(partita_cuda_kernels STATIC
    ${CMAKE_CURRENT_LIST_DIR}/CudaKernels.cu)
  set_target_properties(partita_cuda_kernels PROPERTIES
    POSITION_INDEPENDENT_CODE ON
    CUDA_ARCHITECTURES "${PARTITA_CUDA_ARCHITECTURES}"
    CUDA_RUNTIME_LIBRARY Static)
  target_compile_features(partita_cuda_kernels PRIVATE cuda_std_17)
  target_include_directories(partita_cuda_kernels PRIVATE ${PARTITA_SOURCE_DIR})
  # nvcc 13 spells them so; a planted spill fails a test with these flags
  # (test/unit/runtime/cuda).
  set(PARTITA_CUDA_STRICT_FLAGS -Werror=all-warnings
    -Xptxas=-warn-spills,-warn-lmem-usage,-Werror -Xcompiler=-Wall,-Werror)
  target_compile_options(partita_cuda_kernels PRIVATE
    ${PARTITA_CUDA_STRICT_FLAGS})
  target_sources(partita_runtime PRIVATE ${CMAKE_CURRENT_LIST_DIR}/CudaApi.cpp
    ${CMAKE_CURRENT_LIST_DIR}/NcclApi.cpp)
  target_include_directories(partita_runtime PRIVATE
    ${CUDAToolkit_INCLUDE_DIRS} ${PARTITA_NCCL_INCLUDE_DIR})
  target_link_libraries(partita_runtime PRIVATE partita_cuda_kernels
    CUDA::cudart_static CUDA::cublasLt ${PARTITA_NCCL_LIBRARY})
  target_compile_definitions(partita_runtime PRIVATE PARTITA_HAVE_CUDA=1)
else()
  target_sources(partita_runtime PRIVATE
    ${CMAKE_CURRENT_LIST_DIR}/NoCudaApi.cpp)
endif()
