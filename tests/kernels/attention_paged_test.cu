// Decode attention through block tables (kernels/kv_pages.cuh): every kernel variant (warp-parallel
// per kv head and per query head, the tiled one above 8 query heads per kv head; one chunk and
// several; merged in the kernel or by the combine kernel) on a cache paged at random (each
// sequence's blocks shuffled over a larger pool, shared with no other sequence, the rest of the
// pool NaN poison) against the oracle that reads the cache through the same table
// (ref::attention_decode_paged), and against the same launch on the contiguous cache, bit for
// bit. Block sizes 16 and 32, contexts 1, 17, 1000 and 8191 among others; outputs poisoned before
// each launch. Also: fixed split counts and CTA forms make a row's output independent of its
// batch; the qkv_rope fold writing and reading through the table; the launcher's checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <tuple>

#include "gpu_test_util.h"
#include "kernels/attention.cuh"
#include "kernels/attention_test_util.h"
#include "kernels/paged_test_util.h"
#include "kernels/qkv_rope.cuh"
#include "kernels/rope_fold.cuh"
#include "reference/ops.h"

namespace megaops {
namespace {

using testing::DeviceBuffer;
using testing::KvCache;
using testing::RandomPaging;
using Shape = testing::AttentionShape;

// One decode launch's variant: the merge, PDL, and the fixed choices (0 / -1: by the batch).
struct DecodeVariant {
  bool fused = true;
  bool pdl = false;
  int splits = 0;
  int per_head = -1;
};

std::string variant_name(const DecodeVariant& v) {
  return "fused=" + std::to_string(v.fused) + " pdl=" + std::to_string(v.pdl) +
         " splits=" + std::to_string(v.splits) + " per_head=" + std::to_string(v.per_head);
}

// The inputs of one decode launch, on the host: b sequences at shuffled slots of a contiguous
// cache [b + 2, max_seq] (NaN past each context), their queries, and a random paging of it.
struct DecodeCase {
  Shape s;
  std::vector<int> ctx;
  int max_seq;
  std::vector<int32_t> slots;
  KvCache cache;
  RandomPaging paging;
  std::vector<uint16_t> q_bits;

  DecodeCase(const Shape& shape, std::vector<int> ctx_lens, int max_seq_, int block_size,
             std::mt19937_64& rng)
      : s(shape),
        ctx(std::move(ctx_lens)),
        max_seq(max_seq_),
        cache(static_cast<int>(ctx.size()) + 2, max_seq_, shape),
        paging(static_cast<int>(ctx.size()) + 2, max_seq_, block_size, 3, rng) {
    const int b = static_cast<int>(ctx.size());
    slots.resize(b + 2);
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), rng);
    slots.resize(b);
    for (int i = 0; i < b; ++i) cache.fill(slots[i], max_seq, ctx[i], rng);
    q_bits = testing::random_q(static_cast<size_t>(b) * s.num_heads * s.head_dim, rng);
  }
  int b() const { return static_cast<int>(ctx.size()); }
};

