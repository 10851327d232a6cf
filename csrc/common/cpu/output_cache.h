// A cache of the CPU ops' large output buffers, so that a training loop's outputs reuse memory
// whose pages are already in place instead of fresh pages the kernel must zero on every call.
//
// An output of many MB (the forward's result, the backward's dq, dk, dv) is fresh mmap'd memory
// on every call: glibc maps allocations above 32 MB on their own and unmaps them when freed, and
// the kernel zeroes each new page before the op writes it (4 ms per 32 MB with 2 MB pages, about
// 15% of a forward+backward at B=1, H=8, N=16384 on one core; benchmarks/results/causal_product.md,
// "first touch"). Buffers from kMinCachedBytes on come from here instead: a freed output's buffer goes
// back to the cache (within the bound below) and the next output of the same rounded size reuses it,
// like the caching allocators of GPU frameworks. The tensors are ordinary CPU tensors (resizable,
// with this allocator), their contents undefined as at::empty's are.
//
// How much it keeps. By default the cache follows what the process reuses: the bytes it holds,
// free buffers and live outputs together, stay within the most bytes of live outputs the process
// has had at once (peak_bytes) plus one largest buffer. A training loop at one shape reaches its
// peak in its first step and frees the same buffers that the next step asks for, so every later
// step reuses all of them (the extra buffer covers outputs of two sizes that are never alive
// together); outputs of ever new sizes (mixed sequence lengths) evict the oldest free buffers
// instead of piling up, so the cache adds at most one buffer to the peak the process reaches anyway.
// LINTF_CPU_OUTPUT_CACHE_MB=<MB> (read once) replaces that bound with a fixed cap on the free
// bytes (freed buffers evict the oldest beyond it); 0 turns the cache off.
//
// Every buffer is a 2 MB-aligned mapping of its own: an evicted buffer is unmapped at once, and
// lintf.ops.empty_cpu_output_cache() unmaps every free buffer (its pages go back to the system,
// resident memory drops) and restarts the default bound from the bytes in use.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace lintf::cpu {

// Buffers below this size come from ATen's allocator: small allocations are served from the heap
// without fresh pages, and caching them would only hold memory.
constexpr std::size_t kMinCachedBytes = std::size_t(4) << 20;

// Advises fresh memory [data, data + bytes) to use transparent huge pages on its 2 MB-aligned
// interior and faults its pages in from this thread (MADV_HUGEPAGE, MADV_POPULATE_WRITE; Linux
// 5.14+). Advice only: a no-op where THP is off, where the kernel is older or the memory resident.
void advise_fresh_pages(void* data, std::size_t bytes);

// The allocator of cached outputs (one per process, never destroyed: tensors may outlive statics).
c10::Allocator* output_cache_allocator();

// {bytes cached and free, bytes handed out and alive, buffers reused, buffers freshly allocated,
//  limit (the cap, or by default peak + largest buffer), peak bytes in use, buffers evicted}
std::vector<int64_t> output_cache_stats();

// Unmaps every cached buffer that no tensor holds and restarts the default bound from the bytes in use.
void empty_output_cache();

}  // namespace lintf::cpu
