// Matmul y = x · Wᵀ (bf16 weights in HF Linear layout [n, k]) for decode and prefill.
//
// Decode (small m) is weight-bandwidth bound: W is the only large operand and is read exactly once,
// so the small-m kernel here exists to stream W at HBM rate. It keeps many 16-byte weight loads in
// flight, issues its first loads before waiting on its predecessor (PDL), and does the arithmetic
// on tensor cores (mma.sync m16n8k16) so that the math stays far below the memory time for every m
// up to 64. Prefill (large m) is compute bound and goes to cuBLASLt (matmul_cublaslt.cu); the
// parameter checks all paths share: matmul_impl.h.
#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "core/cuda_check.h"
#include "kernels/matmul.cuh"
#include "kernels/matmul_impl.h"
#include "kernels/matmul_stream.cuh"

namespace megaops {

// ---------------------------------------------------------------------------------------------
// Small-m kernel
//
// Napkin math (H200, 4.6 TB/s HBM read measured with a plain read kernel): the floor is
// weight bytes / 4.6 TB/s. Llama-3.1-8B gate_up 4096x28672 bf16 = 235 MB -> 51 us; LM head
// 4096x128256 = 1.05 GB -> 228 us; Llama-3.2-1B O proj 2048x2048 = 8.4 MB -> 1.8 us (there launch
// and DRAM latency dominate, not bandwidth).
// Measured (H200, m = 1, no PDL, plain read kernel 4.53 TB/s): 8B LM head 261 us (4.03 TB/s,
// 89%), 8B gate_up 62 us (3.80 TB/s), 8B down 33 us (3.53 TB/s), 1B O 5.8 us (1.46 TB/s).
//
// Work split. A tile is TILE_ROWS = 16 output columns n (16 weight rows, one MMA A operand) for
// all m batch rows. The 8 warps of a CTA split the tile's k range; each warp accumulates a 16 x
// 8*NB fp32 MMA fragment, and the warps' partials are summed through shared memory at the end of
// the tile. The grid is persistent (at most MIN_BLOCKS CTAs per SM, all resident at once) and
// strides over tiles, so PDL's early trigger cannot let a dependent grid take slots our own CTAs
// still need.
//
// Loads in flight (Little's law): ~4.6 TB/s x ~1 us loaded DRAM latency = ~4.6 MB in flight across
// 132 SMs = ~35 KB per SM. One group is U k-blocks x 2 rows x 16 B per lane = 128 B (U = 4), so a
// 256-thread CTA has 32 KB in flight and 3 CTAs per SM about 96 KB: enough margin for the time
// each warp spends in its MMAs and in the per-tile reduction.
//
// MMA operand mapping. Lane (g = lane / 4, t = lane % 4) loads 16 B = 8 consecutive k of weight
// rows g and g + 8 at k offset kb + 8t, and 16 B of x batch row g at the same k. A dot product may
// sum its k terms in any order, so instead of shuffling data into the MMA's canonical k order we
// relabel k: MMA 0 of the block takes the lane's k +0..3, MMA 1 takes +4..7. For m16n8k16 (bf16),
// A reg0 = row g cols {2t, 2t+1}, reg1 = row g+8 same cols, reg2 = row g cols {2t+8, 2t+9},
// reg3 = row g+8 same; B reg0 = k {2t, 2t+1} of column g, reg1 = k {2t+8, 2t+9}. Mapping logical
// {2t, 2t+1} -> physical +0,+1 and {2t+8, 2t+9} -> +2,+3 in both A and B gives A = (lo.x, hi.x,
// lo.y, hi.y), B = (xv.x, xv.y) for MMA 0 and the .z/.w words for MMA 1. C: c0,c1 = row g,
// columns 2t, 2t+1; c2,c3 = row g + 8. Each warp load instruction covers 8 rows x 64 contiguous
// bytes (full 32-byte sectors) and the U loads of a group continue the same rows, 256 B per row.
//
// x is read with ordinary (L1-cached, coherent) loads after pdl_wait(): it is tiny, shared by all
// CTAs of an SM and stays in L1/L2; weights use ld.global.nc.L1::no_allocate so the weight stream
// does not evict x from L1.

namespace {

constexpr int SMALL_M_WARPS = 8;
constexpr int SMALL_M_THREADS = SMALL_M_WARPS * 32;
constexpr int TILE_ROWS = 16;  // rows of W per tile: the M extent of one m16n8k16 MMA
constexpr int KBLOCK = 32;     // k covered by one 16-byte load of each of 4 lanes
// Row stride (floats) of the reduction buffer: 20 puts a warp's 32 fragment writes in 32 banks.
constexpr int RED_STRIDE = 20;

// Compile-time shape of one instantiation; NB = number of 8-wide batch blocks (m <= 8 * NB).
template <int NB>
struct SmallMConfig {
  // k-blocks loaded per group: larger NB holds more accumulators, so it gets fewer weight
  // registers.
  static constexpr int U = NB <= 4 ? 4 : 2;
  // Resident CTAs per SM promised by __launch_bounds__ (caps registers at 85 resp. 128).
  static constexpr int MIN_BLOCKS = NB <= 2 ? 3 : 2;
  static constexpr int RED_FLOATS = SMALL_M_WARPS * NB * 8 * RED_STRIDE;
};

struct SmallMArgs {
  const bf16* x;  // [m, ldx]
  int64_t ldx;
  const bf16* w;  // [n, k]
  void* y;        // [m, ldy]
  int64_t ldy;
  int m, n, k;
  TileSync sync;
};

// One group of weight fragments: U k-blocks of rows g (lo) and g + 8 (hi).
template <int U>
struct WeightGroup {
  uint4 lo[U];
  uint4 hi[U];
};

// Streaming weight load: read once per step, so keep it out of L1 (x lives there). L2::256B asks
// L2 to fetch the whole 256-byte run this warp reads from the row (U = 4 blocks x 64 B); measured
// +3-5% GB/s on the model shapes over the same load without the hint.
__device__ __forceinline__ uint4 load_weight16(const bf16* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                               uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ int small_m_num_tiles(const SmallMArgs& a) {
  return (a.n + TILE_ROWS - 1) / TILE_ROWS;
}

// Groups per warp per tile; the same for every warp (a warp past the end of k loads zeros).
template <int NB>
__device__ __forceinline__ int small_m_num_groups(const SmallMArgs& a) {
  constexpr int GROUP_K = SMALL_M_WARPS * SmallMConfig<NB>::U * KBLOCK;
  return (a.k + GROUP_K - 1) / GROUP_K;
}

// k offset of this lane's 8 elements in block u of `group` for warp `warp`. A warp's U blocks are
// contiguous, so each row is read in runs of U * 64 bytes.
template <int NB>
__device__ __forceinline__ int small_m_k_offset(int group, int warp, int u, int t) {
  return ((group * SMALL_M_WARPS + warp) * SmallMConfig<NB>::U + u) * KBLOCK + t * 8;
}

// Issues this warp's weight loads of one group of `tile` (no waiting). Safe before pdl_wait():
// weights are never written by a predecessor. Rows past n are clamped to n - 1 (their results are
// discarded) so that no load needs a row predicate; k past the end reads as zero.
template <int NB>
__device__ __forceinline__ void small_m_load_weights(const SmallMArgs& a, int tile, int group,
                                                     WeightGroup<SmallMConfig<NB>::U>& wg) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int row_lo = min(tile * TILE_ROWS + g, a.n - 1);
  const int row_hi = min(tile * TILE_ROWS + g + 8, a.n - 1);
  const bf16* w_lo = a.w + static_cast<int64_t>(row_lo) * a.k;
  const bf16* w_hi = a.w + static_cast<int64_t>(row_hi) * a.k;
#pragma unroll
  for (int u = 0; u < SmallMConfig<NB>::U; ++u) {
    const int k_off = small_m_k_offset<NB>(group, warp, u, t);
    if (k_off < a.k) {
      wg.lo[u] = load_weight16(w_lo + k_off);
      wg.hi[u] = load_weight16(w_hi + k_off);
    } else {
      wg.lo[u] = make_uint4(0, 0, 0, 0);
      wg.hi[u] = make_uint4(0, 0, 0, 0);
    }
  }
}

__device__ __forceinline__ void store_out(float* y, float v) {
  *y = v;
}
__device__ __forceinline__ void store_out(bf16* y, float v) {
  *y = __float2bfloat16_rn(v);
}

// The per-tile work, shared by the standalone kernel and (later) a persistent megakernel.
// Preconditions: a CTA of SMALL_M_THREADS threads; `wg` holds group 0 of `tile` (issued by
// small_m_load_weights); x is safe to read (after pdl_wait or a tile acquire); `red` points to
// SmallMConfig<NB>::RED_FLOATS floats of shared memory. If next_tile >= 0, group 0 of next_tile
// is loaded into `wg` before this tile's reduction, so its weights stream during the reduction.
template <int NB, typename OutT>
__device__ __forceinline__ void small_m_tile(const SmallMArgs& a, int tile, int next_tile,
                                             WeightGroup<SmallMConfig<NB>::U>& wg, float* red) {
  constexpr int U = SmallMConfig<NB>::U;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  const int num_groups = small_m_num_groups<NB>(a);

  float acc[NB][4];
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) acc[nb][0] = acc[nb][1] = acc[nb][2] = acc[nb][3] = 0.f;

