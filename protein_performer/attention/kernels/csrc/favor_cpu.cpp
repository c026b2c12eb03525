// Fused bidirectional FAVOR (ReLU and softmax kernels) on the CPU, on a packed (B, L, 3, H, D)
// q/k/v projection.
//
// The same computation as linear_attention.PackedBidirectionalFavorFunction (features rebuilt
// in the backward, constant feature offsets added as rank-one terms), but
// one head per thread, block by block, with every elementwise step (ReLU, its mask, the key
// sum, the normaliser, the output adjoint) applied to a block while it is in cache, between
// BLAS calls on the packed layout itself. Built on first use by fused_cpu.py.
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <optional>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

extern "C" {
void sgemm_(const char*, const char*, const int*, const int*, const int*, const float*,
            const float*, const int*, const float*, const int*, const float*, float*, const int*);
void dgemm_(const char*, const char*, const int*, const int*, const int*, const double*,
            const double*, const int*, const double*, const int*, const double*, double*,
            const int*);
}

namespace {

inline void blas(const char* ta, const char* tb, const int* m, const int* n, const int* k,
                 const float* alpha, const float* a, const int* lda, const float* b,
                 const int* ldb, const float* beta, float* c, const int* ldc) {
  sgemm_(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

inline void blas(const char* ta, const char* tb, const int* m, const int* n, const int* k,
                 const double* alpha, const double* a, const int* lda, const double* b,
                 const int* ldb, const double* beta, double* c, const int* ldc) {
  dgemm_(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// Row-major C[M, N] = op(A)[M, K] op(B)[K, N] + beta C, as column-major BLAS computes
// C^T = op(B)^T op(A)^T.
template <typename T>
inline void mm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda,
               const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  const char ca = tb ? 'T' : 'N', cb = ta ? 'T' : 'N';
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  const int la = static_cast<int>(ldb), lb = static_cast<int>(lda), lc = static_cast<int>(ldc);
  const T one = T(1);
  blas(&ca, &cb, &m, &n, &k, &one, B, &la, A, &lb, &beta, C, &lc);
}

// Normalisers below this count as 0 (linear_attention.den_floor).
template <typename T>
T den_floor() {
  return std::numeric_limits<T>::min() * T(16777216.0);
}

// What one head works on: pointers into the packed tensors and their row strides.
template <typename T>
struct Head {
  const T* q;
  const T* k;
  const T* v;
  int64_t ld;        // row stride of q, k, v (and of their gradients)
  const T* w;        // (m, D) query projection (the query scale folded in)
  const T* wk;       // (m, D) key projection
  const bool* mask;  // (L,) true = padded key, or null
};

template <typename T>
Head<T> head(const at::Tensor& qkv, const at::Tensor& w, const at::Tensor& wk,
             const std::optional<at::Tensor>& mask, int64_t n) {
  const int64_t H = qkv.size(3), L = qkv.size(1), D = qkv.size(4), m = w.size(1);
  const int64_t b = n / H, h = n % H;
  const T* q = qkv.data_ptr<T>() + b * qkv.stride(0) + h * qkv.stride(3);
  const bool* mk = mask.has_value() ? mask->data_ptr<bool>() + n * L : nullptr;
  return {q,
          q + qkv.stride(2),
          q + 2 * qkv.stride(2),
          qkv.stride(1),
          w.data_ptr<T>() + n * m * D,
          wk.data_ptr<T>() + n * m * D,
          mk};
}

// Elementwise passes over a block in cache, compiled for several instruction sets and picked
// at load time (the build is cached and may be shared between machines: no -march=native).
// Their sums and maxima run in LANES partial results (lane_sum, lane_max), which vectorise:
// a single float accumulator does not without -ffast-math, whose other assumptions would break
// the -inf and NaN handling (measured: a row softmax 2.5x faster so).
#if defined(__GNUC__) && defined(__x86_64__) && !defined(__clang__)
#define PP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define PP_CLONES
#endif
#define PP_INLINE inline __attribute__((always_inline))

constexpr int LANES = 16;

// Σ_{j < m} f(j) (f may also write: it runs once per j, in order within each lane).
template <typename T, typename F>
PP_INLINE T lane_sum(int64_t m, F f) {
  T acc[LANES] = {};
  int64_t j = 0;
  for (; j + LANES <= m; j += LANES)
    for (int i = 0; i < LANES; ++i) acc[i] += f(j + i);
  T sum = T(0);
  for (int i = 0; i < LANES; ++i) sum += acc[i];
  for (; j < m; ++j) sum += f(j);
  return sum;
}

// max(init, max_{j < m} f(j)), NaN values passed over (f may also write, as for lane_sum).
template <typename T, typename F>
PP_INLINE T lane_max(int64_t m, T init, F f) {
  T acc[LANES];
  for (int i = 0; i < LANES; ++i) acc[i] = init;
  int64_t j = 0;
  for (; j + LANES <= m; j += LANES)
    for (int i = 0; i < LANES; ++i) {
      const T v = f(j + i);
      acc[i] = v > acc[i] ? v : acc[i];
    }
  T top = init;
  for (int i = 0; i < LANES; ++i) top = acc[i] > top ? acc[i] : top;
  for (; j < m; ++j) {
    const T v = f(j);
    top = v > top ? v : top;
  }
  return top;
}

// relu in place over R rows of m (padded rows zeroed; NaN stays NaN, as torch.relu, so a
// diverging step shows); adds each row into ksum (keys), or writes its dot with ksum into
// den (queries).
template <typename T>
PP_CLONES void relu_rows(T* __restrict__ phi, int64_t R, int64_t m, const bool* mask,
                         T* __restrict__ ksum, const T* __restrict__ kdot, T* __restrict__ den) {
  for (int64_t r = 0; r < R; ++r) {
    T* __restrict__ row = phi + r * m;
    if (mask && mask[r]) {
      std::fill(row, row + m, T(0));
      if (den) den[r] = T(0);
      continue;
    }
    if (kdot) {  // queries
      den[r] = lane_sum<T>(m, [&](int64_t j) {
        const T x = row[j] < T(0) ? T(0) : row[j];
        row[j] = x;
        return x * kdot[j];
      });
      continue;
    }
    for (int64_t j = 0; j < m; ++j) {
      const T x = row[j] < T(0) ? T(0) : row[j];
      row[j] = x;
      if (ksum) ksum[j] += x;
    }
  }
}

// dphi <- where(phi <= 0, 0, dphi + a_r * ksum) row by row (a NaN feature passes the gradient,
// as torch's threshold_backward does) (a null: a_r = 1, the keys' dksum
// term); with acc, also acc_j += Σ_r phi_rj a_r (the normaliser's part of the summary gradient).
template <typename T>
PP_CLONES void relu_grad_rows(T* __restrict__ dphi, const T* __restrict__ phi, int64_t R,
                              int64_t m, const T* __restrict__ a, const T* __restrict__ add,
                              T* __restrict__ acc) {
  for (int64_t r = 0; r < R; ++r) {
    T* __restrict__ dr = dphi + r * m;
    const T* __restrict__ pr = phi + r * m;
    const T ar = a ? a[r] : T(1);
    for (int64_t j = 0; j < m; ++j) {
      dr[j] = pr[j] <= T(0) ? T(0) : dr[j] + ar * add[j];
      if (acc) acc[j] += pr[j] * ar;
    }
  }
}

// phi[R, m] = X W^T for R rows of X (row stride ld), then relu_rows.
template <typename T>
void features(const T* X, int64_t ld, const T* W, int64_t R, int64_t m, int64_t D,
              const bool* mask, T* phi, T* ksum, const T* kdot, T* den) {
  mm<T>(false, true, R, m, D, X, ld, W, D, T(0), phi, m);
  relu_rows<T>(phi, R, m, mask, ksum, kdot, den);
}

bool any_of(const bool* mask, int64_t R) {
  return mask && std::any_of(mask, mask + R, [](bool x) { return x; });
}

// The values of rows [r0, r0 + R) as BLAS reads them (row stride *ldv): in place, or, in a
// block with padded rows, a copy in vz with those rows zeroed (padded values may hold
// anything: never 0 * inf).
template <typename T>
const T* values_block(const Head<T>& hd, int64_t r0, int64_t R, int64_t D, const bool* mb,
                      T* vz, int64_t* ldv) {
  const T* V = hd.v + r0 * hd.ld;
  *ldv = hd.ld;
  if (!any_of(mb, R)) return V;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t d = 0; d < D; ++d) vz[r * D + d] = mb[r] ? T(0) : V[r * hd.ld + d];
  *ldv = D;
  return vz;
}

// Saves the summary [Sv, ksum] as state S (m, D+1), the PyTorch kernel's layout, and returns
// the query features' constant eps as rank-one terms: qterm = eps Σ_j Sv[j, :] (written) and
// eps Σ_j ksum[j] (returned).
template <typename T>
T save_summary(const T* Sv, const T* ksum, int64_t m, int64_t D, T eps, T* S, T* qterm) {
  std::fill(qterm, qterm + D, T(0));
  T qden = T(0);
  for (int64_t j = 0; j < m; ++j) {
    qden += ksum[j];
    for (int64_t d = 0; d < D; ++d) {
      qterm[d] += Sv[j * D + d];
      S[j * (D + 1) + d] = Sv[j * D + d];
    }
    S[j * (D + 1) + D] = ksum[j];
  }
  for (int64_t d = 0; d < D; ++d) qterm[d] *= eps;
  return qden * eps;
}

// Where head h of batch element b writes dq, dk, dv in the packed gradient, and their row stride.
template <typename T>
struct Grads {
  T* q;
  T* k;
  T* v;
  int64_t ld;
};

template <typename T>
Grads<T> grads(at::Tensor& dqkv, int64_t b, int64_t h) {
  T* q = dqkv.data_ptr<T>() + b * dqkv.stride(0) + h * dqkv.stride(3);
  return {q, q + dqkv.stride(2), q + 2 * dqkv.stride(2), dqkv.stride(1)};
}

// Zeroes the backward's accumulators (the summary's gradient and the output adjoint's sums).
template <typename T>
void zero(std::vector<T>& dSv, std::vector<T>& dksum, std::vector<T>& gsum) {
  for (auto* v : {&dSv, &dksum, &gsum}) std::fill(v->begin(), v->end(), T(0));
}

// The summary back from state S (m, D+1) into Sv (m, D) and ksum (m).
template <typename T>
void load_summary(const T* S, int64_t m, int64_t D, T* Sv, T* ksum) {
  for (int64_t j = 0; j < m; ++j) {
    std::copy(S + j * (D + 1), S + j * (D + 1) + D, Sv + j * D);
    ksum[j] = S[j * (D + 1) + D];
  }
}

// R output rows ob (row stride ldo) holding φ(q) Sv, and dn their φ(q)·ksum: adds the eps
// terms and divides (linear_attention.split_output: 0 where the normaliser is below the floor);
// dn becomes the normaliser.
template <typename T>
void normalise_rows(T* ob, int64_t ldo, T* dn, int64_t R, int64_t D, T qden, const T* qterm) {
  const T floor = den_floor<T>();
  for (int64_t r = 0; r < R; ++r) {
    const T dd = dn[r] + qden;
    dn[r] = dd;
    T* __restrict__ o = ob + r * ldo;
    if (dd < floor) {
      std::fill(o, o + D, T(0));
    } else {
      const T inv = T(1) / dd;
      for (int64_t d = 0; d < D; ++d) o[d] = (o[d] + qterm[d]) * inv;
    }
  }
}

// dLoss/d[numerator, normaliser] of R rows (linear_attention.output_adjoint) from the output
// gradient g0 and output o0 (row strides ldg, ldo) and the normalisers dn: gv (R, D) and a (R);
// adds gv's rows into gsum and returns Σ a.
template <typename T>
T output_adjoint_rows(const T* g0, int64_t ldg, const T* o0, int64_t ldo, const T* dn, int64_t R,
                      int64_t D, T* gv, T* a, T* gsum) {
  const T floor = den_floor<T>();
  T asum = T(0);
  for (int64_t r = 0; r < R; ++r) {
    const T inv = dn[r] >= floor ? T(1) / dn[r] : T(0);
    const T* gr = g0 + r * ldg;
    const T* o = o0 + r * ldo;
    T* __restrict__ gr_v = gv + r * D;
    T dot = T(0);
    for (int64_t d = 0; d < D; ++d) {
      gr_v[d] = gr[d] * inv;
      dot += gr[d] * o[d];
      gsum[d] += gr_v[d];
    }
    a[r] = -dot * inv;
    asum += a[r];
  }
  return asum;
}

// The summary is kept as Sv = Σ φ(k) vᵀ (m, D) and ksum = Σ φ(k) (m): products of 64 columns
// run faster than of the 65 of [Sv, ksum], and the ksum terms ride on the elementwise passes.
// Saved for the backward as state (m, D+1) = [Sv, ksum], the PyTorch kernel's layout.
template <typename T>
void forward_impl(const at::Tensor& qkv, const at::Tensor& w, const at::Tensor& wk,
                  const std::optional<at::Tensor>& mask, T eps, int64_t rows, at::Tensor& out,
                  at::Tensor& den, at::Tensor& state) {
  const int64_t B = qkv.size(0), L = qkv.size(1), H = qkv.size(3), D = qkv.size(4);
  const int64_t m = w.size(1), D1 = D + 1;
  T* out_p = out.data_ptr<T>();
  T* den_p = den.data_ptr<T>();
  T* state_p = state.data_ptr<T>();
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> phi(rows * m), vz(rows * D), Sv(m * D), ksum(m), vsum(D), qterm(D);
    for (int64_t n = begin; n < end; ++n) {
      const Head<T> hd = head<T>(qkv, w, wk, mask, n);
      std::fill(Sv.begin(), Sv.end(), T(0));
      std::fill(ksum.begin(), ksum.end(), T(0));
      std::fill(vsum.begin(), vsum.end(), T(0));
      int64_t count = 0;
      for (int64_t r0 = 0; r0 < L; r0 += rows) {
        const int64_t R = std::min(rows, L - r0);
        const bool* mb = hd.mask ? hd.mask + r0 : nullptr;
        features<T>(hd.k + r0 * hd.ld, hd.ld, hd.wk, R, m, D, mb, phi.data(), ksum.data(),
                    nullptr, nullptr);
        int64_t ldv;
        const T* V = values_block<T>(hd, r0, R, D, mb, vz.data(), &ldv);
        mm<T>(true, false, m, D, R, phi.data(), m, V, ldv, T(1), Sv.data(), D);
        for (int64_t r = 0; r < R; ++r) {
          if (mb && mb[r]) continue;
          for (int64_t d = 0; d < D; ++d) vsum[d] += V[r * ldv + d];
          ++count;
        }
      }
      // the kernel epsilon on every valid key feature: + eps · [Σ v, count] on every row
      for (int64_t j = 0; j < m; ++j) {
        ksum[j] += eps * T(count);
        for (int64_t d = 0; d < D; ++d) Sv[j * D + d] += eps * vsum[d];
      }
      // ... and on every query feature: + eps · Σ_j [Sv, ksum][j] on every output row
      const T qden =
          save_summary<T>(Sv.data(), ksum.data(), m, D, eps, state_p + n * m * D1, qterm.data());
      const int64_t b = n / H, h = n % H;
      const int64_t ldo = out.stride(1);
      T* dn = den_p + n * L;
      for (int64_t r0 = 0; r0 < L; r0 += rows) {
        const int64_t R = std::min(rows, L - r0);
        features<T>(hd.q + r0 * hd.ld, hd.ld, hd.w, R, m, D, nullptr, phi.data(), nullptr,
                    ksum.data(), dn + r0);
        T* ob = out_p + b * out.stride(0) + r0 * ldo + h * D;
        mm<T>(false, false, R, D, m, phi.data(), m, Sv.data(), D, T(0), ob, ldo);
        normalise_rows<T>(ob, ldo, dn + r0, R, D, qden, qterm.data());
      }
    }
  });
}

template <typename T>
void backward_impl(const at::Tensor& g, const at::Tensor& qkv, const at::Tensor& w,
                   const at::Tensor& wk,
                   const std::optional<at::Tensor>& mask, T eps, int64_t rows,
                   const at::Tensor& out, const at::Tensor& den, const at::Tensor& state,
                   at::Tensor& dqkv) {
  const int64_t B = qkv.size(0), L = qkv.size(1), H = qkv.size(3), D = qkv.size(4);
  const int64_t m = w.size(1), D1 = D + 1;
  const T* g_p = g.data_ptr<T>();
  const T* out_p = out.data_ptr<T>();
  const T* den_p = den.data_ptr<T>();
  const T* state_p = state.data_ptr<T>();
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> phi(rows * m), dphi(rows * m), gv(rows * D), a(rows), Sv(m * D), ksum(m),
        dSv(m * D), dksum(m), gsum(D), vterm(D);
    for (int64_t n = begin; n < end; ++n) {
      const Head<T> hd = head<T>(qkv, w, wk, mask, n);
      const int64_t b = n / H, h = n % H;
      const auto [dq, dk, dv, ldd] = grads<T>(dqkv, b, h);
      load_summary<T>(state_p + n * m * D1, m, D, Sv.data(), ksum.data());
      const T* dn = den_p + n * L;
      zero(dSv, dksum, gsum);
      T asum = T(0);
      for (int64_t r0 = 0; r0 < L; r0 += rows) {
        const int64_t R = std::min(rows, L - r0);
        features<T>(hd.q + r0 * hd.ld, hd.ld, hd.w, R, m, D, nullptr, phi.data(), nullptr,
                    nullptr, nullptr);
        asum += output_adjoint_rows<T>(
            g_p + b * g.stride(0) + r0 * g.stride(1) + h * D, g.stride(1),
            out_p + b * out.stride(0) + r0 * out.stride(1) + h * D, out.stride(1), dn + r0, R, D,
            gv.data(), a.data(), gsum.data());
        // dφ(q) = gv Svᵀ + a ksumᵀ, through the relu; dksum += φ(q)ᵀ a
        mm<T>(false, true, R, m, D, gv.data(), D, Sv.data(), D, T(0), dphi.data(), m);
        relu_grad_rows<T>(dphi.data(), phi.data(), R, m, a.data(), ksum.data(), dksum.data());
        mm<T>(false, false, R, D, m, dphi.data(), m, hd.w, D, T(0), dq + r0 * ldd, ldd);
        mm<T>(true, false, m, D, R, phi.data(), m, gv.data(), D, T(1), dSv.data(), D);
      }
      // the query features' epsilon: dS += eps · Σ_rows [gv, a] on every row
      std::fill(vterm.begin(), vterm.end(), T(0));
      for (int64_t j = 0; j < m; ++j) {
        dksum[j] += eps * asum;
        for (int64_t d = 0; d < D; ++d) {
          dSv[j * D + d] += eps * gsum[d];
          vterm[d] += dSv[j * D + d];
        }
      }
      for (int64_t d = 0; d < D; ++d) vterm[d] *= eps;  // the key features' epsilon, on dv
      for (int64_t r0 = 0; r0 < L; r0 += rows) {
        const int64_t R = std::min(rows, L - r0);
        const bool* mb = hd.mask ? hd.mask + r0 : nullptr;
        features<T>(hd.k + r0 * hd.ld, hd.ld, hd.wk, R, m, D, mb, phi.data(), nullptr, nullptr,
                    nullptr);
        T* dvb = dv + r0 * ldd;
        mm<T>(false, false, R, D, m, phi.data(), m, dSv.data(), D, T(0), dvb, ldd);
        for (int64_t r = 0; r < R; ++r) {
          T* __restrict__ row = dvb + r * ldd;
          if (mb && mb[r]) {
            std::fill(row, row + D, T(0));
          } else {
            for (int64_t d = 0; d < D; ++d) row[d] += vterm[d];
          }
        }
        // dφ(k) = v dSvᵀ + dksumᵀ, through the relu; a padded row (phi 0) is selected away,
        // whatever its v holds
        mm<T>(false, true, R, m, D, hd.v + r0 * hd.ld, hd.ld, dSv.data(), D, T(0), dphi.data(),
              m);
        relu_grad_rows<T>(dphi.data(), phi.data(), R, m, nullptr, dksum.data(), nullptr);
        mm<T>(false, false, R, D, m, dphi.data(), m, hd.wk, D, T(0), dk + r0 * ldd, ldd);
      }
    }
  });
}

