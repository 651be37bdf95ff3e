// Prefill attention over the bf16 KV cache, fp32 softmax and accumulation, on CUDA cores (the
// scalar kernel; attention_prefill.cu has the flash one; decode attention is attention_decode.cu).
//
// A CTA owns a block of PREFILL_BQ consecutive query tokens and one query head, and
// streams K/V tiles of PREFILL_TK keys through shared memory with an online softmax. Tokens of one
// sequence are contiguous, but a block may straddle sequences: the block is processed as runs of
// equal slot, each run against keys [0, max position of the run] of its slot, masking rows outside
// the run and keys after each row's own position.
//
// Uses the log2 domain (q pre-scaled by scale * log2(e), exp2f). Limits: head_dim % 8 == 0 and
// head_dim <= 256 (16-byte rows). Limits, tile sizes and helpers shared with decode:
// attention_impl.cuh.
#include "kernels/attention_impl.cuh"

namespace megaops {
namespace {

__host__ __device__ constexpr int prefill_q_stride(int head_dim) {
  return head_dim + 4;
}

size_t prefill_smem_bytes(int head_dim) {
  return sizeof(float) * PREFILL_BQ * prefill_q_stride(head_dim) +
         2 * sizeof(bf16) * PREFILL_TK * kv_stride(head_dim) +
         sizeof(float) * PREFILL_BQ * (PREFILL_TK + 1) + sizeof(float) * 3 * PREFILL_BQ +
         sizeof(int) * 2 * PREFILL_BQ;
}

// One tile = (block of PREFILL_BQ tokens starting at q_block * PREFILL_BQ, query head). Must be
// called by all PREFILL_THREADS threads with prefill_smem_bytes() of dynamic shared memory.
__device__ void prefill_attention_block(const PrefillAttentionParams& p, int q_block, int head,
                                        unsigned char* smem) {
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int hd = p.head_dim, half = hd / 2;
  const int kv_head = head / (p.num_heads / p.num_kv_heads);
  const int q_stride = prefill_q_stride(hd), stride = kv_stride(hd);
  constexpr int S_STRIDE = PREFILL_TK + 1;
  float* qs = reinterpret_cast<float*>(smem);                      // [BQ][q_stride]
  bf16* ks = reinterpret_cast<bf16*>(qs + PREFILL_BQ * q_stride);  // [TK][stride]
  bf16* vs = ks + PREFILL_TK * stride;
  float* sc = reinterpret_cast<float*>(vs + PREFILL_TK * stride);  // [BQ][S_STRIDE]
  float* row_max = sc + PREFILL_BQ * S_STRIDE;
  float* row_sum = row_max + PREFILL_BQ;
  float* row_alpha = row_sum + PREFILL_BQ;
  int* row_pos = reinterpret_cast<int*>(row_alpha + PREFILL_BQ);
  int* row_slot = row_pos + PREFILL_BQ;

  const int q0 = q_block * PREFILL_BQ;
  const int rows = min(PREFILL_BQ, p.t - q0);
  if (tid < PREFILL_BQ) {
    const bool valid = tid < rows;
    row_pos[tid] = valid ? p.positions[q0 + tid] : -1;
    row_slot[tid] = valid ? p.slots[q0 + tid] : -1;
    row_max[tid] = -INFINITY;
    row_sum[tid] = 0.0f;
  }
  const float q_scale = p.scale * LOG2E;
  for (int v = tid; v < PREFILL_BQ * (hd / 8); v += PREFILL_THREADS) {
    const int r = v / (hd / 8), c = (v - r * (hd / 8)) * 8;
    float f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (r < rows) {
      const bf16* src = p.q + (static_cast<int64_t>(q0 + r) * p.num_heads + head) * hd + c;
      bf16x8_to_float(*reinterpret_cast<const uint4*>(src), f);
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) qs[r * q_stride + c + i] = f[i] * q_scale;
  }
  __syncthreads();

  const int npairs = PREFILL_BQ * half;
  float2 acc[PREFILL_MAX_PAIRS];
#pragma unroll
  for (int i = 0; i < PREFILL_MAX_PAIRS; ++i) acc[i] = make_float2(0.f, 0.f);

  // Score mapping: thread -> row tid / 8 and keys tid % 8 + 8 * c.
  const int s_row = tid / 8, s_key = tid % 8;

  int seg_begin = 0;
  while (seg_begin < rows) {
    // A run of rows with the same slot; every thread derives the same run from shared memory.
    const int slot = row_slot[seg_begin];
    int seg_end = seg_begin + 1;
    int key_last = row_pos[seg_begin];
    while (seg_end < rows && row_slot[seg_end] == slot)
      key_last = max(key_last, row_pos[seg_end++]);
    key_last = min(key_last, p.max_seq - 1);

    for (int key0 = 0; key0 <= key_last; key0 += PREFILL_TK) {
      const int n = min(PREFILL_TK, key_last + 1 - key0);
      __syncthreads();  // the previous tile's readers are done with ks, vs and sc
      load_kv_tile<PREFILL_THREADS>(p.k_cache, p.v_cache, p.kv, slot, key0, n, kv_head,
                                    p.num_kv_heads, hd, p.max_seq, ks, vs);
      __syncthreads();

      {
        const bool row_in_seg = s_row >= seg_begin && s_row < seg_end;
        const int pos = row_pos[s_row];
        float s[4] = {0.f, 0.f, 0.f, 0.f};
        if (row_in_seg) {
          for (int c = 0; c < hd; c += 8) {
#pragma unroll
            for (int k = 0; k < 4; ++k) {
              const int j = s_key + 8 * k;
              if (j < n) s[k] += dot8(qs + s_row * q_stride + c, ks + j * stride + c);
            }
          }
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int j = s_key + 8 * k;
          const bool valid = row_in_seg && j < n && key0 + j <= pos;
          sc[s_row * S_STRIDE + j] = valid ? s[k] : -INFINITY;
        }
      }
      __syncthreads();

      // Online softmax, one warp per 4 rows, one key per lane. A row with no valid key so far
      // (outside the run, or before its first key) keeps max -inf; it must not form -inf - -inf.
      for (int r = warp * (PREFILL_BQ / 8); r < (warp + 1) * (PREFILL_BQ / 8); ++r) {
        const float s = sc[r * S_STRIDE + lane];
        const float m_old = row_max[r];
        const float m_new = fmaxf(m_old, warp_max(s));
        const bool live = m_new != -INFINITY;
        const float pr = live ? exp2f(s - m_new) : 0.0f;
        sc[r * S_STRIDE + lane] = pr;
        const float tile_sum = warp_sum(pr);
        __syncwarp();  // every lane has read row_max[r] before lane 0 overwrites it
        if (lane == 0) {
          const float alpha = live ? exp2f(m_old - m_new) : 1.0f;
          row_alpha[r] = alpha;
          row_max[r] = m_new;
          row_sum[r] = row_sum[r] * alpha + tile_sum;
        }
      }
      __syncthreads();

      // Only the run's rows take this tile's values: the others' p is 0 here, but 0 x a NaN or
      // Inf in this sequence's values is NaN, and one request's broken values must not reach
      // another's output.
#pragma unroll
      for (int i = 0; i < PREFILL_MAX_PAIRS; ++i) {
        const int idx = tid + i * PREFILL_THREADS;
        const int r = idx / half;
        if (idx < npairs && r >= seg_begin && r < seg_end) {
          const int d = (idx - r * half) * 2;
          const float alpha = row_alpha[r];
          float2 a = make_float2(acc[i].x * alpha, acc[i].y * alpha);
          const float* pr = sc + r * S_STRIDE;
          for (int j = 0; j < n; ++j) {
            const float pj = pr[j];
            const float2 v =
                __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(vs + j * stride + d));
            a.x += pj * v.x;
            a.y += pj * v.y;
          }
          acc[i] = a;
        }
      }
    }
    seg_begin = seg_end;
  }
  __syncthreads();  // row_sum of the last tile, also when no tile ran for some rows

#pragma unroll
  for (int i = 0; i < PREFILL_MAX_PAIRS; ++i) {
    const int idx = tid + i * PREFILL_THREADS;
    if (idx < npairs) {
      const int r = idx / half, d = (idx - r * half) * 2;
      if (r < rows) {
        // A row that saw no key (position outside the cache) is defined as zero.
        const float l = row_sum[r];
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        bf16* out = p.out + (static_cast<int64_t>(q0 + r) * p.num_heads + head) * hd + d;
        *reinterpret_cast<__nv_bfloat162*>(out) =
            __floats2bfloat162_rn(acc[i].x * inv, acc[i].y * inv);
      }
    }
  }
}

__global__ void __launch_bounds__(PREFILL_THREADS)
    prefill_attention_kernel(PrefillAttentionParams p) {
  extern __shared__ __align__(16) unsigned char prefill_smem[];
  pdl_wait();
  pdl_launch_dependents();
  prefill_attention_block(p, blockIdx.x, blockIdx.y, prefill_smem);
}

}  // namespace

