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
//
// The bulk-copy kernel: matmul_stream_bulk.cuh; the stage geometry and helpers both share:
// matmul_stream_impl.cuh.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/matmul_stream_bulk.cuh"
#include "kernels/matmul_stream_impl.cuh"

namespace megaops {

namespace {

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
        const float v = stream_warp_sum(acc[b][0] + acc[b][1]);
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