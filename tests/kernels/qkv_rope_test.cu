// GPU QKV post-processing (Qwen3 q/k norm, RoPE, cache scatter) against ref::rmsnorm + ref::rope on
// the same inputs (bf16-rounded for the bf16 qkv input, exact for the fp32 one). Cache entries not
// addressed by any token must keep their poison, which catches writes to the wrong (slot, position,
// head). The models' heads run in the op table (tests/ops/op_harness_test.cu); here, the head dims,
// token counts and positions outside it, and the parameter checks.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "gpu_test_util.h"
#include "kernels/qkv_rope.cuh"
#include "reference/ops.h"

namespace megaops {
namespace {

using testing::DeviceBuffer;

struct RopeCase {
  int num_heads, num_kv_heads, head_dim;
  bool qk_norm;
  int t, max_batch, max_seq;
};

// f32_in: the kernel reads qkv_f32 (exact fp32 values) instead of the bf16 qkv.
void run_case(const RopeCase& c, bool f32_in, bool pdl, std::mt19937_64& rng) {
  SCOPED_TRACE("H=" + std::to_string(c.num_heads) + " KV=" + std::to_string(c.num_kv_heads) +
               " hd=" + std::to_string(c.head_dim) + " norm=" + std::to_string(c.qk_norm) +
               " t=" + std::to_string(c.t) + " max_seq=" + std::to_string(c.max_seq) +
               " f32_in=" + std::to_string(f32_in) + " pdl=" + std::to_string(pdl));
  const int hd = c.head_dim, heads = c.num_heads + 2 * c.num_kv_heads;
  const size_t row = static_cast<size_t>(heads) * hd;
  const auto qkv_f32 = testing::random_floats(c.t * row, -2, 2, rng);
  const auto qkv_bits = testing::to_bf16_bits(qkv_f32);
  // The reference sees exactly what the kernel reads.
  const auto qkv = f32_in ? qkv_f32 : testing::from_bf16_bits(qkv_bits);
  const auto qn_bits = testing::to_bf16_bits(testing::random_floats(hd, 0.5f, 1.5f, rng));
  const auto kn_bits = testing::to_bf16_bits(testing::random_floats(hd, 0.5f, 1.5f, rng));
  const auto q_norm = testing::from_bf16_bits(qn_bits), k_norm = testing::from_bf16_bits(kn_bits);
  std::vector<float> inv_freq(hd / 2);
  for (int i = 0; i < hd / 2; ++i)
    inv_freq[i] = static_cast<float>(1.0 / std::pow(500000.0, 2.0 * i / hd));

  // Distinct (slot, position) per token; one token sits at the last position of the cache.
  std::vector<int32_t> positions(c.t), slots(c.t);
  std::set<std::pair<int, int>> used;
  std::uniform_int_distribution<int> pick_pos(0, c.max_seq - 1), pick_slot(0, c.max_batch - 1);
  for (int i = 0; i < c.t; ++i) {
    do {
      positions[i] = i == 0 ? c.max_seq - 1 : pick_pos(rng);
      slots[i] = pick_slot(rng);
    } while (!used.insert({slots[i], positions[i]}).second);
  }

  const size_t cache_n = static_cast<size_t>(c.max_batch) * c.max_seq * c.num_kv_heads * hd;
  DeviceBuffer<uint16_t> d_qkv(qkv_bits.size()), d_qn(hd), d_kn(hd);
  DeviceBuffer<uint16_t> d_q(static_cast<size_t>(c.t) * c.num_heads * hd), d_k(cache_n),
      d_v(cache_n);
  DeviceBuffer<int32_t> d_pos(c.t), d_slots(c.t);
  DeviceBuffer<float> d_freq(hd / 2), d_qkv_f32(qkv_f32.size());
  d_qkv.upload(qkv_bits);
  d_qkv_f32.upload(qkv_f32);
  d_qn.upload(qn_bits);
  d_kn.upload(kn_bits);
  d_pos.upload(positions);
  d_slots.upload(slots);
  d_freq.upload(inv_freq);
  d_q.poison();
  d_k.poison();
  d_v.poison();

  QkvRopeParams p;
  p.qkv = f32_in ? nullptr : reinterpret_cast<const bf16*>(d_qkv.ptr);
  p.qkv_f32 = f32_in ? d_qkv_f32.ptr : nullptr;
  p.positions = d_pos.ptr;
  p.slots = d_slots.ptr;
  p.q_norm = c.qk_norm ? reinterpret_cast<const bf16*>(d_qn.ptr) : nullptr;
  p.k_norm = c.qk_norm ? reinterpret_cast<const bf16*>(d_kn.ptr) : nullptr;
  p.inv_freq = d_freq.ptr;
  p.q_out = reinterpret_cast<bf16*>(d_q.ptr);
  p.k_cache = reinterpret_cast<bf16*>(d_k.ptr);
  p.v_cache = reinterpret_cast<bf16*>(d_v.ptr);
  p.t = c.t;
  p.num_heads = c.num_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_dim = hd;
  p.max_seq = c.max_seq;
  p.eps = 1e-6f;
  p.launch.pdl = pdl;
  ASSERT_EQ(launch_qkv_rope(p), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<float> exp_q(static_cast<size_t>(c.t) * c.num_heads * hd);
  std::vector<float> exp_k(static_cast<size_t>(c.t) * c.num_kv_heads * hd), got_k(exp_k.size());
  std::vector<float> exp_v(exp_k.size()), got_v(exp_k.size());
  const auto q_bits = d_q.download(), k_bits = d_k.download(), v_bits = d_v.download();
  std::vector<char> touched(cache_n, 0);
  const size_t kv_row = static_cast<size_t>(c.num_kv_heads) * hd;
  for (int i = 0; i < c.t; ++i) {
    const float* src = qkv.data() + i * row;
    float* q = exp_q.data() + static_cast<size_t>(i) * c.num_heads * hd;
    float* k = exp_k.data() + i * kv_row;
    std::copy(src, src + c.num_heads * hd, q);
    std::copy(src + c.num_heads * hd, src + c.num_heads * hd + kv_row, k);
    std::copy(src + c.num_heads * hd + kv_row, src + row, exp_v.data() + i * kv_row);
    if (c.qk_norm) {
      ref::rmsnorm(q, q_norm.data(), q, c.num_heads, hd, 1e-6f);
      ref::rmsnorm(k, k_norm.data(), k, c.num_kv_heads, hd, 1e-6f);
    }
    ref::rope(q, c.num_heads, hd, positions[i], inv_freq.data());
    ref::rope(k, c.num_kv_heads, hd, positions[i], inv_freq.data());
    const size_t at = (static_cast<size_t>(slots[i]) * c.max_seq + positions[i]) * kv_row;
    for (size_t e = 0; e < kv_row; ++e) {
      got_k[i * kv_row + e] = bf16_to_float(k_bits[at + e]);
      got_v[i * kv_row + e] = bf16_to_float(v_bits[at + e]);
      touched[at + e] = 1;
    }
  }
  const auto got_q = testing::from_bf16_bits(q_bits);
  // Tolerance: bf16 outputs vs fp32 reference (DESIGN.md). The kernel forms the angle in fp32
  // (as HF does) where the reference uses double: at position 131071 that differs by up to half an
  // ulp of the angle (~4e-3 rad), still well inside 2e-2.
  EXPECT_LE(testing::rel_error(got_q.data(), exp_q.data(), exp_q.size()), 2e-2);
  EXPECT_LE(testing::rel_error(got_k.data(), exp_k.data(), exp_k.size()), 2e-2);
  if (f32_in) {
    // Nothing is rounded before the outputs: one bf16 rounding (~2^-9 relative per element) plus
    // the fp32 angle above, a few 1e-3 in all.
    EXPECT_LE(testing::rel_error(got_q.data(), exp_q.data(), exp_q.size()), 1e-2);
    EXPECT_LE(testing::rel_error(got_k.data(), exp_k.data(), exp_k.size()), 1e-2);
    // v is the fp32 input rounded once to bf16 (nearest even, like float_to_bf16): exact.
    round_to_bf16(exp_v.data(), exp_v.size());
  }
  // v is a copy of bf16 values: exact.
  EXPECT_EQ(got_v, exp_v);
  for (size_t e = 0; e < cache_n; ++e) {
    if (touched[e]) continue;
    ASSERT_EQ(k_bits[e], 0xffff) << "stray k write at " << e;
    ASSERT_EQ(v_bits[e], 0xffff) << "stray v write at " << e;
  }
}

// The cases outside the op table (tests/ops/op_harness_test.cu: qkv_rope_* rows, the models'
// heads at 1-64 tokens within 500 positions): head_dim 256 and 32, 300 tokens in one launch, and
// positions up to 131071.
TEST(QkvRope, MatchesReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed());
  const RopeCase cases[] = {
      {16, 2, 256, true, 7, 2, 100},
      {4, 4, 32, true, 17, 2, 64},
      {32, 8, 128, true, 300, 2, 1024},
      {8, 1, 128, false, 3, 1, 131072},  // long-context positions
  };
  for (const auto& c : cases)
    for (bool pdl : {false, true}) run_case(c, false, pdl, rng);
}

// The same with fp32 qkv (the op table's qkv_rope_f32in_* rows run the models' heads), and the
// smallest head_dim.
TEST(QkvRope, Fp32InputMatchesReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 1);
  const RopeCase cases[] = {
      {16, 2, 256, true, 7, 2, 100},    {4, 4, 32, true, 17, 2, 64},
      {4, 2, 4, true, 9, 2, 16},                                           // smallest head_dim
      {32, 8, 128, true, 300, 2, 1024}, {8, 1, 128, false, 3, 1, 131072},  // long context
  };
  for (const auto& c : cases)
    for (bool pdl : {false, true}) run_case(c, true, pdl, rng);
}

TEST(QkvRope, RejectsBadShapes) {
  MEGAOPS_REQUIRE_GPU();
  QkvRopeParams p;
  p.t = 1;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = 512;  // above the 256 limit
  p.max_seq = 8;
  EXPECT_EQ(launch_qkv_rope(p), cudaErrorInvalidValue);
  p.head_dim = 66;  // not a multiple of 4
  EXPECT_EQ(launch_qkv_rope(p), cudaErrorInvalidValue);
}

TEST(QkvRope, RejectsBadInputs) {
  MEGAOPS_REQUIRE_GPU();
  const int t = 2, heads = 4 + 2 * 2, hd = 8, max_seq = 4;
  DeviceBuffer<uint16_t> qkv(t * heads * hd), q(t * 4 * hd), k(2 * max_seq * 2 * hd),
      v(2 * max_seq * 2 * hd);
  DeviceBuffer<float> qkv_f32(t * heads * hd + 2), freq(hd / 2);
  DeviceBuffer<int32_t> pos(t), slots(t);
  const std::vector<int32_t> zero_one = {0, 1};
  pos.upload(zero_one);
  slots.upload(zero_one);
  freq.upload(std::vector<float>(hd / 2, 0.5f));
  QkvRopeParams p;
  p.positions = pos.ptr;
  p.slots = slots.ptr;
  p.inv_freq = freq.ptr;
  p.q_out = reinterpret_cast<bf16*>(q.ptr);
  p.k_cache = reinterpret_cast<bf16*>(k.ptr);
  p.v_cache = reinterpret_cast<bf16*>(v.ptr);
  p.t = t;
  p.num_heads = 4;
  p.num_kv_heads = 2;
  p.head_dim = hd;
  p.max_seq = max_seq;
  EXPECT_EQ(launch_qkv_rope(p), cudaErrorInvalidValue);  // neither input set
  p.qkv = reinterpret_cast<const bf16*>(qkv.ptr);
  p.qkv_f32 = qkv_f32.ptr;  // both set
  EXPECT_EQ(launch_qkv_rope(p), cudaErrorInvalidValue);
  p.qkv = nullptr;
  p.qkv_f32 = qkv_f32.ptr + 1;  // 4-byte aligned only: float2 loads need 8
  EXPECT_EQ(launch_qkv_rope(p), cudaErrorInvalidValue);
  p.qkv_f32 = qkv_f32.ptr + 2;  // 8-byte aligned: accepted
  EXPECT_EQ(launch_qkv_rope(p), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace megaops
