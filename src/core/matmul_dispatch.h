// Which matmuls the executors run on megaops' small-m kernel, its streaming kernel and cuBLASLt: a
// pure rule on the shape (and PDL), shared by the kernels (MatmulContext::path) and by the planner,
// which has to know which ops of an overlap region are vendor GEMMs (planner/planner.h). It lives
// in core/ because both read it and neither may depend on the other (scripts/check_layers.py).
// Every figure below was measured on an H200; docs/perf-notes.md gives each run.
#pragma once

#include <cstdint>

namespace megaops {

// Largest m the small-batch kernel handles; above it the cuBLASLt path is used.
constexpr int MATMUL_SMALL_M_MAX = 64;

// The rule (`megaops bench-matmul`, a CUDA graph of 40 dependent launches with the weights rotated
// through ~1 GB; and the whole conventional step with the paths forced by MEGAOPS_MATMUL_PATH, in
// the same run; docs/perf-notes.md, "Dispatch from measurements"). Standalone at m = 1, cuBLASLt
// streams the long weights at 85-98% of the HBM read ceiling (gate_up, down, LM head) against
// 65-81% for the small-m kernel, and is level with or ahead of it on the 8B's QKV / O (16.5 vs
// 18.0, 13.1 vs 14.2 us). In the step, moving the 8B's QKV and O (k = 4096) to cuBLASLt took
// llama3.1-8b from 5.069 / 4.856 to 4.786 / 4.740 ms (PDL off / on) and qwen3-8b from 5.225 / 5.013
// to 5.083 / 5.001; on the small models (k <= 2048) it lost with PDL (llama3.2-1b 1.045 -> 1.064
// ms) or everywhere (qwen3-0.6b 1.190 / 0.971 -> 1.345 / 1.318: cuBLASLt's kernel for a 1024 x 2048
// O is slow, 12.4 vs 4.9 us), where the small-m kernel's PDL weight prologue pays. Small-m runs m
// <= 8 at about the same rate (x re-read per 16-row tile costs it at larger m). Hence small-m for m
// <= 8, k <= 2048, n <= 8192 (the QKV / O projections of the 1B-class models and anything smaller),
// cuBLASLt for the rest.
constexpr int MATMUL_DISPATCH_SMALL_M_MAX = 8;
constexpr int MATMUL_DISPATCH_SMALL_K_MAX = 2048;
constexpr int MATMUL_DISPATCH_SMALL_N_MAX = 8192;
static_assert(MATMUL_DISPATCH_SMALL_M_MAX <= MATMUL_SMALL_M_MAX);

// cuBLASLt problems up to this m (the decode batch range) get a measured algorithm
// (MatmulContext::tune_pending); larger ones (prefill) keep the heuristic's first answer.
constexpr int MATMUL_TUNE_MAX_M = 64;

// Ring slots a launch may ask for (MEGAOPS_STREAM_STAGES, MatmulContext).
constexpr int MATMUL_STREAM_STAGES_MIN = 2;
constexpr int MATMUL_STREAM_STAGES_MAX = 16;

// Largest batch the streaming kernel takes (its math runs on CUDA cores, 2 m FLOP per 2-byte
// weight: at m = 4 it measured 2-2.5x slower than at m = 1 on the 8B shapes).
constexpr int MATMUL_STREAM_M_MAX = 2;
// x is staged in shared memory (fp32) once per CTA, k padded to the kernel's stage width:
// m * kpad * 4 bytes must fit in this.
constexpr int64_t MATMUL_STREAM_X_BYTES_MAX = 64 * 1024;
constexpr int MATMUL_STREAM_KC = 1024;  // k per stage of the streaming kernel

// True when the streaming kernel can run this shape (on any GPU with >= 100 KB of opt-in shared
// memory per block: sm_80 and sm_90).
// (m is rounded up to the instantiation that runs it: 1 or 2.)
constexpr bool matmul_stream_fits(int64_t m, int64_t k) {
  const int64_t kpad = (k + MATMUL_STREAM_KC - 1) / MATMUL_STREAM_KC * MATMUL_STREAM_KC;
  const int64_t rows = m <= 1 ? 1 : 2;
  return m >= 1 && m <= MATMUL_STREAM_M_MAX && rows * kpad * 4 <= MATMUL_STREAM_X_BYTES_MAX;
}

// The kernels a matmul can run on: megaops' small-m kernel (tensor cores, weights in registers,
// m <= 64), megaops' weight-streaming kernel (CUDA cores, weights through a shared-memory ring,
// m <= 2: kernels/matmul_stream.cuh), cuBLASLt. The first two have PDL prologues and overlap
// hooks; cuBLASLt is a vendor kernel (opaque to the overlap runtime and the planner).
enum class MatmulPath { SmallM, Stream, CublasLt };

// How the bulk streaming kernel's CTAs take their row blocks (StreamMatmulArgs::schedule).
enum class StreamSchedule { Auto, Static, Dynamic };

// Auto's choice: the dynamic schedule (row blocks from a ticket counter as CTAs finish) where a
// launch has at least MATMUL_STREAM_DYNAMIC_MIN_BLOCKS row blocks a CTA. A static range gives
// every CTA the same count, but SMs do not stream at the same rate, so the kernel ends when the
// slowest SM's CTAs do. Measured (bench-matmul, m = 1, us, static -> dynamic; docs/perf-notes.md,
// "A dynamic row-block schedule"): llama3.1-8b LM head (40.5 blocks a CTA) 254.9
// -> 246.9, gate_up (9.1) 59.2 -> 58.5; llama3.2-1b LM head 129.4 -> 123.7, gate_up (5.2) 17.6 ->
// 17.4; but the launches of 1-3 blocks a CTA lost (8B O 10.7 -> 11.4, QKV 15.9 -> 16.3, 1B down
// 10.9 -> 11.3), and the 1B step with every launch dynamic lost 2-4% (0.932 / 0.822 -> 0.953 /
// 0.853 ms, conventional + PDL / chain); with it on the 8B's gate_up and LM head only, the 8B
// steps with the MLP streaming gained (below). Six: the 8B-class gate_up (7.8-9.1) and the LM
// heads take it, the 1B's gate_up (5.2) does not.
constexpr int64_t MATMUL_STREAM_DYNAMIC_MIN_BLOCKS = 6;
constexpr bool matmul_stream_dynamic(int64_t row_blocks, int64_t grid) {
  return grid > 0 && row_blocks >= MATMUL_STREAM_DYNAMIC_MIN_BLOCKS * grid;
}

// Under PDL, at m = 1, the 8B-class QKV / O projections (2048 < k <= 4096, n <= 8192) run on the
// streaming kernel: its CTAs start while the norm / attention before them still runs (the executor
// launches those with the streaming kernel's shared-memory carveout) and have their first weight
// stages in flight when it ends. Measured (rows alternated on one H200; docs/perf-notes.md, "The
// shared-memory carveout and the streaming kernel under PDL"): llama3.1-8b batch 1 with PDL 4.731 /
// 4.729 -> 4.584 / 4.582 ms, qwen3-8b 4.965 -> 4.809; without PDL the same kernels lose (5.00 vs
// 4.78 ms), so the rule keeps cuBLASLt there. With the predecessors on the streaming kernel's split
// the streaming QKV / O measured 4.576-4.584 ms with PDL, on the driver's split 4.694: the gain
// needs the early start.
constexpr int64_t MATMUL_DISPATCH_STREAM_K_MAX = 4096;

// With the streaming kernel's bulk-copy version (sm_90: `bulk` below, kernels/matmul_stream.cuh) at
// m = 1 it also takes, with PDL or without, the 1B-class QKV / O (k <= 2048, n <= 4096, else
// small-m) and down projections (n <= 2048, k <= 8192, else cuBLASLt), and under PDL the 8B-class
// QKV / O as above. Measured (ms/token PDL off / on, rows alternated; docs/perf-notes.md, "A
// bulk-copy version of the streaming kernel"): llama3.2-1b 1.083-1.091 / 1.024-1.027 -> 1.042-1.045
// / 0.950-0.952, qwen3-0.6b 1.138-1.140 / 0.885-0.887 -> 1.053-1.056 / 0.836-0.841; llama3.1-8b
// with PDL 4.494-4.520 -> 4.416-4.425 (the ring version's 8B QKV / O replaced). Not taken then: the
// long streams (gate_up, the 8B's down, LM heads), where cuBLASLt was ahead (every matmul on it:
// llama3.1-8b 5.51 / 5.10, llama3.2-1b 1.084 / 0.956) until the aligned ring (below), and the
// 8B-class QKV / O without PDL (llama3.1-8b 4.71-4.73 -> 4.77; qwen3-8b 5.003 -> 4.892, the two
// disagree). m = 2 is not measured.
constexpr int64_t MATMUL_DISPATCH_BULK_QKVO_N_MAX = 4096;
// And, at m = 1 with either PDL setting, the 0.6B-class gate_up (k <= 1024, n <= 8192: 6144 x
// 1024), which otherwise runs on the small-m kernel. Measured (two rounds alternated,
// `MEGAOPS_MATMUL_STREAM_SHAPES=6144x1024` against the default dispatch, ms/token at batch 1;
// docs/perf-notes.md, "The 0.6B's gate_up on the streaming kernel"): qwen3-0.6b overlap step
// 1.171-1.174 -> 1.108, conventional with PDL 0.845-0.848 -> 0.838-0.840, without PDL level
// (1.066-1.073 vs 1.068-1.072). The 1B's gate_up (16384 x 2048) on the same kernel lost (overlap
// 1.174-1.183 -> 1.198, PDL off 1.053 -> 1.086-1.090), so it stays on cuBLASLt.
constexpr int64_t MATMUL_DISPATCH_BULK_GATEUP_K_MAX = 1024;
// Also the 1B-class gate_up (k <= 2048, n <= 16384: 16384 x 2048) on the bulk kernel: the PDL
// chain then folds the norm before it (kernels/norm_fold.cuh) and has no vendor GEMM in the
// layer. Measured (rows alternated, llama3.2-1b batch 1, ms/token, conventional + PDL / chain):
// 0.932-0.933 / 0.886-0.888 against 0.934-0.944 / 0.918-0.928 with it on cuBLASLt. Without PDL
// the step measures the same either way since the streaming kernel's ring is aligned (rows
// alternated: 1.0069 / 1.0077 against 1.0066 / 1.0068 ms), so one rule serves both.
constexpr int64_t MATMUL_DISPATCH_BULK_GATEUP1B_K_MAX = 2048;
constexpr int64_t MATMUL_DISPATCH_BULK_GATEUP1B_N_MAX = 16384;
constexpr int64_t MATMUL_DISPATCH_BULK_DOWN_N_MAX = 2048;
constexpr int64_t MATMUL_DISPATCH_BULK_DOWN_K_MAX = 8192;
// Also the 8B-class MLP: gate_up (2048 < k <= 4096, 16384 < n <= 32768) and down (2048 < n <=
// 4096, 8192 < k <= 16384), with the dynamic schedule on gate_up (above). The PDL chain then
// folds the norm into gate_up and the SwiGLU into its epilogue with the conventional step's
// arithmetic, and its layer has no vendor GEMM. Under PDL: the chain 1.8% / 2.7% faster (8B
// presets), conventional + PDL 3.0% / 1.6% slower while the kernel was 4% behind tuned cuBLASLt
// on gate_up. Without PDL since the ring is aligned on a 128-byte line (gate_up 53.8 against tuned
// cuBLASLt's 56.8 us, down 29.3 against 32.8), measured with the LM head rule below (rows
// alternated, batch 1, PDL off, ms/token): llama3.1-8b 4.551 / 4.553 -> 4.516 / 4.501, qwen3-8b
// 4.746 / 4.745 -> 4.705 / 4.706. docs/perf-notes.md, "A dynamic row-block schedule" and "The bulk
// kernel's ring on a 128-byte line".
constexpr int64_t MATMUL_DISPATCH_BULK_GATEUP8B_K_MAX = 4096;
constexpr int64_t MATMUL_DISPATCH_BULK_GATEUP8B_N_MAX = 32768;
constexpr int64_t MATMUL_DISPATCH_BULK_DOWN8B_N_MAX = 4096;
constexpr int64_t MATMUL_DISPATCH_BULK_DOWN8B_K_MAX = 16384;
// And the LM heads (n >= 65536 rows: the vocabulary) of any k that fits, with either PDL
// setting: on the aligned ring the bulk kernel reads them at the plain read's rate (8B 232.5 us
// against tuned cuBLASLt's 243.6, 1B 116.7 against 123.8, qwen3-8b 274.8 against 288.6). Rows
// alternated (batch 1, conventional PDL off / on / chain, ms/token, default -> LM head on the bulk
// kernel): llama3.1-8b 4.551 / 4.200 / 3.918 -> 4.516 /
// 4.195 / 3.916 and 4.553 / 4.199 / 3.922 -> 4.501 / 4.189 / 3.901; qwen3-8b 4.746 / 4.368 /
// 4.045 -> 4.705 / 4.347 / 4.026 (twice alike); llama3.2-1b 1.007 / 0.903 / 0.796 -> 1.007 /
// 0.895 / 0.795 and 1.008 / 0.902 / 0.798 -> 1.007 / 0.896 / 0.797; qwen3-0.6b level (0.825 /
// 0.733 -> 0.824 / 0.729, 0.821 / 0.727 -> 0.825 / 0.732).
constexpr int64_t MATMUL_DISPATCH_BULK_LM_HEAD_N_MIN = 65536;

// CTAs an SM of the bulk streaming kernel, of the `fit` that fit by registers and shared memory
// (three at m = 1: 72 registers, x as bf16): at most MATMUL_STREAM_LONG_K_CTAS_PER_SM for rows of k
// >= MATMUL_STREAM_LONG_K in a matrix of n <= MATMUL_STREAM_LONG_K_N_MAX rows (the 8B presets' QKV
// and O, and down where it streams). Measured (rows alternated, batch 1, ms/token, conventional +
// PDL / chain): llama3.1-8b (QKV and O, k = 4096) 4.346-4.356 / 4.279-4.300 at two against
// 4.404-4.418 / 4.339-4.354 at three; qwen3-8b 4.614-4.627 / 4.441-4.458 against 4.605-4.620 /
// 4.501-4.513 (again on another machine: 4.343 / 4.283 against 4.416 / 4.350, 4.621 / 4.453 against
// 4.607 / 4.505); llama3.2-1b's k = 2048 launches want three (its gate_up at two: chain 0.891-0.893
// against 0.841-0.844; its down, k = 8192, has 256 row blocks: the same grid either way). The long
// matrices want three: the 8B's gate_up (28672 x 4096) at two took 74.1 us standalone against 58.8
// at three, its LM head 325.6 against 254.9 (bench-matmul), and in the chain with the MLP streaming
// llama3.1-8b 4.672 against 4.311 ms. Why two suit the shorter ones was not measured
// (docs/perf-notes.md, "x as bf16 in the bulk kernel, three CTAs an SM").
constexpr int64_t MATMUL_STREAM_LONG_K = 4096;
constexpr int64_t MATMUL_STREAM_LONG_K_N_MAX = 8192;
constexpr int MATMUL_STREAM_LONG_K_CTAS_PER_SM = 2;
constexpr int matmul_stream_ctas_per_sm(int fit, int64_t n, int64_t k) {
  return k >= MATMUL_STREAM_LONG_K && n <= MATMUL_STREAM_LONG_K_N_MAX &&
                 fit > MATMUL_STREAM_LONG_K_CTAS_PER_SM
             ? MATMUL_STREAM_LONG_K_CTAS_PER_SM
             : fit;
}

// The default dispatch (no MEGAOPS_* override) of y[m, n] = x[m, k] * w[n, k]^T, launched with
// PDL or not, on a GPU that runs the streaming kernel's bulk version (`bulk`; the planner's H200
// model does) or not: small-m, the streaming kernel (above) or cuBLASLt.
constexpr MatmulPath matmul_dispatch_path(int64_t m, int64_t n, int64_t k, bool pdl = false,
                                          bool bulk = true) {
  if (bulk && m == 1 && matmul_stream_fits(m, k) &&
      ((k <= MATMUL_DISPATCH_SMALL_K_MAX && n <= MATMUL_DISPATCH_BULK_QKVO_N_MAX) ||
       (k <= MATMUL_DISPATCH_BULK_GATEUP_K_MAX && n <= MATMUL_DISPATCH_SMALL_N_MAX) ||
       (n <= MATMUL_DISPATCH_BULK_DOWN_N_MAX && k <= MATMUL_DISPATCH_BULK_DOWN_K_MAX) ||
       (k <= MATMUL_DISPATCH_BULK_GATEUP1B_K_MAX && n <= MATMUL_DISPATCH_BULK_GATEUP1B_N_MAX) ||
       (k > MATMUL_DISPATCH_BULK_GATEUP1B_K_MAX && k <= MATMUL_DISPATCH_BULK_GATEUP8B_K_MAX &&
        n > MATMUL_DISPATCH_BULK_GATEUP1B_N_MAX && n <= MATMUL_DISPATCH_BULK_GATEUP8B_N_MAX) ||
       (n > MATMUL_DISPATCH_BULK_DOWN_N_MAX && n <= MATMUL_DISPATCH_BULK_DOWN8B_N_MAX &&
        k > MATMUL_DISPATCH_BULK_DOWN_K_MAX && k <= MATMUL_DISPATCH_BULK_DOWN8B_K_MAX) ||
       n >= MATMUL_DISPATCH_BULK_LM_HEAD_N_MIN))
    return MatmulPath::Stream;
  if (m <= MATMUL_DISPATCH_SMALL_M_MAX && k <= MATMUL_DISPATCH_SMALL_K_MAX &&
      n <= MATMUL_DISPATCH_SMALL_N_MAX)
    return MatmulPath::SmallM;
  if (pdl && m == 1 && k <= MATMUL_DISPATCH_STREAM_K_MAX && n <= MATMUL_DISPATCH_SMALL_N_MAX &&
      matmul_stream_fits(m, k))
    return MatmulPath::Stream;
  return MatmulPath::CublasLt;
}

}  // namespace megaops