// ---- softmax kernel (positive random features, the OPRF/FAVOR+ family) ----------------------
// Keys: exp(k·w_j + row_r + bias_j - ref), row_r = -ksq |k_r|², against a running max ref over
// the keys seen (the summary rescaled when it grows; linear_attention.RunningMax). Queries:
// softmax_j(q·w_j) + eps, the eps as rank-one terms. Padded keys: logit -inf, features 0.

// exp for the elementwise loops. float: Cephes' expf (range reduction by ln 2, a degree-6
// polynomial; ~1 ulp), written in plain arithmetic so that the loops vectorise without
// -ffast-math, which would also drop the -inf and NaN semantics this kernel relies on:
// exp(-inf) = 0 (padded keys), NaN stays NaN, overflow gives inf. double (the tests' precision):
// the library's exp.
inline double exp_of(double x) { return std::exp(x); }

PP_INLINE float exp_of(float x) {
  // exp overflows above hi and leaves the normal range below lo (flushed to 0 there)
  const float hi = 88.72283905206835f, lo = -87.33654475055310f;
  const bool nan = x != x;
  float xc = x > hi ? hi : x;
  xc = xc < lo ? lo : xc;
  xc = nan ? 0.0f : xc;
  // n = round(x / ln 2) by the 1.5 * 2^23 trick (plain arithmetic: vectorises)
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;
  const float r2 = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r2 + r + 1.0f;
  // 2^n as a float's exponent bits, n in -126..128 (the clamps above); 2^128 is not a float,
  // so n above 127 (x in 88.03..88.72) takes its last factor 2 apart
  const int32_t ni = static_cast<int32_t>(n);
  const int32_t n1 = ni > 127 ? 127 : ni;
  const int32_t bits = (n1 + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  float out = y * scale * (ni > 127 ? 2.0f : 1.0f);
  out = x < lo ? 0.0f : out;
  out = x > hi ? std::numeric_limits<float>::infinity() : out;
  return nan ? x : out;
}

// logits[R, m] += row_r rc_j + bias_j in place (padded rows: -inf); returns the largest one
// (-inf if none). A NaN logit is not a maximum; it stays NaN in the features, so it shows.
template <typename T>
PP_CLONES T key_logit_rows(T* __restrict__ logit, int64_t R, int64_t m,
                           const T* __restrict__ row, const T* __restrict__ rc,
                           const T* __restrict__ bias, const bool* mask) {
  T best = -std::numeric_limits<T>::infinity();
  for (int64_t r = 0; r < R; ++r) {
    T* __restrict__ x = logit + r * m;
    if (mask && mask[r]) {
      std::fill(x, x + m, -std::numeric_limits<T>::infinity());
      continue;
    }
    const T add = row[r];
    best = lane_max<T>(m, best, [&](int64_t j) {
      const T v = x[j] + add * rc[j] + bias[j];
      x[j] = v;
      return v;
    });
  }
  return best;
}

// x <- exp(x - ref) in place; with ksum, ksum_j += Σ_r x_rj.
template <typename T>
PP_CLONES void exp_rows(T* __restrict__ x, int64_t n_rows, int64_t m, T ref,
                        T* __restrict__ ksum) {
  for (int64_t r = 0; r < n_rows; ++r) {
    T* __restrict__ row = x + r * m;
    for (int64_t j = 0; j < m; ++j) row[j] = exp_of(row[j] - ref);
    if (ksum)
      for (int64_t j = 0; j < m; ++j) ksum[j] += row[j];
  }
}

// Row-wise softmax in place; with kdot, den_r = Σ_j p_rj kdot_j.
template <typename T>
PP_CLONES void softmax_rows(T* __restrict__ x, int64_t R, int64_t m, const T* __restrict__ kdot,
                            T* __restrict__ den) {
  for (int64_t r = 0; r < R; ++r) {
    T* __restrict__ row = x + r * m;
    const T top =
        lane_max<T>(m, -std::numeric_limits<T>::infinity(), [&](int64_t j) { return row[j]; });
    const T sum = lane_sum<T>(m, [&](int64_t j) { return row[j] = exp_of(row[j] - top); });
    const T inv = T(1) / sum;
    if (!kdot) {
      for (int64_t j = 0; j < m; ++j) row[j] *= inv;
      continue;
    }
    den[r] = lane_sum<T>(m, [&](int64_t j) { return (row[j] *= inv) * kdot[j]; });
  }
}

// Query side of the backward: dphi += a_r ksum_j and dksum_j += p_rj a_r, then dphi becomes
// the softmax's input gradient p ⊙ (dphi − Σ_j dphi_j p_j).
template <typename T>
PP_CLONES void softmax_grad_rows(T* __restrict__ dphi, const T* __restrict__ p, int64_t R,
                                 int64_t m, const T* __restrict__ a, const T* __restrict__ ksum,
                                 T* __restrict__ dksum) {
  for (int64_t r = 0; r < R; ++r) {
    T* __restrict__ d = dphi + r * m;
    const T* __restrict__ pr = p + r * m;
    const T ar = a[r];
    const T dot = lane_sum<T>(m, [&](int64_t j) {
      dksum[j] += pr[j] * ar;
      return (d[j] += ar * ksum[j]) * pr[j];
    });
    for (int64_t j = 0; j < m; ++j) d[j] = pr[j] * (d[j] - dot);
  }
}

// Key side of the backward: g = (dphi + dksum_j) ⊙ phi, 0 where phi == 0 (whatever a padded
// row's value made of dphi), and rs_r = Σ_j g_rj rc_j (the row term's gradient).
template <typename T>
PP_CLONES void key_grad_rows(T* __restrict__ dphi, const T* __restrict__ phi, int64_t R,
                             int64_t m, const T* __restrict__ dksum, const T* __restrict__ rc,
                             T* __restrict__ rs) {
  for (int64_t r = 0; r < R; ++r) {
    T* __restrict__ d = dphi + r * m;
    const T* __restrict__ pr = phi + r * m;
    rs[r] = lane_sum<T>(m, [&](int64_t j) {
      const T g = pr[j] == T(0) ? T(0) : (d[j] + dksum[j]) * pr[j];
      d[j] = g;
      return g * rc[j];
    });
  }
}

// Key features of a block against ref (exp_rows after the logits); fills row with the row
// terms. Returns the block's largest logit (NaN passed over; -inf if all padded).
template <typename T>
T key_logits(const Head<T>& hd, int64_t r0, int64_t R, int64_t m, int64_t D, const T* rc,
             const T* bias, T ksq, const bool* mb, T* phi, T* row) {
  const T* K = hd.k + r0 * hd.ld;
  mm<T>(false, true, R, m, D, K, hd.ld, hd.wk, D, T(0), phi, m);
  for (int64_t r = 0; r < R; ++r) {
    if (mb && mb[r]) {
      row[r] = T(0);
      continue;
    }
    T sq = T(0);
    for (int64_t d = 0; d < D; ++d) sq += K[r * hd.ld + d] * K[r * hd.ld + d];
    row[r] = -ksq * sq;
  }
  return key_logit_rows<T>(phi, R, m, row, rc, bias, mb);
}

template <typename T>
void softmax_forward_impl(const at::Tensor& qkv, const at::Tensor& w, const at::Tensor& wk,
                          const at::Tensor& rc, const at::Tensor& bias,
                          const std::optional<at::Tensor>& mask, T ksq, T eps, int64_t rows,
                          at::Tensor& out, at::Tensor& den, at::Tensor& state, at::Tensor& ref) {
  const int64_t B = qkv.size(0), L = qkv.size(1), H = qkv.size(3), D = qkv.size(4);
  const int64_t m = w.size(1), D1 = D + 1;
  T* out_p = out.data_ptr<T>();
  T* den_p = den.data_ptr<T>();
  T* state_p = state.data_ptr<T>();
  T* ref_p = ref.data_ptr<T>();
  const T* bias_p = bias.data_ptr<T>();
  const T inf = std::numeric_limits<T>::infinity();
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> phi(rows * m), vz(rows * D), Sv(m * D), ksum(m), qterm(D), row(rows);
    for (int64_t n = begin; n < end; ++n) {
      const Head<T> hd = head<T>(qkv, w, wk, mask, n);
      const T* bn = bias_p + n * m;
      const T* rcn = rc.data_ptr<T>() + n * m;
      std::fill(Sv.begin(), Sv.end(), T(0));
      std::fill(ksum.begin(), ksum.end(), T(0));
      T raw = -inf, stab = T(0);  // the running max, and what the features are taken against
      for (int64_t r0 = 0; r0 < L; r0 += rows) {
        const int64_t R = std::min(rows, L - r0);
        const bool* mb = hd.mask ? hd.mask + r0 : nullptr;
        const T top =
            key_logits<T>(hd, r0, R, m, D, rcn, bn, ksq, mb, phi.data(), row.data());
        const T new_raw = std::max(raw, top);
        const T new_stab = std::isfinite(new_raw) ? new_raw : T(0);
        if (new_stab != stab) {  // the sums so far, to the new stabiliser
          const T factor = std::isfinite(raw) ? std::exp(stab - new_stab) : T(0);
          for (auto& x : Sv) x *= factor;
          for (auto& x : ksum) x *= factor;
        }
        raw = new_raw;
        stab = new_stab;
        exp_rows<T>(phi.data(), R, m, stab, ksum.data());
        int64_t ldv;
        const T* V = values_block<T>(hd, r0, R, D, mb, vz.data(), &ldv);
        mm<T>(true, false, m, D, R, phi.data(), m, V, ldv, T(1), Sv.data(), D);
      }
      ref_p[n] = stab;
      // the query features' eps (the keys' features have none)
      const T qden =
          save_summary<T>(Sv.data(), ksum.data(), m, D, eps, state_p + n * m * D1, qterm.data());
      const int64_t b = n / H, h = n % H;
      const int64_t ldo = out.stride(1);
      T* dn = den_p + n * L;
      for (int64_t r0 = 0; r0 < L; r0 += rows) {
        const int64_t R = std::min(rows, L - r0);
        mm<T>(false, true, R, m, D, hd.q + r0 * hd.ld, hd.ld, hd.w, D, T(0), phi.data(), m);
        softmax_rows<T>(phi.data(), R, m, ksum.data(), dn + r0);
        T* ob = out_p + b * out.stride(0) + r0 * ldo + h * D;
        mm<T>(false, false, R, D, m, phi.data(), m, Sv.data(), D, T(0), ob, ldo);
        normalise_rows<T>(ob, ldo, dn + r0, R, D, qden, qterm.data());
      }
    }
  });
}

