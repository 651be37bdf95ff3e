// GPU decode and prefill attention against ref::attention_decode / ref::attention_prefill on the
// same bf16 inputs. Cache rows outside each sequence's visible range hold NaN poison, so reading
// past ctx_len (or past a query's own position) turns the output into NaN and fails the test. The
// models' heads at the contexts and batches of the op table (tests/ops/op_harness_test.cu:
// decode_attention_*, prefill_attention_* rows) run there; here, the sweeps over the kernels'
// variants and context boundaries, long contexts and more heads than SMs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "gpu_test_util.h"
#include "kernels/attention.cuh"
#include "kernels/attention_test_util.h"
#include "reference/ops.h"

namespace megaops {
namespace {

using testing::DeviceBuffer;
using testing::KvCache;
using testing::PrefillSeq;
using testing::random_q;
using testing::shape_name;
using Shape = testing::AttentionShape;

// fused: the split kernel merges its own partials through done counters (the executor's path);
// otherwise the separate combine kernel does (the overlap step's path).
void run_decode(const Shape& s, const std::vector<int>& ctx_lens, int max_seq, bool pdl,
                std::mt19937_64& rng, int spare_slots = 2, bool fused = true) {
  const int b = static_cast<int>(ctx_lens.size()), hd = s.head_dim;
  SCOPED_TRACE(shape_name(s) + " b=" + std::to_string(b) + " max_seq=" + std::to_string(max_seq) +
               " ctx0=" + std::to_string(ctx_lens[0]) + " pdl=" + std::to_string(pdl) +
               " fused=" + std::to_string(fused));
  // Slots: a shuffled subset of a larger cache, so the slot indirection is exercised.
  const int max_batch = b + spare_slots;
  std::vector<int32_t> slots(max_batch);
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(b);
  KvCache cache(max_batch, max_seq, s);
  for (int i = 0; i < b; ++i) cache.fill(slots[i], max_seq, ctx_lens[i], rng);

  const size_t q_n = static_cast<size_t>(b) * s.num_heads * hd;
  const auto q_bits = random_q(q_n, rng);
  const auto q = testing::from_bf16_bits(q_bits);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  DeviceBuffer<uint16_t> d_q(q_n), d_k(cache.k_bits.size()), d_v(cache.v_bits.size()), d_out(q_n);
  DeviceBuffer<int32_t> d_slots(b), d_ctx(b);
  const size_t ws_n = decode_attention_workspace_floats(b, s.num_heads, hd, max_seq);
  DeviceBuffer<float> d_ws(ws_n);
  DeviceBuffer<uint32_t> d_done(static_cast<size_t>(b) * s.num_kv_heads);
  d_done.upload(std::vector<uint32_t>(static_cast<size_t>(b) * s.num_kv_heads, 0u));
  d_q.upload(q_bits);
  d_k.upload(cache.k_bits);
  d_v.upload(cache.v_bits);
  d_slots.upload(slots);
  d_ctx.upload(std::vector<int32_t>(ctx_lens.begin(), ctx_lens.end()));
  d_ws.poison();

  DecodeAttentionParams p;
  p.q = reinterpret_cast<const bf16*>(d_q.ptr);
  p.k_cache = reinterpret_cast<const bf16*>(d_k.ptr);
  p.v_cache = reinterpret_cast<const bf16*>(d_v.ptr);
  p.slots = d_slots.ptr;
  p.ctx_lens = d_ctx.ptr;
  p.out = reinterpret_cast<bf16*>(d_out.ptr);
  p.workspace = ws_n ? d_ws.ptr : nullptr;
  p.done_counters = fused ? d_done.ptr : nullptr;
  p.b = b;
  p.num_heads = s.num_heads;
  p.num_kv_heads = s.num_kv_heads;
  p.head_dim = hd;
  p.max_seq = max_seq;
  p.scale = scale;
  p.launch.pdl = pdl;

  std::vector<float> expect(q_n);
  for (int i = 0; i < b; ++i) {
    const size_t at = static_cast<size_t>(i) * s.num_heads * hd;
    ref::attention_decode(q.data() + at, cache.k_slot(slots[i], max_seq),
                          cache.v_slot(slots[i], max_seq), ctx_lens[i], s.num_heads, s.num_kv_heads,
                          hd, scale, expect.data() + at);
  }
  // Twice: the second run reuses the (now dirty) workspace, as every replayed decode step does.
  for (int rep = 0; rep < 2; ++rep) {
    d_out.poison();
    ASSERT_EQ(launch_decode_attention(p), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto got = testing::from_bf16_bits(d_out.download());
    // Tolerance: bf16 output vs fp32 reference (DESIGN.md), per sequence so that a short one is
    // not hidden by long ones.
    for (int i = 0; i < b; ++i) {
      const size_t at = static_cast<size_t>(i) * s.num_heads * hd;
      ASSERT_LE(testing::rel_error(got.data() + at, expect.data() + at,
                                   static_cast<size_t>(s.num_heads) * hd),
                2e-2)
          << "sequence " << i << " ctx " << ctx_lens[i] << " rep " << rep;
    }
    // The merge counters must be back at zero for the next launch.
    for (uint32_t c : d_done.download()) ASSERT_EQ(c, 0u) << "rep " << rep;
  }
}

TEST(DecodeAttention, MatchesReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed());
  // Groups 1..8 take the warp-parallel kernel (head_dim 32..256 over 8, 16 and 32 lanes per key,
  // group 5 and 3 padded to 8 and 4), groups 16 and 64 the tiled one.
  const Shape shapes[] = {{1, 1, 64},   {8, 2, 128},  {32, 4, 128}, {8, 8, 256}, {4, 1, 32},
                          {16, 2, 256}, {40, 8, 128}, {6, 2, 96},   {64, 4, 64}, {64, 1, 128}};
  for (const auto& s : shapes)
    for (bool pdl : {false, true}) {
      // 128 / 129: one round of the per-query-head kernel (head_dim 64 and 128) and a key past
      // it; 256 / 257: the longest unsplit context and the first split one.
      for (int ctx : {1, 7, 100, 128, 129, 200, 256, 257, 1000, 5000})
        run_decode(s, {ctx}, 5000, pdl, rng);
      run_decode(s, {1, 1000, 5000}, 8192, pdl, rng);
      run_decode(s, {257, 64, 300}, 8192, pdl, rng);  // just past one chunk, exact tile multiple
      run_decode(s, {3000, 130, 1}, 8192, pdl, rng, 2, /*fused=*/false);
    }
}

// A short case list for the compute sanitizers (racecheck runs MatchesReference for too long): each
// decode kernel variant once, with one and several splits, fused and separate merges.
TEST(DecodeAttention, SanitizerSubset) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 3);
  for (const Shape& s : {Shape{8, 2, 128}, Shape{32, 4, 64}, Shape{40, 8, 128}, Shape{64, 4, 64}}) {
    run_decode(s, {1, 100, 300}, 512, true, rng);
    run_decode(s, {300, 7}, 512, false, rng, 2, /*fused=*/false);
  }
  // More query heads than SMs: a CTA per kv head instead of one per query head.
  std::vector<int> ctx(40);
  for (size_t i = 0; i < ctx.size(); ++i) ctx[i] = 1 + static_cast<int>(i * 37 % 300);
  run_decode({32, 8, 128}, ctx, 512, true, rng);
}

