# Detects the CUDA toolkit and NCCL for the CUDA backend and, when they are
# usable, enables the CUDA language.
#
# Sets TRIAD_HAVE_CUDA (ON/OFF) according to TRIAD_ENABLE_CUDA:
#   AUTO  ON when nvcc, cuBLASLt and NCCL are found under TRIAD_CUDA_ROOT and
#         nvcc compiles with the host compiler; OFF (with a message) otherwise.
#   ON    the same, but anything missing is a configuration error.
#   OFF   never.
# With TRIAD_HAVE_CUDA it also defines the imported target triad::nccl and
# the CUDA::cudart and CUDA::cublasLt targets (FindCUDAToolkit). The GPU
# architecture defaults to sm_90 (H100/H200); set CMAKE_CUDA_ARCHITECTURES
# to override (e.g. "90a" or "80;90").
set(TRIAD_HAVE_CUDA OFF)
string(TOUPPER "${TRIAD_ENABLE_CUDA}" _triad_cuda_mode)
if(NOT _triad_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "TRIAD_ENABLE_CUDA must be AUTO, ON or OFF, not '${TRIAD_ENABLE_CUDA}'")
endif()

# Fails the configuration under ON; under AUTO says why the backend is off.
macro(_triad_cuda_missing why)
  if(_triad_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR "TRIAD_ENABLE_CUDA=ON but ${why} (TRIAD_CUDA_ROOT="
      "${TRIAD_CUDA_ROOT}). Set TRIAD_CUDA_ROOT or configure with "
      "-DTRIAD_ENABLE_CUDA=OFF.")
  endif()
  message(STATUS "Triad CUDA backend: disabled (${why})")
endmacro()

if(_triad_cuda_mode STREQUAL "OFF")
  message(STATUS "Triad CUDA backend: disabled (TRIAD_ENABLE_CUDA=OFF)")
else()
  find_program(TRIAD_NVCC nvcc HINTS "${TRIAD_CUDA_ROOT}/bin" NO_CACHE)
  find_path(TRIAD_NCCL_INCLUDE_DIR nccl.h
            HINTS "${TRIAD_CUDA_ROOT}/include" NO_CACHE)
  find_library(TRIAD_NCCL_LIBRARY nccl
               HINTS "${TRIAD_CUDA_ROOT}/lib64" "${TRIAD_CUDA_ROOT}/lib" NO_CACHE)
  if(NOT (TRIAD_NVCC AND TRIAD_NCCL_INCLUDE_DIR AND TRIAD_NCCL_LIBRARY))
    _triad_cuda_missing("the CUDA toolkit with NCCL was not found (nvcc: "
      "${TRIAD_NVCC}, nccl.h: ${TRIAD_NCCL_INCLUDE_DIR}, libnccl: "
      "${TRIAD_NCCL_LIBRARY})")
  else()
    # check_language() and enable_language() find nvcc and the host
    # compiler through these (unless CMAKE_CUDA_COMPILER is given).
    if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX})
      set(ENV{CUDACXX} "${TRIAD_NVCC}")
    endif()
    if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER AND NOT DEFINED ENV{CUDAHOSTCXX})
      set(ENV{CUDAHOSTCXX} "${CMAKE_CXX_COMPILER}")
    endif()
    # Only the architectures asked for: every extra one is another full
    # device compilation of every kernel (CI has 2 cores).
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "GPU architectures of the CUDA kernels")
    endif()
    include(CheckLanguage)
    check_language(CUDA)
    if(NOT CMAKE_CUDA_COMPILER)
      _triad_cuda_missing("nvcc (${TRIAD_NVCC}) cannot compile with the host "
        "compiler ${CMAKE_CXX_COMPILER}")
    else()
      enable_language(CUDA)
      set(CMAKE_CUDA_STANDARD 17)
      # One CUDA runtime, the shared one CUDA::cudart links: targets with
      # CUDA sources would otherwise add the static one beside it.
      set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
      set(CMAKE_CUDA_STANDARD_REQUIRED ON)
      set(CUDAToolkit_ROOT "${TRIAD_CUDA_ROOT}")
      find_package(CUDAToolkit)
      if(NOT (CUDAToolkit_FOUND AND TARGET CUDA::cudart AND TARGET CUDA::cublasLt))
        _triad_cuda_missing("the CUDA runtime or cuBLASLt was not found")
      else()
        set(TRIAD_HAVE_CUDA ON)
        add_library(triad::nccl UNKNOWN IMPORTED)
        set_target_properties(triad::nccl PROPERTIES
          IMPORTED_LOCATION "${TRIAD_NCCL_LIBRARY}"
          INTERFACE_INCLUDE_DIRECTORIES "${TRIAD_NCCL_INCLUDE_DIR}")
        message(STATUS "Triad CUDA backend: enabled (CUDA ${CUDAToolkit_VERSION}, "
          "nvcc ${CMAKE_CUDA_COMPILER}, architectures ${CMAKE_CUDA_ARCHITECTURES}, "
          "NCCL ${TRIAD_NCCL_LIBRARY})")
      endif()
    endif()
  endif()
endif()
