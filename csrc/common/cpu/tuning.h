// The CPU kernels' cache-dependent choices, made at every call from the caches the CPU reports
// (caches.h; LINTF_CPU_CACHE_KB pretends others) and the call's shape. The register tiles follow the
// vector path instead (path.h, recurrence.h), and the 32-position chunk is fixed (layout.h).
//
//   kept-state span   positions between the states the causal and decayed forwards keep for their
//                     backward (chosen on the Python side through lintf::cpu_tuning, which counts
//                     half-precision rows as fp32): the largest 32 * 2^k positions, up to 1024, whose
//                     rows the backward reads twice (once per sweep) take at most half of L2, so the
//                     reverse sweep finds them there; but at least the span whose rows weigh 8 times
//                     the kept state, which each span loads and transposes (C = M = 128, fp32, 1 MiB
//                     of L2: 128 positions measured 8% slower than 256).
//   prefetch distance chunks a sweep prefetches ahead: the most, up to 4, whose rows take at most
//                     half of L2, at least 1.
//   streamed outputs  gradients of at least 4 x L2 bytes are written with streaming stores: they
//                     leave the caches before anyone reads them.
//   kept copies       the delta rule's backward writes its per-chunk copies with streaming stores
//                     when a head's copies take at least half of L2 (else plain stores keep them
//                     cached for the reverse sweep).
// Baseline ISA; the kernels receive the choices in their Args.
#pragma once

#include "common/cpu/caches.h"

#include <vector>

namespace lintf::cpu {

constexpr int64_t kMaxSpanPositions = 1024;
constexpr int64_t kMaxPrefetchChunks = 4;  // the distance the kernels were measured with (docs/cpu_op.md)

// Positions per span of kept states for rows of row_bytes per position and kept states of state_bytes.
int64_t kept_span(int64_t row_bytes, int64_t state_bytes, const CacheSizes& caches);
// Chunks to prefetch ahead for chunks of chunk_bytes.
int64_t prefetch_chunks(int64_t chunk_bytes, const CacheSizes& caches);
// Bytes of a gradient from which it is written with streaming stores.
int64_t streamed_bytes(const CacheSizes& caches);
// Bytes of one head's kept copies (delta rule) from which they are written with streaming stores.
int64_t streamed_kept_bytes(const CacheSizes& caches);

// Bytes per position of the rows each op's sweeps read, for inputs of `itemsize` bytes.
inline int64_t causal_forward_row_bytes(int64_t c, int64_t m, int64_t itemsize) { return (2 * c + m) * itemsize; }
inline int64_t causal_backward_row_bytes(int64_t c, int64_t m, int64_t itemsize) {
  return (2 * c + 3 * m) * itemsize;  // q, k, v, the output's gradient and the output
}
inline int64_t decayed_row_bytes(int64_t c, int64_t m, int64_t itemsize) {
  return (2 * c + 2 * m) * itemsize + (itemsize == 8 ? 8 : 4);  // q, k, v, gradient; log_decay (accumulation dtype)
}

// Every choice at one shape, in the order lintf/ops/common/tuning.py names them (TUNING_FIELDS):
// l1d, l2, l3 bytes, l3_shared_by, causal span, causal forward / backward prefetch chunks, decayed span,
// decayed prefetch chunks, streamed gradient bytes, streamed kept bytes.
std::vector<int64_t> tuning_report(int64_t c, int64_t m, int64_t itemsize);

}  // namespace lintf::cpu