// Runs the launch on the contiguous cache (paged false) or its paging; returns the output bits.
std::vector<uint16_t> launch_decode(const DecodeCase& c, const DecodeVariant& v, bool paged,
                                    const std::vector<int32_t>* slots = nullptr,
                                    const std::vector<uint16_t>* q_bits = nullptr) {
  const std::vector<int32_t>& sl = slots ? *slots : c.slots;
  const std::vector<uint16_t>& qb = q_bits ? *q_bits : c.q_bits;
  const int b = static_cast<int>(sl.size()), hd = c.s.head_dim;
  std::vector<int32_t> ctx(b);
  for (int i = 0; i < b; ++i)
    ctx[i] = c.ctx[std::find(c.slots.begin(), c.slots.end(), sl[i]) - c.slots.begin()];
  const size_t row = c.cache.row;
  const std::vector<uint16_t> k =
      paged ? c.paging.to_paged(c.cache.k_bits, row, uint16_t{0xffff}) : c.cache.k_bits;
  const std::vector<uint16_t> vv =
      paged ? c.paging.to_paged(c.cache.v_bits, row, uint16_t{0xffff}) : c.cache.v_bits;
  DeviceBuffer<uint16_t> d_q(qb.size()), d_k(k.size()), d_v(vv.size()), d_out(qb.size());
  DeviceBuffer<int32_t> d_slots(b), d_ctx(b), d_table(c.paging.table.size());
  const size_t ws_n = decode_attention_workspace_floats(b, c.s.num_heads, hd, c.max_seq, v.splits);
  DeviceBuffer<float> d_ws(ws_n);
  DeviceBuffer<uint32_t> d_done(static_cast<size_t>(b) * c.s.num_kv_heads);
  d_done.upload(std::vector<uint32_t>(static_cast<size_t>(b) * c.s.num_kv_heads, 0u));
  d_q.upload(qb);
  d_k.upload(k);
  d_v.upload(vv);
  d_slots.upload(sl);
  d_ctx.upload(ctx);
  d_table.upload(c.paging.table);
  d_ws.poison();
  d_out.poison();
  DecodeAttentionParams p;
  p.q = reinterpret_cast<const bf16*>(d_q.ptr);
  p.k_cache = reinterpret_cast<const bf16*>(d_k.ptr);
  p.v_cache = reinterpret_cast<const bf16*>(d_v.ptr);
  p.slots = d_slots.ptr;
  p.ctx_lens = d_ctx.ptr;
  if (paged) p.kv = c.paging.pages(d_table.ptr);
  p.out = reinterpret_cast<bf16*>(d_out.ptr);
  p.workspace = ws_n ? d_ws.ptr : nullptr;
  p.done_counters = v.fused ? d_done.ptr : nullptr;
  p.b = b;
  p.num_heads = c.s.num_heads;
  p.num_kv_heads = c.s.num_kv_heads;
  p.head_dim = hd;
  p.max_seq = c.max_seq;
  p.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  p.splits = v.splits;
  p.per_head = v.per_head;
  p.launch.pdl = v.pdl;
  EXPECT_EQ(launch_decode_attention(p), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (uint32_t x : d_done.download()) EXPECT_EQ(x, 0u) << "merge counters left non-zero";
  return d_out.download();
}

// The paged launch against the oracle reading through the table (2e-2, DESIGN.md's bf16 bound,
// per sequence) and against the contiguous launch (the same bits).
void check_decode(const Shape& s, const std::vector<int>& ctx, int max_seq, int block_size,
                  const DecodeVariant& v, std::mt19937_64& rng) {
  SCOPED_TRACE(testing::shape_name(s) + " b=" + std::to_string(ctx.size()) +
               " ctx0=" + std::to_string(ctx[0]) + " max_seq=" + std::to_string(max_seq) +
               " block_size=" + std::to_string(block_size) + " " + variant_name(v));
  const DecodeCase c(s, ctx, max_seq, block_size, rng);
  const std::vector<uint16_t> paged = launch_decode(c, v, true);
  const std::vector<uint16_t> flat = launch_decode(c, v, false);
  const std::vector<float> kp =
      testing::from_bf16_bits(c.paging.to_paged(c.cache.k_bits, c.cache.row, uint16_t{0xffff}));
  const std::vector<float> vp =
      testing::from_bf16_bits(c.paging.to_paged(c.cache.v_bits, c.cache.row, uint16_t{0xffff}));
  const std::vector<float> q = testing::from_bf16_bits(c.q_bits);
  const std::vector<float> got = testing::from_bf16_bits(paged);
  const size_t per = static_cast<size_t>(s.num_heads) * s.head_dim;
  for (int i = 0; i < c.b(); ++i) {
    std::vector<float> expect(per);
    ref::attention_decode_paged(q.data() + i * per, kp.data(), vp.data(),
                                c.paging.slot_table(c.slots[i]), block_size, ctx[i], s.num_heads,
                                s.num_kv_heads, s.head_dim,
                                1.0f / std::sqrt(static_cast<float>(s.head_dim)), expect.data());
    ASSERT_LE(testing::rel_error(got.data() + i * per, expect.data(), per), 2e-2)
        << "sequence " << i << " ctx " << ctx[i];
  }
  EXPECT_TRUE(paged == flat) << "the paged launch differs from the contiguous one";
}

const Shape SHAPES[] = {{32, 8, 64}, {16, 8, 128}, {32, 8, 128}, {8, 8, 128},
                        {6, 2, 96},  {8, 8, 256},  {64, 4, 64},  {40, 8, 128}};

TEST(DecodeAttentionPaged, MatchesReferenceAndContiguous) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 41);
  for (const Shape& s : SHAPES)
    for (int bs : {16, 32}) {
      DecodeVariant v;
      v.pdl = bs == 32;
      for (int ctx : {1, 17, 1000}) check_decode(s, {ctx}, 1024, bs, v, rng);
      check_decode(s, {17, 1, 1000, 129}, 1024, bs, v, rng);
      v.fused = false;
      check_decode(s, {1000, 300, 1}, 1024, bs, v, rng);
    }
}

