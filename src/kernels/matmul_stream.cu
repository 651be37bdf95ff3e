// The weight-streaming matmul for decode at batch 1-2 (see matmul_stream.cuh), in two versions:
// the cp.async ring below (any sm_80+ GPU) and the bulk-copy version after it (sm_90), which the
// default dispatch runs at m = 1 on the shapes of kernels/matmul_dispatch.h (every projection of
// the presets and their LM heads but the 8B-class QKV / O without PDL). `megaops bench-matmul`
// compares both with the small-m kernel and cuBLASLt; MEGAOPS_MATMUL_PATH / _STREAM_SHAPES move
// other shapes here.
//
// The ring version's history:
// Why it exists. The small-m kernel (matmul.cu) keeps its weights in registers: 4 KB in flight per
// warp, and ncu on the 8B's O projection (bench/results/2026-11-29-s6-call1) shows it latency-bound
// (DRAM 43-50% of peak, 15.5 of 24 possible warps per SM, 66% of stalls on the weight loads).
// Here the bytes in flight live in shared memory, filled by cp.async with no register cost, and a
// CTA issues its first STAGES - 1 stages before it waits for its predecessor (PDL or a tile
// counter), so the weights stream while the predecessor finishes.
//
// What it measured (s6-call2, -call3; H200, m = 1): level with or ahead of small-m everywhere
// (8B O 12.9 vs 14.2 us, gate_up 66.5 vs 74.7, LM head 276 vs 298; with PDL, O 11.2 vs 13.7 and
// QKV 15.4 vs 16.1), but behind cuBLASLt on every long weight stream (8B gate_up 66.5 vs 56.7 us,
// LM head 276 vs 247: cuBLASLt reaches 85-98% of the HBM ceiling there), and in the whole step it
// did not beat the default (llama3.1-8b 4.806 vs 4.740 ms with QKV / O on cuBLASLt, PDL on; that
// run used 8 ring slots). Fewer ring slots measured faster (2-4 of 16 KB beat 6-12), which the
// bytes-in-flight argument above does not explain; the first version, ~92 instructions per
// 16-byte chunk, was issue-bound (ncu: 45% of issue slots with 8 warps), the second halves that
// (by a count of its code, not measured: about 100 instructions per warp per 16 KB stage, ~16% of
// the issue slots at the rate it runs), so the second should not be issue-bound. What is left to
// try: 16 warps per CTA, tensor-core math on the staged tile (ldmatrix + mma), and ncu on the
// second version.
//
// Work split. A row block is ST_ROWS = 8 rows of W (one per warp) over the whole k; a stage is
// one row block's 8 x 1024 slice (16 KB, 8 runs of 2 KB, each copied by four warp instructions of
// 512 contiguous bytes). Each CTA (one per SM: the ring and x take most of its shared memory) owns
// a contiguous range of row blocks, balanced to within one block, and walks its stages in order
// through a ring of STAGES slots: wait for stage t, barrier, refill the slot stage t - 1 used with
// stage t + STAGES - 1, compute stage t. One barrier per stage.
//
// Math on CUDA cores: warp w owns row w of the row block; lane l takes 16-byte chunks l, l + 32,
// l + 64, l + 96 of each stage (conflict-free shared loads), multiplies them with x (staged in
// shared memory once per CTA, converted to fp32) into two fp32 accumulators per batch row, and the
// row's partial sums meet in a shuffle reduction when the row block's last stage is done.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/greedy_key.cuh"
#include "kernels/matmul_stream.cuh"
#include "kernels/rmsnorm_row.cuh"
#include "kernels/silu_mul_row.cuh"

