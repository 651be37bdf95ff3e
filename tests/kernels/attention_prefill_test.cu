// The tensor-core prefill attention (kernels/attention_prefill.cuh) against ref::attention_prefill
// (fp32, CPU) on the same bf16 inputs: awkward lengths (1, 17, 111, 500), several sequences packed
// in one launch with boundaries inside a 64-token block, prompts that continue a cached prefix,
// GQA ratios 1, 4 and 8, head_dim 64 and 128 (and the forwarded head dims). Cache rows past each
// sequence's last position hold NaN, so a read past a query's visible keys fails the test; the
// output is poisoned with NaN before each launch, so an unwritten element fails it too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/attention_prefill.cuh"
#include "reference/ops.h"

namespace megaops {
namespace {

using testing::DeviceBuffer;

struct Shape {
  int num_heads, num_kv_heads, head_dim;
};

// One sequence of a launch: n_q tokens at positions [pos0, pos0 + n_q) of slot.
struct Seq {
  int slot, pos0, n_q;
};

std::string describe(const Shape& s, const std::vector<Seq>& seqs, bool pdl) {
  std::string name = "H=" + std::to_string(s.num_heads) + " KV=" + std::to_string(s.num_kv_heads) +
                     " hd=" + std::to_string(s.head_dim) + " pdl=" + std::to_string(pdl) + " seqs:";
  for (const Seq& q : seqs)
    name += " (slot " + std::to_string(q.slot) + ", p0 " + std::to_string(q.pos0) + ", n " +
            std::to_string(q.n_q) + ")";
  return name;
}

// Runs launch_prefill_attention_flash once for each query block (64 and 128 rows a CTA, and the
// default) on the same inputs and checks every sequence against the reference. Tolerance: bf16
// output (and P rounded to bf16 before P.V) against fp32, 2e-2 relative per sequence (DESIGN.md).
void run_case(const Shape& s, const std::vector<Seq>& seqs, int max_batch, int max_seq, bool pdl,
              std::mt19937_64& rng) {
  SCOPED_TRACE(describe(s, seqs, pdl));
  const int hd = s.head_dim;
  const size_t row = static_cast<size_t>(s.num_kv_heads) * hd;  // cache elements per position
  const size_t cache_n = static_cast<size_t>(max_batch) * max_seq * row;
  std::vector<uint16_t> k_bits(cache_n, 0xffff), v_bits(cache_n, 0xffff);  // NaN
  std::vector<float> k(cache_n, NAN), v(cache_n, NAN);
  std::vector<int32_t> slots, positions;
  for (const Seq& q : seqs) {
    const size_t at = static_cast<size_t>(q.slot) * max_seq * row,
                 n = static_cast<size_t>(q.pos0 + q.n_q) * row;
    const auto kb = testing::to_bf16_bits(testing::random_floats(n, -1, 1, rng));
    const auto vb = testing::to_bf16_bits(testing::random_floats(n, -1, 1, rng));
    std::copy(kb.begin(), kb.end(), k_bits.begin() + at);
    std::copy(vb.begin(), vb.end(), v_bits.begin() + at);
    for (size_t i = 0; i < n; ++i)
      k[at + i] = bf16_to_float(kb[i]), v[at + i] = bf16_to_float(vb[i]);
    for (int i = 0; i < q.n_q; ++i) slots.push_back(q.slot), positions.push_back(q.pos0 + i);
  }
  const int t = static_cast<int>(slots.size());
  const size_t token = static_cast<size_t>(s.num_heads) * hd, q_n = t * token;
  // q in [-5, 5] against k in [-1, 1]: scores q.k / sqrt(hd) of standard deviation ~1.7, so the
  // softmax is neither flat nor one-hot.
  const auto q_bits = testing::to_bf16_bits(testing::random_floats(q_n, -5, 5, rng));
  const auto q = testing::from_bf16_bits(q_bits);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  DeviceBuffer<uint16_t> d_q(q_n), d_k(cache_n), d_v(cache_n), d_out(q_n);
  DeviceBuffer<int32_t> d_slots(t), d_pos(t);
  d_q.upload(q_bits);
  d_k.upload(k_bits);
  d_v.upload(v_bits);
  d_slots.upload(slots);
  d_pos.upload(positions);

  PrefillAttentionParams p;
  p.q = reinterpret_cast<const bf16*>(d_q.ptr);
  p.k_cache = reinterpret_cast<const bf16*>(d_k.ptr);
  p.v_cache = reinterpret_cast<const bf16*>(d_v.ptr);
  p.slots = d_slots.ptr;
  p.positions = d_pos.ptr;
  p.out = reinterpret_cast<bf16*>(d_out.ptr);
  p.t = t;
  p.num_heads = s.num_heads;
  p.num_kv_heads = s.num_kv_heads;
  p.head_dim = hd;
  p.max_seq = max_seq;
  p.scale = scale;
  p.launch.pdl = pdl;

  std::vector<float> expect(q_n);
  size_t at = 0;
  for (const Seq& sq : seqs) {
    const size_t slot_at = static_cast<size_t>(sq.slot) * max_seq * row;
    ref::attention_prefill(q.data() + at, k.data() + slot_at, v.data() + slot_at, sq.n_q, sq.pos0,
                           s.num_heads, s.num_kv_heads, hd, scale, expect.data() + at);
    at += sq.n_q * token;
  }
  for (int block_q : {64, 128, 0}) {
    SCOPED_TRACE("block_q " + std::to_string(block_q));
    d_out.poison();
    ASSERT_EQ(launch_prefill_attention_flash(p, block_q), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto got = testing::from_bf16_bits(d_out.download());
    at = 0;
    for (const Seq& sq : seqs) {
      const size_t n = sq.n_q * token;
      EXPECT_LE(testing::rel_error(got.data() + at, expect.data() + at, n), 2e-2)
          << "slot " << sq.slot;
      at += n;
    }
  }
}

// GQA ratios 1, 4 and 8 at both head dims the kernel takes, the 1B (32 / 8, 64) and 8B (32 / 8,
// 128) configurations among them.
const Shape FLASH_SHAPES[] = {{8, 8, 64},  {32, 8, 64},  {16, 2, 64},
                              {4, 4, 128}, {32, 8, 128}, {16, 2, 128}};

TEST(PrefillAttentionFlash, OneSequenceMatchesReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 11);
  for (const Shape& s : FLASH_SHAPES)
    for (int n_q : {1, 17, 111, 500})
      for (int pos0 : {0, 5, 300}) run_case(s, {{1, pos0, n_q}}, 2, 1024, pos0 == 5, rng);
}

TEST(PrefillAttentionFlash, PackedSequencesMatchReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 12);
  for (const Shape& s : FLASH_SHAPES) {
    // Boundaries inside 64-token blocks (17, 17 + 111 = 128, ...); slots out of order.
    run_case(s, {{2, 0, 17}, {0, 0, 111}, {3, 0, 1}, {1, 0, 500}}, 4, 600, true, rng);
    // A continued prompt (cached prefix), three tiny sequences inside one block, one of them a
    // single decode-like token.
    run_case(s, {{3, 10, 2}, {1, 0, 3}, {0, 99, 1}, {2, 200, 45}}, 4, 512, false, rng);
    // Several sequences of equal length, as a batched prefill packs them.
    run_case(s, {{0, 0, 100}, {1, 0, 100}, {2, 0, 100}}, 3, 128, true, rng);
  }
}

TEST(PrefillAttentionFlash, LongSequenceMatchesReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 13);
  // Many key tiles a block: the online softmax rescaling over 30+ tiles. Few heads keep the CPU
  // reference at a few GFLOP.
  run_case({8, 1, 128}, {{0, 0, 2000}}, 1, 2048, false, rng);
  run_case({4, 1, 64}, {{1, 37, 1900}}, 2, 2048, true, rng);
}

