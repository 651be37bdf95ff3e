// Decode attention over the bf16 KV cache, fp32 softmax and accumulation, on CUDA cores.
//
// Decode (flash-decoding): a CTA owns one (sequence, kv head, split) and all G = num_heads /
// num_kv_heads query heads of that kv group, so each K/V row is read from memory once per group;
// when every query head of the batch fits one CTA per SM (small batches), a CTA owns one
// (sequence, query head, split) instead, so G times as many SMs share the latency-bound work.
// A context of up to DECODE_UNSPLIT_MAX keys is one chunk; a longer one is cut into at most
// `splits` chunks (a multiple of the key tile, at least DECODE_MIN_CHUNK keys each), decided on
// the device from ctx_len because a captured graph sees the length grow. A sequence that needs one
// chunk writes its output directly; otherwise every chunk writes an unnormalised partial output
// with its running max and sum to the workspace, and either the last CTA of the group merges them
// (done_counters set) or a small combine kernel does. When the host-side split count is 1 (large
// batches) no merge happens at all. For G <= 8 the split kernel is warp-parallel over keys
// (decode_attention_fast: no block barrier per key tile, several K/V rows in flight per lane);
// above, a tiled kernel stages K/V tiles in shared memory. The per-query-head kernel can fold
// qkv_rope into its prologue (kernels/rope_fold.cuh, DecodeAttentionParams::rope).
//
// Uses the log2 domain (q pre-scaled by scale * log2(e), exp2f). Limits: head_dim % 8 == 0,
// head_dim <= 256 (16-byte rows), G <= 64 and G * head_dim <= 8192 (registers). Limits, tile
// sizes and helpers shared with prefill: attention_impl.cuh; the warp-parallel kernel:
// attention_decode_fast.cuh.
#include "kernels/attention_decode_fast.cuh"
#include "kernels/attention_impl.cuh"

