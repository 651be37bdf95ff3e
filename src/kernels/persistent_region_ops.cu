// The persistent region kernel (kernels/persistent_region_ops.cuh): the loop of
// kernels/persistent_region.cuh over a real schedule, each task dispatched by its op's kind to the
// standalone kernels' per-tile device functions.
//
// The matmul's weight ring. The streaming kernel's bulk version has a producer warp beside eight
// consumer warps; a region's CTA is the eight consumer warps, and they produce too: warp 0 issues
// the first stages of a task before the task's waits (the prologue) and, in the loop, after stage
// i the warp i - 1 (mod 8) refills the slot of stage i - 1 (a stage every thread has most likely
// released by then), a lane a weight row. The ring's
// mbarriers are initialised once per launch and their phases run on across the CTA's matmul
// tasks: stage g of the CTA's stream (counting every task's stages) sits in slot g % stages, its
// "full" barrier completes phase g / stages when its bytes land and its "empty" barrier the same
// phase when every thread has read it, so a refill of the slot for stage g waits for the empty
// phase g / stages - 1. Every stage issued is consumed before its task ends, so the count is the
// same on every thread. The arithmetic (x prologues, the stage's FMAs, the row block's sums and
// epilogues) is the streaming kernel's own functions, so a row's bits do not depend on which CTA
// or task computes it.
#include <algorithm>

#include "kernels/attention_decode_fast.cuh"
#include "kernels/embedding_row.cuh"
#include "kernels/greedy_key.cuh"
#include "kernels/matmul_stream_bulk.cuh"
#include "kernels/persistent_region_ops.cuh"
#include "kernels/qkv_rope_head.cuh"
#include "kernels/rmsnorm_row.cuh"
#include "kernels/silu_mul_row.cuh"