namespace megaops {

namespace {

constexpr int ST_WARPS = 8;
constexpr int ST_THREADS = ST_WARPS * 32;
constexpr int ST_ROWS = ST_WARPS;        // rows of W per row block: one per warp
constexpr int ST_KC = MATMUL_STREAM_KC;  // k per stage (and the padding unit of x)
constexpr int ST_STAGE_ELEMS = ST_ROWS * ST_KC;
constexpr int ST_STAGE_BYTES = ST_STAGE_ELEMS * 2;               // 16 KB
constexpr int ST_ROW_CHUNKS = ST_KC / 8;                         // 16-byte chunks per row per stage
constexpr int ST_COPIES = ST_ROWS * ST_ROW_CHUNKS / ST_THREADS;  // cp.async per thread per stage
constexpr int ST_LANE_CHUNKS = ST_ROW_CHUNKS / 32;               // chunks per lane per stage
// 4: measured as fast as or faster than 6-12 on every model shape (s6-call3), 2-3 within noise of
// it.
constexpr int ST_DEFAULT_STAGES = 4;
constexpr int ST_MIN_STAGES = MATMUL_STREAM_STAGES_MIN;
constexpr int ST_MAX_STAGES = MATMUL_STREAM_STAGES_MAX;
static_assert(ST_ROWS * ST_ROW_CHUNKS % ST_THREADS == 0 && ST_ROW_CHUNKS % 32 == 0);

__device__ __forceinline__ uint32_t shared_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, cached in L2 only; src_bytes = 0 writes zeros (rows past n, k past
// its end) and reads nothing.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(shared_addr(dst)), "l"(src),
               "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}

// cp.async.wait_group takes an immediate; the ring size is a launch parameter.
__device__ __forceinline__ void cp_async_wait_pending(int pending) {
  switch (pending) {
#define MEGAOPS_CP_WAIT(n)                                    \
  case n:                                                     \
    asm volatile("cp.async.wait_group " #n ";" ::: "memory"); \
    break;
    MEGAOPS_CP_WAIT(1)
    MEGAOPS_CP_WAIT(2)
    MEGAOPS_CP_WAIT(3)
    MEGAOPS_CP_WAIT(4)
    MEGAOPS_CP_WAIT(5)
    MEGAOPS_CP_WAIT(6)
    MEGAOPS_CP_WAIT(7)
    MEGAOPS_CP_WAIT(8)
    MEGAOPS_CP_WAIT(9)
    MEGAOPS_CP_WAIT(10)
    MEGAOPS_CP_WAIT(11)
    MEGAOPS_CP_WAIT(12)
    MEGAOPS_CP_WAIT(13)
    MEGAOPS_CP_WAIT(14)
#undef MEGAOPS_CP_WAIT
    default:  // 0, or more than the ring holds: wait for everything (correct, never too early)
      asm volatile("cp.async.wait_group 0;" ::: "memory");
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ void store_y(float* y, float v) {
  *y = v;
}
__device__ __forceinline__ void store_y(bf16* y, float v) {
  *y = __float2bfloat16_rn(v);
}

// Chunk i of x as [m][k padded to the stage width] in 8-element chunks: the predecessor's output
// (ordinary coherent loads, after the wait), zeros past m and k.
__device__ __forceinline__ uint4 x_chunk(const StreamMatmulArgs& a, int i, int chunks_per_row) {
  const int b = i / chunks_per_row, kk = (i % chunks_per_row) * 8;
  if (b >= a.m || kk >= a.k) return make_uint4(0, 0, 0, 0);
  return *reinterpret_cast<const uint4*>(a.x + static_cast<int64_t>(b) * a.ldx + kk);
}

// The stage this thread copies next: row block, k slice and ring slot, advanced one stage at a
// time (no divisions in the loop). Each thread copies the same four 16-byte chunks of every
// stage: column chunk `cc8` of rows r0, r0 + 2, r0 + 4, r0 + 6 (two rows per 256-thread round).
struct StageCopier {
  static constexpr int ROW_STEP = ST_THREADS / ST_ROW_CHUNKS;
  int rb, ks, slot, left;  // next stage; stages still to copy (past them: empty groups)
  int r0, cc8;

  __device__ __forceinline__ void issue(const StreamMatmulArgs& a, bf16* ring, int stages,
                                        int kstages) {
    if (left > 0) {
      const int row0 = rb * ST_ROWS + r0, kk = ks * ST_KC + cc8;
      const bf16* src = a.w + static_cast<int64_t>(row0) * a.k + kk;
      bf16* dst = ring + slot * ST_STAGE_ELEMS + r0 * ST_KC + cc8;
#pragma unroll
      for (int j = 0; j < ST_COPIES; ++j) {
        const bool ok = kk < a.k && row0 + ROW_STEP * j < a.n;  // k % 8 == 0: all in or all out
        cp_async16(dst + ROW_STEP * j * ST_KC,
                   ok ? src + static_cast<int64_t>(ROW_STEP * j) * a.k : a.w, ok ? 16 : 0);
      }
      --left;
      if (++ks == kstages) {
        ks = 0;
        ++rb;
      }
      if (++slot == stages) slot = 0;
    }
    cp_async_commit();  // one group per stage for every thread, so the wait count stays uniform
  }
};
static_assert(ST_COPIES * StageCopier::ROW_STEP == ST_ROWS);

__device__ __forceinline__ float bf16_lo(uint32_t v) {
  return __uint_as_float(v << 16);
}
__device__ __forceinline__ float bf16_hi(uint32_t v) {
  return __uint_as_float(v & 0xffff0000u);
}

template <int M, typename OutT>
__global__ void __launch_bounds__(ST_THREADS, 1)
    matmul_stream_kernel(StreamMatmulArgs a, int stages) {
  extern __shared__ __align__(16) uint8_t smem[];
  bf16* ring = reinterpret_cast<bf16*>(smem);  // stages x [ST_ROWS][ST_KC]
  float* xs = reinterpret_cast<float*>(ring + static_cast<size_t>(stages) * ST_STAGE_ELEMS);
  const int kstages = (a.k + ST_KC - 1) / ST_KC;
  const int kpad = kstages * ST_KC;  // xs is [M][kpad] fp32
  const int row_blocks = (a.n + ST_ROWS - 1) / ST_ROWS;
  const int rb0 = static_cast<int>(static_cast<int64_t>(blockIdx.x) * row_blocks / gridDim.x);
  const int rb1 = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * row_blocks / gridDim.x);
  const int total = (rb1 - rb0) * kstages;
  const uint32_t step = tile_sync_step(a.sync);

  // The weights need no wait: fill all but one slot of the ring before waiting for x.
  StageCopier copier{rb0,
                     0,
                     0,
                     total,
                     static_cast<int>(threadIdx.x) / ST_ROW_CHUNKS,
                     (static_cast<int>(threadIdx.x) % ST_ROW_CHUNKS) * 8};
  for (int t = 0; t < stages - 1; ++t) copier.issue(a, ring, stages, kstages);
  tile_sync_wait(a.sync, step);

  // x (the predecessor's output: ordinary coherent loads, after the wait) into shared memory as
  // fp32, zero past m and k. The first barrier of the loop publishes it.
  const int x_chunks_per_row = kpad / 8;
  for (int i = threadIdx.x; i < M * x_chunks_per_row; i += ST_THREADS) {
    const uint4 v = x_chunk(a, i, x_chunks_per_row);
    float4* dst = reinterpret_cast<float4*>(xs) + 2 * i;  // xs[b][kpad]: chunk i at 8 i
    dst[0] = make_float4(bf16_lo(v.x), bf16_hi(v.x), bf16_lo(v.y), bf16_hi(v.y));
    dst[1] = make_float4(bf16_lo(v.z), bf16_hi(v.z), bf16_lo(v.w), bf16_hi(v.w));
  }
  pdl_launch_dependents();

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  OutT* y = static_cast<OutT*>(a.y);
  float acc[M][2];
#pragma unroll
  for (int b = 0; b < M; ++b) acc[b][0] = acc[b][1] = 0.f;
  int rb = rb0, ks = 0, slot = 0;
  for (int t = 0; t < total; ++t) {
    cp_async_wait_pending(stages - 2);  // this thread's copies of stage t have landed
    __syncthreads();  // everyone's copies of t (and x) visible; everyone done with slot t - 1
    copier.issue(a, ring, stages, kstages);  // stage t + stages - 1, into slot t - 1
    const bf16* wrow = ring + slot * ST_STAGE_ELEMS + warp * ST_KC;
    const float* xk = xs + ks * ST_KC;
#pragma unroll
    for (int j = 0; j < ST_LANE_CHUNKS; ++j) {
      const int e = (lane + 32 * j) * 8;
      const uint4 wv = *reinterpret_cast<const uint4*>(wrow + e);
#pragma unroll
      for (int b = 0; b < M; ++b) {
        const float4 x0 = *reinterpret_cast<const float4*>(xk + static_cast<size_t>(b) * kpad + e);
        const float4 x1 =
            *reinterpret_cast<const float4*>(xk + static_cast<size_t>(b) * kpad + e + 4);
        acc[b][0] = fmaf(bf16_lo(wv.x), x0.x, acc[b][0]);
        acc[b][1] = fmaf(bf16_hi(wv.x), x0.y, acc[b][1]);
        acc[b][0] = fmaf(bf16_lo(wv.y), x0.z, acc[b][0]);
        acc[b][1] = fmaf(bf16_hi(wv.y), x0.w, acc[b][1]);
        acc[b][0] = fmaf(bf16_lo(wv.z), x1.x, acc[b][0]);
        acc[b][1] = fmaf(bf16_hi(wv.z), x1.y, acc[b][1]);
        acc[b][0] = fmaf(bf16_lo(wv.w), x1.z, acc[b][0]);
        acc[b][1] = fmaf(bf16_hi(wv.w), x1.w, acc[b][1]);
      }
    }
    if (++slot == stages) slot = 0;
    if (++ks == kstages) {  // the row block's last slice: this warp's row is complete
      ks = 0;
      const int row = rb * ST_ROWS + warp;
#pragma unroll
      for (int b = 0; b < M; ++b) {
        const float v = warp_sum(acc[b][0] + acc[b][1]);
        acc[b][0] = acc[b][1] = 0.f;
        if (lane == 0 && b < a.m && row < a.n)
          store_y(y + static_cast<int64_t>(b) * a.ldy + row, v);
      }
      ++rb;
    }
  }
  // Every copy of a stage < total was waited for above; the groups still open are empty.
  tile_sync_signal(a.sync, step);
}

// ---------------------------------------------------------------------------------------------
// The bulk-copy version (sm_90; MEGAOPS_STREAM_KERNEL=bulk, kernels/matmul_stream.cuh).
//
// Same stages (8 rows x 1024 k, 16 KB) and the same contiguous row-block range per CTA, but:
//   - one producer warp (lane 0) fills the ring with bulk copies (cp.async.bulk, the TMA's 1-D
//     form: one instruction per 2 KB row slice instead of 128 16-byte cp.async), each slot with a
//     "full" mbarrier the copies complete and an "empty" one every consumer thread releases, so no
//     CTA-wide barrier per stage and the ring can be deep without costing issue slots;
//   - the eight consumer warps split a stage along k instead of by row: warp w takes chunks
//     16 w .. 16 w + 15 of all eight rows, lane l chunk 16 w + l % 16 of rows l / 16 + 2 j
//     (j < 4), so a lane loads its 8 x values once per stage and uses them for four rows (the
//     ring version reads all of x once per row: 2 bytes of x per byte of W from shared memory);
//     x sits in shared memory as bf16 (what it is in global memory, and what the folds round to),
//     a lane converting its 8 values of a stage (16 contiguous bytes a lane, 256 a half warp: no
//     bank conflict); at 2 bytes an element (it was fp32 until the seventeenth session) the 1B's
//     down projection (k = 8192, 81 KB a CTA with 4 slots) fits on an SM beside two CTAs of the
//     gate_up before it (69 KB each), so it can start and stream while they finish;
//   - a row's partial sums meet once per row block: a shuffle over the 16 lanes of a half warp,
//     then the eight warps' partials through shared memory (double-buffered by row block, one
//     named barrier of the consumer warps), summed in warp order by warp 0;
//   - it alone can fold the residual add + RMSNorm before it (a.fold, kernels/norm_fold.cuh): the
//     prologue computes x from the residual rows instead of reading it (bulk_fold_x), while the
//     weights already stream into the ring; likewise the SwiGLU before it (a.silu_fold,
//     kernels/act_fold.cuh; bulk_silu_fold_x).
// Measured (bench/results/2026-11-30-s9-call1, -call2; H200, m = 1, 4 slots): faster than the
// ring on every model shape (8B QKV 15.9 vs 17.8 us, O 11.8 vs 13.3, gate_up 63.0 vs 67.4; 1B
// gate_up 20.7 vs 24.1) and than cuBLASLt on the QKV / O / small down projections (8B O 11.7 vs
// 13.3; 1B O 5.0 vs 6.1, down 12.8 vs 13.6), still behind it on the long streams (8B gate_up 61 vs
// 55-58, down 34-39 vs 31-33, LM head 257 vs 238). More slots are slower here too (ncu at 8: DRAM
// 67% busy, issue slots 23%: neither the issue rate nor the bytes in flight limit it).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define MEGAOPS_STREAM_BULK 1
#endif

constexpr int BK_WARPS = ST_WARPS;  // consumer warps; the producer is warp BK_WARPS
constexpr int BK_THREADS = (BK_WARPS + 1) * 32;
// 4: the fastest of 2-12 on most model shapes (bench/results/2026-11-30-s9-call1, -call2); more
// slots are slower, 6 and up by 10-20% on the long streams (8B gate_up 61 / 61 / 72 us at 4 / 5 /
// 6).
constexpr int BK_DEFAULT_STAGES = 4;
constexpr int BK_RED_FLOATS = 2 * BK_WARPS * MATMUL_STREAM_M_MAX * ST_ROWS;  // two row blocks
// The ring's first slot starts at a multiple of this many bytes of the shared window (the launch
// asks for that much more shared memory). Dynamic shared memory follows the kernel's static
// shared memory (16 bytes of trace stamps, kernels/tile_sync.cuh), so without it every bulk copy
// landed 16 bytes past a 128-byte line: ncu (bench/results/2026-12-01-s21-call2) counted 25% more
// L2 sectors read by the TMA than the weights hold (9.18 M for 7.34 M on the 8B's gate_up) in
// 1.67-sector requests, against cuBLASLt's 4-sector requests and 6% (perf-notes item 41).
constexpr int BK_RING_ALIGN = 128;

#ifdef MEGAOPS_STREAM_BULK
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_addr(bar)), "r"(count)
               : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_addr(bar)),
               "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(shared_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(shared_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

// One bulk copy of global memory into shared memory, completing on `bar`, with an L2 cache policy
// (createpolicy) on the source's lines.
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                          uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], "
      "[%1], %2, [%3], %4;" ::"r"(shared_addr(dst)),
      "l"(src), "r"(bytes), "r"(shared_addr(bar)), "l"(policy)
      : "memory");
}