  for (int group = 0; group < num_groups; ++group) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int k_off = small_m_k_offset<NB>(group, warp, u, t);
#pragma unroll
      for (int nb = 0; nb < NB; ++nb) {
        const int b = nb * 8 + g;
        // The load itself is unconditional (clamped into x, so ptxas can batch it with the others);
        // past m or k the value is replaced by zero, never left as garbage: a NaN there would
        // poison a whole output through 0 * NaN.
        const int b_in = min(b, a.m - 1), k_in = min(k_off, a.k - 8);
        uint4 xv = *reinterpret_cast<const uint4*>(a.x + static_cast<int64_t>(b_in) * a.ldx + k_in);
        if (b >= a.m || k_off >= a.k) xv = make_uint4(0, 0, 0, 0);
        mma_bf16_16816(acc[nb], wg.lo[u].x, wg.hi[u].x, wg.lo[u].y, wg.hi[u].y, xv.x, xv.y);
        mma_bf16_16816(acc[nb], wg.lo[u].z, wg.hi[u].z, wg.lo[u].w, wg.hi[u].w, xv.z, xv.w);
      }
    }
    if (group + 1 < num_groups)
      small_m_load_weights<NB>(a, tile, group + 1, wg);
    else if (next_tile >= 0)
      small_m_load_weights<NB>(a, next_tile, 0, wg);
  }

  // Cross-warp reduction. Layout red[warp][batch b = nb*8 + col][row], rows padded to RED_STRIDE.
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
    float* r = red + (warp * NB * 8 + nb * 8) * RED_STRIDE;
    r[(2 * t) * RED_STRIDE + g] = acc[nb][0];
    r[(2 * t + 1) * RED_STRIDE + g] = acc[nb][1];
    r[(2 * t) * RED_STRIDE + g + 8] = acc[nb][2];
    r[(2 * t + 1) * RED_STRIDE + g + 8] = acc[nb][3];
  }
  __syncthreads();
  OutT* y = static_cast<OutT*>(a.y);
  for (int i = threadIdx.x; i < NB * 8 * TILE_ROWS; i += SMALL_M_THREADS) {
    const int row = i % TILE_ROWS, b = i / TILE_ROWS;
    const int col_n = tile * TILE_ROWS + row;
    if (b < a.m && col_n < a.n) {
      float s = 0.f;
#pragma unroll
      for (int w = 0; w < SMALL_M_WARPS; ++w) s += red[(w * NB * 8 + b) * RED_STRIDE + row];
      store_out(y + static_cast<int64_t>(b) * a.ldy + col_n, s);
    }
  }
  // The next tile overwrites `red`.
  __syncthreads();
}