namespace megaops {

const char* region_task_kind_name(RegionTaskKind k) {
  switch (k) {
    case RegionTaskKind::None:
      return "none";
    case RegionTaskKind::Embedding:
      return "embedding";
    case RegionTaskKind::Norm:
      return "norm";
    case RegionTaskKind::Matmul:
      return "matmul";
    case RegionTaskKind::QkvRope:
      return "qkv_rope";
    case RegionTaskKind::Attention:
      return "attention";
    case RegionTaskKind::SiluMul:
      return "silu_mul";
    case RegionTaskKind::SampleArgmax:
      return "sample";
  }
  return "?";
}

namespace {

static_assert(REGION_THREADS == BK_WARPS * 32 && REGION_THREADS == RMSNORM_THREADS &&
                  REGION_THREADS == DECODE_THREADS,
              "a region's CTA is the streaming matmul's consumer warps, add_rmsnorm's and the "
              "decode attention's CTA");
static_assert(sizeof(RegionOp) % 16 == 0, "ops are copied to shared memory in 16-byte words");

#ifdef MEGAOPS_STREAM_BULK

// The CTA's weight ring (see the file comment): pointers into the dynamic window and the stage
// count of the CTA's stream so far (the same on every thread).
struct RegionRing {
  bf16* ring;
  uint64_t* full;
  uint64_t* empty;
  int stages;
  uint32_t base;  // stages of the CTA's earlier matmul tasks
};

// A matmul task's row blocks: tile `tile` covers columns [tile * tile_cols, + tile_cols) of the
// output, row blocks of ST_ROWS (with the SwiGLU epilogue, row block rb is gate rows 4 rb .. 4 rb
// + 3 and their up rows, so the blocks of the tile's columns cover the activation's columns
// [tile * tile_cols / 2, ...): every block once over the op's tiles).
struct RowBlocks {
  int rb0, rb1, kstages;
  __device__ int total() const { return (rb1 - rb0) * kstages; }
};

__device__ __forceinline__ RowBlocks matmul_row_blocks(const RegionOp& op, int tile) {
  const StreamMatmulArgs& a = op.mm;
  const int c0 = tile * op.tile_cols, c1 = min(a.n, c0 + op.tile_cols);
  return {c0 / ST_ROWS, (c1 + ST_ROWS - 1) / ST_ROWS, (a.k + ST_KC - 1) / ST_KC};
}

// One warp (every lane): stage i of the task (row block rb0 + i / kstages, k slice i % kstages)
// into its slot, once every thread has released the slot's previous stage.
template <bool EPI>
__device__ __forceinline__ void region_issue(const StreamMatmulArgs& a, const RegionRing& r,
                                             const RowBlocks& rbs, int i, int lane) {
  const uint32_t g = r.base + static_cast<uint32_t>(i);
  const int slot = static_cast<int>(g % static_cast<uint32_t>(r.stages));
  const uint32_t lap = g / static_cast<uint32_t>(r.stages);
  if (lap > 0) mbar_wait(&r.empty[slot], (lap - 1u) & 1u);
  bulk_issue_stage_warp<EPI>(a, r.ring + slot * ST_STAGE_ELEMS, &r.full[slot],
                             rbs.rb0 + i / rbs.kstages, i % rbs.kstages, lane);
}

// Before the waits: warp 0 issues the first stages of the task's weights; a folded norm's gain
// goes into x.
template <int M, bool EPI>
__device__ __forceinline__ void region_matmul_prologue(const RegionOp& op, int tile,
                                                       const RegionRing& r, bf16* xs) {
  const StreamMatmulArgs& a = op.mm;
  const RowBlocks rbs = matmul_row_blocks(op, tile);
  if (threadIdx.x < 32) {
    const int first = min(r.stages, rbs.total());
    for (int i = 0; i < first; ++i) region_issue<EPI>(a, r, rbs, i, threadIdx.x);
  }
  if (a.fold.on()) bulk_fold_stage_weight<M>(a, xs, rbs.kstages * ST_KC / 8);
}

// After the waits: x (the predecessors' rows, or a fold of them), then the row blocks of the tile
// stage by stage, as the streaming kernel's consumer warps compute them.
template <int M, bool EPI, bool ARG>
__device__ __forceinline__ void region_matmul_run(const RegionOp& op, int tile, RegionRing& r,
                                                  bf16* xs, float* red) {
  const StreamMatmulArgs& a = op.mm;
  const RowBlocks rbs = matmul_row_blocks(op, tile);
  const int x_chunks_per_row = rbs.kstages * ST_KC / 8;
  if (a.fold.on()) {
    // The first tile writes the residual stream on, as the kernel's CTA 0 does.
    bulk_fold_x<M, REGION_THREADS>(a, xs, x_chunks_per_row, red, tile == 0);
  } else if (a.silu_fold.on()) {
    bulk_silu_fold_x<M, REGION_THREADS>(a, xs, x_chunks_per_row);
  } else {
    bulk_load_x<M, REGION_THREADS>(a, xs, x_chunks_per_row);
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int c = 16 * warp + (lane & 15);
  const int r0 = lane >> 4;
  float* y = static_cast<float*>(a.y);
  float acc[M][4];
#pragma unroll
  for (int b = 0; b < M; ++b)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[b][j] = 0.f;
  [[maybe_unused]] unsigned long long best = 0ull;
  const int total = rbs.total();
  int rb = rbs.rb0, ks = 0, buf = 0;
  for (int i = 0; i < total; ++i) {
    const uint32_t g = r.base + static_cast<uint32_t>(i);
    const int slot = static_cast<int>(g % static_cast<uint32_t>(r.stages));
    const uint32_t lap = g / static_cast<uint32_t>(r.stages);
    mbar_wait(&r.full[slot], lap & 1u);
    const int kc = ks * (ST_KC / 8) + c;
    if (kc * 8 < a.k)
      bulk_stage_fma<M>(xs, r.ring + slot * ST_STAGE_ELEMS, x_chunks_per_row, kc, r0, c, acc);
    mbar_arrive(&r.empty[slot]);
    // The refill of the previous stage's slot, by the warps in turn: stage j = i - 1 is one every
    // thread has most likely released already, so its refiller rarely waits, and no warp issues
    // more than one stage in BK_WARPS.
    const int j = i - 1;
    if (j >= 0 && j + r.stages < total && warp == j % BK_WARPS)
      region_issue<EPI>(a, r, rbs, j + r.stages, lane);
    if (++ks == rbs.kstages) {
      ks = 0;
      bulk_finish_row_block<M, float, EPI, ARG>(a, red + buf * (BK_WARPS * M * ST_ROWS), warp, lane,
                                                r0, rb, y, acc, best);
      buf ^= 1;
      ++rb;
    }
  }
  if constexpr (ARG) {
    if (warp == 0) bulk_argmax_publish(a, lane, best);
  }
  r.base += static_cast<uint32_t>(total);
}

template <int M>
__device__ __forceinline__ void region_matmul_prologue_any(const RegionOp& op, int tile,
                                                           const RegionRing& r, bf16* xs) {
  if (op.mm.silu_out.on())
    region_matmul_prologue<M, true>(op, tile, r, xs);
  else
    region_matmul_prologue<M, false>(op, tile, r, xs);
}

template <int M>
__device__ __forceinline__ void region_matmul_run_any(const RegionOp& op, int tile, RegionRing& r,
                                                      bf16* xs, float* red) {
  if (op.mm.silu_out.on())
    region_matmul_run<M, true, false>(op, tile, r, xs, red);
  else if (op.mm.argmax != nullptr)
    region_matmul_run<M, false, true>(op, tile, r, xs, red);
  else
    region_matmul_run<M, false, false>(op, tile, r, xs, red);
}

// qkv_rope's head `tile` for every token: warp w takes tokens w, w + 8, ...
__device__ __forceinline__ void region_qkv_rope(const QkvRopeParams& p, int tile) {
  const int heads = p.num_heads + 2 * p.num_kv_heads;
  for (int tok = threadIdx.x / 32; tok < p.t; tok += REGION_THREADS / 32) {
    const int64_t item = static_cast<int64_t>(tok) * heads + tile;
    qkv_rope_head<float>(p, item, qkv_rope_load_consts(p, item));
  }
}

// silu_mul's vectors of the tile's columns, every row.
__device__ __forceinline__ void region_silu_mul(const SiluMulParams& p, int tile, int tile_cols) {
  const int v0 = tile * tile_cols / 8, v1 = min(p.inter, (tile + 1) * tile_cols) / 8;
  const int per_row = v1 - v0, vecs_per_row = p.inter / 8;
  for (int i = threadIdx.x; i < p.m * per_row; i += REGION_THREADS) {
    const int row = i / per_row;
    silu_mul_vec<float>(p, static_cast<int64_t>(row) * vecs_per_row + v0 + (i - row * per_row));
  }
}

// The attention's query head `tile`: the per-query-head launch's CTAs (row, split) of the head
// that hold keys of the row's context (decode_split_plan; split 0 for an empty one, which writes
// its zeros). The launch's other CTAs find no keys and return having written nothing (the split
// that writes the row's k / v to the cache is one of those with keys, or split 0), so they are
// left out rather than run in turn. Out of line: it takes the registers it needs (its fold
// variants the most of any task) without pressing on the matmul's, which at two CTAs an SM
// otherwise spill.
__device__ __noinline__ void region_attention(const RegionOp& op, int tile, unsigned char* smem) {
  const DecodeAttentionParams& p = op.attn;
  for (int bi = 0; bi < p.b; ++bi) {
    // A step input (written before the step, as the kernel reads it before its wait).
    const int ctx = min(p.ctx_lens[bi], p.max_seq);
    const int units = max(1, decode_split_plan(ctx, op.attn_splits).n_active);
    for (int split = 0; split < units; ++split) {
      decode_attention_per_head_unit(op.attn_variant, p, op.attn_splits, bi, tile, split, smem);
      // The unit's last shared-memory reads (its merge) come before the next unit's writes.
      __syncthreads();
    }
  }
}

__device__ __forceinline__ void region_sample_argmax(const SampleParams& p) {
  for (int r = threadIdx.x; r < p.b; r += REGION_THREADS) {
    p.tokens[r] = greedy_unpack_token(p.argmax[r]);
    p.argmax[r] = 0ull;
  }
}

template <int M>
__device__ __forceinline__ void persistent_region_body(const PersistentRegionParams& p,
                                                       uint8_t* region_window) {
  // The op of the running task, copied from the table in the prologue (16-byte words).
  __shared__ __align__(16) uint8_t op_raw[sizeof(RegionOp)];
  __shared__ uint32_t launch_index;
  uint8_t* smem = region_window +
                  ((BK_RING_ALIGN - shared_addr(region_window) % BK_RING_ALIGN) % BK_RING_ALIGN);
  RegionRing ring{reinterpret_cast<bf16*>(smem + p.smem.ring_offset),
                  reinterpret_cast<uint64_t*>(smem + p.smem.bar_offset),
                  reinterpret_cast<uint64_t*>(smem + p.smem.bar_offset) + p.smem.stages,
                  p.smem.stages, 0u};
  bf16* xs = reinterpret_cast<bf16*>(smem + p.smem.xs_offset);
  float* red = reinterpret_cast<float*>(smem + p.smem.red_offset);
  unsigned char* attn_smem = smem + p.smem.attn_offset;
  const RegionOp& op = *reinterpret_cast<const RegionOp*>(op_raw);

  if (threadIdx.x == 0) {
    bulk_init_barriers(ring.full, ring.empty, ring.stages);
    // Every CTA reads the launch index before any CTA of this launch can have advanced it: the
    // last CTA advances it only after every CTA has counted itself done, below.
    launch_index = ld_relaxed_gpu(p.launches);
  }
  __syncthreads();
  const uint32_t step = launch_index + 1u;

  auto prologue = [&](int32_t op_index, int32_t tile, int32_t) {
    const uint4* src = reinterpret_cast<const uint4*>(p.ops + (op_index - p.first_op));
    uint4* dst = reinterpret_cast<uint4*>(op_raw);
    for (int i = threadIdx.x; i < static_cast<int>(sizeof(RegionOp) / 16); i += REGION_THREADS)
      dst[i] = src[i];
    __syncthreads();
    if (op.kind == RegionTaskKind::Matmul) region_matmul_prologue_any<M>(op, tile, ring, xs);
  };
  auto body = [&](int32_t, int32_t tile, int32_t) {
    switch (op.kind) {
      case RegionTaskKind::Matmul:
        region_matmul_run_any<M>(op, tile, ring, xs, red);
        break;
      case RegionTaskKind::Norm:
        for (int row = 0; row < op.norm.rows; ++row) add_rmsnorm_row<float>(op.norm, row);
        break;
      case RegionTaskKind::QkvRope:
        region_qkv_rope(op.rope, tile);
        break;
      case RegionTaskKind::Attention:
        region_attention(op, tile, attn_smem);
        break;
      case RegionTaskKind::SiluMul:
        region_silu_mul(op.silu, tile, op.tile_cols);
        break;
      case RegionTaskKind::Embedding:
        for (int row = 0; row < op.emb.n; ++row) embedding_row(op.emb, row);
        break;
      case RegionTaskKind::SampleArgmax:
        region_sample_argmax(op.sample);
        break;
      case RegionTaskKind::None:
        break;
    }
  };
  persistent_region_run(p.sync, step, prologue, body);

  // The launch is done when every CTA is: the last one advances the launch index for the next
  // launch (stream-ordered after this one) and clears the count.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(p.launches + 1, 1u) == gridDim.x - 1) {
      atomicExch(p.launches + 1, 0u);
      atomicAdd(p.launches, 1u);
    }
  }
}

#endif  // MEGAOPS_STREAM_BULK

template <int M, int MIN_BLOCKS>
__global__ void __launch_bounds__(REGION_THREADS, MIN_BLOCKS)
    persistent_region_kernel(const PersistentRegionParams p) {
#ifdef MEGAOPS_STREAM_BULK
  extern __shared__ __align__(16) uint8_t region_window[];
  persistent_region_body<M>(p, region_window);
#else
  __trap();  // launched only on sm_90 (launch_persistent_region checks)
#endif
}

using RegionKernel = void (*)(const PersistentRegionParams);

// The instantiation of a layout: its rows and the registers its CTAs an SM leave each.
RegionKernel region_kernel(const RegionSmem& s) {
  static const RegionKernel table[2][REGION_MAX_CTAS_PER_SM] = {
      {persistent_region_kernel<1, 1>, persistent_region_kernel<1, 2>,
       persistent_region_kernel<1, 3>},
      {persistent_region_kernel<2, 1>, persistent_region_kernel<2, 2>,
       persistent_region_kernel<2, 3>}};
  return table[s.m <= 1 ? 0 : 1][std::clamp(s.ctas_per_sm, 1, REGION_MAX_CTAS_PER_SM) - 1];
}

int align_up(int v, int a) {
  return (v + a - 1) / a * a;
}

}  // namespace