TEST(PrefillAttentionFlash, OtherHeadDimsForwardToTheScalarKernel) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 14);
  for (const Shape& s : {Shape{4, 1, 32}, Shape{16, 2, 256}}) {
    PrefillAttentionParams p;
    p.head_dim = s.head_dim;
    EXPECT_FALSE(prefill_attention_flash_supported(p));
    run_case(s, {{0, 0, 17}, {1, 3, 40}}, 2, 128, false, rng);
  }
}

TEST(PrefillAttentionFlash, RejectsBadShapes) {
  MEGAOPS_REQUIRE_GPU();
  PrefillAttentionParams p;
  p.t = 4;
  p.num_heads = 8;
  p.num_kv_heads = 3;  // does not divide num_heads
  p.head_dim = 128;
  p.max_seq = 16;
  EXPECT_EQ(launch_prefill_attention_flash(p), cudaErrorInvalidValue);
  p.num_kv_heads = 2;  // a valid shape, but no buffers
  EXPECT_EQ(launch_prefill_attention_flash(p), cudaErrorInvalidValue);
  p.t = 0;  // nothing to do: no launch, no buffers needed
  EXPECT_EQ(launch_prefill_attention_flash(p), cudaSuccess);
  EXPECT_EQ(launch_prefill_attention_flash(p, 32), cudaErrorInvalidValue);  // no such block
}

}  // namespace
}  // namespace megaops
