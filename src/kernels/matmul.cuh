// Matmul y = x · Wᵀ with bf16 weights in HF Linear layout ([n, k], row-major). Small m (decode,
// m <= 64) runs our own memory-bound kernel, which issues its weight loads before pdl_wait() so the
// weights stream while the predecessor finishes; large m (prefill) runs cuBLASLt.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/cuda_owners.h"
#include "core/dtype.h"
#include "kernels/act_fold.cuh"
#include "kernels/common.cuh"
#include "kernels/matmul_dispatch.h"
#include "kernels/matmul_settings.h"
#include "kernels/norm_fold.cuh"
#include "kernels/tile_sync.cuh"

namespace megaops {

struct StreamMatmulArgs;  // kernels/matmul_stream.cuh

struct MatmulParams {
  // [m, k], row stride ldx elements; unused (may be null) with `fold` or `silu_fold` on.
  const bf16* x = nullptr;
  int64_t ldx = 0;
  const bf16* w = nullptr;  // [n, k], contiguous
  void* y = nullptr;        // [m, n], row stride ldy elements, dtype y_dtype
  int64_t ldy = 0;
  DType y_dtype = DType::BF16;  // BF16 or F32
  int m = 0, n = 0, k = 0;      // k must be a multiple of 8 (16-byte rows)
  // Small-m path only: upper bound on the persistent grid (0 = the default min(tiles, blocks per
  // SM * SMs)); the overlap executor's CTA budget.
  int max_ctas = 0;
  // Small-m path only: overlap hooks (kernels/tile_sync.cuh); the cuBLASLt path rejects a set
  // sync with cudaErrorNotSupported, it has no hooks.
  TileSync sync;
  // The residual add + RMSNorm that produces x, folded into this matmul (kernels/norm_fold.cuh):
  // with fold.on() the kernel ignores x / ldx and computes x = the normalised rows of
  // fold.residual (+ fold.delta), k elements each, itself; CTA 0 writes fold.residual_out. Only
  // the streaming kernel's bulk version folds: run_small_m, run_cublaslt and run_stream on the
  // cp.async ring return cudaErrorNotSupported. Needs 16-byte aligned fold buffers and
  // residual_out not overlapping residual or delta (else cudaErrorInvalidValue).
  NormFold fold;
  // The SwiGLU activation that produces x, folded into this matmul (kernels/act_fold.cuh): with
  // silu_fold.on() the kernel ignores x / ldx and computes x[b, i] = bf16(silu(gate_up[b, i]) *
  // gate_up[b, k + i]) itself, with silu_mul's arithmetic. The same paths as `fold` take it (the
  // others return cudaErrorNotSupported). Needs a 16-byte aligned gate_up, and at most one of
  // fold and silu_fold on (else cudaErrorInvalidValue).
  SiluMulFold silu_fold;
  // The SwiGLU applied in this matmul's epilogue (kernels/act_fold.cuh): with silu_out.on(), n =
  // 2 * silu_out.inter (gate rows, then up rows), y is not written (may be null) and
  // silu_out.out[b, i] = bf16(silu(y[b, i]) * y[b, inter + i]) with y the fp32 product, silu_mul's
  // arithmetic (the same bits as the matmul into fp32 y, then silu_mul). The bulk streaming
  // kernel only, as the folds; inter % 4 == 0, ld >= inter, 2-byte aligned out, and not with
  // silu_fold (else cudaErrorInvalidValue).
  SiluMulEpilogue silu_out;
  // Greedy sampling in the epilogue (the LM head; kernels/greedy_key.cuh): with argmax_out set,
  // each CTA folds the fp32 sums it writes to y into a per-batch-row maximum of greedy_pack(y,
  // column) and takes atomicMax of it into argmax_out[b] before it signals, so argmax_out[b]
  // ends as the pack of row b's argmax (lowest column on ties), the same choice as the greedy
  // sampler's over y, or GREEDY_PACK_NONFINITE where row b holds a NaN or Inf (no token). y is
  // written as usual and must be F32 (else cudaErrorInvalidValue). The caller zeroes argmax_out
  // before the launch (the sampler that reads it, SampleParams::argmax, does so for the next one).
  // The bulk streaming kernel only, as the folds; not with silu_out (cudaErrorInvalidValue).
  unsigned long long* argmax_out = nullptr;
  // The streaming kernel's row-block schedule (StreamMatmulArgs::schedule; bulk version, m = 1;
  // ignored elsewhere): Auto, the rule's (matmul_stream_dynamic); Static or Dynamic forced
  // (tests). MatmulContext supplies the dynamic schedule's counters.
  StreamSchedule stream_schedule = StreamSchedule::Auto;
  LaunchOptions launch;
};

// y [m, n] = x [m, k] . w [n, k]^T with contiguous rows (ldx = k, ldy = n); launch options,
// hooks and folds left default.
inline MatmulParams matmul_params(const bf16* x, const bf16* w, void* y, DType y_dtype, int m,
                                  int n, int k) {
  MatmulParams p;
  p.x = x;
  p.ldx = k;
  p.w = w;
  p.y = y;
  p.ldy = n;
  p.y_dtype = y_dtype;
  p.m = m;
  p.n = n;
  p.k = k;
  return p;
}

// Everything cuBLASLt's heuristic sees of a problem, and the device: the key of a tuned algorithm.
struct CublasLtKey {
  int device, m, n, k;
  int64_t ldx, ldy;
  bool y_f32;
  uint32_t align_w, align_x, align_y;
  bool operator<(const CublasLtKey& o) const {
    return std::tie(device, m, n, k, ldx, ldy, y_f32, align_w, align_x, align_y) <
           std::tie(o.device, o.m, o.n, o.k, o.ldx, o.ldy, o.y_f32, o.align_w, o.align_x,
                    o.align_y);
  }
};

// Owns the cuBLASLt handle and workspace. One per executor; not thread-safe. Usable inside CUDA
// stream capture (the workspace is fixed at construction).
class MatmulContext {
 public:
  // InputError on settings out of range (stages, a bulk kernel this GPU lacks).
  explicit MatmulContext(const MatmulSettings& settings = MatmulSettings{});
  ~MatmulContext();
  MatmulContext(const MatmulContext&) = delete;
  MatmulContext& operator=(const MatmulContext&) = delete;

