// The scan over chunks that the decayed product and gated linear attention share (decayed/cuda/chunk*.cuh,
// gla/cuda/chunk*.cuh): each chunk's own contribution to the state, computed in parallel, becomes the
// state entering every chunk, S_{c+1} = diag(exp(B_c)) S_c + added_c, with B_c the chunk's total
// log-decay (one per chunk for the decayed product, one per state row for GLA).
#pragma once

#include "common/cuda/chunk_grid.cuh"
#ifndef LINTF_CUDA_EMULATION  // the emulation supplies its own runtime
#include "common/cuda/chunk_runtime.cuh"
#endif

#include <ATen/ATen.h>

namespace lintf {
namespace chunk {

// Where the decay of each chunk and state entry is: entry e (of the head's width) of chunk c decays by
// exp(at[(head * chunks + c) * chunk_stride + e / entries_per_decay]).
struct ScanDecays {
  const float* at;
  int64_t chunk_stride, entries_per_decay;
};

// states (heads, chunks, width) in place, in chunk order (reverse: from the last chunk): each entry becomes
// the running state r before its chunk, then r = exp(B_c) r + entry, from r = start (null: zeros); total
// (heads, width), if given, receives the last r. Forward: added -> S_c and the final state; reverse: the
// reverse sweep's added -> R_c = dL/dS after chunk c and dL/dS_0. One thread per (head, state entry), with
// kBatch loads in flight (a template: the translation units of both ops include it).
template <int kBatch = 8>
__global__ void chunk_scan_kernel(float* states, ScanDecays decays, const float* start, float* total, int64_t heads,
                                    int64_t chunks, int64_t width, bool reverse) {
  const int64_t index = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (index >= heads * width) return;
  const int64_t head = index / width, entry = index % width;
  float* base = states + head * chunks * width + entry;
  const float* totals = decays.at + head * chunks * decays.chunk_stride + entry / decays.entries_per_decay;
  float running = start != nullptr ? start[index] : 0.f;
  for (int64_t s0 = 0; s0 < chunks; s0 += kBatch) {
    float values[kBatch], decay[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int64_t s = s0 + i, c = reverse ? chunks - 1 - s : s;
      values[i] = s < chunks ? base[c * width] : 0.f;
      decay[i] = s < chunks ? expf(totals[c * decays.chunk_stride]) : 1.f;
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int64_t s = s0 + i, c = reverse ? chunks - 1 - s : s;
      if (s < chunks) base[c * width] = running;
      running = decay[i] * running + values[i];
    }
  }
  if (total != nullptr) total[index] = running;
}

// The scan (chunk_scan_kernel) of states (heads, chunks, c, m) in place from start (or zeros); total,
// if given, receives the last running state.
inline void scan(at::Tensor& states, const ScanDecays& decays, const at::Tensor& start, at::Tensor* total,
                 bool reverse) {
  const int64_t heads = states.size(0), chunks = states.size(1), width = states.size(2) * states.size(3);
  const int threads = 256;
  const int64_t blocks = (heads * width + threads - 1) / threads;
  runtime::launch(chunk_scan_kernel<>, blocks, threads, 0, states.data_ptr<float>(), decays,
                  start.defined() ? start.data_ptr<float>() : nullptr,
                  total != nullptr ? total->data_ptr<float>() : nullptr, heads, chunks, width, reverse);
}

}  // namespace chunk
}  // namespace lintf