template <int NB, typename OutT>
__global__ void __launch_bounds__(SMALL_M_THREADS, SmallMConfig<NB>::MIN_BLOCKS)
    matmul_small_m_kernel(SmallMArgs a) {
  __shared__ float red[SmallMConfig<NB>::RED_FLOATS];
  const int num_tiles = small_m_num_tiles(a);
  int tile = blockIdx.x;  // the launcher keeps gridDim.x <= num_tiles
  const uint32_t step = tile_sync_step(a.sync);
  WeightGroup<SmallMConfig<NB>::U> wg;
  // The first weights stream while the predecessor finishes; x is its output, so it waits (for
  // the previous kernel under PDL, or for the producer's counter in the overlap step). x is then
  // read with ordinary loads (small_m_tile), never through the non-coherent path.
  small_m_load_weights<NB>(a, tile, 0, wg);
  tile_sync_wait(a.sync, step);
  pdl_launch_dependents();
  for (; tile < num_tiles; tile += gridDim.x) {
    const int next = tile + static_cast<int>(gridDim.x);
    small_m_tile<NB, OutT>(a, tile, next < num_tiles ? next : -1, wg, red);
  }
  // One signal per CTA after its last tile: consumers of v0 wait for the whole tensor anyway.
  tile_sync_signal(a.sync, step);
}

