// Runs the sweeps of one vector path on torch's intra-op threads (at::parallel_for), and builds
// the states that connect the pieces. Baseline ISA; only causal_product_cpu.cpp includes it.
//
// Work items are (head, segment): a segment is a run of consecutive chunks of one (batch, head),
// swept by one thread from its own start state with its own workspace, so threads share nothing
// they write. With at least as many heads as threads each head is one segment and nothing else
// runs. Otherwise each head is cut into segments and the call has three phases:
//   1. every segment but the boundary one adds up its state contribution (kernel `totals`),
//      in parallel, split into more pieces when there are fewer segments than threads;
//   2. a short sequential scan per head turns those totals into each segment's start state
//      (prefix sums forward; suffix sums for the reverse dk/dv sweep);
//   3. every segment runs its sweep from its start state, in parallel.
// The number of segments minimises a small cost model: the slowest thread's share of the sweeps
// plus the extra state pass (phase 1), which costs a fraction of a sweep per position, plus a
// fixed cost of the extra parallel regions.
#pragma once

#include "causal/cpu/plan.h"

#include <ATen/Parallel.h>

namespace lintf::schedule {
namespace {

using cpu::AlignedBuffer;
using cpu::Args;
using cpu::ceil_div;
using cpu::Dims;
using cpu::StateKind;
using cpu::VectorPath;
using cpu::load_state;
using cpu::store_state;

// Cost of a state-only pass per position relative to the sweeps it prepares. Forward: K^T V
// (2CM flops per position, as chunk products) against the forward recurrence (4CM and the
// normaliser). Backward: the dq and dk/dv passes (4CM) against the two sweeps (12CM); from kept
// span states only the dk/dv pass (2CM).
constexpr double kForwardPassCost = 0.4;
constexpr double kBackwardPassCost = 0.3;
constexpr double kKeptBackwardPassCost = 0.15;
// Flops of the sweeps per position, in units of C*M: forward 4, backward 12 (the three recurrences).
constexpr double kForwardSweepFlops = 4;
constexpr double kBackwardSweepFlops = 12;
// What cutting heads into segments costs beyond the state pass: two more parallel regions (thread
// wake-ups, barriers), about 18 us on a 2-core Xeon, worth some 2 MFLOP of sweeps. It keeps short
// heads in one piece (N=256, C=M=64, one head: a split forward was 0.93-1.03x the unsplit one).
constexpr double kSplitOverheadFlops = 2e6;
constexpr int64_t kMinSegmentChunks = 4;  // shorter segments spend more on the state pass than they save

// How each head's chunks are cut: `segments` runs of `per` chunks (the last may be shorter), each
// summed in phase 1 as `parts` pieces.
struct Split {
  int64_t segments, per, parts;