namespace {

cudaError_t region_smem_layout_for(const RegionOp* ops, int n_ops, int stages, int ctas_per_sm,
                                   RegionSmem* out) {
  RegionSmem s;
  s.ctas_per_sm = ctas_per_sm;
  s.stages = stages;
  s.m = 0;
  for (int i = 0; i < n_ops; ++i) {
    const RegionOp& op = ops[i];
    if (op.kind == RegionTaskKind::Matmul) {
      if (op.mm.m < 1 || op.mm.m > MATMUL_STREAM_M_MAX || (s.m != 0 && op.mm.m != s.m))
        return cudaErrorInvalidValue;
      s.m = op.mm.m;
      s.x_kpad = std::max(s.x_kpad, (op.mm.k + ST_KC - 1) / ST_KC * ST_KC);
    }
    if (op.kind == RegionTaskKind::Attention)
      s.attn_bytes = std::max(s.attn_bytes,
                              static_cast<int>(sizeof(float)) * (DECODE_THREADS / 32) *
                                  (op.attn.head_dim + 2));  // decode_fast_smem_bytes(1, head_dim)
  }
  if (s.m == 0) s.m = 1;
  if (stages < ST_MIN_STAGES || stages > ST_MAX_STAGES) return cudaErrorInvalidValue;
  s.bar_offset = 0;
  s.red_offset = align_up(2 * stages * 8, 16);
  s.attn_offset = s.red_offset + BK_RED_FLOATS * 4;
  s.ring_offset = align_up(s.attn_offset + s.attn_bytes, BK_RING_ALIGN);
  s.xs_offset = s.ring_offset + (s.x_kpad > 0 ? stages * ST_STAGE_BYTES : 0);
  s.total = BK_RING_ALIGN + s.xs_offset + s.m * s.x_kpad * 2;
  *out = s;
  return cudaSuccess;
}

}  // namespace

