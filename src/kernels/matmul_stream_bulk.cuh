// Private to matmul_stream.cu: the bulk-copy version of the weight-streaming matmul (sm_90;
// MEGAOPS_STREAM_KERNEL=bulk, kernels/matmul_stream.cuh), with its x prologues (plain, folded
// RMSNorm, folded SwiGLU) and epilogues. The ring version and the launchers: matmul_stream.cu.
//
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
//     bank conflict); at 2 bytes an element (half of fp32's footprint) the 1B's
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
#pragma once

#include "kernels/greedy_key.cuh"
#include "kernels/matmul_stream_impl.cuh"
#include "kernels/rmsnorm_row.cuh"
#include "kernels/silu_mul_row.cuh"

namespace megaops {
namespace {

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
__device__ __forceinline__ const bf16* bulk_stage_row_src(const StreamMatmulArgs& a, int rb, int ks,
                                                          int r) {
  const int64_t wrow = !EPI              ? rb * ST_ROWS + r
                       : r < ST_ROWS / 2 ? (ST_ROWS / 2) * rb + r
                                         : static_cast<int64_t>(a.silu_out.inter) +
                                               (ST_ROWS / 2) * rb + (r - ST_ROWS / 2);
  return a.w + wrow * a.k + ks * ST_KC;
}

template <bool EPI>
__device__ __forceinline__ void bulk_issue_stage(const StreamMatmulArgs& a, bf16* slot_base,
                                                 uint64_t* full, int rb, int ks) {
  const int rows = min(ST_ROWS, a.n - rb * ST_ROWS);
  const uint32_t bytes = static_cast<uint32_t>(min(ST_KC, a.k - ks * ST_KC)) * 2u;
  mbar_expect_tx(full, bytes * static_cast<uint32_t>(rows));
  for (int r = 0; r < rows; ++r) {
    // The policy formed per copy: one held in a register across the producer's loop spilled.
    bulk_copy(slot_base + r * ST_KC, bulk_stage_row_src<EPI>(a, rb, ks, r), bytes, full,
              l2_weight_policy(a.l2_evict_first));
  }
}

// The same stage's copies issued by a whole warp, lane r copying row r: one instruction for the
// warp instead of a lane's loop of ST_ROWS (a persistent region's consumer warps issue their own
// stages, and a serial loop there holds up the warp that runs it). Every lane calls it.
template <bool EPI>
__device__ __forceinline__ void bulk_issue_stage_warp(const StreamMatmulArgs& a, bf16* slot_base,
                                                      uint64_t* full, int rb, int ks, int lane) {
  static_assert(ST_ROWS <= 32, "a lane a row");
  const int rows = min(ST_ROWS, a.n - rb * ST_ROWS);
  const uint32_t bytes = static_cast<uint32_t>(min(ST_KC, a.k - ks * ST_KC)) * 2u;
  if (lane == 0) mbar_expect_tx(full, bytes * static_cast<uint32_t>(rows));
  __syncwarp();
  if (lane < rows)
    bulk_copy(slot_base + lane * ST_KC, bulk_stage_row_src<EPI>(a, rb, ks, lane), bytes, full,
              l2_weight_policy(a.l2_evict_first));
  __syncwarp();
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
// residual_out (`write_residual`; the standalone kernel's CTA 0, a region's first tile of the op).
// add_rmsnorm's arithmetic on add_rmsnorm's threads (kernels/rmsnorm_row.cuh):
// thread t < RMSNORM_THREADS (the consumer warps) owns vectors t, t + RMSNORM_THREADS, ... of each
// row, so x and r match its output bit for bit. r waits in the owner's registers between the
// passes (BK_FOLD_KEEP vectors; any further ones are formed again). Every thread of the CTA calls
// it (the block sums' barriers); threads past RMSNORM_THREADS (the producer warp) add zeros.
// THREADS: the CTA's threads (BK_THREADS, or RMSNORM_THREADS in a persistent region). `scratch`:
// RMSNORM_WARPS floats of
// shared memory nobody else uses until the barrier after this. The norm's gain is already in xs
// (bulk_fold_stage_weight, before the wait), where each owner reads its vector and writes x over
// it. The first pass only loads (r's residual_out copy waits for the second), so an owner's
// loads of all its vectors are in flight together: one L2 round trip after the wait instead of
// one per vector, and none for the gain, which is a miss queued behind the ring's fill otherwise
// (the 8B's QKV had x after 3.5 us, its gate_up after 3.7, traced in 2026-12-01-s23-call1).
template <int M, int THREADS = BK_THREADS>
__device__ __forceinline__ void bulk_fold_x(const StreamMatmulArgs& a, bf16* xs, int chunks_per_row,
                                            float* scratch, bool write_residual) {
  static_assert(RMSNORM_THREADS == BK_WARPS * 32, "the consumer warps are add_rmsnorm's CTA");
  const NormFold& f = a.fold;
  const int vecs = a.k / 8;
  const int t = static_cast<int>(threadIdx.x);
  const bool owner = t < RMSNORM_THREADS;
  for (int b = 0; b < M; ++b) {  // b < a.m is the same on every thread
    uint4* x = reinterpret_cast<uint4*>(xs) + b * chunks_per_row;
    for (int v = (b < a.m ? vecs : 0) + t; v < chunks_per_row; v += THREADS)
      x[v] = make_uint4(0u, 0u, 0u, 0u);
    if (b >= a.m) continue;
    const int64_t row = static_cast<int64_t>(b) * a.k;
    const float4* res = reinterpret_cast<const float4*>(f.residual + row);
    const float4* delta = f.delta ? reinterpret_cast<const float4*>(f.delta + row) : nullptr;
    float4* res_out = write_residual && f.residual_out
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
template <int M, int THREADS = BK_THREADS>
__device__ __forceinline__ void bulk_load_x(const StreamMatmulArgs& a, bf16* xs,
                                            int chunks_per_row) {
  const int total = M * chunks_per_row;
  for (int i0 = static_cast<int>(threadIdx.x); i0 < total; i0 += BK_X_BATCH * THREADS) {
    uint4 v[BK_X_BATCH];
#pragma unroll
    for (int j = 0; j < BK_X_BATCH; ++j) {
      const int i = i0 + j * THREADS;
      v[j] = i < total ? x_chunk(a, i, chunks_per_row) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int j = 0; j < BK_X_BATCH; ++j) {
      const int i = i0 + j * THREADS;
      if (i < total) reinterpret_cast<uint4*>(xs)[i] = v[j];
    }
  }
}

// Units of gate|up that a thread of the bulk kernel loads before it computes any
// (bulk_silu_fold_x): 4 x 2 float4 = 32 registers, 37 KB in flight per CTA, so one round covers
// a row of k <= 4608 and the 1B's down projection (k = 8192) takes two. 8 would take 64
// registers: 4 keeps the m = 1 kernel within 72 registers (below).
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
template <int M, int THREADS = BK_THREADS>
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
       u0 += BK_SILU_BATCH * THREADS) {
    float4 g[BK_SILU_BATCH], u[BK_SILU_BATCH];
#pragma unroll
    for (int j = 0; j < BK_SILU_BATCH; ++j) {
      int b, q;
      locate(u0 + j * THREADS + lane, b, q);
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
      locate(u0 + j * THREADS + lane, b, q);
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

// The ring's barriers: a slot's "full" completes with its bulk copies (one arrive, the producer's
// expect_tx), its "empty" with every consumer thread's release.
__device__ __forceinline__ void bulk_init_barriers(uint64_t* full, uint64_t* empty, int stages) {
  for (int s = 0; s < stages; ++s) {
    mbar_init(&full[s], 1);
    mbar_init(&empty[s], BK_WARPS * 32);  // every consumer thread releases its own loads
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One stage of a consumer lane: its chunk kc of x's M rows times the chunk of its four rows
// r0, r0 + 2, r0 + 4, r0 + 6 in the ring slot `slot_w`, into acc.
template <int M>
__device__ __forceinline__ void bulk_stage_fma(const bf16* xs, const bf16* slot_w,
                                               int x_chunks_per_row, int kc, int r0, int c,
                                               float (&acc)[M][4]) {
  float xv[M][8];
#pragma unroll
  for (int b = 0; b < M; ++b) {
    const uint4 v = reinterpret_cast<const uint4*>(xs)[b * x_chunks_per_row + kc];
    xv[b][0] = bf16_lo(v.x), xv[b][1] = bf16_hi(v.x), xv[b][2] = bf16_lo(v.y);
    xv[b][3] = bf16_hi(v.y), xv[b][4] = bf16_lo(v.z), xv[b][5] = bf16_hi(v.z);
    xv[b][6] = bf16_lo(v.w), xv[b][7] = bf16_hi(v.w);
  }
  const bf16* ws = slot_w + r0 * ST_KC + c * 8;
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

// A row block's last slice done: the lanes' partial sums meet (a shuffle over each half warp, the
// warps' partials through `rbuf`, a named barrier of the consumer warps) and warp 0 stores the
// rows (or, EPI, their SwiGLU; ARG, keeps the best of what it stored). acc is zeroed.
template <int M, typename OutT, bool EPI, bool ARG>
__device__ __forceinline__ void bulk_finish_row_block(const StreamMatmulArgs& a, float* rbuf,
                                                      int warp, int lane, int r0, int rb, OutT* y,
                                                      float (&acc)[M][4],
                                                      unsigned long long& best) {
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
}

// ARG, after the last row block: warp 0 (lanes b * ST_ROWS .. + ST_ROWS - 1 hold batch row b's
// candidates) folds each batch row's lanes and takes atomicMax into a.argmax[b].
__device__ __forceinline__ void bulk_argmax_publish(const StreamMatmulArgs& a, int lane,
                                                    unsigned long long best) {
#pragma unroll
  for (int off = 1; off < ST_ROWS; off *= 2)
    best = max(best, __shfl_xor_sync(0xffffffffu, best, off));
  const int b = lane / ST_ROWS;
  if (lane % ST_ROWS == 0 && b < a.m && best != 0ull) atomicMax(a.argmax + b, best);
}

// DYN, the producer lane after its last fetch: counts this CTA done in a.sched[1].
__device__ __forceinline__ void bulk_schedule_done(const StreamMatmulArgs& a) {
  // This CTA's fetches (the last one past the end, whose value the loop read) come before
  // its count; the CTA that completes the count zeroes both counters.
  __threadfence();
  if (atomicAdd(a.sched + 1, 1u) == gridDim.x - 1) {
    atomicExch(a.sched, 0u);
    atomicExch(a.sched + 1, 0u);
  }
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

  if (threadIdx.x == 0) bulk_init_barriers(full, empty, stages);
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
    bulk_fold_x<M>(a, xs, x_chunks_per_row, red, blockIdx.x == 0);  // red: free until the loop
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
      if constexpr (DYN) bulk_schedule_done(a);
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
      if (kc * 8 < a.k)
        bulk_stage_fma<M>(xs, ring + slot * ST_STAGE_ELEMS, x_chunks_per_row, kc, r0, c, acc);
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
        bulk_finish_row_block<M, OutT, EPI, ARG>(a, red + buf * (BK_WARPS * M * ST_ROWS), warp,
                                                 lane, r0, rb, y, acc, best);
        buf ^= 1;  // the next writer of this buffer comes after the next barrier
        ++rb;
      }
    }
    if constexpr (ARG) {
      if (warp == 0) bulk_argmax_publish(a, lane, best);
    }
  }
  // Every bulk copy issued was waited for by the consumers above.
  tile_sync_signal(a.sync, step);
#else
  __trap();  // launched only on sm_90 (launch_matmul_stream checks)
#endif
}

}  // namespace
}  // namespace megaops