template <int NB, typename OutT>
int small_m_grid(const SmallMArgs& a, int sm_count, int max_ctas) {
  const int num_tiles = (a.n + TILE_ROWS - 1) / TILE_ROWS;
  int grid = std::min(num_tiles, sm_count * SmallMConfig<NB>::MIN_BLOCKS);
  if (max_ctas > 0) grid = std::min(grid, max_ctas);
  return grid;
}

template <int NB, typename OutT>
cudaError_t launch_small_m(const SmallMArgs& a, int sm_count, int max_ctas,
                           const LaunchOptions& opt, KernelFootprint* footprint) {
  const int grid = small_m_grid<NB, OutT>(a, sm_count, max_ctas);
  if (footprint != nullptr)
    return kernel_footprint(matmul_small_m_kernel<NB, OutT>, grid, SMALL_M_THREADS, 0, footprint);
  return launch_kernel(matmul_small_m_kernel<NB, OutT>, dim3(grid), dim3(SMALL_M_THREADS), 0, opt,
                       a);
}

// Launches (footprint == null) or describes the launch (footprint set).
template <typename OutT>
cudaError_t launch_small_m_for_m(const SmallMArgs& a, int sm_count, int max_ctas,
                                 const LaunchOptions& opt, KernelFootprint* footprint = nullptr) {
  if (a.m <= 8) return launch_small_m<1, OutT>(a, sm_count, max_ctas, opt, footprint);
  if (a.m <= 16) return launch_small_m<2, OutT>(a, sm_count, max_ctas, opt, footprint);
  if (a.m <= 32) return launch_small_m<4, OutT>(a, sm_count, max_ctas, opt, footprint);
  return launch_small_m<8, OutT>(a, sm_count, max_ctas, opt, footprint);
}