namespace megaops {
namespace {

// ---------------------------------------------------------------------------------------------
// Decode

size_t decode_smem_bytes(int group, int head_dim) {
  return 2 * sizeof(bf16) * DECODE_TILE * kv_stride(head_dim) +
         sizeof(float) * (static_cast<size_t>(group) * head_dim + group * DECODE_TILE + 3 * group);
}

// One tile = (sequence bi, kv head, split). Must be called by all DECODE_THREADS threads with
// decode_smem_bytes() of dynamic shared memory at `smem` (16-byte aligned).
__device__ __forceinline__ void decode_attention_split(const DecodeAttentionParams& p, int splits,
                                                       int bi, int kv_head, int split,
                                                       unsigned char* smem) {
  const int tid = threadIdx.x;
  const int hd = p.head_dim, half = hd / 2;
  const int group = p.num_heads / p.num_kv_heads;
  const int stride = kv_stride(hd);
  bf16* ks = reinterpret_cast<bf16*>(smem);
  bf16* vs = ks + DECODE_TILE * stride;
  float* qs = reinterpret_cast<float*>(vs + DECODE_TILE * stride);  // [group][hd]
  float* sc = qs + group * hd;                                      // [group][DECODE_TILE]
  float* row_max = sc + group * DECODE_TILE;                        // [group]
  float* row_sum = row_max + group;
  float* row_alpha = row_sum + group;

  const int ctx = min(p.ctx_lens[bi], p.max_seq);
  const int head0 = kv_head * group;
  bf16* out = p.out + (static_cast<int64_t>(bi) * p.num_heads + head0) * hd;
  DecodeSplitPlan plan;
  int key_begin, key_end;
  if (!decode_chunk(ctx, splits, split, group * hd, out, &plan, &key_begin, &key_end)) return;
  const int64_t slot = p.slots[bi];

  const float q_scale = p.scale * LOG2E;
  const bf16* q = p.q + (static_cast<int64_t>(bi) * p.num_heads + head0) * hd;
  for (int v = tid; v < group * hd / 8; v += DECODE_THREADS) {
    float f[8];
    bf16x8_to_float(*reinterpret_cast<const uint4*>(q + v * 8), f);
#pragma unroll
    for (int i = 0; i < 8; ++i) qs[v * 8 + i] = f[i] * q_scale;
  }
  if (tid < group) {
    row_max[tid] = -INFINITY;
    row_sum[tid] = 0.0f;
  }

  const int npairs = group * half;
  float2 acc[DECODE_MAX_PAIRS];
#pragma unroll
  for (int r = 0; r < DECODE_MAX_PAIRS; ++r) acc[r] = make_float2(0.f, 0.f);

  for (int key0 = key_begin; key0 < key_end; key0 += DECODE_TILE) {
    const int n = min(DECODE_TILE, key_end - key0);
    __syncthreads();  // the previous tile's readers are done with ks, vs and sc
    load_kv_tile<DECODE_THREADS>(p.k_cache, p.v_cache, p.kv, slot, key0, n, kv_head, p.num_kv_heads,
                                 hd, p.max_seq, ks, vs);
    __syncthreads();

    // Scores: thread -> (head g, key j); a warp shares g, so its q reads are broadcasts.
    for (int idx = tid; idx < group * DECODE_TILE; idx += DECODE_THREADS) {
      const int g = idx / DECODE_TILE, j = idx % DECODE_TILE;
      float s = -INFINITY;
      if (j < n) {
        s = 0.0f;
#pragma unroll 4
        for (int c = 0; c < hd; c += 8) s += dot8(qs + g * hd + c, ks + j * stride + c);
      }
      sc[idx] = s;
    }
    __syncthreads();

    // Online softmax, one warp per head. Key 0 of the tile is always valid, so the new max is
    // finite and exp2f(-inf - m) gives exact zeros for the padding keys.
    for (int g = tid / 32; g < group; g += DECODE_THREADS / 32) {
      const int lane = tid % 32;
      const float s0 = sc[g * DECODE_TILE + lane], s1 = sc[g * DECODE_TILE + lane + 32];
      const float m_old = row_max[g];
      const float m_new = fmaxf(m_old, warp_max(fmaxf(s0, s1)));
      const float p0 = exp2f(s0 - m_new), p1 = exp2f(s1 - m_new);
      sc[g * DECODE_TILE + lane] = p0;
      sc[g * DECODE_TILE + lane + 32] = p1;
      const float tile_sum = warp_sum(p0 + p1);
      __syncwarp();  // every lane has read row_max[g] before lane 0 overwrites it
      if (lane == 0) {
        const float alpha = exp2f(m_old - m_new);
        row_alpha[g] = alpha;
        row_max[g] = m_new;
        row_sum[g] = row_sum[g] * alpha + tile_sum;
      }
    }
    __syncthreads();

    // P . V: thread -> output pairs (g, d..d+1).
#pragma unroll
    for (int r = 0; r < DECODE_MAX_PAIRS; ++r) {
      const int idx = tid + r * DECODE_THREADS;
      if (idx < npairs) {
        const int g = idx / half, d = (idx - g * half) * 2;
        const float alpha = row_alpha[g];
        float2 a = make_float2(acc[r].x * alpha, acc[r].y * alpha);
        const float* pg = sc + g * DECODE_TILE;
#pragma unroll 8
        for (int j = 0; j < n; ++j) {
          const float pj = pg[j];
          const float2 v =
              __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(vs + j * stride + d));
          a.x += pj * v.x;
          a.y += pj * v.y;
        }
        acc[r] = a;
      }
    }
  }
  // row_max / row_sum were last written before the final __syncthreads() above: visible here.

