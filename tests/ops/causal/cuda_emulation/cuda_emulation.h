// CPU emulation of the CUDA execution model, enough to run the chunked causal-product kernels
// (csrc/causal/cuda/chunk*.cuh) and their host code on a machine without a GPU.
//
// A block's threads are fibers (ucontext) on one OS thread. A fiber runs until it reaches a barrier
// (__syncthreads, or the warp barriers inside __shfl_xor_sync), then the next fiber runs, in a random
// order each round; a barrier opens when every thread of the block (of the warp) waits at it. A barrier
// some threads never reach is reported and aborts, instead of hanging as on a GPU. Blocks run one after
// another; shared memory is filled with 0xFF bytes (NaN in every float type) before each block, so a
// read of shared memory nothing wrote shows up as NaN in the results.
//
// Include after the torch headers and before the kernels; csrc/'s CUDA runtime calls are replaced by
// lintf::chunk::runtime below (LINTF_CUDA_EMULATION).
#pragma once

#define LINTF_CUDA_EMULATION 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n)
#define __restrict__

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

struct Dim3 {
  unsigned x = 0, y = 0, z = 0;
};

namespace lintf_emulation {

constexpr size_t kSharedBytes = 227 * 1024;  // an H100's per-block opt-in limit
// The per-block opt-in limit device_info reports: an H100's unless a test sets a smaller GPU's
// (the kernels' shared memory is kSharedBytes whatever it says).
inline size_t reported_shared_bytes = kSharedBytes;
constexpr size_t kStackBytes = 256 * 1024;

inline Dim3 thread_index, block_index, block_dim;

enum class Wait { kRunnable, kBlock, kWarp, kDone };

struct Fiber {
  ucontext_t context;
  std::vector<char> stack;
  Wait wait = Wait::kRunnable;
};

struct Scheduler {
  ucontext_t main;
  std::vector<Fiber> fibers;
  unsigned current = 0;
  std::mt19937 random{0};
  std::vector<float> slots;  // one per thread, for __shfl_xor_sync
  const std::function<void()>* body = nullptr;
};

inline Scheduler scheduler;

inline void yield(Wait wait) {
  Fiber& fiber = scheduler.fibers[scheduler.current];
  fiber.wait = wait;
  swapcontext(&fiber.context, &scheduler.main);
}

inline void fiber_entry() {
  (*scheduler.body)();
  yield(Wait::kDone);
}

// Opens the barriers every waiting thread has reached; false when none can open (a deadlock).
inline bool release() {
  auto& fibers = scheduler.fibers;
  const size_t n = fibers.size();
  bool any = false;
  for (size_t warp = 0; warp * 32 < n; ++warp) {
    const size_t end = std::min(n, warp * 32 + 32);
    if (std::all_of(fibers.begin() + warp * 32, fibers.begin() + end, [](const Fiber& f) { return f.wait == Wait::kWarp; })) {
      for (size_t i = warp * 32; i < end; ++i) fibers[i].wait = Wait::kRunnable;
      any = true;
    }
  }
  if (std::all_of(fibers.begin(), fibers.end(), [](const Fiber& f) { return f.wait == Wait::kBlock; })) {
    for (auto& f : fibers) f.wait = Wait::kRunnable;
    any = true;
  }
  return any;
}

inline void run_block(unsigned threads) {
  auto& fibers = scheduler.fibers;
  fibers.resize(threads);
  scheduler.slots.assign(threads, 0.f);
  for (auto& f : fibers) {
    f.stack.resize(kStackBytes);
    f.wait = Wait::kRunnable;
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack.data();
    f.context.uc_stack.ss_size = f.stack.size();
    f.context.uc_link = nullptr;
    makecontext(&f.context, fiber_entry, 0);
  }
  std::vector<unsigned> order(threads);
  for (unsigned i = 0; i < threads; ++i) order[i] = i;
  while (true) {
    std::shuffle(order.begin(), order.end(), scheduler.random);
    for (unsigned i : order) {
      if (fibers[i].wait != Wait::kRunnable) continue;
      scheduler.current = i;
      thread_index = Dim3{i, 0, 0};
      swapcontext(&scheduler.main, &fibers[i].context);
    }
    if (std::all_of(fibers.begin(), fibers.end(), [](const Fiber& f) { return f.wait == Wait::kDone; })) return;
    if (!release()) {
      std::fprintf(stderr, "cuda emulation: deadlock in block %u: threads wait at different barriers:", block_index.x);
      for (unsigned i = 0; i < threads; ++i) std::fprintf(stderr, " %u:%d", i, static_cast<int>(fibers[i].wait));
      std::fprintf(stderr, "\n");
      std::abort();
    }
  }
}

// Runs body (one kernel call) as `blocks` blocks of `threads` threads over the given shared memory.
// One kernel launch as the host code made it: what benchmarks.gpu_model's launch plans are checked against.
struct Launch {
  int64_t blocks;
  int threads;
  size_t shared_bytes;
};
inline std::vector<Launch> launches;  // every launch since the op module's take_launches()

inline void run_grid(int64_t blocks, unsigned threads, unsigned char* shared, size_t bytes,
                     const std::function<void()>& body) {
  scheduler.body = &body;
  block_dim = Dim3{threads, 1, 1};
  for (int64_t b = 0; b < blocks; ++b) {
    std::memset(shared, 0xFF, bytes);
    block_index = Dim3{static_cast<unsigned>(b), 0, 0};
    run_block(threads);
  }
}

}  // namespace lintf_emulation

#define threadIdx ::lintf_emulation::thread_index
#define blockIdx ::lintf_emulation::block_index
#define blockDim ::lintf_emulation::block_dim

inline void __syncthreads() { lintf_emulation::yield(lintf_emulation::Wait::kBlock); }

inline float __shfl_xor_sync(unsigned, float value, int lane_mask) {
  auto& slots = lintf_emulation::scheduler.slots;
  const unsigned me = threadIdx.x;
  slots[me] = value;
  lintf_emulation::yield(lintf_emulation::Wait::kWarp);  // every lane has written
  const float other = slots[me ^ static_cast<unsigned>(lane_mask)];
  lintf_emulation::yield(lintf_emulation::Wait::kWarp);  // every lane has read
  return other;
}

[[noreturn]] inline void __trap() { std::abort(); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
using std::isinf;

namespace lintf {
namespace chunk {

extern unsigned char smem[];  // the kernels' dynamic shared memory, defined by the emulated op

namespace runtime {

struct DeviceInfo {
  int major;
  size_t shared_bytes;
};

inline DeviceInfo device_info(int) { return {9, lintf_emulation::reported_shared_bytes}; }

template <typename... Params, typename... Args>
void launch(void (*kernel)(Params...), int64_t blocks, int threads, size_t bytes, const Args&... args) {
  if (bytes > lintf_emulation::kSharedBytes) {
    std::fprintf(stderr, "cuda emulation: %zu bytes of shared memory requested\n", bytes);
    std::abort();
  }
  lintf_emulation::launches.push_back({blocks, threads, bytes});
  const std::function<void()> body = [&] { kernel(args...); };
  lintf_emulation::run_grid(blocks, static_cast<unsigned>(threads), smem, std::max<size_t>(bytes, 1), body);
}

}  // namespace runtime
}  // namespace chunk
}  // namespace lintf