  // Dispatches on the shape; returns the launch status. Invalid shapes give
  // cudaErrorInvalidValue.
  cudaError_t run(const MatmulParams& p);
  // The path run(p) takes. With p.fold, p.silu_fold or p.silu_out on: the streaming kernel where
  // its bulk version can run (stream_bulk() and matmul_stream_fits), else the rule's path (which
  // refuses the fold).
  MatmulPath path(const MatmulParams& p) const;

  // Forces a path (tests and benchmarks). run_stream needs m <= 2 and a k whose x fits its
  // shared memory (matmul_stream_fits, kernels/matmul_dispatch.h), else cudaErrorInvalidValue.
  cudaError_t run_small_m(const MatmulParams& p);
  cudaError_t run_stream(const MatmulParams& p);
  cudaError_t run_cublaslt(const MatmulParams& p);

  // What run_small_m(p) / run_stream(p) launch: the grid (with p.max_ctas applied) and occupancy.
  static cudaError_t small_m_footprint(const MatmulParams& p, KernelFootprint* out);
  cudaError_t stream_footprint(const MatmulParams& p, KernelFootprint* out) const;
  // The arguments of run_stream(p)'s bulk kernel for a persistent region's matmul task
  // (kernels/persistent_region_ops.cuh): the same x, weights, folds and epilogues, a static
  // row-block schedule (the region's tiles decide which CTA takes which rows).
  // cudaErrorNotSupported unless run(p) takes the streaming kernel's bulk version; the other errors
  // are run_stream's.
  cudaError_t stream_region_args(const MatmulParams& p, StreamMatmulArgs* out) const;
  // Ring slots of the streaming kernel for later launches: 0 (its default) or
  // MATMUL_STREAM_STAGES_MIN..MAX, else InputError. MatmulSettings::stream_stages sets it at
  // construction.
  void set_stream_stages(int stages);
  int stream_stages() const { return stream_stages_; }
  // Which version of the streaming kernel later launches take, and which rule path() follows
  // (matmul_dispatch_path's `bulk`): the bulk copies from a producer warp (true; the default on
  // sm_90, elsewhere InputError) or the cp.async ring (false; the default elsewhere).
  // MatmulSettings::stream_bulk sets it at construction.
  void set_stream_bulk(bool bulk);
  bool stream_bulk() const { return stream_bulk_; }