  if (plan.n_active == 1) {
#pragma unroll
    for (int r = 0; r < DECODE_MAX_PAIRS; ++r) {
      const int idx = tid + r * DECODE_THREADS;
      if (idx < npairs) {
        const int g = idx / half, d = (idx - g * half) * 2;
        const float inv = 1.0f / row_sum[g];
        *reinterpret_cast<__nv_bfloat162*>(out + g * hd + d) =
            __floats2bfloat162_rn(acc[r].x * inv, acc[r].y * inv);
      }
    }
    return;
  }
  // Partials: o [b][num_heads][splits][hd], then (max, sum) [b][num_heads][splits][2].
  const int64_t part0 = (static_cast<int64_t>(bi) * p.num_heads + head0) * splits + split;
  float* ws_o = p.workspace;
  float* ws_ml = p.workspace + static_cast<int64_t>(p.b) * p.num_heads * splits * hd;
#pragma unroll
  for (int r = 0; r < DECODE_MAX_PAIRS; ++r) {
    const int idx = tid + r * DECODE_THREADS;
    if (idx < npairs) {
      const int g = idx / half, d = (idx - g * half) * 2;
      *reinterpret_cast<float2*>(ws_o + (part0 + static_cast<int64_t>(g) * splits) * hd + d) =
          acc[r];
    }
  }
  if (tid < group) {
    const int64_t part = part0 + static_cast<int64_t>(tid) * splits;
    ws_ml[2 * part] = row_max[tid];
    ws_ml[2 * part + 1] = row_sum[tid];
  }
  if (p.done_counters != nullptr)
    decode_merge_if_last(p, splits, bi, kv_head, plan.n_active, plan.n_active);
}

// One tile = (sequence bi, query head h): merges the partials of the active splits.
__device__ __forceinline__ void decode_attention_combine(const DecodeAttentionParams& p, int splits,
                                                         int bi, int head) {
  const int ctx = min(p.ctx_lens[bi], p.max_seq);
  const DecodeSplitPlan plan = decode_split_plan(ctx, splits);
  if (plan.n_active <= 1) return;  // written directly by the split kernel
  decode_combine_heads(p, splits, bi, head, 1, plan.n_active);
}

size_t decode_fast_smem_bytes(int group, int head_dim) {
  return sizeof(float) * (DECODE_THREADS / 32) * group * (head_dim + 2);
}

__global__ void __launch_bounds__(DECODE_THREADS)
    decode_attention_split_kernel(DecodeAttentionParams p, int splits) {
  extern __shared__ __align__(16) unsigned char decode_smem[];
  // q, the cache and ctx_lens are all written by predecessors. q and the cache (which the overlap
  // step's qkv_rope writes while this kernel may already be resident) are read with ordinary
  // loads, coherent after the acquire in tile_sync_wait.
  const uint32_t step = tile_sync_step(p.sync);
  tile_sync_wait(p.sync, step);
  pdl_launch_dependents();
  decode_attention_split(p, splits, blockIdx.z, blockIdx.y, blockIdx.x, decode_smem);
  // Reached by every CTA, also those whose split is empty for this context length.
  tile_sync_signal(p.sync, step);
}

template <int GMAX, int LPK, int U, bool PER_HEAD, bool FOLD, bool PAGED>
__global__ void __launch_bounds__(DECODE_THREADS)
    decode_attention_fast_kernel(DecodeAttentionParams p, int splits) {
  extern __shared__ __align__(16) unsigned char decode_smem[];
  // As decode_attention_split_kernel; the wait is inside, after the context length's loads.
  const uint32_t step = tile_sync_step(p.sync);
  decode_attention_fast<GMAX, LPK, U, PER_HEAD, FOLD, PAGED>(p, splits, blockIdx.z, blockIdx.y,
                                                             blockIdx.x, step, decode_smem);
  tile_sync_signal(p.sync, step);
}

using DecodeSplitKernel = void (*)(DecodeAttentionParams, int);

struct DecodeSplitChoice {
  DecodeSplitKernel kernel;
  size_t smem;
  dim3 grid;
};

// The SMs of the current device (the first call's), which the per-query-head choice compares
// the grid with.
int decode_sm_count() {
  static const int sms = [] {
    int n = 0;
    return current_device_attribute(cudaDevAttrMultiProcessorCount, &n) == cudaSuccess ? n : 0;
  }();
  return sms;
}

// Whether the warp-parallel kernel (G <= 8) serves one query head a CTA: as p.per_head says, or
// by the grid (-1): when every query head of the batch fits one CTA per SM (and within an overlap
// CTA budget); at batch 1 a CTA per kv head leaves 124 of 132 SMs idle while each runs G heads'
// work.
bool decode_per_head(const DecodeAttentionParams& p, int splits) {
  const int group = p.num_heads / p.num_kv_heads;
  if (group > DECODE_FAST_MAX_GROUP) return false;
  if (p.per_head >= 0) return p.per_head == 1;
  const int64_t heads = static_cast<int64_t>(p.b) * p.num_heads;
  return group > 1 && heads <= decode_sm_count() &&
         (p.max_split_ctas <= 0 || heads * splits <= p.max_split_ctas);
}

// The split count of launch p: DecodeAttentionParams::splits when set, else by b and max_seq.
int decode_launch_splits(const DecodeAttentionParams& p) {
  if (p.splits > 0) return p.splits;
  return decode_splits(p.b, p.num_kv_heads, p.max_seq, p.max_split_ctas);
}

// The warp-parallel kernels of one paging (PAGED: through a block table): a CTA per kv head
// (by_group: [group 1, 2, 4, 8][head_dim <= 64, 128, 256]), per query head, and the rope fold.
template <bool PAGED>
struct DecodeFastKernels {
  static constexpr int U = DECODE_FAST_UNROLL, H = DECODE_FAST_UNROLL_HEAD;
  template <int GMAX, int LPK, int UU, bool PER_HEAD, bool FOLD = false>
  static DecodeSplitKernel k() {
    return decode_attention_fast_kernel<GMAX, LPK, UU, PER_HEAD, FOLD, PAGED>;
  }
  static DecodeSplitKernel by_group(int gi, int li) {
    static const DecodeSplitKernel table[4][3] = {
        {k<1, 8, U, false>(), k<1, 16, U, false>(), k<1, 32, U, false>()},
        {k<2, 8, U, false>(), k<2, 16, U, false>(), k<2, 32, U, false>()},
        {k<4, 8, U, false>(), k<4, 16, U, false>(), k<4, 32, U, false>()},
        {k<8, 8, U, false>(), k<8, 16, U, false>(), k<8, 32, U, false>()}};
    return table[gi][li];
  }
  static DecodeSplitKernel per_head(int li) {
    static const DecodeSplitKernel table[3] = {k<1, 8, U, true>(), k<1, 16, H, true>(),
                                               k<1, 32, H, true>()};
    return table[li];
  }
  static DecodeSplitKernel fold(int li) {
    static const DecodeSplitKernel table[2] = {k<1, 8, U, true, true>(), k<1, 16, H, true, true>()};
    return table[li];
  }
};

// The split kernel of a launch with `splits`: the warp-parallel one for G <= 8 (every Llama 3 /
// Qwen 3 shape), the tiled one above; the warp-parallel one per query head or per kv head as
// decode_per_head says. per_head forces the choice either way (-1: decode_per_head). With p.rope
// on (decode_attention_check admitted it: per query head, head_dim <= 128) the per-query-head
// kernel that folds qkv_rope. Through the block table where p.kv is paged.
DecodeSplitChoice decode_split_kernel(const DecodeAttentionParams& p, int splits,
                                      int per_head = -1) {
  const int group = p.num_heads / p.num_kv_heads, head_dim = p.head_dim;
  if (group > DECODE_FAST_MAX_GROUP)
    return {decode_attention_split_kernel, decode_smem_bytes(group, head_dim),
            dim3(splits, p.num_kv_heads, p.b)};
  const int li = head_dim <= 64 ? 0 : head_dim <= 128 ? 1 : 2;
  const bool paged = p.kv.paged();
  if (p.rope.on())
    return {paged ? DecodeFastKernels<true>::fold(li) : DecodeFastKernels<false>::fold(li),
            decode_fast_smem_bytes(1, head_dim), dim3(splits, p.num_heads, p.b)};
  if (per_head == 1 || (per_head < 0 && decode_per_head(p, splits)))
    return {paged ? DecodeFastKernels<true>::per_head(li) : DecodeFastKernels<false>::per_head(li),
            decode_fast_smem_bytes(1, head_dim), dim3(splits, p.num_heads, p.b)};
  const int gi = group <= 1 ? 0 : group <= 2 ? 1 : group <= 4 ? 2 : 3;
  return {paged ? DecodeFastKernels<true>::by_group(gi, li)
                : DecodeFastKernels<false>::by_group(gi, li),
          decode_fast_smem_bytes(group, head_dim), dim3(splits, p.num_kv_heads, p.b)};
}

constexpr int COMBINE_THREADS = 128;

__global__ void __launch_bounds__(COMBINE_THREADS)
    decode_attention_combine_kernel(DecodeAttentionParams p, int splits) {
  const uint32_t step = tile_sync_step(p.sync);
  tile_sync_wait(p.sync, step);  // the partials of the split kernel
  pdl_launch_dependents();
  // (sequence, head) pairs; the default grid (num_heads, b) has one CTA per pair, a capped 1-D
  // grid strides.
  const int pairs = p.num_heads * p.b;
  for (int pair = blockIdx.x + gridDim.x * blockIdx.y; pair < pairs; pair += gridDim.x * gridDim.y)
    decode_attention_combine(p, splits, pair / p.num_heads, pair % p.num_heads);
  tile_sync_signal(p.sync, step);
}

}  // namespace

