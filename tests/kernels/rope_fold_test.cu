// Decode attention with qkv_rope folded into it (kernels/rope_fold.cuh) against qkv_rope followed
// by the unfolded attention on the same inputs: the attention output and the whole K/V caches (the
// rows the step writes, and no other) must be equal bit for bit. The unfolded pair has its CPU
// oracles (the op table's qkv_rope_* and decode_attention_* rows, tests/ops/op_harness_test.cu,
// which also holds the fold to the oracle: rope_fold_attention_* rows); this test needs none: the
// fold's contract is the same bits. Cache rows at and after each row's position start poisoned
// (NaN), as does the output, so a key read before it is written, a row not written or an output
// not written fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/attention.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/rope_fold.cuh"

namespace megaops {
namespace {

using testing::DeviceBuffer;

struct FoldShape {
  int num_heads, num_kv_heads, head_dim;
};

// The presets' decode heads: llama3.2-1b (32 / 8, 64), qwen3-0.6b (16 / 8, 128), llama3.1-8b and
// qwen3-8b (32 / 8, 128); the Qwen3 ones with q/k norms, every shape is run with and without.
constexpr FoldShape PRESET_SHAPES[] = {{32, 8, 64}, {16, 8, 128}, {32, 8, 128}};

// One row of a launch: its cache slot and position; it attends keys [0, ctx).
struct FoldRow {
  int slot, pos, ctx;
};

std::string describe(const FoldShape& s, const std::vector<FoldRow>& rows, bool norm,
                     bool merge_in_kernel) {
  std::string d = "H=" + std::to_string(s.num_heads) + " KV=" + std::to_string(s.num_kv_heads) +
                  " hd=" + std::to_string(s.head_dim) + " norm=" + std::to_string(norm) +
                  " merge_in_kernel=" + std::to_string(merge_in_kernel) + " rows";
  for (const FoldRow& r : rows)
    d += " (slot " + std::to_string(r.slot) + " pos " + std::to_string(r.pos) + " ctx " +
         std::to_string(r.ctx) + ")";
  return d;
}

bool all_finite(const std::vector<uint16_t>& bits) {
  return std::all_of(bits.begin(), bits.end(),
                     [](uint16_t b) { return std::isfinite(bf16_to_float(b)); });
}

// merge_in_kernel: the split kernel merges its own partials through done counters (the
// executor's path); otherwise the combine kernel does.
void run_fold_case(const FoldShape& s, const std::vector<FoldRow>& rows, int max_seq, bool norm,
                   bool merge_in_kernel, std::mt19937_64& rng) {
  SCOPED_TRACE(describe(s, rows, norm, merge_in_kernel));
  const int b = static_cast<int>(rows.size()), hd = s.head_dim, max_batch = 3;
  const size_t kv_row = static_cast<size_t>(s.num_kv_heads) * hd;
  const size_t cache_n = static_cast<size_t>(max_batch) * max_seq * kv_row;

  // The cache: keys below the first position any row of the launch writes in a slot are random,
  // everything else poison.
  std::vector<uint16_t> k_bits(cache_n, 0xffff), v_bits(cache_n, 0xffff);
  for (int slot = 0; slot < max_batch; ++slot) {
    int settled = -1;
    for (const FoldRow& r : rows)
      if (r.slot == slot) settled = settled < 0 ? r.pos : std::min(settled, r.pos);
    if (settled <= 0) continue;
    const size_t at = static_cast<size_t>(slot) * max_seq * kv_row, n = settled * kv_row;
    const auto kb = testing::to_bf16_bits(testing::random_floats(n, -1, 1, rng));
    const auto vb = testing::to_bf16_bits(testing::random_floats(n, -1, 1, rng));
    std::copy(kb.begin(), kb.end(), k_bits.begin() + at);
    std::copy(vb.begin(), vb.end(), v_bits.begin() + at);
  }
  const int heads_per_token = s.num_heads + 2 * s.num_kv_heads;
  const auto qkv =
      testing::random_floats(static_cast<size_t>(b) * heads_per_token * hd, -2, 2, rng);
  std::vector<float> inv_freq(hd / 2);
  for (int i = 0; i < hd / 2; ++i)
    inv_freq[i] = static_cast<float>(1.0 / std::pow(500000.0, 2.0 * i / hd));
  const auto qn = testing::to_bf16_bits(testing::random_floats(hd, 0.5f, 1.5f, rng));
  const auto kn = testing::to_bf16_bits(testing::random_floats(hd, 0.5f, 1.5f, rng));
  std::vector<int32_t> slots(b), positions(b), ctx(b);
  for (int i = 0; i < b; ++i)
    slots[i] = rows[i].slot, positions[i] = rows[i].pos, ctx[i] = rows[i].ctx;

  DeviceBuffer<float> d_qkv(qkv.size()), d_inv(inv_freq.size());
  DeviceBuffer<uint16_t> d_qn(hd), d_kn(hd);
  DeviceBuffer<int32_t> d_slots(b), d_pos(b), d_ctx(b);
  d_qkv.upload(qkv);
  d_inv.upload(inv_freq);
  d_qn.upload(qn);
  d_kn.upload(kn);
  d_slots.upload(slots);
  d_pos.upload(positions);
  d_ctx.upload(ctx);
  const size_t ws_n = decode_attention_workspace_floats(b, s.num_heads, hd, max_seq);

  // [0]: qkv_rope, then attention; [1] and [2]: the fold, twice (the second launch finds the
  // workspace dirty and the merge counters back at zero, as every replayed step does).
  std::vector<uint16_t> outs[3], ks[3], vs[3];
  for (int run = 0; run < 3; ++run) {
    const bool fold = run > 0;
    DeviceBuffer<uint16_t> d_k(cache_n), d_v(cache_n);
    DeviceBuffer<uint16_t> d_q(static_cast<size_t>(b) * s.num_heads * hd);
    DeviceBuffer<uint16_t> d_out(static_cast<size_t>(b) * s.num_heads * hd);
    DeviceBuffer<float> d_ws(ws_n);
    DeviceBuffer<uint32_t> d_done(static_cast<size_t>(b) * s.num_kv_heads);
    d_k.upload(k_bits);
    d_v.upload(v_bits);
    d_q.poison();
    d_out.poison();
    d_ws.poison();
    d_done.upload(std::vector<uint32_t>(static_cast<size_t>(b) * s.num_kv_heads, 0u));

    QkvRopeParams rp;
    rp.qkv_f32 = d_qkv.ptr;
    rp.positions = d_pos.ptr;
    rp.slots = d_slots.ptr;
    rp.q_norm = norm ? reinterpret_cast<const bf16*>(d_qn.ptr) : nullptr;
    rp.k_norm = norm ? reinterpret_cast<const bf16*>(d_kn.ptr) : nullptr;
    rp.inv_freq = d_inv.ptr;
    rp.q_out = reinterpret_cast<bf16*>(d_q.ptr);
    rp.k_cache = reinterpret_cast<bf16*>(d_k.ptr);
    rp.v_cache = reinterpret_cast<bf16*>(d_v.ptr);
    rp.t = b;
    rp.num_heads = s.num_heads;
    rp.num_kv_heads = s.num_kv_heads;
    rp.head_dim = hd;
    rp.max_seq = max_seq;
    rp.eps = 1e-6f;

    DecodeAttentionParams p;
    p.q = fold ? nullptr : rp.q_out;  // the fold must not read q
    p.k_cache = rp.k_cache;
    p.v_cache = rp.v_cache;
    p.slots = d_slots.ptr;
    p.ctx_lens = d_ctx.ptr;
    p.out = reinterpret_cast<bf16*>(d_out.ptr);
    p.workspace = ws_n ? d_ws.ptr : nullptr;
    p.done_counters = merge_in_kernel ? d_done.ptr : nullptr;
    p.b = b;
    p.num_heads = s.num_heads;
    p.num_kv_heads = s.num_kv_heads;
    p.head_dim = hd;
    p.max_seq = max_seq;
    p.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    ASSERT_TRUE(decode_attention_can_fold_rope(p));
    if (fold) {
      p.rope = rope_fold(rp);
      for (int rep = 0; rep < run; ++rep) {
        if (rep > 0) {  // the second launch: the cache as before the step, the output poisoned
          d_k.upload(k_bits);
          d_v.upload(v_bits);
          d_out.poison();
        }
        ASSERT_EQ(launch_decode_attention(p), cudaSuccess);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      }
    } else {
      ASSERT_EQ(launch_qkv_rope(rp), cudaSuccess);
      ASSERT_EQ(launch_decode_attention(p), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
    outs[run] = d_out.download();
    ks[run] = d_k.download();
    vs[run] = d_v.download();
    for (uint32_t c : d_done.download()) ASSERT_EQ(c, 0u) << "run " << run;
  }
  // Not a vacuous equality: the unfolded step attended only written keys and wrote every output.
  ASSERT_TRUE(all_finite(outs[0])) << "the unfolded attention's output holds NaN";
  for (int run = 1; run < 3; ++run) {
    EXPECT_TRUE(outs[run] == outs[0])
        << "attention output differs from the unfolded pair, run " << run;
    EXPECT_TRUE(ks[run] == ks[0]) << "k cache differs from the unfolded pair, run " << run;
    EXPECT_TRUE(vs[run] == vs[0]) << "v cache differs from the unfolded pair, run " << run;
  }
}

// Every preset shape, batch 1 and 2, with and without q/k norms, both merges: contexts of one key,
// two, one round of the per-query-head kernel less one, exactly one and one more (127, 128, 129;
// 128 keys a round at head_dim 64 and 128), three splits (300: the newest key in the last) and
// eight (1000); at batch 2 the second row in another slot with another context. A decode row's
// position is ctx - 1.
TEST(RopeFold, MatchesQkvRopeThenAttention) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 11);
  constexpr int MAX_SEQ = 1024;
  for (const FoldShape& s : PRESET_SHAPES)
    for (bool norm : {false, true})
      for (int ctx : {1, 2, 127, 128, 129, 300, 1000}) {
        const bool merge_in_kernel = ctx % 2 == 0;
        run_fold_case(s, {{1, ctx - 1, ctx}}, MAX_SEQ, norm, merge_in_kernel, rng);
        const int other = 1 + (ctx * 7 + 3) % 400;
        run_fold_case(s, {{2, ctx - 1, ctx}, {0, other - 1, other}}, MAX_SEQ, norm,
                      !merge_in_kernel, rng);
      }
}

// Two rows of one sequence at consecutive positions in one launch (a graph prefill replay): the
// second attends the first's key, which this launch computes (from the first row's qkv) and
// writes; also across a chunk boundary (keys 255 and 256: the second row's context splits, the
// first's does not) and in a long split context.
TEST(RopeFold, RowsOfOneSequenceInOneLaunch) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 12);
  for (const FoldShape& s : PRESET_SHAPES)
    for (bool norm : {false, true})
      for (int pos : {0, 127, 255, 700})
        for (bool merge_in_kernel : {true, false})
          run_fold_case(s, {{1, pos, pos + 1}, {1, pos + 1, pos + 2}}, 1024, norm, merge_in_kernel,
                        rng);
}

