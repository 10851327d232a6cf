// What each chunk adds to a decaying state, the first step of the decayed product's and gated linear
// attention's forward (decayed/cuda/chunk*.cuh, gla/cuda/chunk*.cuh) and of their backward's reverse sweep:
//   added_c = factor (W o X_c)^T Y_c,
// X rounded to the operand type after the weighting. The two ops differ only in W, the weights of the
// chunk's rows, which a Weighting policy supplies: one per row for the decayed product, one per row and
// feature for GLA's gates. A policy has
//   static int floats(int cp): the shared floats its weights take;
//   static at::Tensor cumulative(const Dims&, const at::Tensor& log): the in-chunk cumulative log-decays
//     that it and the scan read (host), and static ScanDecays scan_decays(const Dims&, cumulative): where
//     the scan (chunk_scan.cuh) finds each chunk's total among them; static at::Tensor per_decay(products):
//     (heads, chunks, c, m) products summed over the entries that share a decay (host);
//   __device__ static void weigh(const AddedArgs<T>&, const Dims&, const Block&, float* weights, float* f):
//     f (kChunk x cp, fp32, leading dimension padded_ld<float>(cp)) = W o X_c, zeros past the chunk's rows
//     and c; weights is its shared memory. Called by every thread; the caller syncs after it.
#pragma once

#include "common/cuda/chunk_grid.cuh"
#include "common/cuda/chunk_plan.cuh"
#include "common/cuda/chunk_scan.cuh"
#include "common/cuda/chunk_tiles.cuh"

#include <tuple>