template <typename OutT>
cudaError_t preload_small_m() {
  for (cudaError_t err : {preload_kernel(matmul_small_m_kernel<1, OutT>),
                          preload_kernel(matmul_small_m_kernel<2, OutT>),
                          preload_kernel(matmul_small_m_kernel<4, OutT>),
                          preload_kernel(matmul_small_m_kernel<8, OutT>)})
    if (err != cudaSuccess) return err;
  return cudaSuccess;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// MatmulContext

namespace {
constexpr size_t LT_WORKSPACE_BYTES = size_t{32} << 20;
constexpr unsigned MATMUL_STREAM_SCHED_SLOTS = 4096;  // MatmulContext::sched_'s counter pairs
}  // namespace

namespace {
std::string stream_stages_range() {
  return "expected an integer in [" + std::to_string(MATMUL_STREAM_STAGES_MIN) + ", " +
         std::to_string(MATMUL_STREAM_STAGES_MAX) + "]";
}
}  // namespace

void MatmulContext::set_stream_stages(int stages) {
  if (stages != 0 && (stages < MATMUL_STREAM_STAGES_MIN || stages > MATMUL_STREAM_STAGES_MAX))
    throw InputError("stream stages: 0 (the default) or " + stream_stages_range() + ", found " +
                     std::to_string(stages));
  stream_stages_ = stages;
}

namespace {
// The streaming kernel's bulk version runs on sm_90 only; `who` names the setting that asked.
void require_stream_bulk(const char* who) {
  if (!matmul_stream_bulk_supported())
    throw InputError(std::string(who) + ": bulk needs a compute capability 9.x GPU (sm_90)");
}
}  // namespace

void MatmulContext::set_stream_bulk(bool bulk) {
  if (bulk) require_stream_bulk("stream kernel");
  stream_bulk_ = bulk;
}

void parse_matmul_path(const std::string& v, MatmulSettings* s, const std::string& what) {
  s->forced_path.reset();
  s->stream_for_small = false;
  if (v == "small")
    s->forced_path = MatmulPath::SmallM;
  else if (v == "stream")
    s->forced_path = MatmulPath::Stream;
  else if (v == "cublaslt")
    s->forced_path = MatmulPath::CublasLt;
  else if (v == "stream-for-small")
    s->stream_for_small = true;
  else if (!v.empty() && v != "auto")
    throw InputError(
        what + ": expected small, stream, cublaslt, stream-for-small or auto, found '" + v + "'");
}

std::vector<std::pair<int, int>> parse_matmul_stream_shapes(const std::string& v,
                                                            const std::string& what) {
  std::vector<std::pair<int, int>> shapes;
  for (size_t i = 0; i < v.size();) {
    const size_t j = std::min(v.find(',', i), v.size());
    const std::string item = v.substr(i, j - i);
    int n = 0, k = 0;
    char x = 0;
    char tail = 0;
    if (std::sscanf(item.c_str(), "%d%c%d%c", &n, &x, &k, &tail) != 3 || x != 'x' || n < 1 || k < 1)
      throw InputError(what + ": expected a comma-separated list of NxK (e.g. 4096x4096), found '" +
                       item + "' in '" + v + "'");
    shapes.push_back({n, k});
    i = j + 1;
  }
  return shapes;
}

int parse_stream_stages(const std::string& v, const std::string& what) {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < MATMUL_STREAM_STAGES_MIN || n > MATMUL_STREAM_STAGES_MAX)
    throw InputError(what + ": " + stream_stages_range() + ", found '" + v + "'");
  return static_cast<int>(n);
}

bool parse_stream_kernel(const std::string& v, const std::string& what) {
  if (v != "ring" && v != "bulk")
    throw InputError(what + ": expected ring or bulk, found '" + v + "'");
  if (v == "bulk") require_stream_bulk(what.c_str());
  return v == "bulk";
}