cudaError_t region_smem_layout(const RegionOp* ops, int n_ops, int stages, int ctas_per_sm,
                               RegionSmem* out) {
  if (ctas_per_sm < 1 || ctas_per_sm > REGION_MAX_CTAS_PER_SM) return cudaErrorInvalidValue;
  if (stages != 0) return region_smem_layout_for(ops, n_ops, stages, ctas_per_sm, out);
  // The deepest ring up to REGION_AUTO_STAGES with which ctas_per_sm CTAs fit an SM: each its
  // dynamic and static shared memory and the 1 KB the device reserves a block, within the opt-in
  // limit of one block.
  int optin = 0, per_sm = 0;
  if (const cudaError_t err =
          current_device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, &optin);
      err != cudaSuccess)
    return err;
  if (const cudaError_t err =
          current_device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, &per_sm);
      err != cudaSuccess)
    return err;
  const int budget = std::min(optin, per_sm / ctas_per_sm - 1024);
  for (int s = REGION_AUTO_STAGES; s >= ST_MIN_STAGES; --s) {
    RegionSmem l;
    if (const cudaError_t err = region_smem_layout_for(ops, n_ops, s, ctas_per_sm, &l);
        err != cudaSuccess)
      return err;
    cudaFuncAttributes attr;
    if (const cudaError_t err = cudaFuncGetAttributes(&attr, region_kernel(l)); err != cudaSuccess)
      return err;
    if (l.total + static_cast<int>(attr.sharedSizeBytes) <= budget) {
      *out = l;
      return cudaSuccess;
    }
  }
  return cudaErrorInvalidValue;
}

