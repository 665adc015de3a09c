# Detects the CUDA toolkit and NCCL for the CUDA backend.
# Sets TRIAD_HAVE_CUDA (ON/OFF) according to TRIAD_ENABLE_CUDA.
set(TRIAD_HAVE_CUDA OFF)
string(TOUPPER "${TRIAD_ENABLE_CUDA}" _triad_cuda_mode)
if(NOT _triad_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "TRIAD_ENABLE_CUDA must be AUTO, ON or OFF, not '${TRIAD_ENABLE_CUDA}'")
endif()

if(NOT _triad_cuda_mode STREQUAL "OFF")
  find_program(TRIAD_NVCC nvcc HINTS "${TRIAD_CUDA_ROOT}/bin" NO_CACHE)
  find_path(TRIAD_NCCL_INCLUDE_DIR nccl.h
            HINTS "${TRIAD_CUDA_ROOT}/include" NO_CACHE)
  find_library(TRIAD_NCCL_LIBRARY nccl
               HINTS "${TRIAD_CUDA_ROOT}/lib64" "${TRIAD_CUDA_ROOT}/lib" NO_CACHE)
  if(TRIAD_NVCC AND TRIAD_NCCL_INCLUDE_DIR AND TRIAD_NCCL_LIBRARY)
    set(TRIAD_HAVE_CUDA ON)
  elseif(_triad_cuda_mode STREQUAL "ON")
    message(FATAL_ERROR
      "TRIAD_ENABLE_CUDA=ON but the CUDA toolkit with NCCL was not found under "
      "TRIAD_CUDA_ROOT=${TRIAD_CUDA_ROOT} (nvcc: ${TRIAD_NVCC}, nccl.h: "
      "${TRIAD_NCCL_INCLUDE_DIR}, libnccl: ${TRIAD_NCCL_LIBRARY}). Set "
      "TRIAD_CUDA_ROOT or configure with -DTRIAD_ENABLE_CUDA=OFF.")
  endif()
endif()

if(TRIAD_HAVE_CUDA)
  message(STATUS "Triad CUDA backend: enabled (nvcc ${TRIAD_NVCC}, NCCL ${TRIAD_NCCL_LIBRARY})")
else()
  message(STATUS "Triad CUDA backend: disabled (TRIAD_ENABLE_CUDA=${TRIAD_ENABLE_CUDA})")
endif()
