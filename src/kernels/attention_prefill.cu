// Causal prefill attention on tensor cores (see attention_prefill.cuh for the contract).
//
// Napkin floor: causal FLOPs 4 * T^2 * H * d / 2; llama3.1-8b at T = 4096 (H = 32, d = 128) is
// 137 GFLOP a layer, 0.17 ms at the 797 TFLOP/s cuBLAS ceiling. mma.sync cannot reach that
// ceiling on Hopper (wgmma's rate is about twice mma.sync's); FlashAttention-2 on mma.sync runs
// at 350-400 TFLOP/s on H100, which is what this kernel aims at.
//
// Shared-memory traffic bounds it: per 64-key tile a warp reads the whole K and V tiles (2 * 64 *
// d * 2 bytes) for 2 * 2 * 16 * 64 * d FLOPs, 16 FLOP/byte; at 128 bytes/clock/SM that caps the
// SM near 2048 FLOP/clock, about half its wgmma rate.
#include <cmath>
#include <cstdint>

#include "kernels/attention_prefill.cuh"

namespace megaops {

namespace {

constexpr int BK = PREFILL_FLASH_BK;
constexpr float FLASH_LOG2E = 1.4426950408889634f;

// CTAs an SM the register cap is set for: at head_dim 128 shared memory allows two 4-warp CTAs
// (80 KB each) or one 8-warp CTA (96 KB), and registers (~180 a thread) the same; at 64, three
// 4-warp CTAs by registers (~150), and two 8-warp ones under a cap of 128 (ptxas: 44 bytes of
// spills).
constexpr int flash_min_blocks(int hd, int warps) {
  return hd == 128 ? (warps == 4 ? 2 : 1) : (warps == 4 ? 3 : 2);
}

// Q [WARPS * 16][HD], then K and V [2][BK][HD] each (two stages), all bf16.
template <int HD, int WARPS>
constexpr size_t flash_smem_bytes() {
  return sizeof(bf16) * HD * (WARPS * 16 + 4 * BK);
}

// Element offset of 16-byte chunk c of row r in a [rows][HD] bf16 tile. ldmatrix reads one
// 16-byte chunk from each of 8 consecutive rows; rows are 128 or 256 bytes, so unswizzled those 8
// chunks would sit in the same 4 banks (8-way conflict). XOR-ing the chunk index with r % 8 puts
// them in 8 different bank groups.
template <int HD>
__device__ __forceinline__ int swz(int r, int c) {
  return r * HD + ((c ^ (r & 7)) << 3);
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, bypassing L1; with valid false the destination is zero-filled and
// nothing is read (src must still be a mapped address).
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, bool valid) {
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
__device__ __forceinline__ void cp_async_wait_all() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// d += a (16x16, row) * b (16x8, col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a bf16 pair, the first in the low half (the lower column of an mma fragment).
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// 2^x on the SFU; 2^-inf = +0, which the masking relies on.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// Keys [key0, key0 + BK) of (slot, kv_head) into one K / V stage; keys past key_last are
// zero-filled, never read (they may be another sequence's rows, or unwritten NaN). Contiguous:
// `base` is the kv head's offset in the slot's first row; PAGED: in row 0, and each key's row
// comes through the slot's block table (`seq`).
template <int HD, int THREADS, bool PAGED>
__device__ __forceinline__ void load_kv_stage(const PrefillAttentionParams& p, int64_t base,
                                              const KvSeqRows<PAGED>& seq, int key0, int key_last,
                                              bf16* ks, bf16* vs) {
  constexpr int CHUNKS = HD / 8;
  const int64_t row_stride = static_cast<int64_t>(p.num_kv_heads) * HD;
#pragma unroll
  for (int i = threadIdx.x; i < BK * CHUNKS; i += THREADS) {
    const int r = i / CHUNKS, c = i % CHUNKS;
    const bool valid = key0 + r <= key_last;
    int64_t off = 0;
    if constexpr (PAGED)
      off = valid ? base + seq.row(key0 + r) * row_stride + c * 8 : 0;
    else
      off = valid ? base + (key0 + r) * row_stride + c * 8 : 0;
    cp_async_16(smem_u32(ks + swz<HD>(r, c)), p.k_cache + off, valid);
    cp_async_16(smem_u32(vs + swz<HD>(r, c)), p.v_cache + off, valid);
  }
}

// Stages the block's query rows: each row's slot and position (-1 past t) into row_slot /
// row_pos, and Q [BQ][HD] into qs (rows past t zero-filled). Returns once every thread sees them.
template <int HD, int BQ, int THREADS>
__device__ __forceinline__ void flash_load_q_tile(const PrefillAttentionParams& p, int q0, int head,
                                                  int rows, bf16* qs, int* row_slot, int* row_pos) {
  constexpr int CHUNKS = HD / 8;
  const int tid = threadIdx.x;
  if (tid < BQ) {
    const bool valid = tid < rows;
    row_slot[tid] = valid ? p.slots[q0 + tid] : -1;
    row_pos[tid] = valid ? p.positions[q0 + tid] : -1;
  }
  for (int i = tid; i < BQ * CHUNKS; i += THREADS) {
    const int r = i / CHUNKS, c = i % CHUNKS;
    const bool valid = r < rows;
    const int64_t off =
        valid ? (static_cast<int64_t>(q0 + r) * p.num_heads + head) * HD + c * 8 : 0;
    cp_async_16(smem_u32(qs + swz<HD>(r, c)), p.q + off, valid);
  }
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();
}

// The warp's 16 query rows of the Q tile qs as mma A fragments.
template <int HD>
__device__ __forceinline__ void flash_load_q_fragments(uint32_t (&qf)[HD / 16][4], const bf16* qs,
                                                       int warp, int lane) {
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk) {
    const int r = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
    ldmatrix_x4(qf[kk], smem_u32(qs + swz<HD>(r, kk * 2 + (lane >> 4))));
  }
}

// A run of the block's rows that share one slot, and what this lane and its warp see of it.
struct FlashRun {
  int slot;
  int end;                 // one past the run's last row
  int key_last;            // last key any row of the run sees (clamped to the cache)
  int lim_lo, lim_hi;      // last visible key of this lane's rows (-1: none in this run)
  int warp_min, warp_max;  // of lim_lo / lim_hi over the warp
};

// The run that starts at row begin; every thread derives the same run from shared memory.
__device__ __forceinline__ FlashRun flash_find_run(const int* row_slot, const int* row_pos,
                                                   int begin, int rows, int max_seq, int warp,
                                                   int lane) {
  // This lane's rows, derived here rather than passed in: as parameters the compiler orders the
  // range tests below differently and the kernel's SASS changes.
  const int r_lo = warp * 16 + (lane >> 2), r_hi = r_lo + 8;
  const int slot = row_slot[begin];
  int end = begin + 1;
  int key_last = row_pos[begin];
  while (end < rows && row_slot[end] == slot) key_last = max(key_last, row_pos[end++]);
  key_last = min(key_last, max_seq - 1);
  const int lim_lo = r_lo >= begin && r_lo < end ? min(row_pos[r_lo], key_last) : -1;
  const int lim_hi = r_hi >= begin && r_hi < end ? min(row_pos[r_hi], key_last) : -1;
  int warp_min = min(lim_lo, lim_hi), warp_max = max(lim_lo, lim_hi);
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    warp_min = min(warp_min, __shfl_xor_sync(0xffffffffu, warp_min, off));
    warp_max = max(warp_max, __shfl_xor_sync(0xffffffffu, warp_max, off));
  }
  return {slot, end, key_last, lim_lo, lim_hi, warp_min, warp_max};
}

// S = Q K^T for the warp's 16 rows and the BK keys of tile kt.
template <int HD>
__device__ __forceinline__ void flash_scores(float (&s)[BK / 8][4],
                                             const uint32_t (&qf)[HD / 16][4], const bf16* kt,
                                             int lane) {
  constexpr int NT_S = BK / 8;    // score n-tiles (8 keys each)
  constexpr int KS_QK = HD / 16;  // k-steps of Q K^T
#pragma unroll
  for (int i = 0; i < NT_S; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.f;
#pragma unroll
  for (int kk = 0; kk < KS_QK; ++kk) {
#pragma unroll
    for (int np = 0; np < NT_S / 2; ++np) {
      uint32_t b[4];
      const int key = np * 16 + (lane & 7) + (lane >> 4) * 8;
      ldmatrix_x4(b, smem_u32(kt + swz<HD>(key, kk * 2 + ((lane >> 3) & 1))));
      mma_bf16(s[2 * np], qf[kk], b[0], b[1]);
      mma_bf16(s[2 * np + 1], qf[kk], b[2], b[3]);
    }
  }
}

// Online softmax over one tile of scores s (keys key0 ...): s becomes P = 2^(s - new max), and
// the running max m, the lane's partial row sums l and the output o are rescaled to the new max.
template <int HD>
__device__ __forceinline__ void flash_online_softmax(float (&s)[BK / 8][4], float (&o)[HD / 8][4],
                                                     float& m_lo, float& m_hi, float& l_lo,
                                                     float& l_hi, const FlashRun& run, int key0,
                                                     int lane, float score_scale) {
  constexpr int NT_S = BK / 8;
  constexpr int NT_O = HD / 8;
  // Scale into base 2; mask only tiles that reach past some row's last key.
  const bool need_mask = key0 + BK - 1 > run.warp_min;
  float tmax_lo = -INFINITY, tmax_hi = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < NT_S; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int key = key0 + nt * 8 + (lane & 3) * 2 + (e & 1);
      const bool masked = need_mask && key > (e < 2 ? run.lim_lo : run.lim_hi);
      s[nt][e] = masked ? -INFINITY : s[nt][e] * score_scale;
    }
    tmax_lo = fmaxf(tmax_lo, fmaxf(s[nt][0], s[nt][1]));
    tmax_hi = fmaxf(tmax_hi, fmaxf(s[nt][2], s[nt][3]));
  }
  const float mnew_lo = fmaxf(m_lo, quad_max(tmax_lo));
  const float mnew_hi = fmaxf(m_hi, quad_max(tmax_hi));
  // A row that has seen no key keeps max -inf; subtract 0 instead so no -inf - -inf forms.
  const float base_lo = mnew_lo == -INFINITY ? 0.f : mnew_lo;
  const float base_hi = mnew_hi == -INFINITY ? 0.f : mnew_hi;
  const float alpha_lo = fast_exp2(m_lo - base_lo), alpha_hi = fast_exp2(m_hi - base_hi);
  m_lo = mnew_lo;
  m_hi = mnew_hi;
  float sum_lo = 0.f, sum_hi = 0.f;
#pragma unroll
  for (int nt = 0; nt < NT_S; ++nt) {
    s[nt][0] = fast_exp2(s[nt][0] - base_lo);
    s[nt][1] = fast_exp2(s[nt][1] - base_lo);
    s[nt][2] = fast_exp2(s[nt][2] - base_hi);
    s[nt][3] = fast_exp2(s[nt][3] - base_hi);
    sum_lo += s[nt][0] + s[nt][1];
    sum_hi += s[nt][2] + s[nt][3];
  }
  l_lo = l_lo * alpha_lo + sum_lo;
  l_hi = l_hi * alpha_hi + sum_hi;
#pragma unroll
  for (int nt = 0; nt < NT_O; ++nt) {
    o[nt][0] *= alpha_lo;
    o[nt][1] *= alpha_lo;
    o[nt][2] *= alpha_hi;
    o[nt][3] *= alpha_hi;
  }
}

