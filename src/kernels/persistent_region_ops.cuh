// A persistent region that computes (docs/persistent-regions.md): one resident launch runs a
// contiguous range of the decode step's ops by walking a static tile schedule
// (graph/region_schedule.h, kernels/persistent_region.cuh), each task calling the per-tile device
// functions of the op's standalone kernel, so a region computes the bits of the step it replaces:
//   matmul        the bulk streaming kernel's stage and row-block functions (its folds: norm,
//                 SwiGLU; its epilogues: SwiGLU, greedy argmax) over the tile's row blocks
//   norm          add_rmsnorm's row, for every row (one task: the norm updates the residual in
//                 place, so it is not split by columns)
//   qkv_rope      qkv_rope's warp per (token, head), a task per head
//   attention     the per-query-head decode attention (and its qkv_rope fold), a task per query
//                 head running the CTAs (row, split) of that head in turn; the last of a group's
//                 splits merges them, as in the kernel
//   silu_mul      silu_mul's vectors of the tile's columns
//   embedding     the embedding's rows (one task)
//   sample        the greedy argmax epilogue's unpacking (one task)
//   none          an op folded into its neighbour: waits and signals, computes nothing
// One block size for every op (REGION_THREADS = the consumer warps of the streaming matmul, the
// decode attention's and add_rmsnorm's CTAs) and one shared-memory budget: the ring of weight
// stages and x for the largest matmul, the attention's scratch, the barriers. Before its waits a
// matmul task fills the ring with its first weight stages (the prologue), so its weights stream
// while its producers finish; thread 0 refills the ring as the CTA consumes it. sm_90 only (bulk
// copies); launch_persistent_region returns cudaErrorNotSupported elsewhere.
#pragma once

#include <cstdint>

#include "kernels/attention.cuh"
#include "kernels/embedding.cuh"
#include "kernels/matmul_stream.cuh"
#include "kernels/persistent_region.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/sampling.cuh"
#include "kernels/silu_mul.cuh"

namespace megaops {

constexpr int REGION_THREADS = 256;

enum class RegionTaskKind : int32_t {
  None = 0,
  Embedding,
  Norm,
  Matmul,
  QkvRope,
  Attention,
  SiluMul,
  SampleArgmax,
};

const char* region_task_kind_name(RegionTaskKind k);

// One op of a region as its tasks run it: the params its standalone launch would take (only the
// member of `kind` is read) and what the tiles of the region's schedule cover.
struct alignas(16) RegionOp {
  RegionTaskKind kind = RegionTaskKind::None;
  // Output columns of one tile of the schedule (the op's tile_cols); matmul: a multiple of the
  // streaming kernel's 8-row blocks.
  int32_t tile_cols = 0;
  // Matmul: the SwiGLU epilogue (mm.silu_out) or the greedy argmax (mm.argmax); which tile writes
  // the folded norm's residual_out (the first).
  int32_t attn_variant = -1;  // attention: decode_attention_region_variant's choice
  int32_t attn_splits = 0;    // attention: the launch's context splits
  StreamMatmulArgs mm{};
  AddRmsNormParams norm;
  QkvRopeParams rope;
  DecodeAttentionParams attn;
  SiluMulParams silu;
  EmbeddingParams emb;
  SampleParams sample;
};

// Shared memory of a region launch, in bytes from the start of its dynamic window (after a
// 128-byte alignment): the ring's barriers, the row-block partials, the attention's scratch, the
// ring of `stages` 16 KB weight stages and x of `m` rows of the widest matmul.
struct RegionSmem {
  int ctas_per_sm = 2;  // CTAs an SM the launch is built for (its registers and shared memory)
  int stages = 4;
  int m = 1;           // matmul rows (1 or 2): the kernel's instantiation
  int x_kpad = 0;      // the widest matmul's k, padded to the stage width (0: no matmul)
  int attn_bytes = 0;  // the attention task's dynamic scratch (0: no attention)
  int bar_offset = 0, red_offset = 0, attn_offset = 0, ring_offset = 0, xs_offset = 0;
  int total = 0;  // bytes to launch with (the alignment slack included)
};

// Ring slots a region takes by default: the deepest ring up to this many that fits an SM's shared
// memory shared by its CTAs beside x and the rest.
constexpr int REGION_AUTO_STAGES = 12;
// CTAs an SM (1-3; each a weight ring of its own, as the streaming kernel runs three: one CTA's
// ring streams at about half the HBM rate on an H100, its stages consumed one after another by
// eight warps that meet at every row block).
constexpr int REGION_MAX_CTAS_PER_SM = 3;
constexpr int REGION_DEFAULT_CTAS_PER_SM = 2;

// The layout for `ops` (the region's table) with `stages` ring slots (0: REGION_AUTO_STAGES or
// fewer, as fit the current device's SM shared by `ctas_per_sm` CTAs); cudaErrorInvalidValue when
// a matmul's rows differ (one instantiation per launch) or exceed the streaming kernel's m,
// ctas_per_sm is out of 1..REGION_MAX_CTAS_PER_SM, or nothing fits.
cudaError_t region_smem_layout(const RegionOp* ops, int n_ops, int stages, int ctas_per_sm,
                               RegionSmem* out);

struct PersistentRegionParams {
  RegionSync sync;
  const RegionOp* ops = nullptr;  // [last_op - first_op + 1], device memory
  int32_t first_op = 0;
  int num_ctas = 0;  // the grid; must equal the schedule's num_ctas
  RegionSmem smem;
  // The region's own launch counter ([2] zeroed words, device memory): its semaphores count
  // `launch + 1` steps' signals in launch `launch` (0-based), whatever the executor's step counter
  // did between two launches of this region; the launch's last CTA advances it.
  uint32_t* launches = nullptr;
};

// Launches the region: p.num_ctas CTAs of REGION_THREADS threads. The caller checks p.num_ctas
// against persistent_region_max_resident_ctas first (deadlock freedom).
cudaError_t launch_persistent_region(const PersistentRegionParams& p, const LaunchOptions& launch);

// CTAs of the region kernel for layout `smem` that can be resident at once on the current
// device: blocks per SM (occupancy API) times SMs.
cudaError_t persistent_region_max_resident_ctas(const RegionSmem& smem, int* out);

cudaError_t preload_persistent_region_kernels();

}  // namespace megaops