// MEGAOPS_CUBLAS_CHECK would name cublasGetStatusString, which lives in libcublas; megaops links
// only libcublasLt, so the constructor reports through cublasLtGetStatusString instead.
MatmulContext::MatmulContext(const MatmulSettings& settings)
    : forced_path_(settings.forced_path),
      stream_for_small_(settings.stream_for_small),
      stream_shapes_(settings.stream_shapes),
      stream_l2_evict_first_(settings.stream_l2_evict_first),
      tune_(settings.tune) {
  // The settings and the streaming kernel's attributes first: nothing to release on an error.
  set_stream_stages(settings.stream_stages);
  stream_bulk_ = matmul_stream_bulk_supported();
  if (settings.stream_bulk) set_stream_bulk(*settings.stream_bulk);
  // Only the streaming kernel's attributes (its shared memory): the small-m kernels keep the
  // driver's L1 / shared split in the conventional step (their x reads go through L1); the
  // overlap executor asks for the shared-memory carveout of every kernel itself (preload_kernels).
  MEGAOPS_CUDA_CHECK(preload_matmul_stream());
  const cublasStatus_t st = cublasLtCreate(&handle_);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw_cuda_error("cublasLtCreate(&handle_)", cublasLtGetStatusString(st), __FILE__, __LINE__);
  const cudaError_t err = cudaMalloc(&workspace_, LT_WORKSPACE_BYTES);
  if (err != cudaSuccess) {
    cublasLtDestroy(handle_);
    throw_cuda_error("cudaMalloc(cuBLASLt workspace)", cudaGetErrorString(err), __FILE__, __LINE__);
  }
  workspace_bytes_ = LT_WORKSPACE_BYTES;
  const size_t sched_bytes = 2 * sizeof(unsigned) * MATMUL_STREAM_SCHED_SLOTS;
  cudaError_t sched_err = cudaMalloc(&sched_, sched_bytes);
  if (sched_err == cudaSuccess) sched_err = cudaMemset(sched_, 0, sched_bytes);
  if (sched_err == cudaSuccess) sched_err = cudaDeviceSynchronize();  // zeroed before any launch
  if (sched_err != cudaSuccess) {
    cudaFree(sched_);
    cudaFree(workspace_);
    cublasLtDestroy(handle_);
    throw_cuda_error("cudaMalloc(streaming schedule counters)", cudaGetErrorString(sched_err),
                     __FILE__, __LINE__);
  }
}

MatmulContext::~MatmulContext() {
  cudaFree(sched_);
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
}

// Dispatch threshold. The small-m kernel does its math on tensor cores, so unlike a CUDA-core GEMV
// (whose fp32 FMAs, ~60 TFLOP/s on H200, would cost as much as the weight stream at m ~ 8-14:
// 2 m FLOP per 2-byte weight at 4.6 TB/s = 4.6 m TFLOP/s) its math is never the limit up to m = 64.
// What grows with m is the x traffic: every 16-row tile re-reads all of x (m/16 of the weight
// bytes), from L1 while m * k * 2 bytes fits there and from L2 otherwise. The measurements and
// the rule: kernels/matmul_dispatch.h (the planner reads it too).

MatmulPath MatmulContext::path(const MatmulParams& p) const {
  // A folded norm or SwiGLU runs only on the streaming kernel's bulk version: there wherever it
  // can run (ahead of the knobs); elsewhere the rule's path, whose launcher refuses the fold.
  if (folds(p) && stream_bulk_ && matmul_stream_fits(p.m, p.k)) return MatmulPath::Stream;
  if (forced_path_ == MatmulPath::SmallM)
    return p.m <= MATMUL_SMALL_M_MAX ? MatmulPath::SmallM : MatmulPath::CublasLt;
  if (forced_path_ == MatmulPath::CublasLt) return MatmulPath::CublasLt;
  // The rule picks small-m or cuBLASLt; the knobs move shapes to the streaming kernel where it
  // can take them, else the rule's choice stands.
  const MatmulPath rule = matmul_dispatch_path(p.m, p.n, p.k, p.launch.pdl, stream_bulk_);
  bool stream =
      forced_path_ == MatmulPath::Stream || (stream_for_small_ && rule == MatmulPath::SmallM);
  for (const auto& [n, k] : stream_shapes_) stream |= n == p.n && k == p.k;
  return stream && matmul_stream_fits(p.m, p.k) ? MatmulPath::Stream : rule;
}

cudaError_t MatmulContext::run(const MatmulParams& p) {
  switch (path(p)) {
    case MatmulPath::SmallM:
      return run_small_m(p);
    case MatmulPath::Stream:
      return run_stream(p);
    default:
      return run_cublaslt(p);
  }
}