template <typename T>
void softmax_backward_impl(const at::Tensor& g, const at::Tensor& qkv, const at::Tensor& w,
                           const at::Tensor& wk, const at::Tensor& rc, const at::Tensor& bias,
                           const std::optional<at::Tensor>& mask, T ksq,
                           T eps, int64_t rows, const at::Tensor& out, const at::Tensor& den,
                           const at::Tensor& state, const at::Tensor& ref, at::Tensor& dqkv) {
  const int64_t B = qkv.size(0), L = qkv.size(1), H = qkv.size(3), D = qkv.size(4);
  const int64_t m = w.size(1), D1 = D + 1;
  const T* g_p = g.data_ptr<T>();
  const T* out_p = out.data_ptr<T>();
  const T* den_p = den.data_ptr<T>();
  const T* state_p = state.data_ptr<T>();
  const T* ref_p = ref.data_ptr<T>();
  const T* bias_p = bias.data_ptr<T>();
  at::parallel_for(0, B * H, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> phi(rows * m), dphi(rows * m), gv(rows * D), a(rows), Sv(m * D), ksum(m),
        dSv(m * D), dksum(m), gsum(D), row(rows), rs(rows);
    for (int64_t n = begin; n < end; ++n) {
      const Head<T> hd = head<T>(qkv, w, wk, mask, n);
      const T* bn = bias_p + n * m;
      const T* rcn = rc.data_ptr<T>() + n * m;
      const int64_t b = n / H, h = n % H;
      const auto [dq, dk, dv, ldd] = grads<T>(dqkv, b, h);
      load_summary<T>(state_p + n * m * D1, m, D, Sv.data(), ksum.data());
      const T* dn = den_p + n * L;
      zero(dSv, dksum, gsum);
      T asum = T(0);
      for (int64_t r0 = 0; r0 < L; r0 += rows) {
        const int64_t R = std::min(rows, L - r0);
        mm<T>(false, true, R, m, D, hd.q + r0 * hd.ld, hd.ld, hd.w, D, T(0), phi.data(), m);
        softmax_rows<T>(phi.data(), R, m, nullptr, nullptr);
        asum += output_adjoint_rows<T>(
            g_p + b * g.stride(0) + r0 * g.stride(1) + h * D, g.stride(1),
            out_p + b * out.stride(0) + r0 * out.stride(1) + h * D, out.stride(1), dn + r0, R, D,
            gv.data(), a.data(), gsum.data());
        mm<T>(false, true, R, m, D, gv.data(), D, Sv.data(), D, T(0), dphi.data(), m);
        mm<T>(true, false, m, D, R, phi.data(), m, gv.data(), D, T(1), dSv.data(), D);
        softmax_grad_rows<T>(dphi.data(), phi.data(), R, m, a.data(), ksum.data(), dksum.data());
        mm<T>(false, false, R, D, m, dphi.data(), m, hd.w, D, T(0), dq + r0 * ldd, ldd);
      }
      for (int64_t j = 0; j < m; ++j) {  // the query features' eps: + eps · Σ_rows [gv, a]
        dksum[j] += eps * asum;
        for (int64_t d = 0; d < D; ++d) dSv[j * D + d] += eps * gsum[d];
      }
      const T stab = ref_p[n];
      for (int64_t r0 = 0; r0 < L; r0 += rows) {
        const int64_t R = std::min(rows, L - r0);
        const bool* mb = hd.mask ? hd.mask + r0 : nullptr;
        key_logits<T>(hd, r0, R, m, D, rcn, bn, ksq, mb, phi.data(), row.data());
        exp_rows<T>(phi.data(), R, m, stab, nullptr);
        T* dvb = dv + r0 * ldd;
        mm<T>(false, false, R, D, m, phi.data(), m, dSv.data(), D, T(0), dvb, ldd);
        mm<T>(false, true, R, m, D, hd.v + r0 * hd.ld, hd.ld, dSv.data(), D, T(0), dphi.data(),
              m);
        key_grad_rows<T>(dphi.data(), phi.data(), R, m, dksum.data(), rcn, rs.data());
        T* dkb = dk + r0 * ldd;
        mm<T>(false, false, R, D, m, dphi.data(), m, hd.wk, D, T(0), dkb, ldd);
        const T* K = hd.k + r0 * hd.ld;
        for (int64_t r = 0; r < R; ++r) {
          T* __restrict__ dkr = dkb + r * ldd;
          if (mb && mb[r]) {  // padded: no gradient, whatever k or v hold
            std::fill(dkr, dkr + D, T(0));
            std::fill(dvb + r * ldd, dvb + r * ldd + D, T(0));
            continue;
          }
          const T c = T(-2) * ksq * rs[r];  // d(row term)/dk = -2 ksq k
          for (int64_t d = 0; d < D; ++d) dkr[d] += c * K[r * hd.ld + d];
        }
      }
    }
  });
}