// The L2 policy of the weight copies (StreamMatmulArgs::l2_evict_first): every line they bring in
// is the first to leave L2, or (the diagnostic off state) of normal priority, which measured far
// slower than a copy without any hint (docs/perf-notes.md item 46).
__device__ __forceinline__ uint64_t l2_weight_policy(bool evict_first) {
  uint64_t first, normal;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(first));
  asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(normal));
  return evict_first ? first : normal;
}

// The bulk copies of one stage into its slot, completing on the slot's full barrier. Rows past n
// are not copied (their sums are never stored); k past its end is not copied either, and the
// consumers skip those chunks (the slot holds stale bytes there). With the SwiGLU epilogue
// (a.silu_out) row block rb holds gate rows 4 rb .. 4 rb + 3 and the up rows inter + 4 rb ..
// inter + 4 rb + 3 that pair with them (n = 2 inter, inter % 4 == 0: every block is whole); EPI
// is whether a.silu_out is on.
template <bool EPI>
__device__ __forceinline__ void bulk_issue_stage(const StreamMatmulArgs& a, bf16* slot_base,
                                                 uint64_t* full, int rb, int ks) {
  const int row0 = rb * ST_ROWS, k0 = ks * ST_KC;
  const int rows = min(ST_ROWS, a.n - row0);
  const uint32_t bytes = static_cast<uint32_t>(min(ST_KC, a.k - k0)) * 2u;
  mbar_expect_tx(full, bytes * static_cast<uint32_t>(rows));
  for (int r = 0; r < rows; ++r) {
    const int64_t wrow = !EPI              ? row0 + r
                         : r < ST_ROWS / 2 ? (ST_ROWS / 2) * rb + r
                                           : static_cast<int64_t>(a.silu_out.inter) +
                                                 (ST_ROWS / 2) * rb + (r - ST_ROWS / 2);
    // The policy formed per copy: one held in a register across the producer's loop spilled.
    bulk_copy(slot_base + r * ST_KC, a.w + wrow * a.k + k0, bytes, full,
              l2_weight_policy(a.l2_evict_first));
  }
}

