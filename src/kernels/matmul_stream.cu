// The weight-streaming matmul for decode at batch 1-2 (see matmul_stream.cuh). Not in the default
// dispatch: it runs when MEGAOPS_MATMUL_PATH asks for it (stream, stream-for-small) and in
// `megaops bench-matmul`, which compares it with the small-m kernel and cuBLASLt.
//
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
    const int b = i / x_chunks_per_row, kk = (i % x_chunks_per_row) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (b < a.m && kk < a.k)
      v = *reinterpret_cast<const uint4*>(a.x + static_cast<int64_t>(b) * a.ldx + kk);
    float4* dst = reinterpret_cast<float4*>(xs + static_cast<size_t>(b) * kpad + kk);
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

template <int M, typename OutT>
cudaError_t launch_stream_m(const StreamMatmulArgs& a, int max_ctas, int stages,
                            const LaunchOptions& opt, KernelFootprint* footprint) {
  auto kernel = matmul_stream_kernel<M, OutT>;
  int dyn_room = 0, sm_count = 0;
  if (const cudaError_t err = dynamic_smem_room(kernel, &dyn_room, &sm_count); err != cudaSuccess)
    return err;
  const int64_t kpad = (static_cast<int64_t>(a.k) + ST_KC - 1) / ST_KC * ST_KC;
  const int64_t x_bytes = M * kpad * 4;  // fp32
  const int64_t room = static_cast<int64_t>(dyn_room) - x_bytes;
  int s = stages > 0 ? stages : ST_DEFAULT_STAGES;
  s = static_cast<int>(std::min<int64_t>({s, ST_MAX_STAGES, room / ST_STAGE_BYTES}));
  if (s < ST_MIN_STAGES) return cudaErrorInvalidValue;
  const size_t smem = static_cast<size_t>(s) * ST_STAGE_BYTES + static_cast<size_t>(x_bytes);
  int per_sm = 0;
  if (const cudaError_t err =
          cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, ST_THREADS, smem);
      err != cudaSuccess)
    return err;
  if (per_sm < 1) return cudaErrorInvalidValue;  // preload_matmul_stream() not called
  const int row_blocks = (a.n + ST_ROWS - 1) / ST_ROWS;
  int grid = std::min(row_blocks, sm_count * per_sm);
  if (max_ctas > 0) grid = std::min(grid, max_ctas);
  if (footprint != nullptr) return kernel_footprint(kernel, grid, ST_THREADS, smem, footprint);
  return launch_kernel(kernel, dim3(grid), dim3(ST_THREADS), smem, opt, a, s);
}

template <typename OutT>
cudaError_t launch_stream_out(const StreamMatmulArgs& a, int max_ctas, int stages,
                              const LaunchOptions& opt, KernelFootprint* footprint) {
  if (a.m <= 1) return launch_stream_m<1, OutT>(a, max_ctas, stages, opt, footprint);
  return launch_stream_m<2, OutT>(a, max_ctas, stages, opt, footprint);
}

template <int M, typename OutT>
cudaError_t preload_stream_m() {
  auto kernel = matmul_stream_kernel<M, OutT>;
  if (const cudaError_t err = preload_kernel(kernel); err != cudaSuccess) return err;
  int room = 0, sm_count = 0;
  if (const cudaError_t err = dynamic_smem_room(kernel, &room, &sm_count); err != cudaSuccess)
    return err;
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, room);
}

}  // namespace

cudaError_t launch_matmul_stream(const StreamMatmulArgs& a, int max_ctas, int stages,
                                 const LaunchOptions& opt, KernelFootprint* footprint) {
  if (!matmul_stream_fits(a.m, a.k)) return cudaErrorInvalidValue;
  return a.y_f32 ? launch_stream_out<float>(a, max_ctas, stages, opt, footprint)
                 : launch_stream_out<bf16>(a, max_ctas, stages, opt, footprint);
}

cudaError_t preload_matmul_stream() {
  for (cudaError_t err : {preload_stream_m<1, float>(), preload_stream_m<2, float>(),
                          preload_stream_m<1, bf16>(), preload_stream_m<2, bf16>()})
    if (err != cudaSuccess) return err;
  return cudaSuccess;
}

}  // namespace megaops