// decode_attention_can_fold_rope: the per-query-head kernel at batch 1-2 (the presets), nothing
// else; and a fold the path does not take is refused, as are rope params that do not describe
// this launch.
TEST(RopeFold, OnlyThePerQueryHeadPathFolds) {
  MEGAOPS_REQUIRE_GPU();
  auto params = [](int b, int heads, int kv_heads, int head_dim) {
    DecodeAttentionParams p;
    p.b = b;
    p.num_heads = heads;
    p.num_kv_heads = kv_heads;
    p.head_dim = head_dim;
    p.max_seq = 1024;
    return p;
  };
  for (const FoldShape& s : PRESET_SHAPES)
    for (int b : {1, 2}) {
      EXPECT_TRUE(
          decode_attention_can_fold_rope(params(b, s.num_heads, s.num_kv_heads, s.head_dim)))
          << s.num_heads << "/" << s.num_kv_heads << "/" << s.head_dim << " b " << b;
      EXPECT_FALSE(
          decode_attention_can_fold_rope(params(3, s.num_heads, s.num_kv_heads, s.head_dim)));
    }
  EXPECT_FALSE(decode_attention_can_fold_rope(params(1, 8, 8, 128)));    // G = 1: per kv head
  EXPECT_FALSE(decode_attention_can_fold_rope(params(1, 64, 4, 128)));   // G = 16: tiled kernel
  EXPECT_FALSE(decode_attention_can_fold_rope(params(1, 16, 2, 256)));   // head_dim 256
  EXPECT_FALSE(decode_attention_can_fold_rope(params(2, 128, 16, 64)));  // 256 heads > SMs
  DecodeAttentionParams capped = params(1, 32, 8, 128);
  capped.max_split_ctas = 8;  // an overlap budget below a CTA per query head
  EXPECT_FALSE(decode_attention_can_fold_rope(capped));

  DeviceBuffer<uint16_t> k(8 * 1024 * 128), v(8 * 1024 * 128), out(32 * 128);
  DeviceBuffer<int32_t> ints(4);
  DeviceBuffer<float> qkv(48 * 128), inv(64), ws(1 << 16);
  ints.upload({0, 0, 1, 1});
  DecodeAttentionParams p = params(1, 32, 8, 128);
  p.k_cache = reinterpret_cast<const bf16*>(k.ptr);
  p.v_cache = reinterpret_cast<const bf16*>(v.ptr);
  p.slots = ints.ptr;
  p.ctx_lens = ints.ptr + 2;
  p.out = reinterpret_cast<bf16*>(out.ptr);
  p.workspace = ws.ptr;
  p.rope.qkv = qkv.ptr;
  p.rope.positions = ints.ptr;
  p.rope.inv_freq = inv.ptr;
  p.rope.k_cache = reinterpret_cast<bf16*>(k.ptr);
  p.rope.v_cache = reinterpret_cast<bf16*>(k.ptr);  // not the attention's v cache
  EXPECT_EQ(launch_decode_attention(p), cudaErrorInvalidValue);
  p.rope.v_cache = reinterpret_cast<bf16*>(v.ptr);
  p.rope.qkv = qkv.ptr + 1;  // not 8-byte aligned
  EXPECT_EQ(launch_decode_attention(p), cudaErrorInvalidValue);
  p.rope.qkv = qkv.ptr;
  EXPECT_EQ(launch_decode_attention(p), cudaSuccess);
  p.max_split_ctas = 8;  // the per-kv-head kernel: no fold
  EXPECT_EQ(launch_decode_attention_split(p), cudaErrorNotSupported);
  KernelFootprint split, combine;
  EXPECT_EQ(decode_attention_footprint(p, &split, &combine), cudaErrorNotSupported);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace megaops