// The longest contexts: 8191 keys (a block short of 8192, the last block partly used; many
// splits, each of several rounds), with a block size that does not divide max_seq.
TEST(DecodeAttentionPaged, LongContexts) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 42);
  for (const Shape& s : {Shape{32, 8, 128}, Shape{32, 8, 64}, Shape{64, 4, 64}})
    for (int bs : {16, 32}) {
      check_decode(s, {8191}, 8191, bs, DecodeVariant{}, rng);
      check_decode(s, {8191, 17, 4000}, 8200, bs, DecodeVariant{true, true, 0, -1}, rng);
    }
}

// Both CTA forms of the warp-parallel kernel, forced, and fixed split counts.
TEST(DecodeAttentionPaged, ForcedFormsAndSplits) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 43);
  for (const Shape& s : {Shape{32, 8, 128}, Shape{16, 8, 128}, Shape{32, 8, 64}})
    for (int per_head : {0, 1})
      for (int splits : {1, 7, 33}) {
        DecodeVariant v;
        v.per_head = per_head;
        v.splits = splits;
        check_decode(s, {1, 17, 1000, 257}, 1024, 16, v, rng);
      }
}

// With the split count and the CTA form fixed, a row's output bits do not depend on the other
// rows of its launch: each row of a batch of 32 equals the same row launched alone.
TEST(DecodeAttentionPaged, FixedChoicesAreBatchInvariant) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 44);
  for (const Shape& s : {Shape{32, 8, 128}, Shape{32, 8, 64}}) {
    std::vector<int> ctx(32);
    std::uniform_int_distribution<int> len(1, 2000);
    for (int& x : ctx) x = len(rng);
    ctx[3] = 1;
    ctx[5] = 2000;
    const DecodeCase c(s, ctx, 2048, 16, rng);
    DecodeVariant v;
    v.splits = decode_attention_default_splits(1, s.num_kv_heads, 2048);
    v.per_head = 0;
    const std::vector<uint16_t> all = launch_decode(c, v, true);
    const size_t per = static_cast<size_t>(s.num_heads) * s.head_dim;
    for (int i = 0; i < c.b(); ++i) {
      const std::vector<int32_t> one_slot = {c.slots[i]};
      const std::vector<uint16_t> one_q(c.q_bits.begin() + i * per,
                                        c.q_bits.begin() + (i + 1) * per);
      const std::vector<uint16_t> alone = launch_decode(c, v, true, &one_slot, &one_q);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + i * per))
          << testing::shape_name(s) << ": row " << i << " (ctx " << ctx[i]
          << ") alone differs from the same row in a batch of 32";
    }
  }
}