cudaError_t persistent_region_max_resident_ctas(const RegionSmem& smem, int* out) {
  int sms = 0;
  if (const cudaError_t err = current_device_attribute(cudaDevAttrMultiProcessorCount, &sms);
      err != cudaSuccess)
    return err;
  const RegionKernel kernel = region_kernel(smem);
  if (const cudaError_t err =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem.total);
      err != cudaSuccess)
    return err;
  KernelFootprint f;
  if (const cudaError_t err = kernel_footprint(kernel, 0, REGION_THREADS, smem.total, &f);
      err != cudaSuccess)
    return err;
  *out = f.blocks_per_sm * sms;
  return cudaSuccess;
}

cudaError_t launch_persistent_region(const PersistentRegionParams& p, const LaunchOptions& launch) {
  if (!matmul_stream_bulk_supported()) return cudaErrorNotSupported;
  if (p.sync.schedule == nullptr || p.sync.semaphores == nullptr || p.ops == nullptr ||
      p.launches == nullptr || p.num_ctas < 1 || p.smem.total <= 0)
    return cudaErrorInvalidValue;
  const RegionKernel kernel = region_kernel(p.smem);
  if (const cudaError_t err =
          cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, p.smem.total);
      err != cudaSuccess)
    return err;
  return launch_kernel(kernel, dim3(p.num_ctas), dim3(REGION_THREADS),
                       static_cast<size_t>(p.smem.total), launch, p);
}

cudaError_t preload_persistent_region_kernels() {
  for (int m = 1; m <= MATMUL_STREAM_M_MAX; ++m)
    for (int c = 1; c <= REGION_MAX_CTAS_PER_SM; ++c) {
      RegionSmem s;
      s.m = m;
      s.ctas_per_sm = c;
      if (const cudaError_t err = preload_kernel(region_kernel(s)); err != cudaSuccess) return err;
    }
  return cudaSuccess;
}

}  // namespace megaops