  // cuBLASLt algorithm tuning for decode-sized problems (m <= MATMUL_TUNE_MAX_M). A problem that
  // run_cublaslt meets during stream capture and has no tuned algorithm for runs the heuristic's
  // first answer and is queued; tune_pending() times every candidate the heuristic offers on the
  // GPU (outside capture) and keeps the fastest, process-wide, for later captures. The executor
  // captures a step, tunes what is pending, and captures it again. The first tuning allocates a
  // 128 MB scratch buffer (output and L2 flush) that the context keeps. Throws DeviceError on a
  // CUDA failure. Off by default: MatmulSettings::tune or set_tuning(true) turns it on. Measured
  // on an H200: standalone the tuned algorithms are as fast or faster (8B QKV 16.5 -> 15.6 us,
  // qwen3-0.6b O 12.4 -> 5.3), yet the llama3.1-8b step ran slower with them (4.72 / 4.66 -> 4.99
  // / 4.84 ms, PDL off / on) when a memset emptied L2 between timed launches; with the read that
  // empties it now, on another machine, 0.6% / 0.4% faster than untuned, within the spread of
  // rows (docs/perf-notes.md, "cuBLASLt algorithms timed instead of the heuristic's first
  // answer").
  size_t pending_tuning() const { return pending_.size(); }
  void tune_pending(cudaStream_t stream);
  void set_tuning(bool on) { tune_ = on; }
  bool tuning() const { return tune_; }

  // Loads every instantiation of megaops' matmul kernels and asks for the shared-memory carveout
  // (overlap executor start, DESIGN rule 1). The constructor does this for the streaming kernel
  // only (its shared memory), so the conventional step's small-m kernels keep the driver's split.
  static cudaError_t preload_kernels();

 private:
  // Path forced by MatmulSettings::forced_path (a developer knob for measuring the paths in situ;
  // `stream` falls back to the shape rule where the streaming kernel cannot run);
  // `stream-for-small`: the streaming kernel where the rule picks the small-m kernel.
  std::optional<MatmulPath> forced_path_;
  bool stream_for_small_ = false;
  // MatmulSettings::stream_shapes: (n, k) of the weights put on the streaming kernel.
  std::vector<std::pair<int, int>> stream_shapes_;
  // Ring slots of the streaming kernel (MatmulSettings::stream_stages; 0 = its default).
  int stream_stages_ = 0;
  bool stream_bulk_ = false;  // sm_90 unless MatmulSettings::stream_bulk says otherwise
  // Whether the bulk streaming kernel's weight copies carry an L2 evict_first policy (on by
  // default; StreamMatmulArgs::l2_evict_first) or an evict_normal one;
  // MatmulSettings::stream_l2_evict_first sets it at construction. Off is a diagnostic, not the old
  // behaviour: the copies still carry a policy, and evict_normal measured far slower than no hint
  // at all (llama3.1-8b chain 3.854 -> 4.148 ms a token with it and the executor's two knobs of
  // the same run off; docs/perf-notes.md, "Greedy sampling in the LM head's epilogue, the
  // weights' L2 evict_first policy").
  bool stream_l2_evict_first_ = true;
  bool tune_ = false;
  std::map<CublasLtKey, MatmulParams> pending_;  // one problem per key, awaiting tune_pending
  std::unique_ptr<CudaMemory> tune_memory_;      // owns tune_scratch_
  void* tune_scratch_ = nullptr;
  size_t tune_scratch_bytes_ = 0;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  // The dynamic schedule's counters (MATMUL_STREAM_SCHED_SLOTS pairs, zeroed): run_stream hands
  // each launch the next pair, round robin, so two launches share a pair only
  // MATMUL_STREAM_SCHED_SLOTS launches apart; of one context, never that many run at once.
  unsigned* sched_ = nullptr;
  unsigned sched_next_ = 0;
};

}  // namespace megaops