bool decode_attention_can_fold_rope(const DecodeAttentionParams& p) {
  if (p.b < 1 || p.b > ROPE_FOLD_MAX_ROWS || p.num_heads <= 0 || p.num_kv_heads <= 0 ||
      p.num_heads % p.num_kv_heads != 0 || p.head_dim <= 0 || p.head_dim % 8 != 0 ||
      p.head_dim > ROPE_FOLD_MAX_HEAD_DIM || p.max_seq <= 0 || p.max_split_ctas < 0)
    return false;
  const int group = p.num_heads / p.num_kv_heads;
  if (group < 2 || group > DECODE_FAST_MAX_GROUP || p.splits < 0 || p.splits > DECODE_MAX_SPLITS)
    return false;
  return decode_per_head(p, decode_launch_splits(p));
}

int decode_attention_default_splits(int b, int num_kv_heads, int max_seq) {
  if (b <= 0 || num_kv_heads <= 0 || max_seq <= 0) return 1;
  return decode_splits(b, num_kv_heads, max_seq);
}

int decode_attention_max_splits() {
  return DECODE_MAX_SPLITS;
}

size_t decode_attention_workspace_floats(int b, int num_heads, int head_dim, int max_seq,
                                         int fixed_splits) {
  if (b <= 0 || num_heads <= 0 || head_dim <= 0 || max_seq <= 0) return 0;
  // num_kv_heads = 1 gives the most splits the launcher can choose for these shapes.
  const int splits = fixed_splits > 0 ? fixed_splits : decode_splits(b, 1, max_seq);
  if (splits == 1) return 0;
  return static_cast<size_t>(b) * num_heads * splits * (head_dim + 2);
}