// Vectors (8 elements) of r that an owner thread of bulk_fold_x keeps in registers between the
// norm's two passes: rows of k <= 8 * 256 * 2 = 4096 (every preset's hidden size); past them a
// thread forms r again from the residual rows in the second pass (the same operations: the same
// bits). 2, not 4: with the first pass's loads all in flight together, 4 spilled at m = 1 under
// the kernel's 72-register bound (ptxas -v).
constexpr int BK_FOLD_KEEP = 2;

// x for the bulk kernel with a folded norm (kernels/norm_fold.cuh): row b < m is
// bf16(r / sqrt(mean(r^2) + eps) * weight) with r = residual + delta, into xs ([M][kpad] bf16,
// row b at b * chunks_per_row 16-byte chunks), zero past k and past m; CTA 0 also writes r to
// residual_out. add_rmsnorm's arithmetic on add_rmsnorm's threads (kernels/rmsnorm_row.cuh):
// thread t < RMSNORM_THREADS (the consumer warps) owns vectors t, t + RMSNORM_THREADS, ... of each
// row, so x and r match its output bit for bit. r waits in the owner's registers between the
// passes (BK_FOLD_KEEP vectors; any further ones are formed again). Every thread of the CTA calls
// it (the block sums' barriers); the producer warp adds zeros. `scratch`: RMSNORM_WARPS floats of
// shared memory nobody else uses until the barrier after this. The norm's gain is already in xs
// (bulk_fold_stage_weight, before the wait), where each owner reads its vector and writes x over
// it. The first pass only loads (r's residual_out copy waits for the second), so an owner's
// loads of all its vectors are in flight together: one L2 round trip after the wait instead of
// one per vector, and none for the gain, which is a miss queued behind the ring's fill otherwise
// (the 8B's QKV had x after 3.5 us, its gate_up after 3.7, traced in 2026-12-01-s23-call1).
template <int M>
__device__ __forceinline__ void bulk_fold_x(const StreamMatmulArgs& a, bf16* xs, int chunks_per_row,
                                            float* scratch) {
  static_assert(RMSNORM_THREADS == BK_WARPS * 32, "the consumer warps are add_rmsnorm's CTA");
  const NormFold& f = a.fold;
  const int vecs = a.k / 8;
  const int t = static_cast<int>(threadIdx.x);
  const bool owner = t < RMSNORM_THREADS;
  for (int b = 0; b < M; ++b) {  // b < a.m is the same on every thread
    uint4* x = reinterpret_cast<uint4*>(xs) + b * chunks_per_row;
    for (int v = (b < a.m ? vecs : 0) + t; v < chunks_per_row; v += BK_THREADS)
      x[v] = make_uint4(0u, 0u, 0u, 0u);
    if (b >= a.m) continue;
    const int64_t row = static_cast<int64_t>(b) * a.k;
    const float4* res = reinterpret_cast<const float4*>(f.residual + row);
    const float4* delta = f.delta ? reinterpret_cast<const float4*>(f.delta + row) : nullptr;
    float4* res_out = blockIdx.x == 0 && f.residual_out
                          ? reinterpret_cast<float4*>(f.residual_out + row)
                          : nullptr;
    // r of vector v (residual + delta, add_rmsnorm's additions).
    auto form_r = [&](int v, float4& r0, float4& r1) {
      r0 = res[2 * v], r1 = res[2 * v + 1];
      if (delta) {
        const float4 d0 = delta[2 * v], d1 = delta[2 * v + 1];
        const float d[8] = {d0.x, d0.y, d0.z, d0.w, d1.x, d1.y, d1.z, d1.w};
        rmsnorm_add8(r0, r1, d);
      }
    };
    float4 keep0[BK_FOLD_KEEP], keep1[BK_FOLD_KEEP];
    float sumsq = 0.0f;
    if (owner) {
#pragma unroll
      for (int j = 0; j < BK_FOLD_KEEP; ++j) {
        const int v = t + j * RMSNORM_THREADS;
        if (v < vecs) form_r(v, keep0[j], keep1[j]);
      }
#pragma unroll
      for (int j = 0; j < BK_FOLD_KEEP; ++j) {
        const int v = t + j * RMSNORM_THREADS;
        if (v < vecs) sumsq = rmsnorm_sumsq8(sumsq, keep0[j], keep1[j]);
      }
      for (int v = t + BK_FOLD_KEEP * RMSNORM_THREADS; v < vecs; v += RMSNORM_THREADS) {
        float4 r0, r1;
        form_r(v, r0, r1);
        sumsq = rmsnorm_sumsq8(sumsq, r0, r1);
      }
    }
    const float inv_rms = rmsnorm_inv_rms(rmsnorm_block_sum(sumsq, scratch), a.k, f.eps);
    if (owner) {
#pragma unroll
      for (int j = 0; j < BK_FOLD_KEEP; ++j) {
        const int v = t + j * RMSNORM_THREADS;
        if (v < vecs) {
          x[v] = rmsnorm_scale8(keep0[j], keep1[j], x[v], inv_rms);
          if (res_out) {
            res_out[2 * v] = keep0[j];
            res_out[2 * v + 1] = keep1[j];
          }
        }
      }
      for (int v = t + BK_FOLD_KEEP * RMSNORM_THREADS; v < vecs; v += RMSNORM_THREADS) {
        float4 r0, r1;
        form_r(v, r0, r1);
        x[v] = rmsnorm_scale8(r0, r1, x[v], inv_rms);
        if (res_out) {
          res_out[2 * v] = r0;
          res_out[2 * v + 1] = r1;
        }
      }
    }
  }
}

// The norm's gain into xs before the wait (bulk_fold_x reads it there): row b < m of xs gets the
// gain's k / 8 vectors, vector v stored by the owner thread that later computes x[v] over it, so
// no barrier is needed between the two. The gain is a weight (nobody writes it), so it may be read
// before the wait, like the ring's stages.
template <int M>
__device__ __forceinline__ void bulk_fold_stage_weight(const StreamMatmulArgs& a, bf16* xs,
                                                       int chunks_per_row) {
  const int t = static_cast<int>(threadIdx.x);
  if (t >= RMSNORM_THREADS) return;
  const uint4* weight = reinterpret_cast<const uint4*>(a.fold.weight);
  const int vecs = a.k / 8;
  for (int b = 0; b < M; ++b) {
    if (b >= a.m) break;
    uint4* x = reinterpret_cast<uint4*>(xs) + b * chunks_per_row;
#pragma unroll 1
    for (int v = t; v < vecs; v += RMSNORM_THREADS) x[v] = weight[v];
  }
}

