// What the delta rule's backward keeps of its forward sweep: per chunk, the entering (cp x mp) state
// and the chunk's X = V - diag(exp(b)) K S_in (L x mp), h and tinv (L x L each, chunk.h), so the
// reverse sweep recomputes none of them.
// The memory is left uninitialised (every element is written before it is read) and, on Linux, asked
// for in huge pages: tens of MiB per head, taken and returned once per head and call, would otherwise
// cost a page fault per 4 KiB and a zero-filling pass of its own. Internal linkage throughout.
#pragma once

#include "common/cpu/layout.h"

#include <cstdlib>
#include <memory>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace lintf::delta {
namespace {

template <typename T>
class Kept {
 public:
  // Per chunk one entering state, one X and two L x L matrices, each slot 64-byte aligned (every size
  // a multiple of 16 elements).
  Kept(int64_t chunks, int64_t state_elems, int64_t x_elems, int64_t square_elems)
      : stride_(state_elems + x_elems + 2 * square_elems), state_elems_(state_elems), x_elems_(x_elems),
        square_elems_(square_elems) {
    const size_t bytes = static_cast<size_t>(chunks * stride_) * sizeof(T);
    const size_t align = bytes >= kHuge ? kHuge : static_cast<size_t>(cpu::kAlignBytes);
    data_.reset(static_cast<T*>(std::aligned_alloc(align, (bytes + align - 1) / align * align)));
    if (data_ == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes >= kHuge) madvise(data_.get(), bytes, MADV_HUGEPAGE);  // a hint: failure only costs speed
#endif
  }
  T* state(int64_t chunk) { return data_.get() + chunk * stride_; }
  T* x(int64_t chunk) { return state(chunk) + state_elems_; }
  T* h(int64_t chunk) { return x(chunk) + x_elems_; }
  T* tinv(int64_t chunk) { return h(chunk) + square_elems_; }

 private:
  static constexpr size_t kHuge = size_t(2) << 20;
  struct Free {
    void operator()(T* p) const { std::free(p); }
  };
  int64_t stride_, state_elems_, x_elems_, square_elems_;
  std::unique_ptr<T, Free> data_;
};

}  // namespace
}  // namespace lintf::delta