cudaError_t preload_prefill_attention_kernel() {
  return preload_kernel(prefill_attention_kernel);
}

cudaError_t launch_prefill_attention(const PrefillAttentionParams& p) {
  if (p.t < 0 || p.num_heads <= 0 || p.num_kv_heads <= 0 || p.num_heads % p.num_kv_heads != 0 ||
      p.head_dim <= 0 || p.head_dim % 8 != 0 || p.head_dim > ATTN_MAX_HEAD_DIM || p.max_seq <= 0 ||
      p.num_heads > 65535)
    return cudaErrorInvalidValue;
  if (p.t == 0) return cudaSuccess;
  if (!p.q || !p.k_cache || !p.v_cache || !p.slots || !p.positions || !p.out)
    return cudaErrorInvalidValue;
  if (!aligned16(p.q) || !aligned16(p.k_cache) || !aligned16(p.v_cache) || !aligned16(p.out))
    return cudaErrorInvalidValue;
  if (!kv_pages_valid(p.kv, p.max_seq)) return cudaErrorInvalidValue;
  const size_t smem = prefill_smem_bytes(p.head_dim);
  cudaError_t err = allow_smem(prefill_attention_kernel, smem);
  if (err != cudaSuccess) return err;
  return launch_kernel(prefill_attention_kernel, dim3(ceil_div(p.t, PREFILL_BQ), p.num_heads),
                       dim3(PREFILL_THREADS), smem, p.launch, p);
}

}  // namespace megaops
