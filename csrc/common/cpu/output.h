// New output tensors of the CPU ops, with their pages in place before the threads write them.
//
// An output of many MB is fresh mmap'd memory whose first write faults once per 4 KB page, which
// in a VM costs about 2 us a page (19 ms for a 32 MB output: more than the kernel's own work on
// it). Outputs from 4 MB on therefore come from the output cache (output_cache.h), which
// reuses the buffers of freed outputs; a buffer it allocates afresh is on transparent huge pages
// (about 3 ms per 32 MB instead of 19) and faulted in by one thread before the sweeps start: faults
// taken by several threads at once in one process were measured at 45 ms of system time per 32 MB
// (2 threads: a forward 2x slower than on one thread). With the cache turned off the same advice
// (MADV_HUGEPAGE, MADV_POPULATE_WRITE; Linux 5.14+) is given to ATen's fresh memory. Advice only:
// a no-op where THP is off, where the kernel is older or the memory already resident.
#pragma once

#include "common/cpu/output_cache.h"

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>

#include <cstddef>
#include <optional>

namespace lintf::cpu {

// ATen's fresh memory, advised to use huge pages and faulted in by this thread.
inline at::Tensor advised_empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
  auto t = at::empty(sizes, options);
  advise_fresh_pages(t.data_ptr(), t.nbytes());
  return t;
}

inline at::Tensor output(at::IntArrayRef sizes, const at::TensorOptions& options) {
  const auto dtype = options.dtype().toScalarType();
  const auto nbytes = static_cast<std::size_t>(c10::multiply_integers(sizes)) * c10::elementSize(dtype);
  c10::Allocator* cached = nbytes >= kMinCachedBytes ? output_cache_allocator() : nullptr;
  if (cached == nullptr) return advised_empty(sizes, options);
  return at::detail::empty_generic(sizes, cached, c10::DispatchKeySet(c10::DispatchKey::CPU), dtype, std::nullopt);
}

}  // namespace lintf::cpu