namespace lintf {
namespace chunk {

using tile::padded_ld;

// w = exp(B - b) (forward: X = K, Y = V, factor 1) or exp(b) (the backward's reverse sweep: X = Q,
// Y = grad_out, and GLA's factor = scale), with b the in-chunk cumulative log-decay and B its total.
template <typename T>
struct AddedArgs {
  const T *x, *y;           // (heads, n, c), (heads, n, m)
  const float* cumulative;  // in-chunk cumulative log-decays, laid out as the Weighting's cumulative()
  bool to_end;              // w = exp(B - b), else exp(b)
  float factor;
  float* added;             // (heads, chunks, c, m)
};

template <typename T, typename Weighting>
struct AddedLayout {
  T *x, *y;
  float *f, *weights, *scratch;
  size_t bytes;
  __host__ __device__ AddedLayout(int cp, int mt, unsigned char* base = nullptr) {
    tile::Carve carve{base};
    x = carve.take<T>(kChunk * padded_ld<T>(cp));
    y = carve.take<T>(kChunk * padded_ld<T>(mt));
    f = carve.take<float>(max(kChunk * padded_ld<float>(cp), cp * padded_ld<float>(mt)));  // x weighted, then added
    weights = carve.take<float>(Weighting::floats(cp));
    scratch = carve.take<float>(tile::kWarps);
    bytes = carve.bytes;
  }
};

// One block per (head, chunk, value tile): that tile's columns of added_c.
template <typename T, bool Split, typename Weighting>
__global__ void __launch_bounds__(tile::kThreads) added_state_kernel(AddedArgs<T> args, Dims d) {
  const auto sh = shared_tiles<AddedLayout<T, Weighting>>(d.cp, d.mt);
  const Block b(d, true);
  const int ldx = padded_ld<T>(d.cp), ldy = padded_ld<T>(d.mt), ldf = padded_ld<float>(d.mt);

  load_values(args.y, d, b, b.value_tile, sh.y);
  Weighting::weigh(args, d, b, sh.weights, sh.f);
  __syncthreads();
  const float x_scale = tile::to_operand(sh.f, padded_ld<float>(d.cp), sh.x, ldx, kChunk, d.cp, sh.scratch);
  __syncthreads();
  // added (cp x mt) = x^T y: x read as a column-major (cp x kChunk) operand
  tile::block_mma<T, Split, false, true>(sh.x, ldx, sh.y, ldy, sh.f, ldf, d.cp, d.mt, kChunk, tile::Causal::kNone, 0.f,
                                         x_scale * args.factor);
  __syncthreads();
  tile::store_tile(sh.f, ldf, d.c, b.cols, args.added + b.state * int64_t(d.c) * d.m + b.m0, d.m);
}

// (heads, chunks, c, m) fp32 of what each chunk adds (AddedArgs) for x (B, H, N, C), y (B, H, N, M)
// contiguous and the Weighting's cumulative log-decays.
template <typename T, bool Split, typename Weighting>
at::Tensor added_states(const Dims& d, const at::Tensor& x, const at::Tensor& y, const at::Tensor& cumulative,
                        bool to_end, float factor = 1.f) {
  auto added = at::empty({d.heads, d.chunks, d.c, d.m}, y.options().dtype(at::kFloat));
  const AddedArgs<T> args{data<T>(x), data<T>(y), cumulative.data_ptr<float>(), to_end, factor,
                          added.data_ptr<float>()};
  runtime::launch(added_state_kernel<T, Split, Weighting>, d.heads * d.chunks * d.value_tiles, tile::kThreads,
                  AddedLayout<T, Weighting>(d.cp, d.mt).bytes, args, d);
  return added;
}

// What the forward and the backward of an op with a decaying state return.
using DecayingOutputs = std::tuple<at::Tensor, at::Tensor>;  // out, S_N
using DecayingGradients = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>;  // dq, dk, dv,
                                                                                                    // d log-decays, dS0

// S_c, the states entering each chunk (heads, chunks, c, m) of the forward: what each chunk of x, y adds,
// scanned from state0 (undefined: zeros); final_state receives S_N.
template <typename T, bool Split, typename Weighting>
at::Tensor entering_states(const Dims& d, const at::Tensor& x, const at::Tensor& y, const at::Tensor& cumulative,
                           const at::Tensor& state0, at::Tensor& final_state) {
  at::Tensor states = added_states<T, Split, Weighting>(d, x, y, cumulative, true);
  scan(states, Weighting::scan_decays(d, cumulative), state0, &final_state, false);
  return states;
}

// x[head, chunk, j] = sum over the group entries e of decay j of R[head, chunk, e] S_{chunk+1}[head, e], with
// S_{chunk+1} the state leaving the chunk (the next one's entering state, the final state after the last):
// one warp per (head, chunk, j), fp32 sums. states and grad_states (heads, chunks, width), final (heads, width).
constexpr int kLeavingThreads = 256;

__global__ void __launch_bounds__(kLeavingThreads) leaving_products_kernel(const float* grad_states,
                                                                           const float* states,
                                                                           const float* final_state, float* x,
                                                                           int64_t heads, int64_t chunks,
                                                                           int64_t width, int64_t group) {
  const int lane = threadIdx.x % 32;
  const int64_t per_chunk = width / group, items = heads * chunks * per_chunk;
  const int64_t item = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  float sum = 0.f;
  if (item < items) {
    const int64_t head = item / (chunks * per_chunk), chunk = item / per_chunk % chunks, first = item % per_chunk * group;
    const float* r = grad_states + (head * chunks + chunk) * width + first;
    const float* s = chunk + 1 < chunks ? states + (head * chunks + chunk + 1) * width + first
                                        : final_state + head * width + first;
    for (int64_t e = lane; e < group; e += 32) sum += r[e] * s[e];
  }
  for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);  // every lane
  if (item < items && lane == 0) x[item] = sum;
}

// Both sweeps of the backward: S_c entering each chunk (from state0, undefined: zeros), R_c = dL/dS after each
// (from grad_state, through the reverse sweep of factor (Q o exp(b))^T G) and x_c = sum(R_c o S_{c+1}) over
// each decay's entries (Weighting::entries_per_decay; leaving_products_kernel), the state leaving chunk c's
// share in the gradient of its log-decays.
struct Sweeps {
  at::Tensor states, grad_states, x;
};

// Sweeps for q, k, v and g = grad_out contiguous; d_state0 receives dL/dS_0.
template <typename T, bool Split, typename Weighting>
Sweeps backward_sweeps(const Dims& d, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       const at::Tensor& g, const at::Tensor& cumulative, float factor, const at::Tensor& state0,
                       const at::Tensor& grad_state, at::Tensor& d_state0) {
  auto final_state = at::empty({d.heads, d.c, d.m}, v.options().dtype(at::kFloat));
  at::Tensor states = added_states<T, Split, Weighting>(d, k, v, cumulative, true);
  at::Tensor grad_states = added_states<T, Split, Weighting>(d, q, g, cumulative, false, factor);
  scan(states, Weighting::scan_decays(d, cumulative), state0, &final_state, false);
  scan(grad_states, Weighting::scan_decays(d, cumulative), grad_state, &d_state0, true);
  const int64_t width = int64_t(d.c) * d.m, group = Weighting::entries_per_decay(d), per_block = kLeavingThreads / 32;
  auto x = at::empty({d.heads, d.chunks, width / group}, states.options());
  if (x.numel() > 0)
    runtime::launch(leaving_products_kernel, (x.numel() + per_block - 1) / per_block, kLeavingThreads, 0,
                    grad_states.data_ptr<float>(), states.data_ptr<float>(), final_state.data_ptr<float>(),
                    x.data_ptr<float>(), d.heads, int64_t(d.chunks), width, group);
  return {states, grad_states, x};
}

}  // namespace chunk
}  // namespace lintf
