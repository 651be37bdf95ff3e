// Standalone prefill matmul timing (see prefill_gemm_bench.h).
#include <cublasLt.h>

#include <cmath>
#include <string>
#include <vector>

#include "core/counter_rng.h"
#include "core/cuda_check.h"
#include "core/cuda_owners.h"
#include "core/error.h"
#include "kernels/matmul.cuh"
#include "kernels/prefill_gemm_bench.h"

namespace megaops {

namespace {

// bf16 values in [-1, 1) from the counter RNG (never zeros: a GEMM on zeros runs faster).
__global__ void prefill_gemm_fill_kernel(uint16_t* p, size_t count, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x)
    p[i] = static_cast<uint16_t>(__float_as_uint(2.f * counter_uniform(seed, i, 0) - 1.f) >> 16);
}

constexpr size_t WORKSPACE_BYTES = size_t{32} << 20;  // as MatmulContext's

// One cuBLASLt problem y[m, n] (bf16 or fp32 `y_type`, column-major n x m: our row-major [m, n])
// = w^T-op . x, beta 0 or 1; descriptors and the heuristic's first algorithm, owned for the
// timing loop.
struct LtPrefillGemm {
  cublasLtHandle_t handle = nullptr;
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  std::vector<cublasLtMatmulAlgo_t> algos;  // the heuristic's answers, best guess first
  cublasLtMatmulAlgo_t algo = {};           // the one run() uses
  LtPrefillGemm(int m, int n, int k, int candidates, cudaDataType_t y_type) {
    MEGAOPS_CUBLAS_CHECK(cublasLtCreate(&handle));
    MEGAOPS_CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    MEGAOPS_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
    MEGAOPS_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
    MEGAOPS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a, CUDA_R_16BF, k, n, k));
    MEGAOPS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b, CUDA_R_16BF, k, m, k));
    MEGAOPS_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c, y_type, n, m, n));
    MEGAOPS_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const size_t ws = WORKSPACE_BYTES;
    MEGAOPS_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    std::vector<cublasLtMatmulHeuristicResult_t> h(candidates);
    int found = 0;
    MEGAOPS_CUBLAS_CHECK(
        cublasLtMatmulAlgoGetHeuristic(handle, op, a, b, c, c, pref, candidates, h.data(), &found));
    if (found == 0) throw DeviceError("cuBLASLt offers no algorithm for this prefill GEMM");
    for (int i = 0; i < found; ++i)
      if (h[i].state == CUBLAS_STATUS_SUCCESS) algos.push_back(h[i].algo);
    if (algos.empty()) throw DeviceError("cuBLASLt offers no algorithm for this prefill GEMM");
    algo = algos[0];
  }
  ~LtPrefillGemm() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
    if (handle) cublasLtDestroy(handle);
  }
  LtPrefillGemm(const LtPrefillGemm&) = delete;
  LtPrefillGemm& operator=(const LtPrefillGemm&) = delete;
  void run(const void* w, const void* x, void* y, float beta, void* ws, cudaStream_t s) const {
    const float alpha = 1.f;
    MEGAOPS_CUBLAS_CHECK(cublasLtMatmul(handle, op, &alpha, w, a, x, b, &beta, y, c, y, c, &algo,
                                        ws, WORKSPACE_BYTES, s));
  }
};

}  // namespace

PrefillGemmTime time_prefill_gemm(const PrefillGemmCase& c) {
  if (!prefill_gemm_path_known(c.path))
    throw InputError("bench-matmul: prefill path: expected " + prefill_gemm_paths_text() +
                     ", found '" + c.path + "'");
  if (c.m < 1 || c.n < 1 || c.k < 8 || c.k % 8 != 0 || c.n % 8 != 0 || c.repeats < 1 ||
      c.warmups < 0)
    throw InputError("bench-matmul: prefill: expected m >= 1, n and k positive multiples of 8");
  const size_t w_elems = static_cast<size_t>(c.n) * c.k, x_elems = static_cast<size_t>(c.m) * c.k;
  const size_t y_elems = static_cast<size_t>(c.m) * c.n;
  CudaMemory w(w_elems * 2), x(x_elems * 2), y(y_elems * 4), ws(WORKSPACE_BYTES);
  prefill_gemm_fill_kernel<<<1024, 256>>>(static_cast<uint16_t*>(w.ptr), w_elems, 4321);
  prefill_gemm_fill_kernel<<<1024, 256>>>(static_cast<uint16_t*>(x.ptr), x_elems, 99);
  // The residual the lt-residual paths add to, in place: bf16 values in every 16-bit half (read
  // as fp32 by lt-f32-residual: finite values of the same magnitude).
  prefill_gemm_fill_kernel<<<1024, 256>>>(static_cast<uint16_t*>(y.ptr), 2 * y_elems, 5);
  MEGAOPS_CUDA_CHECK(cudaGetLastError());
  MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());
  CudaStream stream;

  std::vector<float> ms;
  int best = 0;
  if (c.path == "executor") {
    MatmulContext ctx;
    MatmulParams p = matmul_params(static_cast<const bf16*>(x.ptr), static_cast<const bf16*>(w.ptr),
                                   y.ptr, DType::F32, c.m, c.n, c.k);
    p.launch = LaunchOptions{stream.s, false};
    for (int i = 0; i < c.warmups; ++i) MEGAOPS_CUDA_CHECK(ctx.run(p));
    MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(stream.s));
    ms = timed_runs_ms(stream.s, c.repeats, [&] { MEGAOPS_CUDA_CHECK(ctx.run(p)); });
  } else {
    LtPrefillGemm g(c.m, c.n, c.k, c.path == "lt-best" ? PREFILL_GEMM_CANDIDATES : 1,
                    c.path == "lt-f32-residual" ? CUDA_R_32F : CUDA_R_16BF);
    const float beta = c.path == "lt-residual" || c.path == "lt-f32-residual" ? 1.f : 0.f;
    if (g.algos.size() > 1) {
      float best_ms = INFINITY;
      for (size_t i = 0; i < g.algos.size(); ++i) {
        g.algo = g.algos[i];
        // An algorithm the heuristic offers can still fail at launch (workspace, alignment):
        // such a candidate is skipped, not fatal.
        const float alpha = 1.f;
        if (cublasLtMatmul(g.handle, g.op, &alpha, w.ptr, g.a, x.ptr, g.b, &beta, y.ptr, g.c, y.ptr,
                           g.c, &g.algo, ws.ptr, WORKSPACE_BYTES,
                           stream.s) != CUBLAS_STATUS_SUCCESS)
          continue;
        const std::vector<float> t =
            timed_runs_ms(stream.s, 3, [&] { g.run(w.ptr, x.ptr, y.ptr, beta, ws.ptr, stream.s); });
        if (t[1] < best_ms) best_ms = t[1], best = static_cast<int>(i);
      }
      g.algo = g.algos[best];
    }
    for (int i = 0; i < c.warmups; ++i) g.run(w.ptr, x.ptr, y.ptr, beta, ws.ptr, stream.s);
    MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(stream.s));
    ms = timed_runs_ms(stream.s, c.repeats,
                       [&] { g.run(w.ptr, x.ptr, y.ptr, beta, ws.ptr, stream.s); });
  }
  MEGAOPS_CUDA_CHECK(cudaGetLastError());
  return {ms[ms.size() / 2] * 1e3, ms.front() * 1e3, ms.back() * 1e3, best};
}

}  // namespace megaops
