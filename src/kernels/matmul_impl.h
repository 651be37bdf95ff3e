// Private to the matmul launchers (matmul.cu, matmul_cublaslt.cu): the parameter checks every
// path shares, and what a MatmulParams asks for beyond a plain matmul (folds, tile sync).
#pragma once

#include <cstdint>

#include "kernels/matmul.cuh"

namespace megaops {
namespace {

inline bool is_aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// True when p asks for a fold (a norm or the SwiGLU computing x in the matmul's prologue) or an
// epilogue (the SwiGLU, the greedy argmax): what only the streaming kernel's bulk version runs.
inline bool folds(const MatmulParams& p) {
  return p.fold.on() || p.silu_fold.on() || p.silu_out.on() || p.argmax_out != nullptr;
}

// True when the [m, k] fp32 buffers at a and b share a byte (b may be null).
inline bool fold_rows_overlap(const float* a, const float* b, const MatmulParams& p) {
  if (b == nullptr) return false;
  const size_t bytes = static_cast<size_t>(p.m) * static_cast<size_t>(p.k) * sizeof(float);
  const uintptr_t ua = reinterpret_cast<uintptr_t>(a), ub = reinterpret_cast<uintptr_t>(b);
  return ua < ub + bytes && ub < ua + bytes;
}

// A folded norm (kernels/norm_fold.cuh) in place of x: 16-byte aligned rows (8-element vector
// loads; k % 8 == 0 is checked for every matmul), eps >= 0 as add_rmsnorm asks, and residual_out
// apart from what the other CTAs still read while CTA 0 writes it.
inline cudaError_t validate_fold(const MatmulParams& p) {
  const NormFold& f = p.fold;
  if (f.residual == nullptr || !(f.eps >= 0.0f)) return cudaErrorInvalidValue;
  if (!is_aligned(f.residual, 16) || !is_aligned(f.delta, 16) || !is_aligned(f.weight, 16) ||
      !is_aligned(f.residual_out, 16))
    return cudaErrorInvalidValue;
  if (f.residual_out != nullptr && (fold_rows_overlap(f.residual_out, f.residual, p) ||
                                    fold_rows_overlap(f.residual_out, f.delta, p)))
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

// Checks shared by all paths: 16-byte rows of x and W (vector loads), y aligned to its element;
// with a folded norm or SwiGLU its buffers instead of x (which is then not read): gate_up's rows
// are 16-byte aligned with it (float4 loads; row stride 2k, k % 8 == 0). One fold at most.
inline cudaError_t validate(const MatmulParams& p) {
  if (p.w == nullptr || (p.y == nullptr && !p.silu_out.on())) return cudaErrorInvalidValue;
  if (p.m < 1 || p.n < 1 || p.k < 8 || p.k % 8 != 0 || p.ldy < p.n) return cudaErrorInvalidValue;
  if (p.y_dtype != DType::BF16 && p.y_dtype != DType::F32) return cudaErrorInvalidValue;
  if (!is_aligned(p.w, 16) || !is_aligned(p.y, dtype_size(p.y_dtype))) return cudaErrorInvalidValue;
  if (p.silu_out.on()) {  // gate rows then up rows, pairs of four in a row block
    const SiluMulEpilogue& e = p.silu_out;
    if (p.silu_fold.on() || e.inter < 4 || e.inter % 4 != 0 ||
        static_cast<int64_t>(p.n) != 2 * static_cast<int64_t>(e.inter) || e.ld < e.inter ||
        !is_aligned(e.out, 2))
      return cudaErrorInvalidValue;
  }
  if (p.argmax_out != nullptr &&  // the argmax of the fp32 sums written to y
      (p.y_dtype != DType::F32 || p.silu_out.on() || !is_aligned(p.argmax_out, 8)))
    return cudaErrorInvalidValue;
  if (p.fold.on() && p.silu_fold.on()) return cudaErrorInvalidValue;
  if (p.fold.on()) return validate_fold(p);
  if (p.silu_fold.on())
    return is_aligned(p.silu_fold.gate_up, 16) ? cudaSuccess : cudaErrorInvalidValue;
  if (p.x == nullptr || p.ldx < p.k || p.ldx % 8 != 0 || !is_aligned(p.x, 16))
    return cudaErrorInvalidValue;
  return cudaSuccess;
}

// True when p waits for or signals tile counters (which the cuBLASLt path cannot).
inline bool sync_requested(const TileSync& s) {
  return s.signal_counter != nullptr || s.wait_counter[0] != nullptr ||
         s.wait_counter[1] != nullptr;
}

}  // namespace
}  // namespace megaops