// x as the predecessor wrote it (no fold) into xs: BK_X_BATCH chunks a thread per round, all
// loaded before any is stored, so a row of k = 14336 (the 8B's down projection: 1792 chunks over
// 288 threads) takes two L2 round trips after the wait instead of seven.
constexpr int BK_X_BATCH = 4;
template <int M>
__device__ __forceinline__ void bulk_load_x(const StreamMatmulArgs& a, bf16* xs,
                                            int chunks_per_row) {
  const int total = M * chunks_per_row;
  for (int i0 = static_cast<int>(threadIdx.x); i0 < total; i0 += BK_X_BATCH * BK_THREADS) {
    uint4 v[BK_X_BATCH];
#pragma unroll
    for (int j = 0; j < BK_X_BATCH; ++j) {
      const int i = i0 + j * BK_THREADS;
      v[j] = i < total ? x_chunk(a, i, chunks_per_row) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int j = 0; j < BK_X_BATCH; ++j) {
      const int i = i0 + j * BK_THREADS;
      if (i < total) reinterpret_cast<uint4*>(xs)[i] = v[j];
    }
  }
}

// Units of gate|up that a thread of the bulk kernel loads before it computes any
// (bulk_silu_fold_x): 4 x 2 float4 = 32 registers, 37 KB in flight per CTA, so one round covers
// a row of k <= 4608 and the 1B's down projection (k = 8192) takes two. It was 8 (64 registers)
// until the eighteenth session: 4 keeps the m = 1 kernel within 72 registers (below).
constexpr int BK_SILU_BATCH = 4;

// x for the bulk kernel with a folded SwiGLU (kernels/act_fold.cuh): row b < m, element i < k is
// bf16(silu(gate_up[b, i]) * gate_up[b, k + i]), zero past k and past m, in xs ([M][kpad] bf16,
// bulk_fold_x). silu_mul's arithmetic (kernels/silu_mul_row.cuh), which is elementwise, so any
// thread mapping gives its bits. A unit is one float4 (4 elements) of a row: unit q of row b is
// elements 4q .. 4q + 3, 8 bytes of xs. All BK_THREADS threads (the producer warp too: its lane 0
// has issued the ring's first stages and waits for a slot until after the barrier that follows)
// take units in rounds of BK_SILU_BATCH per thread, and issue a round's loads (a gate and an up
// float4 each) before computing any. Warp w's j-th unit of a round lies in a 32-unit block (512
// contiguous bytes of gate, and of up, per load instruction; 256 contiguous bytes of xs per
// store), lane l taking its unit l.
template <int M>
__device__ __forceinline__ void bulk_silu_fold_x(const StreamMatmulArgs& a, bf16* xs,
                                                 int chunks_per_row) {
  const int units_per_row = 2 * chunks_per_row;  // a multiple of 256: blocks never straddle rows
  const int total = M * units_per_row;
  const int k_units = a.k / 4;  // units holding elements < k
  const int lane = threadIdx.x & 31;
  const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
  // Unit u of the CTA's M rows: row b, unit q of the row; with loads only for b < m and q < k / 4.
  auto locate = [&](int u, int& b, int& q) {
    b = 0;
    q = u;
#pragma unroll
    for (int s = 1; s < M; ++s)
      if (q >= units_per_row) {
        q -= units_per_row;
        ++b;
      }
  };
  for (int u0 = 32 * (static_cast<int>(threadIdx.x) >> 5); u0 < total;
       u0 += BK_SILU_BATCH * BK_THREADS) {
    float4 g[BK_SILU_BATCH], u[BK_SILU_BATCH];
#pragma unroll
    for (int j = 0; j < BK_SILU_BATCH; ++j) {
      int b, q;
      locate(u0 + j * BK_THREADS + lane, b, q);
      g[j] = u[j] = zero;
      if (b < a.m && q < k_units) {
        const float4* row = reinterpret_cast<const float4*>(a.silu_fold.gate_up +
                                                            static_cast<int64_t>(b) * 2 * a.k);
        g[j] = row[q];
        u[j] = row[k_units + q];  // up starts at element k: unit k / 4
      }
    }
#pragma unroll
    for (int j = 0; j < BK_SILU_BATCH; ++j) {
      int b, q;
      locate(u0 + j * BK_THREADS + lane, b, q);
      if (q >= units_per_row) continue;  // past the last row (u >= total)
      uint2 v = make_uint2(0u, 0u);
      if (b < a.m && q < k_units) {
        const __nv_bfloat162 lo =
            silu_mul2(make_float2(g[j].x, g[j].y), make_float2(u[j].x, u[j].y));
        const __nv_bfloat162 hi =
            silu_mul2(make_float2(g[j].z, g[j].w), make_float2(u[j].z, u[j].w));
        v = make_uint2(*reinterpret_cast<const uint32_t*>(&lo),
                       *reinterpret_cast<const uint32_t*>(&hi));
      }
      reinterpret_cast<uint2*>(xs)[b * units_per_row + q] = v;
    }
  }
}

// The site of an injected delay in the bulk kernel's ring: (CTA, stage, warp; the producer is
// warp BK_WARPS).
__device__ __forceinline__ uint64_t ring_delay_site(int t, int warp) {
  return (static_cast<uint64_t>(blockIdx.x) << 40) ^ (static_cast<uint64_t>(t) << 8) ^
         static_cast<uint64_t>(warp);
}
#endif

