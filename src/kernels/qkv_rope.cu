// QKV post-processing: one warp per (token, head) over the token's q, k and v heads. q and k heads
// get the optional per-head RMSNorm (Qwen3) then RoPE; v heads are copied. q goes to q_out, k and
// v to the KV cache at (slot, position). A lane owns the rotate_half pairs (i, i + hd/2) for
// i in {2*lane, 2*lane+1} (+64 for head_dim > 128), so the norm needs one warp reduction and
// RoPE needs no data exchange. Limits: head_dim % 4 == 0 and head_dim <= 256. The kernel is
// instantiated per qkv type (bf16 or fp32); the outputs are bf16 either way.
#include <algorithm>
#include <type_traits>

#include "kernels/qkv_rope.cuh"

namespace megaops {
namespace {

constexpr int QKV_ROPE_WARPS = 4;
constexpr int QKV_ROPE_MAX_HEAD_DIM = 256;
// Pair groups per lane: each group is two adjacent pairs, 64 pair indices per warp step.
constexpr int QKV_ROPE_GROUPS = QKV_ROPE_MAX_HEAD_DIM / 2 / 64;

// The constant inputs of one head (inverse frequencies, norm weights) for this lane's pairs.
struct QkvRopeConsts {
  float2 inv_freq[QKV_ROPE_GROUPS], w_lo[QKV_ROPE_GROUPS], w_hi[QKV_ROPE_GROUPS];
};

__device__ __forceinline__ int qkv_rope_head_index(const QkvRopeParams& p, int64_t item) {
  const int heads_per_token = p.num_heads + 2 * p.num_kv_heads;
  return static_cast<int>(item % heads_per_token);
}

// The qkv input of type T: p.qkv for bf16, p.qkv_f32 for float.
template <typename T>
__device__ __forceinline__ const T* qkv_input(const QkvRopeParams& p) {
  if constexpr (std::is_same<T, float>::value) {
    return p.qkv_f32;
  } else {
    static_assert(std::is_same<T, bf16>::value, "qkv is bf16 or fp32");
    return p.qkv;
  }
}

// Elements i and i + 1 (i even) as floats: one 4-byte load for bf16, one 8-byte load for fp32.
__device__ __forceinline__ float2 load2(const bf16* src, int i) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(src + i));
}
__device__ __forceinline__ float2 load2(const float* src, int i) {
  return *reinterpret_cast<const float2*>(src + i);
}

// Reads only weights, never a predecessor's output: may run before pdl_wait().
__device__ QkvRopeConsts qkv_rope_load_consts(const QkvRopeParams& p, int64_t item) {
  const int lane = threadIdx.x % 32;
  const int head = qkv_rope_head_index(p, item);
  const int half = p.head_dim / 2;
  const bool is_q = head < p.num_heads;
  const bool is_v = head >= p.num_heads + p.num_kv_heads;
  const bf16* norm_w = is_v ? nullptr : (is_q ? p.q_norm : p.k_norm);
  QkvRopeConsts c;
#pragma unroll
  for (int g = 0; g < QKV_ROPE_GROUPS; ++g) {
    const int i = 2 * lane + 64 * g;
    c.inv_freq[g] = make_float2(0.f, 0.f);
    c.w_lo[g] = c.w_hi[g] = make_float2(1.f, 1.f);
    if (i < half) {
      if (!is_v) c.inv_freq[g] = make_float2(p.inv_freq[i], p.inv_freq[i + 1]);
      if (norm_w) {
        c.w_lo[g] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(norm_w + i));
        c.w_hi[g] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(norm_w + half + i));
      }
    }
  }
  return c;
}

