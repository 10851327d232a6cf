// What the delta rule's backward keeps of its forward sweep: per chunk, the entering (cp x mp) state
// and the chunk's X = V - diag(exp(b)) K S_in (L x mp), h and tinv (L x L each, chunk.h), so the
// reverse sweep recomputes none of them. The memory comes from take_kept (../delta_rule.h): left
// uninitialised (every element is written before it is read) and handed on to the call's next head, as
// tens of MiB taken fresh per head would cost a page fault and a zero-filling per page each time.
// Internal linkage throughout.
#pragma once

#include "common/cpu/layout.h"
#include "delta/delta_rule.h"

namespace lintf::delta {
namespace {

template <typename T>
class Kept {
 public:
  // Per chunk one entering state, one X and two L x L matrices, each slot 64-byte aligned (every size
  // a multiple of 16 elements).
  Kept(int64_t chunks, int64_t state_elems, int64_t x_elems, int64_t square_elems)
      : stride_(state_elems + x_elems + 2 * square_elems), state_elems_(state_elems), x_elems_(x_elems),
        square_elems_(square_elems), bytes_(static_cast<std::size_t>(chunks * stride_) * sizeof(T)),
        data_(static_cast<T*>(take_kept(bytes_))) {}
  Kept(const Kept&) = delete;
  Kept& operator=(const Kept&) = delete;
  ~Kept() { give_kept(data_, bytes_); }

  T* state(int64_t chunk) { return data_ + chunk * stride_; }
  T* x(int64_t chunk) { return state(chunk) + state_elems_; }
  T* h(int64_t chunk) { return x(chunk) + x_elems_; }
  T* tinv(int64_t chunk) { return h(chunk) + square_elems_; }

 private:
  int64_t stride_, state_elems_, x_elems_, square_elems_;
  std::size_t bytes_;
  T* data_;
};

}  // namespace
}  // namespace lintf::delta