// At m = 1 three CTAs an SM (72 registers, no spills by ptxas -v; 88 without the bound): the
// register file then holds a CTA of the next launch beside two of this one, so in the PDL chain
// the 1B's down projection becomes resident while gate_up's CTAs finish (perf-notes item 38:
// llama3.2-1b's chain 0.878 -> 0.849 ms a token). m = 2 needs 104 registers: one bound of 1.
// EPI: the SwiGLU epilogue (a.silu_out on; launched only then, with OutT float): a template
// argument so that the kernel without it is the code the conventional step measured before it.
// DYN: the dynamic schedule (a.sched, StreamMatmulArgs::schedule; instantiated at M = 1): the
// producer lane takes CTA b's first row block b, then fetches the next block's ticket from
// a.sched[0] as each block starts (so the fetch's latency hides behind the block's stages); the
// row block of a slot's stage travels in slot_rb, written before the slot's full barrier is
// armed (its arrive releases it, the consumers' wait acquires it), and a slot whose row block is
// -1 ends the consumers' loop. Every CTA fetches exactly one ticket past the end, then counts
// itself done in a.sched[1]; the last one zeroes both for the next launch. A row's arithmetic
// does not depend on which CTA computes it: the same bits as the static schedule.
// ARG: the greedy argmax epilogue (a.argmax set; launched only then, with OutT float): warp 0's
// lanes that store y keep the maximum greedy_pack of what they stored (lane b * 8 + r: batch row
// b), and after the last row block the warp folds each row's eight lanes and takes atomicMax into
// a.argmax[b], before the CTA's signal.
template <int M, typename OutT, bool EPI = false, bool DYN = false, bool ARG = false>
__global__ void __launch_bounds__(BK_THREADS, M == 1 ? 3 : 1)
    matmul_stream_bulk_kernel(StreamMatmulArgs a, int stages) {
#ifdef MEGAOPS_STREAM_BULK
  extern __shared__ __align__(16) uint8_t smem_window[];
  uint8_t* smem =
      smem_window + ((BK_RING_ALIGN - shared_addr(smem_window) % BK_RING_ALIGN) % BK_RING_ALIGN);
  const int kstages = (a.k + ST_KC - 1) / ST_KC;
  const int kpad = kstages * ST_KC;
  bf16* ring = reinterpret_cast<bf16*>(smem);                      // stages x [ST_ROWS][ST_KC]
  bf16* xs = ring + static_cast<size_t>(stages) * ST_STAGE_ELEMS;  // x: [M][kpad]
  uint64_t* full = reinterpret_cast<uint64_t*>(xs + static_cast<size_t>(M) * kpad);
  uint64_t* empty = full + stages;
  float* red = reinterpret_cast<float*>(empty + stages);       // [2][BK_WARPS][M][ST_ROWS]
  int* slot_rb = reinterpret_cast<int*>(red + BK_RED_FLOATS);  // DYN: [stages]

  const int row_blocks = (a.n + ST_ROWS - 1) / ST_ROWS;
  const int rb0 = static_cast<int>(static_cast<int64_t>(blockIdx.x) * row_blocks / gridDim.x);
  const int rb1 = static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * row_blocks / gridDim.x);
  const int total = (rb1 - rb0) * kstages;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool producer = warp == BK_WARPS;
  const uint32_t step = tile_sync_step(a.sync);

  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], BK_WARPS * 32);  // every consumer thread releases its own loads
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  // The weights need no wait: the producer fills the whole ring before anyone waits for x.
  int p_rb = DYN ? static_cast<int>(blockIdx.x) : rb0, p_ks = 0, p_t = 0;
  unsigned p_next = blockIdx.x;  // DYN: the row block the next block start takes
  bool p_done = false;           // DYN: the end slot is issued
  auto produce = [&]() {
    const int slot = p_t % stages;
    if constexpr (DYN) {
      if (p_ks == 0) {
        p_rb = p_next < static_cast<unsigned>(row_blocks) ? static_cast<int>(p_next) : -1;
        if (p_rb >= 0) p_next = atomicAdd(a.sched, 1u) + gridDim.x;
        slot_rb[slot] = p_rb;
        if (p_rb < 0) {
          mbar_arrive(&full[slot]);
          p_done = true;
          ++p_t;
          return;
        }
      }
    }
    bulk_issue_stage<EPI>(a, ring + slot * ST_STAGE_ELEMS, &full[slot], p_rb, p_ks);
    if (++p_ks == kstages) {
      p_ks = 0;
      ++p_rb;  // static; DYN takes its next block at the next block start
    }
    ++p_t;
  };
  if (producer && lane == 0) {
    if constexpr (DYN) {
      while (!p_done && p_t < stages) produce();
    } else {
      while (p_t < min(stages, total)) produce();
    }
  }
  __syncwarp();  // the producer warp reconverges before the CTA-wide barriers below
  const int x_chunks_per_row = kpad / 8;
  if (a.fold.on()) bulk_fold_stage_weight<M>(a, xs, x_chunks_per_row);
  tile_sync_wait(a.sync, step);

  // x (the predecessor's output: ordinary coherent loads, after the wait), zero past m and k; with
  // a folded norm or SwiGLU, computed from the residual or gate|up rows (the predecessors'
  // outputs, read the same way). The producer lane issues nothing here (the ring is full until the
  // consumers release a slot).
  if (a.fold.on()) {
    bulk_fold_x<M>(a, xs, x_chunks_per_row, red);  // red is free until the main loop
  } else if (a.silu_fold.on()) {
    bulk_silu_fold_x<M>(a, xs, x_chunks_per_row);
  } else {
    bulk_load_x<M>(a, xs, x_chunks_per_row);
  }
  pdl_launch_dependents();
  __syncthreads();

  if (producer) {
    if (lane == 0) {
      while (DYN ? !p_done : p_t < total) {
        mbar_wait(&empty[p_t % stages], static_cast<uint32_t>(p_t / stages - 1) & 1u);
        // Injected delays (tests): a stage's bytes arrive late, so a consumer that read a slot
        // before its full barrier completed would read the previous stage's rows.
        random_delay(a.sync.delay, ring_delay_site(p_t, BK_WARPS));
        produce();
      }
      if constexpr (DYN) {
        // This CTA's fetches (the last one past the end, whose value the loop read) come before
        // its count; the CTA that completes the count zeroes both counters.
        __threadfence();
        if (atomicAdd(a.sched + 1, 1u) == gridDim.x - 1) {
          atomicExch(a.sched, 0u);
          atomicExch(a.sched + 1, 0u);
        }
      }
    }
    __syncwarp();
  } else {
    const int c = 16 * warp + (lane & 15);  // this lane's chunk of every stage
    const int r0 = lane >> 4;               // and its rows r0, r0 + 2, r0 + 4, r0 + 6
    OutT* y = static_cast<OutT*>(a.y);
    float acc[M][4];
#pragma unroll
    for (int b = 0; b < M; ++b)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[b][j] = 0.f;
    int rb = rb0, ks = 0, slot = 0, buf = 0;
    uint32_t phase = 0;
    [[maybe_unused]] unsigned long long best = 0ull;  // ARG: this lane's stored rows' argmax
    for (int t = 0; DYN || t < total; ++t) {
      mbar_wait(&full[slot], phase);
      if constexpr (DYN) {
        if (ks == 0) {  // a row block's first stage: which block (-1: the end)
          rb = slot_rb[slot];
          if (rb < 0) break;
        }
      }
      const int kc = ks * (ST_KC / 8) + c;  // chunk index along k
      if (kc * 8 < a.k) {
        float xv[M][8];
#pragma unroll
        for (int b = 0; b < M; ++b) {
          const uint4 v = reinterpret_cast<const uint4*>(xs)[b * x_chunks_per_row + kc];
          xv[b][0] = bf16_lo(v.x), xv[b][1] = bf16_hi(v.x), xv[b][2] = bf16_lo(v.y);
          xv[b][3] = bf16_hi(v.y), xv[b][4] = bf16_lo(v.z), xv[b][5] = bf16_hi(v.z);
          xv[b][6] = bf16_lo(v.w), xv[b][7] = bf16_hi(v.w);
        }
        const bf16* ws = ring + slot * ST_STAGE_ELEMS + r0 * ST_KC + c * 8;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const uint4 wv = *reinterpret_cast<const uint4*>(ws + 2 * j * ST_KC);
#pragma unroll
          for (int b = 0; b < M; ++b) {
            float s0 = acc[b][j];
            s0 = fmaf(bf16_lo(wv.x), xv[b][0], s0);
            s0 = fmaf(bf16_hi(wv.x), xv[b][1], s0);
            s0 = fmaf(bf16_lo(wv.y), xv[b][2], s0);
            s0 = fmaf(bf16_hi(wv.y), xv[b][3], s0);
            s0 = fmaf(bf16_lo(wv.z), xv[b][4], s0);
            s0 = fmaf(bf16_hi(wv.z), xv[b][5], s0);
            s0 = fmaf(bf16_lo(wv.w), xv[b][6], s0);
            s0 = fmaf(bf16_hi(wv.w), xv[b][7], s0);
            acc[b][j] = s0;
          }
        }
      }
      // Injected delays (tests): this warp releases the slot late, so a producer that refilled it
      // before every warp released it would overwrite rows a slow warp has yet to read.
      random_delay(a.sync.delay, ring_delay_site(t, warp));
      // Every consumer thread releases its own loads of the slot (the empty barrier counts
      // BK_WARPS * 32 arrivals): one lane's arrive after a __syncwarp orders the warp's loads as
      // well, but racecheck only follows a thread's own release and reported every slot
      // (bench/results/2026-11-30-s9-call3); the same kernel with per-thread arrivals is clean and
      // equally fast (-s10-call1).
      mbar_arrive(&empty[slot]);
      if (++slot == stages) {
        slot = 0;
        phase ^= 1u;
      }
      if (++ks == kstages) {  // the row block's last slice: its rows are complete
        ks = 0;
        float* rbuf = red + buf * (BK_WARPS * M * ST_ROWS);
#pragma unroll
        for (int b = 0; b < M; ++b)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            float v = acc[b][j];
            v += __shfl_xor_sync(0xffffffffu, v, 8);
            v += __shfl_xor_sync(0xffffffffu, v, 4);
            v += __shfl_xor_sync(0xffffffffu, v, 2);
            v += __shfl_xor_sync(0xffffffffu, v, 1);
            acc[b][j] = 0.f;
            if ((lane & 15) == 0) rbuf[(warp * M + b) * ST_ROWS + r0 + 2 * j] = v;
          }
        // The consumer warps only (the producer may still be waiting for a slot).
        asm volatile("bar.sync 1, %0;" ::"n"(BK_WARPS * 32) : "memory");
        // Row r of batch row b: the eight warps' partials in warp order (warp 0, lane b * 8 + r).
        const int b = lane / ST_ROWS, r = lane % ST_ROWS;
        auto row_sum = [&] {
          float v = 0.f;
#pragma unroll
          for (int w = 0; w < BK_WARPS; ++w) v += rbuf[(w * M + b) * ST_ROWS + r];
          return v;
        };
        if (!EPI && warp == 0 && lane < M * ST_ROWS) {
          const float v = row_sum();
          const int row = rb * ST_ROWS + r;
          if (b < a.m && row < a.n) {
            store_y(y + static_cast<int64_t>(b) * a.ldy + row, v);
            if constexpr (ARG) best = max(best, greedy_pack(v, row));
          }
        }
        if (EPI && warp == 0) {
          const bool mine = lane < M * ST_ROWS;
          const float v = mine ? row_sum() : 0.f;
          // Gate row r < 4 of the block and its up row, r + 4, meet in this warp: silu_mul's
          // arithmetic on the two fp32 sums (the low half of silu_mul2; the high half is unused).
          const float u = __shfl_down_sync(0xffffffffu, v, ST_ROWS / 2);
          if (mine && r < ST_ROWS / 2 && b < a.m)
            a.silu_out.out[static_cast<int64_t>(b) * a.silu_out.ld + (ST_ROWS / 2) * rb + r] =
                __low2bfloat16(silu_mul2(make_float2(v, 0.f), make_float2(u, 0.f)));
        }
        buf ^= 1;  // the next writer of this buffer comes after the next barrier
        ++rb;
      }
    }
    if constexpr (ARG) {
      if (warp == 0) {  // lanes b * ST_ROWS .. + ST_ROWS - 1 hold batch row b's candidates
#pragma unroll
        for (int off = 1; off < ST_ROWS; off *= 2)
          best = max(best, __shfl_xor_sync(0xffffffffu, best, off));
        const int b = lane / ST_ROWS;
        if (lane % ST_ROWS == 0 && b < a.m && best != 0ull) atomicMax(a.argmax + b, best);
      }
    }
  }
  // Every bulk copy issued was waited for by the consumers above.
  tile_sync_signal(a.sync, step);