void check(const at::Tensor& qkv, const at::Tensor& w, const at::Tensor& wk,
           const std::optional<at::Tensor>& mask, int64_t rows) {
  TORCH_CHECK(qkv.device().is_cpu() && qkv.dim() == 5 && qkv.size(2) == 3 && qkv.is_contiguous(),
              "qkv must be a contiguous CPU tensor (B, L, 3, H, D)");
  TORCH_CHECK(qkv.scalar_type() == at::kFloat || qkv.scalar_type() == at::kDouble,
              "qkv must be float32 or float64");
  const int64_t n = qkv.size(0) * qkv.size(3);
  TORCH_CHECK(w.scalar_type() == qkv.scalar_type() && w.is_contiguous() && w.dim() == 3 &&
                  w.size(0) == n && w.size(2) == qkv.size(4),
              "w must be a contiguous (B*H, m, D) tensor of qkv's dtype");
  TORCH_CHECK(wk.scalar_type() == w.scalar_type() && wk.is_contiguous() && wk.sizes() == w.sizes(),
              "wk must be a contiguous tensor like w");
  if (mask.has_value())
    TORCH_CHECK(mask->scalar_type() == at::kBool && mask->is_contiguous() && mask->dim() == 2 &&
                    mask->size(0) == n && mask->size(1) == qkv.size(1),
                "mask must be a contiguous bool (B*H, L) tensor");
  TORCH_CHECK(rows > 0, "rows must be positive");
  // BLAS takes int dimensions and leading dimensions
  TORCH_CHECK(qkv.stride(1) <= std::numeric_limits<int>::max() &&
                  rows * w.size(1) <= std::numeric_limits<int>::max(),
              "sizes beyond BLAS's int range");
}

}  // namespace

