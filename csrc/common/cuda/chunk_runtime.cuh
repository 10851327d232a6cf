// The CUDA runtime calls of the chunked kernels' host code (common/cuda/chunk_plan.cuh, chunk_scan.cuh and
// every op's chunk_launch.cuh): device queries and kernel launches on the current stream. Kept apart so
// that the same host code and kernels can also run under the CPU emulation of
// tests/ops/causal/cuda_emulation (LINTF_CUDA_EMULATION).
#pragma once

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdint>

namespace lintf {
namespace chunk {
namespace runtime {

struct DeviceInfo {
  int major;               // compute capability
  size_t shared_bytes;     // dynamic shared memory one block may opt into
};

inline DeviceInfo device_info(int device) {
  int major = 0, shared_bytes = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&shared_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return {major, static_cast<size_t>(shared_bytes)};
}

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), int64_t blocks, int threads, size_t bytes, const Args&... args) {
  if (bytes > 48 * 1024) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  }
  kernel<<<static_cast<unsigned>(blocks), threads, bytes, c10::cuda::getCurrentCUDAStream()>>>(args...);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace runtime
}  // namespace chunk
}  // namespace lintf
