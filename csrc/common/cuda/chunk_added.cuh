// What each chunk adds to a decaying state, the first step of the decayed product's and gated linear
// attention's forward (decayed/cuda/chunk*.cuh, gla/cuda/chunk*.cuh) and of their backward's reverse sweep:
//   added_c = factor (W o X_c)^T Y_c,
// X rounded to the operand type after the weighting. The two ops differ only in W, the weights of the
// chunk's rows, which a Weighting policy supplies: one per row for the decayed product, one per row and
// feature for GLA's gates. A policy has
//   static int floats(int cp): the shared floats its weights take;
//   static at::Tensor cumulative(const Dims&, const at::Tensor& log): the in-chunk cumulative log-decays
//     that it and the scan read (host), and static ScanDecays scan_decays(const Dims&, cumulative): where
//     the scan (chunk_scan.cuh) finds each chunk's total among them;
//   __device__ static void weigh(const AddedArgs<T>&, const Dims&, const Block&, float* weights, float* f):
//     f (kChunk x cp, fp32, leading dimension padded_ld<float>(cp)) = W o X_c, zeros past the chunk's rows
//     and c; weights is its shared memory. Called by every thread; the caller syncs after it.
#pragma once

#include "common/cuda/chunk_grid.cuh"
#include "common/cuda/chunk_plan.cuh"

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
  size_t x, y, f, weights, scratch, bytes;
  __host__ __device__ AddedLayout(int cp, int mt) {
    tile::Carve carve;
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
  unsigned char* smem = shared_memory();
  const AddedLayout<T, Weighting> layout(d.cp, d.mt);
  T* x = tile::at<T>(smem, layout.x);
  T* y = tile::at<T>(smem, layout.y);
  float* f = tile::at<float>(smem, layout.f);
  float* scratch = tile::at<float>(smem, layout.scratch);
  const Block b(d, true);
  const int ldx = padded_ld<T>(d.cp), ldy = padded_ld<T>(d.mt), ldf = padded_ld<float>(d.mt);

  tile::load_tile(args.y + b.row0 * d.m + b.m0, d.m, b.rows, b.cols, static_cast<const float*>(nullptr), y, ldy,
                  kChunk, d.mt);
  Weighting::weigh(args, d, b, tile::at<float>(smem, layout.weights), f);
  __syncthreads();
  const float x_scale = tile::to_operand(f, padded_ld<float>(d.cp), x, ldx, kChunk, d.cp, scratch);
  __syncthreads();
  // added (cp x mt) = x^T y: x read as a column-major (cp x kChunk) operand
  tile::block_mma<T, Split, false, true>(x, ldx, y, ldy, f, ldf, d.cp, d.mt, kChunk, tile::Causal::kNone, 0.f,
                                         x_scale * args.factor);
  __syncthreads();
  tile::store_tile(f, ldf, d.c, b.cols, args.added + b.state * int64_t(d.c) * d.m + b.m0, d.m);
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

}  // namespace chunk
}  // namespace lintf