// O += P V for V tile vt: the score accumulators of key n-tiles 2j, 2j+1 are the A fragment of
// k-step j.
template <int HD>
__device__ __forceinline__ void flash_accumulate_pv(float (&o)[HD / 8][4],
                                                    const float (&s)[BK / 8][4], const bf16* vt,
                                                    int lane) {
  constexpr int NT_O = HD / 8;
  constexpr int KS_PV = BK / 16;  // k-steps of P V
#pragma unroll
  for (int j = 0; j < KS_PV; ++j) {
    const uint32_t a[4] = {pack_bf16(s[2 * j][0], s[2 * j][1]), pack_bf16(s[2 * j][2], s[2 * j][3]),
                           pack_bf16(s[2 * j + 1][0], s[2 * j + 1][1]),
                           pack_bf16(s[2 * j + 1][2], s[2 * j + 1][3])};
#pragma unroll
    for (int dp = 0; dp < NT_O / 2; ++dp) {
      uint32_t b[4];
      const int key = j * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
      ldmatrix_x4_trans(b, smem_u32(vt + swz<HD>(key, dp * 2 + (lane >> 4))));
      mma_bf16(o[2 * dp], a, b[0], b[1]);
      mma_bf16(o[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// Normalises the warp's 16 rows of o by their row sums, stages them in the warp's own rows of the
// Q tile qs (read only by this warp's ldmatrix before), then stores them as 16-byte rows. A row
// that saw no key (position outside the cache) is zero.
template <int HD>
__device__ __forceinline__ void flash_store_output(const PrefillAttentionParams& p,
                                                   const float (&o)[HD / 8][4], float l_lo,
                                                   float l_hi, bf16* qs, int q0, int head, int rows,
                                                   int warp, int lane, int r_lo, int r_hi) {
  constexpr int CHUNKS = HD / 8;
  constexpr int NT_O = HD / 8;
  l_lo = quad_sum(l_lo);
  l_hi = quad_sum(l_hi);
  const float inv_lo = l_lo > 0.f ? 1.f / l_lo : 0.f, inv_hi = l_hi > 0.f ? 1.f / l_hi : 0.f;
#pragma unroll
  for (int nt = 0; nt < NT_O; ++nt) {
    const int col = (lane & 3) * 2;
    *reinterpret_cast<uint32_t*>(qs + swz<HD>(r_lo, nt) + col) =
        pack_bf16(o[nt][0] * inv_lo, o[nt][1] * inv_lo);
    *reinterpret_cast<uint32_t*>(qs + swz<HD>(r_hi, nt) + col) =
        pack_bf16(o[nt][2] * inv_hi, o[nt][3] * inv_hi);
  }
  __syncwarp();
#pragma unroll
  for (int i = lane; i < 16 * CHUNKS; i += 32) {
    const int r = warp * 16 + i / CHUNKS, c = i % CHUNKS;
    if (r < rows)
      *reinterpret_cast<uint4*>(p.out + (static_cast<int64_t>(q0 + r) * p.num_heads + head) * HD +
                                c * 8) = *reinterpret_cast<const uint4*>(qs + swz<HD>(r, c));
  }
}

// Grid: (heads, query blocks). Heads vary fastest, so the query heads of one kv head run side by
// side and share its K / V tiles in L2. Thread (warp w, lane) holds, as mma accumulator fragments,
// rows w * 16 + lane / 4 (lo) and + 8 (hi) of the block.
template <int HD, int WARPS, bool PAGED>
__global__ void __launch_bounds__(WARPS * 32, flash_min_blocks(HD, WARPS))
    prefill_attention_flash_kernel(PrefillAttentionParams p) {
  constexpr int BQ = WARPS * 16;  // 16 query rows a warp (one mma M tile)
  constexpr int THREADS = WARPS * 32;
  constexpr int NT_S = BK / 8;    // score n-tiles (8 keys each)
  constexpr int NT_O = HD / 8;    // output n-tiles (8 dims each)
  constexpr int KS_QK = HD / 16;  // k-steps of Q K^T
  constexpr int KS_PV = BK / 16;  // k-steps of P V
  extern __shared__ __align__(128) unsigned char flash_smem[];
  bf16* qs = reinterpret_cast<bf16*>(flash_smem);
  bf16* ks = qs + BQ * HD;
  bf16* vs = ks + 2 * BK * HD;
  __shared__ int row_slot[BQ], row_pos[BQ];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  // Latest query blocks first: under the causal mask they have the longest key loops, so the
  // grid's tail is made of short blocks.
  const int q0 = (gridDim.y - 1 - blockIdx.y) * BQ;
  const int head = blockIdx.x;
  const int kv_head = head / (p.num_heads / p.num_kv_heads);
  const int rows = min(BQ, p.t - q0);

  pdl_wait();  // q and the cache rows come from the kernels before this one
  pdl_launch_dependents();
  flash_load_q_tile<HD, BQ, THREADS>(p, q0, head, rows, qs, row_slot, row_pos);

  uint32_t qf[KS_QK][4];  // the warp's 16 query rows as A fragments, for the whole kernel
  flash_load_q_fragments<HD>(qf, qs, warp, lane);

  const int r_lo = warp * 16 + (lane >> 2), r_hi = r_lo + 8;
  const float score_scale = p.scale * FLASH_LOG2E;
  float o[NT_O][4];
#pragma unroll
  for (int i = 0; i < NT_O; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.f, l_hi = 0.f;  // l: this lane's columns

  int seg_begin = 0;
  while (seg_begin < rows) {
    const FlashRun run = flash_find_run(row_slot, row_pos, seg_begin, rows, p.max_seq, warp, lane);
    const KvSeqRows<PAGED> seq(p.kv, run.slot, p.max_seq);
    const int64_t base =
        (PAGED ? 0 : static_cast<int64_t>(run.slot) * p.max_seq * p.num_kv_heads * HD) +
        static_cast<int64_t>(kv_head) * HD;
    const int n_tiles = run.key_last < 0 ? 0 : run.key_last / BK + 1;

    __syncthreads();  // the previous run's last tile has been read by every warp
    if (n_tiles > 0) load_kv_stage<HD, THREADS, PAGED>(p, base, seq, 0, run.key_last, ks, vs);
    cp_async_commit();
    for (int it = 0; it < n_tiles; ++it) {
      cp_async_wait_all();
      // Tile it is visible to all; every warp is done with tile it - 1, whose stage the next
      // load overwrites.
      __syncthreads();
      if (it + 1 < n_tiles)
        load_kv_stage<HD, THREADS, PAGED>(p, base, seq, (it + 1) * BK, run.key_last,
                                          ks + ((it + 1) & 1) * BK * HD,
                                          vs + ((it + 1) & 1) * BK * HD);
      cp_async_commit();
      const int key0 = it * BK;
      if (key0 > run.warp_max) continue;  // warp-uniform: no row of this warp sees these keys
      const bf16* kt = ks + (it & 1) * BK * HD;
      const bf16* vt = vs + (it & 1) * BK * HD;

      float s[NT_S][4];
      flash_scores<HD>(s, qf, kt, lane);
      flash_online_softmax<HD>(s, o, m_lo, m_hi, l_lo, l_hi, run, key0, lane, score_scale);
      // O += P V.
      if (run.warp_min >= 0) {
        // Every row of the warp is in this run.
        flash_accumulate_pv<HD>(o, s, vt, lane);
      } else {
        // Some rows of the warp see no key of this run: rows of another sequence (lim -1), or
        // padding past t. Their P is 0 here, but the mma still multiplies it by this run's V, and
        // 0 x NaN or Inf is NaN, so one sequence's non-finite values would reach another's
        // output: those rows keep their O from before each mma, by select. The run's rows take
        // the same mma sequence as flash_accumulate_pv, so their sums are bit-identical to a warp
        // that holds only this run. Only warps that straddle a sequence boundary (or the end of
        // t) come here. Within a run, keys past a row's own position meet P = 0 the same way: a
        // non-finite value in a sequence's V can reach that sequence's earlier rows, never
        // another sequence's.
        // This loop stays in the kernel: moved into a helper it compiles to the same instructions
        // with another register assignment and schedule for the whole kernel.
        const bool keep_lo = run.lim_lo < 0, keep_hi = run.lim_hi < 0;
#pragma unroll
        for (int j = 0; j < KS_PV; ++j) {
          const uint32_t a[4] = {pack_bf16(s[2 * j][0], s[2 * j][1]),
                                 pack_bf16(s[2 * j][2], s[2 * j][3]),
                                 pack_bf16(s[2 * j + 1][0], s[2 * j + 1][1]),
                                 pack_bf16(s[2 * j + 1][2], s[2 * j + 1][3])};
#pragma unroll
          for (int dp = 0; dp < NT_O / 2; ++dp) {
            uint32_t b[4];
            const int key = j * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
            ldmatrix_x4_trans(b, smem_u32(vt + swz<HD>(key, dp * 2 + (lane >> 4))));
            float before[2][4];
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
              for (int e = 0; e < 4; ++e) before[h][e] = o[2 * dp + h][e];
            mma_bf16(o[2 * dp], a, b[0], b[1]);
            mma_bf16(o[2 * dp + 1], a, b[2], b[3]);
#pragma unroll
            for (int h = 0; h < 2; ++h)
#pragma unroll
              for (int e = 0; e < 4; ++e)
                o[2 * dp + h][e] = (e < 2 ? keep_lo : keep_hi) ? before[h][e] : o[2 * dp + h][e];
          }
        }
      }
    }
    seg_begin = run.end;
  }

  flash_store_output<HD>(p, o, l_lo, l_hi, qs, q0, head, rows, warp, lane, r_lo, r_hi);
}

template <int HD, int WARPS, bool PAGED>
cudaError_t launch_flash_paging(const PrefillAttentionParams& p) {
  constexpr size_t smem = flash_smem_bytes<HD, WARPS>();
  if (const cudaError_t err =
          cudaFuncSetAttribute(prefill_attention_flash_kernel<HD, WARPS, PAGED>,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      err != cudaSuccess)
    return err;
  return launch_kernel(prefill_attention_flash_kernel<HD, WARPS, PAGED>,
                       dim3(p.num_heads, ceil_div(p.t, WARPS * 16)), dim3(WARPS * 32), smem,
                       p.launch, p);
}

template <int HD, int WARPS>
cudaError_t launch_flash(const PrefillAttentionParams& p) {
  return p.kv.paged() ? launch_flash_paging<HD, WARPS, true>(p)
                      : launch_flash_paging<HD, WARPS, false>(p);
}

bool aligned16(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
}

}  // namespace

bool prefill_attention_flash_supported(const PrefillAttentionParams& p) {
  return p.head_dim == 64 || p.head_dim == 128;
}

int prefill_attention_flash_block_q(const PrefillAttentionParams&) {
  return 64;
}

cudaError_t launch_prefill_attention_flash(const PrefillAttentionParams& p, int block_q) {
  if (!prefill_attention_flash_supported(p)) return launch_prefill_attention(p);
  if (block_q == 0) block_q = prefill_attention_flash_block_q(p);
  if (p.t < 0 || p.num_heads <= 0 || p.num_kv_heads <= 0 || p.num_heads % p.num_kv_heads != 0 ||
      p.max_seq <= 0 || (block_q != 64 && block_q != 128) || ceil_div(p.t, block_q) > 65535)
    return cudaErrorInvalidValue;
  if (p.t == 0) return cudaSuccess;
  if (!p.q || !p.k_cache || !p.v_cache || !p.slots || !p.positions || !p.out)
    return cudaErrorInvalidValue;
  if (!aligned16(p.q) || !aligned16(p.k_cache) || !aligned16(p.v_cache) || !aligned16(p.out) ||
      !kv_pages_valid(p.kv, p.max_seq))
    return cudaErrorInvalidValue;
  if (p.head_dim == 64) return block_q == 64 ? launch_flash<64, 4>(p) : launch_flash<64, 8>(p);
  return block_q == 64 ? launch_flash<128, 4>(p) : launch_flash<128, 8>(p);
}

template <bool PAGED>
cudaError_t preload_flash_paging() {
  for (cudaError_t err : {preload_kernel(prefill_attention_flash_kernel<64, 4, PAGED>),
                          preload_kernel(prefill_attention_flash_kernel<64, 8, PAGED>),
                          preload_kernel(prefill_attention_flash_kernel<128, 4, PAGED>),
                          preload_kernel(prefill_attention_flash_kernel<128, 8, PAGED>)})
    if (err != cudaSuccess) return err;
  return cudaSuccess;
}

cudaError_t preload_prefill_attention_flash_kernels() {
  const cudaError_t err = preload_flash_paging<false>();
  return err != cudaSuccess ? err : preload_flash_paging<true>();
}

}  // namespace megaops
