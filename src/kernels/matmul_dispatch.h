// Which matmuls the executors run on megaops' small-m kernel and which on cuBLASLt: a pure rule on
// the shape, shared by the kernels (MatmulContext::uses_small_m) and by the planner, which has to
// know which ops of an overlap region are vendor GEMMs behind gates (planner/planner.h).
#pragma once

#include <cstdint>

namespace megaops {

// Largest m the small-batch kernel handles; above it the cuBLASLt path is used.
constexpr int MATMUL_SMALL_M_MAX = 64;

// Measured on the H200 (CUDA graph of 40 launches, weights rotated through 512 MB so they come
// from HBM; plain read kernel 4.53 TB/s): small-m GB/s is flat from m = 1 to 8, drops ~25% at
// m = 16 and collapses at 32-64 (x from L2), while cuBLASLt stays at 3.5-4.2 TB/s on the big
// shapes for every m. At m = 1 cuBLASLt is still 4-13% faster on gate_up, down and the LM head;
// small-m wins on the O and QKV projections (latency-bound sizes) and is the only path with a PDL
// weight prologue and a tile function for the overlap runtime. Hence: small-m up to m = 8 for the
// shapes where it measured faster (k <= 4096 and n <= 8192: the QKV and O projections of the
// 1B/8B models and anything smaller), cuBLASLt for the long weight streams (gate_up, down, LM
// head) and above m = 8.
constexpr int MATMUL_DISPATCH_SMALL_M_MAX = 8;
constexpr int MATMUL_DISPATCH_SMALL_K_MAX = 4096;
constexpr int MATMUL_DISPATCH_SMALL_N_MAX = 8192;
static_assert(MATMUL_DISPATCH_SMALL_M_MAX <= MATMUL_SMALL_M_MAX);

// The default dispatch (no MEGAOPS_MATMUL_PATH override): y[m, n] = x[m, k] * w[n, k]^T.
constexpr bool matmul_dispatch_small_m(int64_t m, int64_t n, int64_t k) {
  return m <= MATMUL_DISPATCH_SMALL_M_MAX && k <= MATMUL_DISPATCH_SMALL_K_MAX &&
         n <= MATMUL_DISPATCH_SMALL_N_MAX;
}

}  // namespace megaops
