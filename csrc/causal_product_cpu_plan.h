// What the vector paths of the CPU causal product share with the code that schedules them:
// problem sizes, the raw pointers of one call, and the table of per-head sweeps each path fills.
//
// A vector path (AVX-512, AVX2+FMA, portable) is one translation unit,
// causal_product_cpu_<path>.cpp, that compiles causal_product_sweeps.h inside a target region
// (#pragma GCC target / clang attribute) and exports a VectorPath table. The rest of the library is
// compiled for the baseline ISA, picks a table at run time from the CPU's features
// (causal_product_cpu_path.cpp) and runs its sweeps on the threads (causal_product_cpu_parallel.h).
// This header is included first, before any target region, so its inline code and everything it
// includes are compiled for the baseline ISA in every translation unit.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace lintf::cpu {

constexpr int64_t kChunk = 32;  // positions per chunk: the unit of every sweep
constexpr int64_t kAlignBytes = 64;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Sizes of one call. cp and mp pad C and M to the path's register block; a running state is a
// padded (cp x mp) matrix (or its (mp x cp) transpose), then cp normaliser entries, then padding to
// the alignment.
struct Dims {
  int64_t heads, n, c, m, cp, mp, chunks;

  Dims(int64_t heads_, int64_t n_, int64_t c_, int64_t m_, int64_t col_block)
      : heads(heads_), n(n_), c(c_), m(m_), cp(ceil_div(c_, col_block) * col_block),
        mp(ceil_div(m_, col_block) * col_block), chunks(ceil_div(n_, kChunk)) {}

  int64_t state_size() const { return cp * mp + cp; }
  int64_t state_stride() const { return ceil_div(state_size(), 16) * 16; }  // 64-byte aligned for fp32 and fp64
};

// Raw pointers of one call (all tensors contiguous) and its flags.
template <typename scalar_t, typename T>
struct Args {
  const scalar_t *q, *k, *v;
  const scalar_t *grad = nullptr, *out = nullptr;  // backward only
  const T* den = nullptr;                            // backward with normalize only
  T* gz = nullptr;                                   // backward with normalize: -(g_i / den_i) . out_i
                                                     // per position, kept by the dq sweep for dk/dv
  scalar_t* result = nullptr;                        // forward only
  T* den_out = nullptr;                              // forward with normalize only
  scalar_t *dq = nullptr, *dk = nullptr, *dv = nullptr;
  const T *kv0 = nullptr, *z0 = nullptr;             // initial state (heads, C, M), (heads, C); null: zeros
  const T *grad_kv = nullptr, *grad_z = nullptr;     // backward: gradient of the final state; null: zeros
  T *state_kv = nullptr, *state_z = nullptr;         // forward: final state; backward: initial state's gradient
  T eps = 0;
  bool normalize = false;
  bool stream_outputs = false;  // backward: gradients too large for the caches, streamed past them
};

// Which running state a sweep carries: sum k v^T (C x M) and sum k for the forward, the same
// stored value-major (M x C) for the dq sweep, sum q g^T and sum q gz for the (reverse) dk/dv sweep.
enum class StateKind { kKeyValue, kValueKey, kQueryGrad };

// The sweeps of one vector path over chunks [first, last) of one head. `state` (padded, 64-byte
// aligned, layout of the sweep's StateKind) holds the running state before the first chunk the
// sweep visits and is left holding the state after the last.
template <typename scalar_t, typename T>
struct Sweeps {
  using Fn = void (*)(const Dims&, const Args<scalar_t, T>&, int64_t head, int64_t first, int64_t last, T* state);
  // Adds the chunks' contribution to a state of the given kind (no outputs).
  void (*totals)(const Dims&, const Args<scalar_t, T>&, StateKind, int64_t head, int64_t first, int64_t last,
                 T* state);
  Fn forward;  // outputs (and denominators); kKeyValue, in order
  Fn dq;       // dq; kValueKey, in order
  Fn dkdv;     // dk and dv; kQueryGrad, from the last chunk back to the first
};

struct VectorPath {
  const char* name;  // "avx512", "avx2", "portable": the values of LINTF_CPU_PATH
  int64_t vector_bytes;
  Sweeps<float, float> f32;
  Sweeps<double, double> f64;
  Sweeps<c10::Half, float> f16;
  Sweeps<c10::BFloat16, float> bf16;

  template <typename T>
  int64_t col_block() const { return 2 * vector_bytes / static_cast<int64_t>(sizeof(T)); }

  template <typename scalar_t>
  const auto& sweeps() const {
    if constexpr (std::is_same_v<scalar_t, float>) return f32;
    else if constexpr (std::is_same_v<scalar_t, double>) return f64;
    else if constexpr (std::is_same_v<scalar_t, c10::Half>) return f16;
    else return bf16;
  }
};

// The paths this library was compiled with; avx512_path and avx2_path are null off x86-64.
const VectorPath* avx512_path();
const VectorPath* avx2_path();
const VectorPath* portable_path();

// The path calls run now: LINTF_CPU_PATH if set (a ValueError if unknown or unsupported by this
// CPU), else the widest this CPU supports. Reads the environment on every call.
const VectorPath& selected_path();
// Names of the paths this CPU can run, widest first.
std::vector<std::string> supported_paths();

// A zero-filled buffer of n elements whose data() is 64-byte aligned.
template <typename T>
class AlignedBuffer {
 public:
  explicit AlignedBuffer(int64_t n) : storage_(n + kAlignBytes / sizeof(T), T(0)) {
    const auto address = reinterpret_cast<std::uintptr_t>(storage_.data());
    data_ = storage_.data() + (kAlignBytes - address % kAlignBytes) % kAlignBytes / sizeof(T);
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  T* data() { return data_; }
  const T* data() const { return data_; }

 private:
  std::vector<T> storage_;
  T* data_;
};

}  // namespace lintf::cpu