std::vector<at::Tensor> relu_forward(const at::Tensor& qkv, const at::Tensor& w,
                                     const at::Tensor& wk,
                                     const std::optional<at::Tensor>& mask, double eps,
                                     int64_t rows) {
  check(qkv, w, wk, mask, rows);
  const int64_t B = qkv.size(0), L = qkv.size(1), H = qkv.size(3), D = qkv.size(4);
  auto out = at::empty({B, L, H, D}, qkv.options());
  auto den = at::empty({B, H, L}, qkv.options());
  auto state = at::zeros({B, H, w.size(1), D + 1}, qkv.options());
  {
    pybind11::gil_scoped_release no_gil;
    AT_DISPATCH_FLOATING_TYPES(qkv.scalar_type(), "favor_relu_forward", [&] {
      forward_impl<scalar_t>(qkv, w, wk, mask, static_cast<scalar_t>(eps), rows, out, den, state);
    });
  }
  return {out, den, state};
}

at::Tensor relu_backward(const at::Tensor& g, const at::Tensor& qkv, const at::Tensor& w,
                         const at::Tensor& wk,
                         const std::optional<at::Tensor>& mask, double eps, int64_t rows,
                         const at::Tensor& out, const at::Tensor& den, const at::Tensor& state) {
  check(qkv, w, wk, mask, rows);
  TORCH_CHECK(g.sizes() == out.sizes() && g.is_contiguous() && g.scalar_type() == qkv.scalar_type(),
              "g must be a contiguous tensor like the output");
  auto dqkv = at::empty_like(qkv);
  {
    pybind11::gil_scoped_release no_gil;
    AT_DISPATCH_FLOATING_TYPES(qkv.scalar_type(), "favor_relu_backward", [&] {
      backward_impl<scalar_t>(g, qkv, w, wk, mask, static_cast<scalar_t>(eps), rows, out, den,
                              state, dqkv);
    });
  }
  return dqkv;
}

