// The cuBLASLt path of MatmulContext (prefill, large m: compute bound): the per-call descriptors,
// the heuristic's pick or a tuned algorithm per problem shape, and the tuning itself
// (MatmulContext::tune_pending). The small-m kernel and the dispatch: matmul.cu.
#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <vector>

#include "core/cuda_check.h"
#include "core/cuda_owners.h"
#include "kernels/hbm_read.cuh"
#include "kernels/matmul.cuh"
#include "kernels/matmul_impl.h"

namespace megaops {

namespace {

// ---------------------------------------------------------------------------------------------
// cuBLASLt helpers

cudaError_t to_cuda_error(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return cudaSuccess;
    case CUBLAS_STATUS_INVALID_VALUE:
      return cudaErrorInvalidValue;
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return cudaErrorNotSupported;
    case CUBLAS_STATUS_ALLOC_FAILED:
      return cudaErrorMemoryAllocation;
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return cudaErrorNoKernelImageForDevice;
    default:
      return cudaErrorUnknown;
  }
}

#define MEGAOPS_LT_RETURN_IF_ERROR(stmt)                                               \
  do {                                                                                 \
    const cublasStatus_t megaops_lt_st_ = (stmt);                                      \
    if (megaops_lt_st_ != CUBLAS_STATUS_SUCCESS) return to_cuda_error(megaops_lt_st_); \
  } while (0)

// Owners of the per-call descriptors (host objects only, so creating them is legal in capture).
struct LtMatmulDesc {
  cublasLtMatmulDesc_t d = nullptr;
  ~LtMatmulDesc() {
    if (d) cublasLtMatmulDescDestroy(d);
  }
};
struct LtLayout {
  cublasLtMatrixLayout_t d = nullptr;
  ~LtLayout() {
    if (d) cublasLtMatrixLayoutDestroy(d);
  }
};
struct LtPreference {
  cublasLtMatmulPreference_t d = nullptr;
  ~LtPreference() {
    if (d) cublasLtMatmulPreferenceDestroy(d);
  }
};

// Largest power of two (<= 256) dividing the address: tells the heuristic which vector widths the
// actual pointers allow, so it never picks a kernel that needs more alignment than we have.
uint32_t pointer_alignment(const void* p) {
  const uintptr_t v = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && v % a != 0) a /= 2;
  return a;
}

// One cuBLASLt problem's descriptors. y[m, n] row-major is, in cuBLASLt's column-major terms,
// C (n x m, ldc = ldy) = op(A) · op(B) with A = W stored column-major as k x n (ld k, transposed:
// op(A) is n x k) and B = x stored column-major as k x m (ld ldx, not transposed). Host objects
// only, so building them is legal inside stream capture.
struct LtProblem {
  LtMatmulDesc op;
  LtLayout a, b, c;
  LtPreference pref;
};

cudaError_t make_lt_problem(const MatmulParams& p, size_t workspace_bytes, LtProblem* pr) {
  const cudaDataType_t y_type = p.y_dtype == DType::F32 ? CUDA_R_32F : CUDA_R_16BF;
  MEGAOPS_LT_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&pr->op.d, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  MEGAOPS_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(pr->op.d, CUBLASLT_MATMUL_DESC_TRANSA,
                                                            &trans_a, sizeof(trans_a)));
  MEGAOPS_LT_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(pr->op.d, CUBLASLT_MATMUL_DESC_TRANSB,
                                                            &trans_b, sizeof(trans_b)));
  MEGAOPS_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&pr->a.d, CUDA_R_16BF, p.k, p.n, p.k));
  MEGAOPS_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&pr->b.d, CUDA_R_16BF, p.k, p.m, p.ldx));
  MEGAOPS_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&pr->c.d, y_type, p.n, p.m, p.ldy));
  MEGAOPS_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pr->pref.d));
  MEGAOPS_LT_RETURN_IF_ERROR(
      cublasLtMatmulPreferenceSetAttribute(pr->pref.d, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspace_bytes, sizeof(workspace_bytes)));
  const uint32_t align_a = pointer_alignment(p.w), align_b = pointer_alignment(p.x),
                 align_c = pointer_alignment(p.y);
  MEGAOPS_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pr->pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
  MEGAOPS_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pr->pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
  MEGAOPS_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pr->pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
  MEGAOPS_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
      pr->pref.d, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));
  return cudaSuccess;
}

