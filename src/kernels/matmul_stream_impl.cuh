// Private to the weight-streaming matmul (matmul_stream.cu, matmul_stream_bulk.cuh): the stage
// geometry both versions share (8 rows x MATMUL_STREAM_KC k, 16 KB), the cp.async primitives and
// the small helpers (x chunks, stores, bf16 halves) both kernels use.
#pragma once

#include <cstdint>

#include "kernels/matmul_stream.cuh"

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

__device__ __forceinline__ float stream_warp_sum(float v) {
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

}  // namespace
}  // namespace megaops