namespace {

// Launches run_small_m's kernel, or with `footprint` set only describes that launch.
cudaError_t small_m_dispatch(const MatmulParams& p, KernelFootprint* footprint) {
  if (const cudaError_t err = validate(p); err != cudaSuccess) return err;
  if (folds(p)) return cudaErrorNotSupported;  // only the streaming kernel's bulk version folds
  if (p.m > MATMUL_SMALL_M_MAX || p.max_ctas < 0) return cudaErrorInvalidValue;
  int sm_count = 0;
  if (const cudaError_t err = current_device_attribute(cudaDevAttrMultiProcessorCount, &sm_count);
      err != cudaSuccess)
    return err;
  const SmallMArgs a{p.x, p.ldx, p.w, p.y, p.ldy, p.m, p.n, p.k, p.sync};
  return p.y_dtype == DType::F32
             ? launch_small_m_for_m<float>(a, sm_count, p.max_ctas, p.launch, footprint)
             : launch_small_m_for_m<bf16>(a, sm_count, p.max_ctas, p.launch, footprint);
}

}  // namespace

cudaError_t MatmulContext::run_small_m(const MatmulParams& p) {
  return small_m_dispatch(p, nullptr);
}

cudaError_t MatmulContext::small_m_footprint(const MatmulParams& p, KernelFootprint* out) {
  return small_m_dispatch(p, out);
}

namespace {

cudaError_t stream_dispatch(const MatmulParams& p, int stages, bool bulk, bool evict_first,
                            unsigned* sched, KernelFootprint* footprint) {
  if (const cudaError_t err = validate(p); err != cudaSuccess) return err;
  if (p.max_ctas < 0) return cudaErrorInvalidValue;
  const StreamMatmulArgs a{p.x,        p.ldx,        p.w,
                           p.y,        p.ldy,        p.m,
                           p.n,        p.k,          p.y_dtype == DType::F32,
                           p.sync,     p.fold,       p.silu_fold,
                           p.silu_out, p.argmax_out, p.stream_schedule,
                           sched,      evict_first};
  return launch_matmul_stream(a, p.max_ctas, stages, p.launch, footprint, bulk);
}

}  // namespace

cudaError_t MatmulContext::run_stream(const MatmulParams& p) {
  unsigned* sched = sched_ + 2 * (sched_next_++ % MATMUL_STREAM_SCHED_SLOTS);
  return stream_dispatch(p, stream_stages_, stream_bulk_, stream_l2_evict_first_, sched, nullptr);
}

cudaError_t MatmulContext::stream_footprint(const MatmulParams& p, KernelFootprint* out) const {
  // The launch run_stream makes.
  return stream_dispatch(p, stream_stages_, stream_bulk_, stream_l2_evict_first_, sched_, out);
}

cudaError_t MatmulContext::stream_region_args(const MatmulParams& p, StreamMatmulArgs* out) const {
  if (path(p) != MatmulPath::Stream || !stream_bulk_) return cudaErrorNotSupported;
  if (const cudaError_t err = validate(p); err != cudaSuccess) return err;
  if (!matmul_stream_fits(p.m, p.k)) return cudaErrorInvalidValue;
  *out = StreamMatmulArgs{p.x,
                          p.ldx,
                          p.w,
                          p.y,
                          p.ldy,
                          p.m,
                          p.n,
                          p.k,
                          p.y_dtype == DType::F32,
                          TileSync{},
                          p.fold,
                          p.silu_fold,
                          p.silu_out,
                          p.argmax_out,
                          StreamSchedule::Static,
                          nullptr,
                          stream_l2_evict_first_};
  return cudaSuccess;
}

cudaError_t MatmulContext::preload_kernels() {
  if (const cudaError_t err = preload_small_m<float>(); err != cudaSuccess) return err;
  if (const cudaError_t err = preload_small_m<bf16>(); err != cudaSuccess) return err;
  return preload_matmul_stream();
}
}  // namespace megaops