CublasLtKey lt_key(const MatmulParams& p) {
  int device = 0;
  cudaGetDevice(&device);
  return {device,
          p.m,
          p.n,
          p.k,
          p.ldx,
          p.ldy,
          p.y_dtype == DType::F32,
          pointer_alignment(p.w),
          pointer_alignment(p.x),
          pointer_alignment(p.y)};
}

// Tuned algorithms, process-wide: every executor and every capture of a process runs the same
// algorithm for a problem, so two executors of one process compute the same bits.
std::mutex g_lt_tuned_mutex;
std::map<CublasLtKey, cublasLtMatmulAlgo_t>& lt_tuned() {
  static std::map<CublasLtKey, cublasLtMatmulAlgo_t> tuned;
  return tuned;
}

std::optional<cublasLtMatmulAlgo_t> find_tuned(const CublasLtKey& key) {
  const std::lock_guard<std::mutex> lock(g_lt_tuned_mutex);
  const auto it = lt_tuned().find(key);
  if (it == lt_tuned().end()) return std::nullopt;
  return it->second;
}

bool stream_capturing(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(s, &st) == cudaSuccess && st == cudaStreamCaptureStatusActive;
}

}  // namespace

cudaError_t MatmulContext::run_cublaslt(const MatmulParams& p) {
  if (const cudaError_t err = validate(p); err != cudaSuccess) return err;
  // cuBLASLt has no tile hooks (docs/overlap-design.md decision 5 is not implemented yet), and
  // cannot fold a norm or the SwiGLU into its prologue.
  if (sync_requested(p.sync) || folds(p)) return cudaErrorNotSupported;
  LtProblem pr;
  if (const cudaError_t err = make_lt_problem(p, workspace_bytes_, &pr); err != cudaSuccess)
    return err;
  cublasLtMatmulAlgo_t algo;
  const bool tunable = tune_ && p.m <= MATMUL_TUNE_MAX_M;
  const std::optional<CublasLtKey> key = tunable ? std::optional(lt_key(p)) : std::nullopt;
  const std::optional<cublasLtMatmulAlgo_t> tuned = key ? find_tuned(*key) : std::nullopt;
  if (tuned) {
    algo = *tuned;
  } else {
    // The heuristic query is host-only work (no allocation, no sync), so it is legal inside
    // stream capture; it costs tens of microseconds of CPU per call, paid once per capture.
    cublasLtMatmulHeuristicResult_t heuristic = {};
    int found = 0;
    MEGAOPS_LT_RETURN_IF_ERROR(cublasLtMatmulAlgoGetHeuristic(
        handle_, pr.op.d, pr.a.d, pr.b.d, pr.c.d, pr.c.d, pr.pref.d, 1, &heuristic, &found));
    if (found == 0) return cudaErrorNotSupported;
    algo = heuristic.algo;
    // Timing needs the GPU, which a capture does not run: the problem waits for tune_pending().
    if (key && stream_capturing(p.launch.stream)) pending_.emplace(*key, p);
  }
  const float alpha = 1.f, beta = 0.f;
  MEGAOPS_LT_RETURN_IF_ERROR(cublasLtMatmul(handle_, pr.op.d, &alpha, p.w, pr.a.d, p.x, pr.b.d,
                                            &beta, p.y, pr.c.d, p.y, pr.c.d, &algo, workspace_,
                                            workspace_bytes_, p.launch.stream));
  return cudaGetLastError();
}

