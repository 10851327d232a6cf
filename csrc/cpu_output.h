// New output tensors of the CPU ops, with their pages in place before the threads write them.
//
// An output of many MB is fresh mmap'd memory whose first write faults once per 4 KB page, which
// in a VM costs about 2 us a page (19 ms for a 32 MB output: more than the kernel's own work on
// it). Transparent huge pages on its 2 MB-aligned interior cut that to about 3 ms
// (benchmarks/results/causal_product.md). Faults taken by several threads at once in one process
// were measured at 45 ms of system time per 32 MB (2 threads: a forward 2x slower than on one
// thread), so the pages are also faulted in here, by one thread, before the sweeps start
// (MADV_POPULATE_WRITE, Linux 5.14+). Advice only: a no-op where THP is off, where the kernel is
// older or the memory already resident; contents are not touched.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace lintf::cpu {

inline at::Tensor output(at::IntArrayRef sizes, const at::TensorOptions& options) {
  auto t = at::empty(sizes, options);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::uintptr_t kHuge = std::uintptr_t(1) << 21, kPage = std::uintptr_t(1) << 12;
  constexpr int kPopulateWrite = 23;  // MADV_POPULATE_WRITE, absent from older headers
  const auto begin = reinterpret_cast<std::uintptr_t>(t.data_ptr()), end = begin + t.nbytes();
  const std::uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1), last = end & ~(kHuge - 1);
  if (begin != 0 && last > first) {  // at least one whole huge page: a fresh mapping of its own
    madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
    const std::uintptr_t page_begin = begin & ~(kPage - 1), page_end = (end + kPage - 1) & ~(kPage - 1);
    madvise(reinterpret_cast<void*>(page_begin), page_end - page_begin, kPopulateWrite);
  }
#endif
  return t;
}

}  // namespace lintf::cpu