#else
  __trap();  // launched only on sm_90 (launch_matmul_stream checks)
#endif
}

// The dynamic shared memory `kernel` may take on the current device (its opt-in limit less its
// static shared memory), and the device's SM count.
template <typename Kernel>
cudaError_t dynamic_smem_room(Kernel kernel, int* room, int* sm_count) {
  int optin = 0;
  if (const cudaError_t err = current_device_attribute(cudaDevAttrMultiProcessorCount, sm_count);
      err != cudaSuccess)
    return err;
  if (const cudaError_t err =
          current_device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin, &optin);
      err != cudaSuccess)
    return err;
  cudaFuncAttributes attr;
  if (const cudaError_t err = cudaFuncGetAttributes(&attr, kernel); err != cudaSuccess) return err;
  *room = optin - static_cast<int>(attr.sharedSizeBytes);
  return cudaSuccess;
}

// Launches (or describes) one of the streaming kernels with `threads` per CTA and shared memory of
// `fixed` bytes plus `per_stage` per ring slot: as many slots as asked for (0: `default_stages`)
// within what the GPU's shared memory holds, one CTA per row block up to what fits on the GPU
// (for the bulk version, `bulk_rule`, fewer an SM for long rows: matmul_stream_ctas_per_sm).
template <typename Kernel>
cudaError_t launch_streaming(Kernel kernel, int threads, int64_t fixed, int64_t per_stage,
                             int default_stages, const StreamMatmulArgs& a, int max_ctas,
                             int stages, const LaunchOptions& opt, KernelFootprint* footprint,
                             bool bulk_rule) {
  int dyn_room = 0, sm_count = 0;
  if (const cudaError_t err = dynamic_smem_room(kernel, &dyn_room, &sm_count); err != cudaSuccess)
    return err;
  int s = stages > 0 ? stages : default_stages;
  s = static_cast<int>(
      std::min<int64_t>({s, ST_MAX_STAGES, (static_cast<int64_t>(dyn_room) - fixed) / per_stage}));
  if (s < ST_MIN_STAGES) return cudaErrorInvalidValue;
  const size_t smem = static_cast<size_t>(s * per_stage + fixed);
  int per_sm = 0;
  if (const cudaError_t err =
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem);
      err != cudaSuccess)
    return err;
  if (per_sm < 1) return cudaErrorInvalidValue;  // preload_matmul_stream() not called
  if (bulk_rule) per_sm = matmul_stream_ctas_per_sm(per_sm, a.n, a.k);
  const int row_blocks = (a.n + ST_ROWS - 1) / ST_ROWS;
  int grid = std::min(row_blocks, sm_count * per_sm);
  if (max_ctas > 0) grid = std::min(grid, max_ctas);
  if (footprint != nullptr) {
    footprint->ring_bytes = static_cast<int64_t>(s) * ST_STAGE_BYTES;
    return kernel_footprint(kernel, grid, threads, smem, footprint);
  }
  return launch_kernel(kernel, dim3(grid), dim3(threads), smem, opt, a, s);
}