// One tile = one head of one token; `item` indexes [t, num_heads + 2 * num_kv_heads]. Must be
// called by a whole warp, after the qkv producer has finished. T is the qkv input type (bf16:
// p.qkv, float: p.qkv_f32).
template <typename T>
__device__ void qkv_rope_head(const QkvRopeParams& p, int64_t item, const QkvRopeConsts& c) {
  const int lane = threadIdx.x % 32;
  const int heads_per_token = p.num_heads + 2 * p.num_kv_heads;
  const int64_t tok = item / heads_per_token;
  const int head = static_cast<int>(item - tok * heads_per_token);
  const int hd = p.head_dim, half = hd / 2;
  const bool is_q = head < p.num_heads;
  const bool is_v = head >= p.num_heads + p.num_kv_heads;
  const bool has_norm = !is_v && (is_q ? p.q_norm : p.k_norm) != nullptr;

  const T* src = qkv_input<T>(p) + (tok * heads_per_token + head) * hd;
  float2 lo[QKV_ROPE_GROUPS], hi[QKV_ROPE_GROUPS];
  float sumsq = 0.0f;
#pragma unroll
  for (int g = 0; g < QKV_ROPE_GROUPS; ++g) {
    const int i = 2 * lane + 64 * g;
    lo[g] = hi[g] = make_float2(0.f, 0.f);
    if (i < half) {
      lo[g] = load2(src, i);
      hi[g] = load2(src, half + i);
    }
    sumsq += lo[g].x * lo[g].x + lo[g].y * lo[g].y + hi[g].x * hi[g].x + hi[g].y * hi[g].y;
  }

  if (has_norm) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) sumsq += __shfl_xor_sync(0xffffffffu, sumsq, off);
    const float inv_rms = rsqrtf(sumsq / static_cast<float>(hd) + p.eps);
#pragma unroll
    for (int g = 0; g < QKV_ROPE_GROUPS; ++g) {
      lo[g].x *= inv_rms * c.w_lo[g].x, lo[g].y *= inv_rms * c.w_lo[g].y;
      hi[g].x *= inv_rms * c.w_hi[g].x, hi[g].y *= inv_rms * c.w_hi[g].y;
    }
  }

  const int pos = p.positions[tok];
  if (!is_v) {
    // The angle is formed in fp32 exactly as the reference does; sincosf (not __sincosf) keeps
    // full accuracy for the large arguments of long contexts.
    const float fpos = static_cast<float>(pos);
#pragma unroll
    for (int g = 0; g < QKV_ROPE_GROUPS; ++g) {
      float s0, c0, s1, c1;
      sincosf(fpos * c.inv_freq[g].x, &s0, &c0);
      sincosf(fpos * c.inv_freq[g].y, &s1, &c1);
      const float2 a = lo[g], b = hi[g];
      lo[g] = make_float2(a.x * c0 - b.x * s0, a.y * c1 - b.y * s1);
      hi[g] = make_float2(b.x * c0 + a.x * s0, b.y * c1 + a.y * s1);
    }
  }

  bf16* dst;
  if (is_q) {
    dst = p.q_out + (tok * p.num_heads + head) * hd;
  } else {
    // A position outside the cache is skipped rather than written out of bounds.
    if (pos < 0 || pos >= p.max_seq) return;
    const int kv_head = is_v ? head - p.num_heads - p.num_kv_heads : head - p.num_heads;
    const int64_t slot = p.slots[tok];
    const int64_t offset = ((slot * p.max_seq + pos) * p.num_kv_heads + kv_head) * hd;
    dst = (is_v ? p.v_cache : p.k_cache) + offset;
  }
