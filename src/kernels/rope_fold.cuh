// qkv_rope folded into the decode attention that consumes it (the third fold of the PDL chain,
// after kernels/norm_fold.cuh and kernels/act_fold.cuh): instead of qkv_rope writing q and the
// newest k / v rows to the cache and attention reading them, the attention kernel reads the fp32
// qkv rows (the QKV matmul's output) after its wait and forms, with exactly qkv_rope's arithmetic
// (kernels/qkv_rope_row.cuh, shared; one warp per head, qkv_rope's lane mapping):
//   - its query head's q (norm + RoPE), rounded to bf16 as qkv_rope writes q_out;
//   - the k (norm + RoPE) and v of its kv head for each row of the launch whose (slot, position)
//     falls in its chunk of keys, rounded to bf16 as qkv_rope writes them to the cache, and used
//     for that key instead of the cache row (a decode step: each row's own newest key; a graph
//     prefill replay may hold several rows of one sequence, whose keys this launch computes);
// and one CTA per (row, kv head) — the first query head of the group, in the split whose chunk
// holds the row's position (split 0 when it is not attended) — writes the row's k / v into the
// cache for later steps (none when the position is outside [0, max_seq), as qkv_rope). Every
// other key is read from the cache as unfolded, the first round of them before the wait (they are
// settled then: decode_attention_fast in kernels/attention.cu says why), with the norm and RoPE
// constants, so that their round trips overlap the QKV matmul. So the folded step computes the same
// bits as qkv_rope followed by the unfolded attention: the same bf16 values enter the same
// arithmetic.
//
// Only the per-query-head warp-parallel kernel folds (the path of batches 1-2 with 2-8 query
// heads per kv head and head_dim <= 128: every preset's decode at batch 1-2);
// decode_attention_can_fold_rope (kernels/attention.cuh) says where, and the launchers return
// cudaErrorNotSupported for a fold elsewhere. Rows of one launch must write distinct (slot,
// position) pairs (qkv_rope's own result is a race otherwise).
//
// What it measured (one H200, the PDL chain at batch 1, ms/token): with the first round of cached
// keys loaded after the wait (as first written) the fold bought nothing on qwen3-0.6b (0.778-0.782
// vs 0.773-0.778 unfolded) and 1% on llama3.2-1b (0.892-0.893 vs 0.901-0.913): the prologue sat on
// the path in place of qkv_rope. With those loads and the constants issued before the wait:
// qwen3-0.6b 0.757-0.758, llama3.2-1b 0.877-0.878, llama3.1-8b 4.382 (4.409 with the loads after
// the wait), qwen3-8b 4.564 (4.589). docs/perf-notes.md, "qkv_rope folded into attention", gives
// the runs.
#pragma once

#include "kernels/common.cuh"
#include "kernels/qkv_rope.cuh"

namespace megaops {

// Rows of one folded launch at most (DecodeAttentionParams::b): each CTA keeps a k and a v row of
// each in shared memory.
constexpr int ROPE_FOLD_MAX_ROWS = 2;
// Largest head_dim the fold takes (the per-query-head kernel's 8- and 16-lane key slots).
constexpr int ROPE_FOLD_MAX_HEAD_DIM = 128;

struct RopeFold {
  // [b, (num_heads + 2 * num_kv_heads) * head_dim] fp32, q | k | v per row, 8-byte aligned (as
  // QkvRopeParams::qkv_f32). Null = no fold (q and the cache are read as given).
  const float* qkv = nullptr;
  const int32_t* positions = nullptr;  // [b]: each row's position (RoPE angle, cache row)
  const bf16* q_norm = nullptr;        // [head_dim] or null (Qwen3's per-head norms)
  const bf16* k_norm = nullptr;        // [head_dim] or null
  const float* inv_freq = nullptr;     // [head_dim / 2]
  // The caches the newest rows are written to: DecodeAttentionParams::k_cache / v_cache, writable.
  bf16* k_cache = nullptr;
  bf16* v_cache = nullptr;
  float eps = 1e-6f;  // for the q/k norms

  __host__ __device__ bool on() const { return qkv != nullptr; }
};

// The fold of the qkv_rope launch p (fp32 input) into the attention after it.
inline RopeFold rope_fold(const QkvRopeParams& p) {
  RopeFold f;
  f.qkv = p.qkv_f32;
  f.positions = p.positions;
  f.q_norm = p.q_norm;
  f.k_norm = p.k_norm;
  f.inv_freq = p.inv_freq;
  f.k_cache = p.k_cache;
  f.v_cache = p.v_cache;
  f.eps = p.eps;
  return f;
}

}  // namespace megaops