// The bulk kernel for a's launch, DYN or not: with the SwiGLU epilogue y is not written, one
// OutT. Every instantiation has the same signature.
template <int M, typename OutT, bool DYN>
auto bulk_kernel(const StreamMatmulArgs& a) {
  if constexpr (std::is_same_v<OutT, float>)
    if (a.argmax != nullptr) return matmul_stream_bulk_kernel<M, float, false, DYN, true>;
  return a.silu_out.on() ? matmul_stream_bulk_kernel<M, float, true, DYN>
                         : matmul_stream_bulk_kernel<M, OutT, false, DYN>;
}

template <typename OutT, int M>
cudaError_t launch_stream_m(const StreamMatmulArgs& a, int max_ctas, int stages,
                            const LaunchOptions& opt, KernelFootprint* footprint, bool bulk) {
  const int64_t kpad = (static_cast<int64_t>(a.k) + ST_KC - 1) / ST_KC * ST_KC;
  const int64_t x_bytes = M * kpad * 4;  // the ring version's x: fp32
  // The ring's alignment, x (bf16), the row partials; a slot and its two mbarriers
  const int64_t bulk_fixed = BK_RING_ALIGN + M * kpad * 2 + BK_RED_FLOATS * 4,
                bulk_stage = ST_STAGE_BYTES + 2 * 8;
  if (bulk) {
    auto launch_bulk = [&](auto kernel, int64_t stage_bytes, KernelFootprint* fp) {
      return launch_streaming(kernel, BK_THREADS, bulk_fixed, stage_bytes, BK_DEFAULT_STAGES, a,
                              max_ctas, stages, opt, fp, true);
    };
    bool dynamic = false;
    if constexpr (M == 1) {
      if (a.sched != nullptr && a.schedule != StreamSchedule::Static) {
        KernelFootprint fixed_grid;  // the static launch's grid decides Auto
        if (const cudaError_t err =
                launch_bulk(bulk_kernel<M, OutT, false>(a), bulk_stage, &fixed_grid);
            err != cudaSuccess)
          return err;
        dynamic = a.schedule == StreamSchedule::Dynamic ||
                  matmul_stream_dynamic((a.n + ST_ROWS - 1) / ST_ROWS, fixed_grid.ctas);
      }
    }
    // The dynamic schedule's slots also hold their row block.
    const cudaError_t err =
        dynamic ? launch_bulk(bulk_kernel<1, OutT, true>(a), bulk_stage + 4, footprint)
                : launch_bulk(bulk_kernel<M, OutT, false>(a), bulk_stage, footprint);
    if (footprint != nullptr) footprint->dynamic_schedule = dynamic;
    return err;
  }
  return launch_streaming(matmul_stream_kernel<M, OutT>, ST_THREADS, x_bytes, ST_STAGE_BYTES,
                          ST_DEFAULT_STAGES, a, max_ctas, stages, opt, footprint, false);
}

template <typename OutT>
cudaError_t launch_stream_out(const StreamMatmulArgs& a, int max_ctas, int stages,
                              const LaunchOptions& opt, KernelFootprint* footprint, bool bulk) {
  if (a.m <= 1) return launch_stream_m<OutT, 1>(a, max_ctas, stages, opt, footprint, bulk);
  return launch_stream_m<OutT, 2>(a, max_ctas, stages, opt, footprint, bulk);
}

template <typename Kernel>
cudaError_t preload_stream_kernel(Kernel kernel) {
  if (const cudaError_t err = preload_kernel(kernel); err != cudaSuccess) return err;
  int room = 0, sm_count = 0;
  if (const cudaError_t err = dynamic_smem_room(kernel, &room, &sm_count); err != cudaSuccess)
    return err;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, room);
}

}  // namespace

bool matmul_stream_bulk_supported() {
  int major = 0;
  return current_device_attribute(cudaDevAttrComputeCapabilityMajor, &major) == cudaSuccess &&
         major == 9;
}

cudaError_t launch_matmul_stream(const StreamMatmulArgs& a, int max_ctas, int stages,
                                 const LaunchOptions& opt, KernelFootprint* footprint, bool bulk) {
  if (!matmul_stream_fits(a.m, a.k)) return cudaErrorInvalidValue;
  if (bulk && !matmul_stream_bulk_supported()) return cudaErrorNotSupported;
  if (a.fold.on() && a.silu_fold.on()) return cudaErrorInvalidValue;  // one fold at most
  if (a.silu_out.on() && (a.silu_fold.on() || a.silu_out.inter % 4 != 0 ||
                          static_cast<int64_t>(a.n) != 2 * static_cast<int64_t>(a.silu_out.inter)))
    return cudaErrorInvalidValue;  // gate and up rows pair up four to a row block
  if (a.argmax != nullptr && (!a.y_f32 || a.silu_out.on()))
    return cudaErrorInvalidValue;  // the argmax of the fp32 sums, one epilogue
  if ((a.fold.on() || a.silu_fold.on() || a.silu_out.on() || a.argmax != nullptr) && !bulk)
    return cudaErrorNotSupported;  // the ring version does not fold
  return a.y_f32 ? launch_stream_out<float>(a, max_ctas, stages, opt, footprint, bulk)
                 : launch_stream_out<bf16>(a, max_ctas, stages, opt, footprint, bulk);
}

cudaError_t preload_matmul_stream() {
  for (cudaError_t err : {preload_stream_kernel(matmul_stream_kernel<1, float>),
                          preload_stream_kernel(matmul_stream_kernel<2, float>),
                          preload_stream_kernel(matmul_stream_kernel<1, bf16>),
                          preload_stream_kernel(matmul_stream_kernel<2, bf16>)})
    if (err != cudaSuccess) return err;
  if (!matmul_stream_bulk_supported()) return cudaSuccess;
  for (cudaError_t err :
       {preload_stream_kernel(matmul_stream_bulk_kernel<1, float>),
        preload_stream_kernel(matmul_stream_bulk_kernel<2, float>),
        preload_stream_kernel(matmul_stream_bulk_kernel<1, bf16>),
        preload_stream_kernel(matmul_stream_bulk_kernel<2, bf16>),
        preload_stream_kernel(matmul_stream_bulk_kernel<1, float, true>),
        preload_stream_kernel(matmul_stream_bulk_kernel<2, float, true>),
        preload_stream_kernel(matmul_stream_bulk_kernel<1, float, false, true>),
        preload_stream_kernel(matmul_stream_bulk_kernel<1, bf16, false, true>),
        preload_stream_kernel(matmul_stream_bulk_kernel<1, float, true, true>),
        preload_stream_kernel(matmul_stream_bulk_kernel<1, float, false, false, true>),
        preload_stream_kernel(matmul_stream_bulk_kernel<2, float, false, false, true>),
        preload_stream_kernel(matmul_stream_bulk_kernel<1, float, false, true, true>)})
    if (err != cudaSuccess) return err;
  return cudaSuccess;
}

}  // namespace megaops