std::vector<at::Tensor> softmax_forward(const at::Tensor& qkv, const at::Tensor& w,
                                        const at::Tensor& wk, const at::Tensor& rc,
                                        const at::Tensor& bias,
                                        const std::optional<at::Tensor>& mask, double ksq,
                                        double eps, int64_t rows) {
  check(qkv, w, wk, mask, rows);
  for (const at::Tensor* t : {&rc, &bias})
    TORCH_CHECK(t->scalar_type() == qkv.scalar_type() && t->is_contiguous() && t->dim() == 2 &&
                    t->size(0) == w.size(0) && t->size(1) == w.size(1),
                "rc and bias must be contiguous (B*H, m) tensors of qkv's dtype");
  const int64_t B = qkv.size(0), L = qkv.size(1), H = qkv.size(3), D = qkv.size(4);
  auto out = at::empty({B, L, H, D}, qkv.options());
  auto den = at::empty({B, H, L}, qkv.options());
  auto state = at::empty({B, H, w.size(1), D + 1}, qkv.options());
  auto ref = at::empty({B, H}, qkv.options());
  {
    pybind11::gil_scoped_release no_gil;
    AT_DISPATCH_FLOATING_TYPES(qkv.scalar_type(), "favor_softmax_forward", [&] {
      softmax_forward_impl<scalar_t>(qkv, w, wk, rc, bias, mask, static_cast<scalar_t>(ksq),
                                     static_cast<scalar_t>(eps), rows, out, den, state, ref);
    });
  }
  return {out, den, state, ref};
}

