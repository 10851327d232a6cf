// The rules of tuning.h.
#include "common/cpu/tuning.h"

#include "common/cpu/layout.h"

#include <c10/util/Exception.h>

namespace lintf::cpu {

int64_t kept_span(int64_t row_bytes, int64_t state_bytes, const CacheSizes& caches) {
  int64_t span = kChunk;
  while (span * 2 <= kMaxSpanPositions && span * 2 * row_bytes <= caches.l2 / 2) span *= 2;
  while (span * 2 <= kMaxSpanPositions && span * row_bytes < 8 * state_bytes) span *= 2;
  return span;
}

int64_t prefetch_chunks(int64_t chunk_bytes, const CacheSizes& caches) {
  const int64_t fit = chunk_bytes > 0 ? caches.l2 / 2 / chunk_bytes : kMaxPrefetchChunks;
  return std::clamp<int64_t>(fit, 1, kMaxPrefetchChunks);
}

int64_t streamed_bytes(const CacheSizes& caches) { return 4 * caches.l2; }

int64_t streamed_kept_bytes(const CacheSizes& caches) { return caches.l2 / 2; }

std::vector<int64_t> tuning_report(int64_t c, int64_t m, int64_t itemsize) {
  TORCH_CHECK_VALUE(c > 0 && m > 0 && (itemsize == 2 || itemsize == 4 || itemsize == 8),
                    "lintf::cpu_tuning: features and values must be positive and itemsize 2, 4 or 8, got ", c, ", ",
                    m, ", ", itemsize);
  const CacheSizes caches = cache_sizes();
  const int64_t state_bytes = c * m * (itemsize == 8 ? 8 : 4);  // a kept state, in the accumulation dtype
  return {caches.l1d,
          caches.l2,
          caches.l3,
          caches.l3_shared_by,
          kept_span(causal_backward_row_bytes(c, m, itemsize), state_bytes, caches),
          prefetch_chunks(kChunk * causal_forward_row_bytes(c, m, itemsize), caches),
          prefetch_chunks(kChunk * causal_backward_row_bytes(c, m, itemsize), caches),
          kept_span(decayed_row_bytes(c, m, itemsize), state_bytes, caches),
          prefetch_chunks(kChunk * decayed_row_bytes(c, m, itemsize), caches),
          streamed_bytes(caches),
          streamed_kept_bytes(caches)};
}

}  // namespace lintf::cpu
