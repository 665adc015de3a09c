//===- HostDevice.h - functions compiled for the host and the GPU -*- C++
//-*-===//
//
// TRIAD_HOST_DEVICE marks an inline function that the CUDA kernels and the
// host code share (the step's arithmetic, Philox and Box-Muller): under
// nvcc it is compiled for both, elsewhere it is a plain function.
//
//===----------------------------------------------------------------------===//

#ifndef TRIAD_RUNTIME_SUPPORT_HOSTDEVICE_H
#define TRIAD_RUNTIME_SUPPORT_HOSTDEVICE_H

#if defined(__CUDACC__)
#define TRIAD_HOST_DEVICE __host__ __device__
#else
#define TRIAD_HOST_DEVICE
#endif

#endif // TRIAD_RUNTIME_SUPPORT_HOSTDEVICE_H
