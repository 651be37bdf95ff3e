// The tensor-core prefill attention (kernels/attention_prefill.cuh) against ref::attention_prefill
// (fp32, CPU) on the same bf16 inputs: awkward lengths (1, 17, 111, 500), several sequences packed
// in one launch with boundaries inside a 64-token block, prompts that continue a cached prefix,
// GQA ratios 1, 4 and 8, head_dim 64 and 128 (and the forwarded head dims). Cache rows past each
// sequence's last position hold NaN, so a read past a query's visible keys fails the test; the
// output is poisoned with NaN before each launch, so an unwritten element fails it too. A NaN or
// Inf in one packed sequence's q, K or V must leave the other sequences' outputs bit-identical to
// their results launched alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/attention_prefill.cuh"
#include "kernels/attention_test_util.h"

namespace megaops {
namespace {

using testing::DeviceBuffer;
using testing::PrefillSeq;
using Shape = testing::AttentionShape;

// Runs launch_prefill_attention_flash once for each query block (64 and 128 rows a CTA, and the
// default) on the same inputs and checks every sequence against the reference. Tolerance: bf16
// output (and P rounded to bf16 before P.V) against fp32, 2e-2 relative per sequence (DESIGN.md).
void run_case(const Shape& s, const std::vector<PrefillSeq>& seqs, int max_batch, int max_seq,
              bool pdl, std::mt19937_64& rng) {
  SCOPED_TRACE(testing::describe(s, seqs, pdl));
  const testing::PrefillInputs in(s, seqs, max_batch, max_seq, rng);
  testing::PrefillDeviceInputs dev(in, pdl);
  std::vector<std::vector<float>> expect;
  for (size_t i = 0; i < seqs.size(); ++i) expect.push_back(in.reference(i));
  for (int block_q : {64, 128, 0}) {
    SCOPED_TRACE("block_q " + std::to_string(block_q));
    dev.out.poison();
    ASSERT_EQ(launch_prefill_attention_flash(dev.params, block_q), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto got = testing::from_bf16_bits(dev.out.download());
    for (size_t i = 0; i < seqs.size(); ++i)
      EXPECT_LE(testing::rel_error(got.data() + in.first_token(i) * in.token(), expect[i].data(),
                                   expect[i].size()),
                2e-2)
          << "slot " << seqs[i].slot;
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

// head_dim 64 and 128 at GQA groups 1 and 4, few heads so the CPU reference stays cheap.
const Shape PACKED_SHAPES[] = {{2, 2, 64}, {8, 2, 64}, {2, 2, 128}, {8, 2, 128}};

TEST(PrefillAttentionFlash, PackedOddLengthsMatchReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 15);
  for (const Shape& s : PACKED_SHAPES) {
    // Lengths around the warp (16), block (64, 128) and key tile (64) sizes, packed back to back:
    // every sequence but the first starts inside a warp's 16 rows.
    run_case(s,
             {{0, 0, 1}, {1, 0, 17}, {2, 0, 63}, {3, 0, 64}, {4, 0, 65}, {5, 0, 130}, {6, 0, 257}},
             7, 320, false, rng);
    // The same lengths in another order, after cached prefixes (most ending inside a key tile).
    run_case(s,
             {{3, 257, 64},
              {6, 1, 130},
              {0, 63, 1},
              {5, 5, 257},
              {1, 130, 17},
              {4, 64, 65},
              {2, 17, 63}},
             7, 384, true, rng);
  }
}

// Which input of one sequence holds non-finite values.
enum class Poison { KV_NAN, V_INF, Q_NAN };

const char* poison_name(Poison poison) {
  switch (poison) {
    case Poison::KV_NAN:
      return "NaN in K and V";
    case Poison::V_INF:
      return "+Inf in V";
    case Poison::Q_NAN:
      return "NaN in q";
  }
  return "?";
}

constexpr uint16_t BF16_NAN = 0x7fc0, BF16_INF = 0x7f80;

size_t count_nonfinite(const float* x, size_t n) {
  return static_cast<size_t>(std::count_if(x, x + n, [](float v) { return !std::isfinite(v); }));
}

// Sequence `bad` of a packed launch gets `poison` in all its q rows or in all its cache rows
// (positions [0, pos0 + n_q) of its slot, every kv head): each other sequence must come out
// finite, within tolerance of the reference and equal to the same kernel's result for that
// sequence launched alone (before the poison), at 64 and 128 query rows a CTA. The packings put
// sequence boundaries inside a warp's 16 rows, so rows of the poisoned sequence and of a clean
// one share the mma tiles of a warp; a kernel that lets P = 0 meet a NaN or Inf of V (0 x NaN =
// NaN), or that masks scores by multiplying, turns those clean rows into NaN. The poisoned
// sequence's own outputs must all be non-finite, so the poison is known to have reached the
// kernel (and not to have been sanitised away).
void run_isolation_case(const Shape& s, const std::vector<PrefillSeq>& seqs, size_t bad,
                        Poison poison, std::mt19937_64& rng) {
  SCOPED_TRACE(testing::describe(s, seqs, false) + "; sequence " + std::to_string(bad) + ": " +
               poison_name(poison));
  constexpr int MAX_BATCH = 4, MAX_SEQ = 256;
  const testing::PrefillInputs in(s, seqs, MAX_BATCH, MAX_SEQ, rng);
  testing::PrefillDeviceInputs dev(in, false);
  const size_t token = in.token();
  const int block_qs[] = {64, 128};

  // Every clean sequence alone: its own slice of q, slots, positions and out.
  std::vector<std::vector<float>> alone;
  DeviceBuffer<uint16_t> alone_out(in.q_bits.size());
  for (int block_q : block_qs) {
    alone_out.poison();
    for (size_t i = 0; i < seqs.size(); ++i) {
      if (i == bad) continue;
      const int t0 = in.first_token(i);
      PrefillAttentionParams p = dev.params;
      p.q += t0 * token;
      p.slots += t0;
      p.positions += t0;
      p.out = reinterpret_cast<bf16*>(alone_out.ptr) + t0 * token;
      p.t = seqs[i].n_q;
      ASSERT_EQ(launch_prefill_attention_flash(p, block_q), cudaSuccess);
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    alone.push_back(testing::from_bf16_bits(alone_out.download()));
  }

  // The poison, on the device only: the reference and the alone runs keep the clean values.
  const PrefillSeq& b = seqs[bad];
  if (poison == Poison::Q_NAN) {
    std::vector<uint16_t> q_bits = in.q_bits;
    std::fill_n(q_bits.begin() + in.first_token(bad) * token, b.n_q * token, BF16_NAN);
    dev.q.upload(q_bits);
  } else {
    std::vector<uint16_t> k_bits = in.cache.k_bits, v_bits = in.cache.v_bits;
    const size_t at = static_cast<size_t>(b.slot) * MAX_SEQ * in.cache.row,
                 n = static_cast<size_t>(b.pos0 + b.n_q) * in.cache.row;
    if (poison == Poison::KV_NAN) std::fill_n(k_bits.begin() + at, n, BF16_NAN);
    std::fill_n(v_bits.begin() + at, n, poison == Poison::KV_NAN ? BF16_NAN : BF16_INF);
    dev.k.upload(k_bits);
    dev.v.upload(v_bits);
  }

  std::vector<std::vector<float>> expect;
  for (size_t i = 0; i < seqs.size(); ++i)
    expect.push_back(i == bad ? std::vector<float>() : in.reference(i));

  for (size_t bq = 0; bq < std::size(block_qs); ++bq) {
    SCOPED_TRACE("block_q " + std::to_string(block_qs[bq]));
    dev.out.poison();
    ASSERT_EQ(launch_prefill_attention_flash(dev.params, block_qs[bq]), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto got = testing::from_bf16_bits(dev.out.download());
    for (size_t i = 0; i < seqs.size(); ++i) {
      const size_t at = in.first_token(i) * token, n = seqs[i].n_q * token;
      const float* out = got.data() + at;
      if (i == bad) {
        EXPECT_EQ(count_nonfinite(out, n), n)
            << "the poisoned sequence (slot " << seqs[i].slot << ") has finite outputs";
        continue;
      }
      EXPECT_EQ(count_nonfinite(out, n), 0u) << "slot " << seqs[i].slot;
      // Tolerance as in run_case: bf16 against fp32, 2e-2 relative per sequence.
      EXPECT_LE(testing::rel_error(out, expect[i].data(), n), 2e-2) << "slot " << seqs[i].slot;
      // Bit-exact against the sequence alone: a row's sums do not depend on which rows share its
      // CTA or warp (an mma row depends only on that row's operands, and a tile that is wholly
      // masked for a row leaves its max, sum and O unchanged).
      const float* own = alone[bq].data() + at;
      size_t differ = 0, first = n;
      for (size_t e = 0; e < n; ++e)
        if (!(out[e] == own[e]) && differ++ == 0) first = e;
      EXPECT_EQ(differ, 0u) << "slot " << seqs[i].slot << ": first at token "
                            << (first < n ? static_cast<int>(first / token) : -1) << ", packed "
                            << (first < n ? out[first] : 0.f) << " vs alone "
                            << (first < n ? own[first] : 0.f);
    }
  }
}

// Packings whose sequence boundaries fall inside a warp's 16 rows at 64 and 128 rows a CTA,
// lengths not multiples of 16, starts inside a key tile (cached prefixes at 45, 130, 3).
const std::vector<PrefillSeq> ISOLATION_PACKINGS[] = {
    // Boundaries at rows 37 and 107.
    {{2, 0, 37}, {0, 0, 70}, {1, 0, 29}},
    // Boundaries at rows 23 and 33; the last sequence spans three 64-row blocks.
    {{1, 45, 23}, {3, 0, 10}, {0, 130, 100}},
    // Rows 144-159 hold the end of the first sequence, all of the second (one token) and the
    // start of the third.
    {{0, 0, 150}, {2, 0, 1}, {1, 3, 66}},
};

void run_isolation(Poison poison, uint64_t seed_offset) {
  std::mt19937_64 rng(testing::test_seed() + seed_offset);
  for (const Shape& s : PACKED_SHAPES)
    for (const auto& seqs : ISOLATION_PACKINGS)
      for (size_t bad = 0; bad < seqs.size(); ++bad) run_isolation_case(s, seqs, bad, poison, rng);
}

TEST(PrefillAttentionFlash, NanKvOfOneSequenceStaysInIt) {
  MEGAOPS_REQUIRE_GPU();
  run_isolation(Poison::KV_NAN, 16);
}

TEST(PrefillAttentionFlash, InfVOfOneSequenceStaysInIt) {
  MEGAOPS_REQUIRE_GPU();
  run_isolation(Poison::V_INF, 17);
}

TEST(PrefillAttentionFlash, NanQOfOneSequenceStaysInIt) {
  MEGAOPS_REQUIRE_GPU();
  run_isolation(Poison::Q_NAN, 18);
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