at::Tensor softmax_backward(const at::Tensor& g, const at::Tensor& qkv, const at::Tensor& w,
                            const at::Tensor& wk, const at::Tensor& rc, const at::Tensor& bias,
                            const std::optional<at::Tensor>& mask,
                            double ksq, double eps, int64_t rows, const at::Tensor& out,
                            const at::Tensor& den, const at::Tensor& state,
                            const at::Tensor& ref) {
  check(qkv, w, wk, mask, rows);
  TORCH_CHECK(g.sizes() == out.sizes() && g.is_contiguous() && g.scalar_type() == qkv.scalar_type(),
              "g must be a contiguous tensor like the output");
  auto dqkv = at::empty_like(qkv);
  {
    pybind11::gil_scoped_release no_gil;
    AT_DISPATCH_FLOATING_TYPES(qkv.scalar_type(), "favor_softmax_backward", [&] {
      softmax_backward_impl<scalar_t>(g, qkv, w, wk, rc, bias, mask, static_cast<scalar_t>(ksq),
                                      static_cast<scalar_t>(eps), rows, out, den, state, ref,
                                      dqkv);
    });
  }
  return dqkv;
}

// exp_of over a contiguous float32 tensor (for the tests: its accuracy and special values).
at::Tensor exp_float(const at::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.is_contiguous(), "x must be contiguous float32");
  auto out = at::empty_like(x);
  const float* src = x.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) dst[i] = exp_of(src[i]);
  return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("exp_float", &exp_float, "the kernel's float exp (tests)");
  m.def("softmax_forward", &softmax_forward, "fused bidirectional softmax FAVOR, forward");
  m.def("softmax_backward", &softmax_backward, "fused bidirectional softmax FAVOR, backward");
  m.def("relu_forward", &relu_forward, "fused bidirectional ReLU FAVOR, forward");
  m.def("relu_backward", &relu_backward, "fused bidirectional ReLU FAVOR, backward");
}