// qkv_rope folded into the attention (the PDL chain at batch 1-2) on a paged cache against
// qkv_rope then the unfolded attention on the contiguous cache: the same output bits, the same
// cache rows (read back through the table), nothing written outside the table. Rows: (slot,
// position); a row attends keys [0, position]; two rows of one sequence at consecutive positions
// (a graph prefill replay) included. Keys below each slot's first written position are random,
// the rest poison.
void check_fold(int heads, int kv_heads, int hd, const std::vector<std::pair<int, int>>& rows,
                int max_seq, int block_size, std::mt19937_64& rng) {
  SCOPED_TRACE("H=" + std::to_string(heads) + " KV=" + std::to_string(kv_heads) +
               " hd=" + std::to_string(hd) + " pos0=" + std::to_string(rows[0].second) + " rows=" +
               std::to_string(rows.size()) + " block_size=" + std::to_string(block_size));
  const int b = static_cast<int>(rows.size()), slots = 3;
  const size_t kv_row = static_cast<size_t>(kv_heads) * hd;
  const RandomPaging paging(slots, max_seq, block_size, 2, rng);
  std::vector<uint16_t> k_bits(static_cast<size_t>(slots) * max_seq * kv_row, 0xffff);
  std::vector<uint16_t> v_bits(k_bits.size(), 0xffff);
  for (int s = 0; s < slots; ++s) {
    int settled = max_seq;
    for (const auto& [slot, pos] : rows)
      if (slot == s) settled = std::min(settled, pos);
    if (settled == max_seq) continue;
    const size_t at = static_cast<size_t>(s) * max_seq * kv_row, n = settled * kv_row;
    const auto kb = testing::to_bf16_bits(testing::random_floats(n, -1, 1, rng));
    const auto vb = testing::to_bf16_bits(testing::random_floats(n, -1, 1, rng));
    std::copy(kb.begin(), kb.end(), k_bits.begin() + at);
    std::copy(vb.begin(), vb.end(), v_bits.begin() + at);
  }
  const auto qkv =
      testing::random_floats(static_cast<size_t>(b) * (heads + 2 * kv_heads) * hd, -2, 2, rng);
  std::vector<float> inv(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv[i] = static_cast<float>(std::pow(500000.0, -2.0 * i / hd));
  std::vector<int32_t> sl(b), pos(b), ctx(b);
  for (int i = 0; i < b; ++i) sl[i] = rows[i].first, pos[i] = rows[i].second, ctx[i] = pos[i] + 1;
  DeviceBuffer<float> d_qkv(qkv.size()), d_inv(inv.size());
  DeviceBuffer<int32_t> d_sl(b), d_pos(b), d_ctx(b), d_table(paging.table.size());
  d_qkv.upload(qkv);
  d_inv.upload(inv);
  d_sl.upload(sl);
  d_pos.upload(pos);
  d_ctx.upload(ctx);
  d_table.upload(paging.table);
  std::vector<uint16_t> outs[2], ks[2], vs[2];
  for (int paged = 0; paged < 2; ++paged) {
    const std::vector<uint16_t> k0 =
        paged ? paging.to_paged(k_bits, kv_row, uint16_t{0xffff}) : k_bits;
    const std::vector<uint16_t> v0 =
        paged ? paging.to_paged(v_bits, kv_row, uint16_t{0xffff}) : v_bits;
    DeviceBuffer<uint16_t> d_k(k0.size()), d_v(v0.size());
    DeviceBuffer<uint16_t> d_q(static_cast<size_t>(b) * heads * hd), d_out(d_q.n);
    const size_t ws_n = decode_attention_workspace_floats(b, heads, hd, max_seq);
    DeviceBuffer<float> d_ws(ws_n);
    DeviceBuffer<uint32_t> d_done(static_cast<size_t>(b) * kv_heads);
    d_done.upload(std::vector<uint32_t>(d_done.n, 0u));
    d_k.upload(k0);
    d_v.upload(v0);
    d_q.poison();
    d_out.poison();
    QkvRopeParams rp;
    rp.qkv_f32 = d_qkv.ptr;
    rp.positions = d_pos.ptr;
    rp.slots = d_sl.ptr;
    rp.inv_freq = d_inv.ptr;
    rp.q_out = reinterpret_cast<bf16*>(d_q.ptr);
    rp.k_cache = reinterpret_cast<bf16*>(d_k.ptr);
    rp.v_cache = reinterpret_cast<bf16*>(d_v.ptr);
    if (paged) rp.kv = paging.pages(d_table.ptr);
    rp.t = b;
    rp.num_heads = heads;
    rp.num_kv_heads = kv_heads;
    rp.head_dim = hd;
    rp.max_seq = max_seq;
    DecodeAttentionParams p;
    p.q = paged ? nullptr : rp.q_out;
    p.k_cache = rp.k_cache;
    p.v_cache = rp.v_cache;
    p.slots = d_sl.ptr;
    p.ctx_lens = d_ctx.ptr;
    p.kv = rp.kv;
    p.out = reinterpret_cast<bf16*>(d_out.ptr);
    p.workspace = ws_n ? d_ws.ptr : nullptr;
    p.done_counters = d_done.ptr;
    p.b = b;
    p.num_heads = heads;
    p.num_kv_heads = kv_heads;
    p.head_dim = hd;
    p.max_seq = max_seq;
    p.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    ASSERT_TRUE(decode_attention_can_fold_rope(p));
    if (paged) {
      p.rope = rope_fold(rp);
    } else {
      ASSERT_EQ(launch_qkv_rope(rp), cudaSuccess);
    }
    ASSERT_EQ(launch_decode_attention(p), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    outs[paged] = d_out.download();
    ks[paged] = d_k.download();
    vs[paged] = d_v.download();
  }
  for (uint16_t x : outs[0]) ASSERT_TRUE(std::isfinite(bf16_to_float(x))) << "unfolded output NaN";
  EXPECT_TRUE(outs[1] == outs[0]) << "the folded paged output differs";
  EXPECT_TRUE(paging.to_contiguous(ks[1], kv_row) == ks[0]) << "k cache differs";
  EXPECT_TRUE(paging.to_contiguous(vs[1], kv_row) == vs[0]) << "v cache differs";
  EXPECT_TRUE(paging.unmapped_untouched(ks[1], kv_row, uint16_t{0xffff}));
  EXPECT_TRUE(paging.unmapped_untouched(vs[1], kv_row, uint16_t{0xffff}));
}

TEST(DecodeAttentionPaged, RopeFoldMatchesQkvRopeThenAttention) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 45);
  for (int bs : {16, 32})
    for (const auto& [heads, kv, hd] : {std::tuple{32, 8, 64}, std::tuple{16, 8, 128}}) {
      for (int pos : {0, 16, 999}) check_fold(heads, kv, hd, {{1, pos}}, 1024, bs, rng);
      check_fold(heads, kv, hd, {{2, 300}, {0, 31}}, 1024, bs, rng);
      check_fold(heads, kv, hd, {{1, 255}, {1, 256}}, 1024, bs, rng);  // one sequence, two rows
    }
}

