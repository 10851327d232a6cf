// Software prefetch of the input rows a sweep reads next, paced by the products that run meanwhile.
//
// A chunk's rows of q, k, v (and the output gradient) are fetched from DRAM while an earlier chunk
// computes, instead of stalling the packing loads. Asking for all of a chunk's lines at once
// (128 or more) fills the core's line-fill buffers and stalls it until most have arrived, so the
// queue hands out a few lines at a time: tile::recurrence calls `request` after every step or tile
// and tile::gemm after every register block, and each call asks for the queued lines divided by
// the number of calls the previous chunk made.
// Included by tile.h inside the vector path's target region; internal linkage.
#pragma once

#include <cstdint>

namespace lintf::tile {
namespace {

constexpr int64_t kLineBytes = 64;

class PrefetchQueue {
 public:
  // Queues [base, base + bytes) (nothing for a null base).
  void add(const void* base, int64_t bytes) {
    if (base == nullptr || bytes <= 0 || count_ == kMaxRanges) return;
    next_[count_] = static_cast<const char*>(base);
    end_[count_] = next_[count_] + bytes;
    lines_ += (bytes + kLineBytes - 1) / kLineBytes;
    ++count_;
  }

  // Starts spreading what is queued over the request() calls to come, as many as the last chunk made.
  void start() {
    const int64_t calls = calls_last_ > 0 ? calls_last_ : kFirstCalls;
    per_call_ = (lines_ + calls - 1) / calls;
    calls_ = 0;
  }

  // Asks for the next few lines (see the top of this file for who calls it when).
  void request() {
    ++calls_;
    request(per_call_);
  }

  // Asks for everything still queued and empties the queue.
  void drain() {
    request(lines_);
    calls_last_ = calls_;
    count_ = current_ = 0;
    lines_ = per_call_ = 0;
  }

 private:
  static constexpr int kMaxRanges = 8;
  static constexpr int64_t kFirstCalls = 16;  // before any chunk has been counted

  void request(int64_t lines) {
    const char* last = nullptr;
    while (lines > 0 && current_ < count_) {
      const char*& next = next_[current_];
      if (next >= end_[current_]) {
        ++current_;
        continue;
      }
      __builtin_prefetch(next, 0, 2);
      last = next;
      next += kLineBytes;
      --lines, --lines_;
    }
    // GCC counts a prefetch as no effect at all and may drop a loop that does nothing else; the
    // empty volatile asm is an effect that keeps it.
    asm volatile("" : : "r"(last));
  }

  const char* next_[kMaxRanges];
  const char* end_[kMaxRanges];
  int count_ = 0, current_ = 0;
  int64_t lines_ = 0, per_call_ = 0, calls_ = 0, calls_last_ = 0;
};

}  // namespace
}  // namespace lintf::tile