// Which kernel the tests above exercise: at batch 1 a CTA per query head (G times the grid of a
// G = 1 shape with the same kv heads), at 40 sequences (more query heads than SMs) a CTA per kv
// head (the same grid).
TEST(DecodeAttention, SmallBatchesTakeACtaPerQueryHead) {
  MEGAOPS_REQUIRE_GPU();
  // The footprint query checks the pointers but reads nothing through them.
  DeviceBuffer<uint16_t> any(64);
  DeviceBuffer<int32_t> ints(64);
  DeviceBuffer<float> ws(64);
  auto split_ctas = [&](int heads, int b) {
    DecodeAttentionParams p;
    p.q = p.k_cache = p.v_cache = reinterpret_cast<const bf16*>(any.ptr);
    p.out = reinterpret_cast<bf16*>(any.ptr);
    p.slots = p.ctx_lens = ints.ptr;
    p.workspace = ws.ptr;
    p.b = b;
    p.num_heads = heads;
    p.num_kv_heads = 8;
    p.head_dim = 128;
    p.max_seq = 512;
    KernelFootprint split, combine;
    EXPECT_EQ(decode_attention_footprint(p, &split, &combine), cudaSuccess);
    return split.ctas;
  };
  EXPECT_EQ(split_ctas(32, 1), 4 * split_ctas(8, 1));
  EXPECT_EQ(split_ctas(32, 40), split_ctas(8, 40));
}