TEST(DecodeAttentionPaged, RejectsBadPaging) {
  MEGAOPS_REQUIRE_GPU();
  DeviceBuffer<uint16_t> any(1 << 12);
  DeviceBuffer<int32_t> ints(64);
  DeviceBuffer<float> ws(1 << 16);
  DecodeAttentionParams p;
  p.q = p.k_cache = p.v_cache = reinterpret_cast<const bf16*>(any.ptr);
  p.out = reinterpret_cast<bf16*>(any.ptr);
  p.slots = p.ctx_lens = ints.ptr;
  p.workspace = ws.ptr;
  p.b = 1;
  p.num_heads = 8;
  p.num_kv_heads = 2;
  p.head_dim = 64;
  p.max_seq = 100;
  p.kv = kv_pages(ints.ptr, 16, 6);  // 6 * 16 = 96 < 100 positions: the table is too short
  EXPECT_EQ(launch_decode_attention(p), cudaErrorInvalidValue);
  p.kv = kv_pages(ints.ptr, 16, 7);
  p.splits = decode_attention_max_splits() + 1;
  EXPECT_EQ(launch_decode_attention(p), cudaErrorInvalidValue);
  p.splits = 0;
  p.per_head = 2;
  EXPECT_EQ(launch_decode_attention(p), cudaErrorInvalidValue);
  p.per_head = 1;
  p.num_heads = 64;
  p.num_kv_heads = 2;  // G = 32: only the tiled kernel, which has no per-query-head form
  EXPECT_EQ(launch_decode_attention(p), cudaErrorInvalidValue);
  EXPECT_FALSE(kv_block_size_ok(24));
  EXPECT_FALSE(kv_block_size_ok(0));
  EXPECT_TRUE(kv_block_size_ok(16) && kv_block_size_ok(32) && kv_block_size_ok(1));
}

}  // namespace
}  // namespace megaops