  int64_t first(int64_t segment) const { return segment * per; }
  int64_t last(const Dims& d, int64_t segment) const { return std::min(d.chunks, (segment + 1) * per); }
};

int64_t available_threads() { return at::in_parallel_region() ? 1 : at::get_num_threads(); }

// `granularity`: segments are whole multiples of that many chunks (the backward from kept span states).
Split choose_split(const Dims& d, int64_t threads, double pass_cost, double sweep_flops, int64_t granularity = 1) {
  Split best{1, d.chunks, 1};
  double best_time = static_cast<double>(ceil_div(d.heads, threads));  // in sweeps of one whole head
  const double chunk_flops = sweep_flops * static_cast<double>(cpu::kChunk * d.cp * d.mp);
  const double overhead = kSplitOverheadFlops / chunk_flops;  // in sweeps of one chunk
  const int64_t most = std::min(d.chunks / kMinSegmentChunks, 8 * threads);
  for (int64_t wanted = 2; wanted <= most; ++wanted) {
    const int64_t per = ceil_div(ceil_div(d.chunks, wanted), granularity) * granularity;
    const int64_t segments = ceil_div(d.chunks, per);
    if (segments < 2) continue;
    const int64_t parts = std::clamp<int64_t>(ceil_div(threads, d.heads * (segments - 1)), 1, per);
    const double sweeps = static_cast<double>(ceil_div(d.heads * segments, threads) * per);
    const double pass = pass_cost * static_cast<double>(ceil_div(d.heads * (segments - 1) * parts, threads) *
                                                        ceil_div(per, parts));
    const double time = (sweeps + pass + overhead) / static_cast<double>(d.chunks);
    if (time < 0.97 * best_time) best = {segments, per, parts}, best_time = time;  // fewer segments on ties
  }
  return best;
}

// The start state of every (head, segment) of a sweep of `kind` (kQueryGrad runs in reverse),
// (heads, segments) states of d.state_stride() elements: phases 1 and 2 above.
template <typename scalar_t, typename T>
void start_states(const VectorPath& path, const Dims& d, const Args<scalar_t, T>& a, const Split& split,
                  StateKind kind, T* states) {
  const bool reverse = kind == StateKind::kQueryGrad;
  const int64_t stride = d.state_stride(), segments = split.segments;
  const T* kv = reverse ? a.grad_kv : a.kv0;
  const T* z = reverse ? a.grad_z : a.z0;
  for (int64_t head = 0; head < d.heads; ++head) {
    load_state(d, kv == nullptr ? nullptr : kv + head * d.c * d.m, z == nullptr ? nullptr : z + head * d.c,
               kind == StateKind::kValueKey, states + (head * segments + (reverse ? segments - 1 : 0)) * stride);
  }
  if (segments == 1) return;
  // phase 1: piece (head, i, part) sums part `part` of segment i (reverse: i + 1), all but the last one
  const int64_t parts = split.parts, pieces = d.heads * (segments - 1) * parts, piece_chunks = ceil_div(split.per, parts);
  AlignedBuffer<T> totals(pieces * stride);
  const auto& sweeps = path.kernels<scalar_t>();
  at::parallel_for(0, pieces, 1, [&](int64_t begin, int64_t end) {
    for (int64_t piece = begin; piece < end; ++piece) {
      const int64_t head = piece / ((segments - 1) * parts), segment = piece / parts % (segments - 1) + reverse;
      const int64_t first = split.first(segment) + piece % parts * piece_chunks;
      const int64_t last = std::min(split.last(d, segment), first + piece_chunks);
      if (first < last) sweeps.totals(d, a, kind, head, first, last, totals.data() + piece * stride);
    }
  });
  // phase 2: start of each segment = start of its predecessor in sweep order + the predecessor's pieces
  at::parallel_for(0, d.heads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t head = begin; head < end; ++head) {
      for (int64_t step = 1; step < segments; ++step) {
        const int64_t segment = reverse ? segments - 1 - step : step, before = reverse ? segment + 1 : segment - 1;
        const T* previous = states + (head * segments + before) * stride;
        T* start = states + (head * segments + segment) * stride;
        std::copy(previous, previous + d.state_size(), start);
        const T* summed = totals.data() + (head * (segments - 1) + before - reverse) * parts * stride;
        for (int64_t part = 0; part < parts; ++part) {
          for (int64_t i = 0; i < d.state_size(); ++i) start[i] += summed[part * stride + i];
        }
      }
    }
  });
}

template <typename scalar_t, typename T>
void run_forward(const VectorPath& path, const Dims& d, const Args<scalar_t, T>& a) {
  const Split split = choose_split(d, available_threads(), kForwardPassCost, kForwardSweepFlops);
  const int64_t stride = d.state_stride(), segments = split.segments;
  AlignedBuffer<T> states(d.heads * segments * stride);
  start_states(path, d, a, split, StateKind::kKeyValue, states.data());
  const auto& sweeps = path.kernels<scalar_t>();
  at::parallel_for(0, d.heads * segments, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t head = item / segments, segment = item % segments;
      T* state = states.data() + item * stride;
      sweeps.forward(d, a, head, split.first(segment), split.last(d, segment), state);
      if (segment == segments - 1) store_state(d, state, a.state_kv + head * d.c * d.m, a.state_z + head * d.c);
    }
  });
}

// Without kept span states: the dq sweep from prefix start states, then the dk/dv sweep. With
// them: segments of whole spans, each running `spans` from its suffix start state alone.
template <typename scalar_t, typename T>
void run_backward(const VectorPath& path, const Dims& d, const Args<scalar_t, T>& a) {
  const bool kept = a.span_states != nullptr;
  const Split split = choose_split(d, available_threads(), kept ? kKeptBackwardPassCost : kBackwardPassCost,
                                   kBackwardSweepFlops, kept ? a.span_chunks : 1);
  const int64_t stride = d.state_stride(), segments = split.segments;
  AlignedBuffer<T> prefix(kept ? 0 : d.heads * segments * stride), suffix(d.heads * segments * stride);
  if (!kept) start_states(path, d, a, split, StateKind::kValueKey, prefix.data());
  start_states(path, d, a, split, StateKind::kQueryGrad, suffix.data());
  const auto& sweeps = path.kernels<scalar_t>();
  at::parallel_for(0, d.heads * segments, 1, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t head = item / segments, segment = item % segments;
      const int64_t first = split.first(segment), last = split.last(d, segment);
      T* state = suffix.data() + item * stride;
      if (kept) {
        sweeps.spans(d, a, head, first, last, state);
      } else {
        sweeps.dq(d, a, head, first, last, prefix.data() + item * stride);
        sweeps.dkdv(d, a, head, first, last, state);
      }
      if (segment == 0) store_state(d, state, a.state_kv + head * d.c * d.m, a.state_z + head * d.c);
    }
  });
}

}  // namespace
}  // namespace lintf::schedule