// Each candidate the heuristic offers, timed on the problem's own weights and input with the
// output in a scratch buffer and L2 flushed by a read of 128 MB before every launch (the step
// reads each weight once, from HBM). The fastest median wins.
void MatmulContext::tune_pending(cudaStream_t stream) {
  constexpr int CANDIDATES = 16, WARMUPS = 2, TIMED = 5;
  constexpr size_t L2_FLUSH_BYTES = size_t{128} << 20;  // H200 L2: 50 MB
  auto lt_check = [](cublasStatus_t st, const char* what) {
    if (st != CUBLAS_STATUS_SUCCESS)
      throw_cuda_error(what, cublasLtGetStatusString(st), __FILE__, __LINE__);
  };
  std::map<CublasLtKey, MatmulParams> todo;
  todo.swap(pending_);
  for (const auto& entry : todo) {
    const CublasLtKey& key = entry.first;
    const MatmulParams& p0 = entry.second;  // a name the launch lambda below can capture
    if (find_tuned(key)) continue;
    const size_t y_bytes = static_cast<size_t>(p0.m) * p0.ldy * dtype_size(p0.y_dtype);
    const size_t scratch_bytes = std::max(y_bytes, L2_FLUSH_BYTES);
    if (tune_scratch_bytes_ < scratch_bytes) {
      tune_memory_.reset();
      tune_scratch_bytes_ = 0;
      try {
        tune_memory_ = std::make_unique<CudaMemory>(scratch_bytes);
      } catch (const DeviceError& e) {
        throw DeviceError("allocating the cuBLASLt tuning scratch (" +
                          std::to_string(scratch_bytes) + " bytes): " + e.what());
      }
      tune_scratch_ = tune_memory_->ptr;
      tune_scratch_bytes_ = scratch_bytes;
      MEGAOPS_CUDA_CHECK(cudaMemset(tune_scratch_, 0, scratch_bytes));  // read by the flush
    }
    LtProblem pr;
    MEGAOPS_CUDA_CHECK(make_lt_problem(p0, workspace_bytes_, &pr));
    cublasLtMatmulHeuristicResult_t cands[CANDIDATES] = {};
    int found = 0;
    lt_check(cublasLtMatmulAlgoGetHeuristic(handle_, pr.op.d, pr.a.d, pr.b.d, pr.c.d, pr.c.d,
                                            pr.pref.d, CANDIDATES, cands, &found),
             "cublasLtMatmulAlgoGetHeuristic (tuning)");
    // The scratch buffer is 256-byte aligned: at least the output alignment of the key.
    void* y = tune_scratch_;
    const float alpha = 1.f, beta = 0.f;
    auto launch = [&](const cublasLtMatmulAlgo_t& algo) {
      return cublasLtMatmul(handle_, pr.op.d, &alpha, p0.w, pr.a.d, p0.x, pr.b.d, &beta, y, pr.c.d,
                            y, pr.c.d, &algo, workspace_, workspace_bytes_, stream);
    };
    CudaEvent e0, e1;
    CudaMemory sink(sizeof(unsigned));
    int best = -1;
    float best_us = 0;
    for (int c = 0; c < found; ++c) {
      if (cands[c].state != CUBLAS_STATUS_SUCCESS) continue;
      bool ok = true;
      for (int i = 0; i < WARMUPS && ok; ++i) ok = launch(cands[c].algo) == CUBLAS_STATUS_SUCCESS;
      if (!ok) continue;  // a candidate cuBLASLt refuses at launch is no candidate
      std::vector<float> us;
      for (int i = 0; i < TIMED; ++i) {
        // L2 emptied by reading the scratch buffer: clean lines, so the timed launch streams its
        // weights from HBM without first writing back what a memset would leave dirty.
        HbmReadParams flush;
        flush.data = y;
        flush.bytes = scratch_bytes / 16 * 16;
        flush.sink = static_cast<unsigned*>(sink.ptr);
        flush.launch = LaunchOptions{stream, false};
        MEGAOPS_CUDA_CHECK(hbm_read(flush));
        MEGAOPS_CUDA_CHECK(cudaEventRecord(e0.e, stream));
        lt_check(launch(cands[c].algo), "cublasLtMatmul (tuning)");
        MEGAOPS_CUDA_CHECK(cudaEventRecord(e1.e, stream));
        MEGAOPS_CUDA_CHECK(cudaEventSynchronize(e1.e));
        float ms = 0;
        MEGAOPS_CUDA_CHECK(cudaEventElapsedTime(&ms, e0.e, e1.e));
        us.push_back(1e3f * ms);
      }
      std::nth_element(us.begin(), us.begin() + TIMED / 2, us.end());
      if (best < 0 || us[TIMED / 2] < best_us) {
        best = c;
        best_us = us[TIMED / 2];
      }
    }
    if (best < 0) continue;  // nothing ran: the heuristic's first answer stays
    const std::lock_guard<std::mutex> lock(g_lt_tuned_mutex);
    lt_tuned().emplace(key, cands[best].algo);
  }
  MEGAOPS_CUDA_CHECK(cudaGetLastError());
}

}  // namespace megaops