#pragma unroll
  for (int g = 0; g < QKV_ROPE_GROUPS; ++g) {
    const int i = 2 * lane + 64 * g;
    if (i < half) {
      *reinterpret_cast<__nv_bfloat162*>(dst + i) = __floats2bfloat162_rn(lo[g].x, lo[g].y);
      *reinterpret_cast<__nv_bfloat162*>(dst + half + i) = __floats2bfloat162_rn(hi[g].x, hi[g].y);
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(QKV_ROPE_WARPS * 32) qkv_rope_kernel(QkvRopeParams p) {
  const int64_t total = static_cast<int64_t>(p.t) * (p.num_heads + 2 * p.num_kv_heads);
  const int64_t first = static_cast<int64_t>(blockIdx.x) * QKV_ROPE_WARPS + threadIdx.x / 32;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * QKV_ROPE_WARPS;
  const uint32_t step = tile_sync_step(p.sync);
  QkvRopeConsts c;
  if (first < total) c = qkv_rope_load_consts(p, first);
  tile_sync_wait(p.sync, step);
  pdl_launch_dependents();
  // One iteration per warp at the default grid; a capped grid (overlap CTA budget) strides. The
  // loop bound depends only on the warp index, so every lane of a warp runs the same iterations
  // (qkv_rope_head uses warp shuffles). qkv is read with ordinary loads (coherent after the wait).
  for (int64_t item = first; item < total; item += stride) {
    if (item != first) c = qkv_rope_load_consts(p, item);
    qkv_rope_head<T>(p, item, c);
  }
  tile_sync_signal(p.sync, step);
}

bool aligned4(const void* ptr) {
  return (reinterpret_cast<uintptr_t>(ptr) & 3u) == 0;
}

bool aligned8(const void* ptr) {
  return (reinterpret_cast<uintptr_t>(ptr) & 7u) == 0;
}

int64_t qkv_rope_blocks(const QkvRopeParams& p) {
  const int64_t total = static_cast<int64_t>(p.t) * (p.num_heads + 2 * p.num_kv_heads);
  int64_t blocks = (total + QKV_ROPE_WARPS - 1) / QKV_ROPE_WARPS;
  if (p.max_ctas > 0) blocks = std::min<int64_t>(blocks, p.max_ctas);
  return blocks;
}

}  // namespace

cudaError_t qkv_rope_footprint(const QkvRopeParams& p, KernelFootprint* out) {
  const int blocks = static_cast<int>(std::min<int64_t>(qkv_rope_blocks(p), 0x7fffffff));
  if (p.qkv_f32)
    return kernel_footprint(qkv_rope_kernel<float>, blocks, QKV_ROPE_WARPS * 32, 0, out);
  return kernel_footprint(qkv_rope_kernel<bf16>, blocks, QKV_ROPE_WARPS * 32, 0, out);
}

cudaError_t preload_qkv_rope_kernels() {
  const cudaError_t err = preload_kernel(qkv_rope_kernel<float>);
  return err != cudaSuccess ? err : preload_kernel(qkv_rope_kernel<bf16>);
}

cudaError_t launch_qkv_rope(const QkvRopeParams& p) {
  if (p.t < 0 || p.num_heads <= 0 || p.num_kv_heads <= 0 || p.head_dim <= 0 ||
      p.head_dim % 4 != 0 || p.head_dim > QKV_ROPE_MAX_HEAD_DIM || p.max_seq <= 0 ||
      p.num_heads % p.num_kv_heads != 0 || !(p.eps >= 0.0f))
    return cudaErrorInvalidValue;
  if (p.t == 0) return cudaSuccess;
  if (p.max_ctas < 0) return cudaErrorInvalidValue;
  if ((p.qkv != nullptr) == (p.qkv_f32 != nullptr)) return cudaErrorInvalidValue;  // exactly one
  if (!p.positions || !p.slots || !p.inv_freq || !p.q_out || !p.k_cache || !p.v_cache)
    return cudaErrorInvalidValue;
  if ((p.qkv && !aligned4(p.qkv)) || (p.qkv_f32 && !aligned8(p.qkv_f32)) || !aligned4(p.q_out) ||
      !aligned4(p.k_cache) || !aligned4(p.v_cache) || (p.q_norm && !aligned4(p.q_norm)) ||
      (p.k_norm && !aligned4(p.k_norm)))
    return cudaErrorInvalidValue;
  const int64_t blocks = qkv_rope_blocks(p);
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  if (p.qkv_f32)
    return launch_kernel(qkv_rope_kernel<float>, dim3(static_cast<unsigned>(blocks)),
                         dim3(QKV_ROPE_WARPS * 32), 0, p.launch, p);
  return launch_kernel(qkv_rope_kernel<bf16>, dim3(static_cast<unsigned>(blocks)),
                       dim3(QKV_ROPE_WARPS * 32), 0, p.launch, p);
}

}  // namespace megaops