TEST(DecodeAttention, LargeBatch) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 1);
  std::uniform_int_distribution<int> len(1, 1000);
  // More query heads than SMs: a CTA per kv head and its G query heads (G = 1, 2, 4, 8); the
  // small batches of MatchesReference take a CTA per query head. The presets' heads (32 / 8 and
  // 16 / 8 at head_dim 128, 32 / 8 at 64) run at batch 33 and 64 in the op table
  // (tests/ops/op_harness_test.cu: decode_attention_* rows).
  for (const Shape& s : {Shape{8, 2, 64}, Shape{4, 4, 64}, Shape{64, 8, 128}}) {
    std::vector<int> ctx(64);
    for (auto& c : ctx) c = len(rng);
    run_decode(s, ctx, 1024, true, rng);
    std::vector<int> small(64);
    for (auto& c : small) c = 1 + len(rng) % 300;
    run_decode(s, small, 1024, false, rng);
  }
}

TEST(DecodeAttention, LongContext) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 2);
  // No spare slots: a 128K-position cache is large on the host side too.
  run_decode({16, 2, 128}, {32768}, 131072, true, rng, 0);
  run_decode({8, 1, 128}, {20000, 3}, 65536, false, rng, 0);
}

TEST(DecodeAttention, RejectsBadShapes) {
  MEGAOPS_REQUIRE_GPU();
  DecodeAttentionParams p;
  p.b = 1;
  p.num_heads = 8;
  p.num_kv_heads = 3;  // does not divide num_heads
  p.head_dim = 128;
  p.max_seq = 16;
  EXPECT_EQ(launch_decode_attention(p), cudaErrorInvalidValue);
  p.num_kv_heads = 2;
  p.head_dim = 100;  // not a multiple of 8
  EXPECT_EQ(launch_decode_attention(p), cudaErrorInvalidValue);
}

void run_prefill(const Shape& s, const std::vector<PrefillSeq>& seqs, int max_batch, int max_seq,
                 bool pdl, std::mt19937_64& rng) {
  SCOPED_TRACE(testing::describe(s, seqs, pdl));
  const testing::PrefillInputs in(s, seqs, max_batch, max_seq, rng);
  testing::PrefillDeviceInputs dev(in, pdl);
  dev.out.poison();
  ASSERT_EQ(launch_prefill_attention(dev.params), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got = testing::from_bf16_bits(dev.out.download());

  for (size_t i = 0; i < seqs.size(); ++i) {
    const std::vector<float> expect = in.reference(i);
    // Tolerance: bf16 output vs fp32 reference (DESIGN.md), per sequence.
    EXPECT_LE(testing::rel_error(got.data() + in.first_token(i) * in.token(), expect.data(),
                                 expect.size()),
              2e-2)
        << "slot " << seqs[i].slot;
  }
}

TEST(PrefillAttention, MatchesReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 3);
  const Shape shapes[] = {{8, 2, 128}, {4, 4, 64}, {32, 4, 128}, {16, 2, 256}, {4, 1, 32}};
  for (const auto& s : shapes)
    for (bool pdl : {false, true})
      for (int n_q : {1, 17, 300})
        for (int pos0 : {0, 5, 1000}) run_prefill(s, {{1, pos0, n_q}}, 2, 2048, pdl, rng);
}

TEST(PrefillAttention, SeveralSequencesInOneLaunch) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 4);
  for (const Shape& s : {Shape{8, 2, 128}, Shape{8, 8, 64}, Shape{16, 2, 256}}) {
    // A 32-token block straddles the two sequences; slots out of order.
    run_prefill(s, {{2, 0, 17}, {0, 40, 30}}, 3, 512, true, rng);
    // Three tiny sequences inside one block, one of them a single decode-like token.
    run_prefill(s, {{3, 10, 2}, {1, 0, 3}, {0, 99, 1}}, 4, 512, false, rng);
    run_prefill(s, {{0, 0, 300}, {1, 200, 45}, {2, 7, 64}}, 3, 512, true, rng);
  }
}

}  // namespace
}  // namespace megaops
