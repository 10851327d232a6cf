// The lintf operator library: its namespace, and the queries of the runtime every CPU op shares.
//   lintf::cpu_vector_path() -> str         the vector path CPU calls use now (common/cpu/path.h)
//   lintf::cpu_vector_paths() -> str[]      the paths this CPU can run, widest first
//   lintf::cpu_output_cache_stats() -> int[]  the output cache's counters (common/cpu/output_cache.h)
//   lintf::empty_cpu_output_cache() -> ()   unmaps the cache's free buffers
//   lintf::cpu_cache_source() -> str       where the cache sizes the kernels tune by come from (common/cpu/caches.h)
//   lintf::cpu_tuning(c, m, itemsize) -> int[]  the caches and the kernels' choices at one shape (common/cpu/tuning.h)
// Each op defines its own schema in a TORCH_LIBRARY_FRAGMENT beside its kernels (causal/, decayed/).
#include "common/cpu/output_cache.h"
#include "common/cpu/path.h"
#include "common/cpu/tuning.h"

#include <torch/library.h>

TORCH_LIBRARY(lintf, m) {
  m.def("cpu_vector_path() -> str", [] { return lintf::cpu::selected_path(); });
  m.def("cpu_vector_paths() -> str[]", [] { return lintf::cpu::supported_paths(); });
  m.def("cpu_output_cache_stats() -> int[]", [] { return lintf::cpu::output_cache_stats(); });
  m.def("empty_cpu_output_cache() -> ()", [] { lintf::cpu::empty_output_cache(); });
  m.def("cpu_cache_source() -> str", [] { return lintf::cpu::cache_sizes().source; });
  m.def("cpu_tuning(int features, int values, int itemsize) -> int[]",
        [](int64_t c, int64_t m, int64_t itemsize) { return lintf::cpu::tuning_report(c, m, itemsize); });
}