namespace {

// Validates p; on success returns the split count (0 when b == 0: nothing to launch).
cudaError_t decode_attention_check(const DecodeAttentionParams& p, int* splits) {
  *splits = 0;
  if (p.b < 0 || p.num_heads <= 0 || p.num_kv_heads <= 0 || p.num_heads % p.num_kv_heads != 0 ||
      p.head_dim <= 0 || p.head_dim % 8 != 0 || p.head_dim > ATTN_MAX_HEAD_DIM || p.max_seq <= 0 ||
      p.b > 65535 || p.max_split_ctas < 0 || p.max_combine_ctas < 0 || p.splits < 0 ||
      p.splits > DECODE_MAX_SPLITS || p.per_head < -1 || p.per_head > 1 ||
      !kv_pages_valid(p.kv, p.max_seq))
    return cudaErrorInvalidValue;
  const int group = p.num_heads / p.num_kv_heads;
  if (group > DECODE_MAX_GROUP || group * p.head_dim > 2 * DECODE_MAX_PAIRS * DECODE_THREADS)
    return cudaErrorInvalidValue;
  // Only the warp-parallel kernel (G <= 8) has a per-query-head form.
  if (p.per_head == 1 && group > DECODE_FAST_MAX_GROUP) return cudaErrorInvalidValue;
  if (p.b == 0) return cudaSuccess;
  const bool fold = p.rope.on();  // then q is not read
  if ((!fold && !p.q) || !p.k_cache || !p.v_cache || !p.slots || !p.ctx_lens || !p.out)
    return cudaErrorInvalidValue;
  if ((!fold && !aligned16(p.q)) || !aligned16(p.k_cache) || !aligned16(p.v_cache) ||
      !aligned16(p.out))
    return cudaErrorInvalidValue;
  if (fold) {
    if (!decode_attention_can_fold_rope(p)) return cudaErrorNotSupported;
    const RopeFold& f = p.rope;
    if (!f.positions || !f.inv_freq || f.k_cache != p.k_cache || f.v_cache != p.v_cache ||
        !aligned(f.qkv, 8) || (f.q_norm && !aligned(f.q_norm, 4)) ||
        (f.k_norm && !aligned(f.k_norm, 4)) || !(f.eps >= 0.0f))
      return cudaErrorInvalidValue;
  }
  const int s = decode_launch_splits(p);
  if (s > 1 && (!p.workspace || !aligned16(p.workspace))) return cudaErrorInvalidValue;
  *splits = s;
  return cudaSuccess;
}

dim3 combine_grid(const DecodeAttentionParams& p) {
  if (p.max_combine_ctas <= 0) return dim3(p.num_heads, p.b);
  return dim3(std::min(p.num_heads * p.b, p.max_combine_ctas));
}

}  // namespace

cudaError_t launch_decode_attention_split(const DecodeAttentionParams& p) {
  int splits = 0;
  cudaError_t err = decode_attention_check(p, &splits);
  if (err != cudaSuccess || splits == 0) return err;
  const DecodeSplitChoice k = decode_split_kernel(p, splits);
  err = allow_smem(k.kernel, k.smem);
  if (err != cudaSuccess) return err;
  return launch_kernel(k.kernel, k.grid, dim3(DECODE_THREADS), k.smem, p.launch, p, splits);
}

cudaError_t launch_decode_attention_combine(const DecodeAttentionParams& p) {
  int splits = 0;
  const cudaError_t err = decode_attention_check(p, &splits);
  if (err != cudaSuccess || splits == 0) return err;
  return launch_kernel(decode_attention_combine_kernel, combine_grid(p), dim3(COMBINE_THREADS), 0,
                       p.launch, p, splits);
}

cudaError_t launch_decode_attention(const DecodeAttentionParams& p) {
  int splits = 0;
  cudaError_t err = decode_attention_check(p, &splits);
  if (err != cudaSuccess || splits == 0) return err;
  err = launch_decode_attention_split(p);
  // With done_counters the split kernel merges its own partials.
  if (err != cudaSuccess || splits == 1 || p.done_counters != nullptr) return err;
  return launch_decode_attention_combine(p);
}

cudaError_t decode_attention_region_variant(const DecodeAttentionParams& p, int* variant,
                                            int* splits) {
  int s = 0;
  if (const cudaError_t err = decode_attention_check(p, &s); err != cudaSuccess) return err;
  if (s == 0) return cudaErrorInvalidValue;
  if (p.num_heads / p.num_kv_heads > DECODE_FAST_MAX_GROUP || p.kv.paged())
    return cudaErrorNotSupported;
  // decode_split_kernel's tables, by the same index (decode_attention_per_head_unit).
  const int li = p.head_dim <= 64 ? 0 : p.head_dim <= 128 ? 1 : 2;
  if (p.rope.on()) {
    *variant = 3 + li;  // decode_attention_check admitted the fold: head_dim <= 128
  } else if (decode_per_head(p, s)) {
    *variant = li;
  } else {
    return cudaErrorNotSupported;
  }
  *splits = s;
  return cudaSuccess;
}

cudaError_t decode_attention_footprint(const DecodeAttentionParams& p, KernelFootprint* split,
                                       KernelFootprint* combine) {
  int splits = 0;
  cudaError_t err = decode_attention_check(p, &splits);
  if (err != cudaSuccess) return err;
  const DecodeSplitChoice k = decode_split_kernel(p, splits);
  // The occupancy query needs the kernel's opt-in for more than 48 KiB of shared memory.
  err = allow_smem(k.kernel, k.smem);
  if (err != cudaSuccess) return err;
  err = kernel_footprint(k.kernel, int(k.grid.x * k.grid.y * k.grid.z), DECODE_THREADS, k.smem,
                         split);
  if (err != cudaSuccess) return err;
  const dim3 cg = combine_grid(p);
  return kernel_footprint(decode_attention_combine_kernel, p.b == 0 ? 0 : int(cg.x * cg.y),
                          COMBINE_THREADS, 0, combine);
}

cudaError_t preload_attention_kernels() {
  for (cudaError_t err :
       {preload_kernel(decode_attention_split_kernel),
        preload_kernel(decode_attention_combine_kernel), preload_prefill_attention_kernel()})
    if (err != cudaSuccess) return err;
  // Every warp-parallel kernel, contiguous and paged: each form (per kv head, per query head, the
  // rope fold) of each group and head_dim class.
  for (bool paged : {false, true}) {
    int32_t table = 0;
    for (int group : {1, 2, 4, 8})
      for (int head_dim : {64, 128, 256})
        for (int form : {0, 1, 2}) {
          if (form == 2 && head_dim > ROPE_FOLD_MAX_HEAD_DIM) continue;
          DecodeAttentionParams p;
          p.num_kv_heads = 1;
          p.num_heads = group;
          p.head_dim = head_dim;
          if (paged) p.kv = kv_pages(&table, 16, 1);
          float qkv = 0.0f;
          if (form == 2) p.rope.qkv = &qkv;  // selects the fold kernel; nothing is read
          const cudaError_t err =
              preload_kernel(decode_split_kernel(p, 1, form == 0 ? 0 : 1).kernel);
          if (err != cudaSuccess) return err;
        }
  }
  return cudaSuccess;
}

}  // namespace megaops
