// GPU residual-add + RMSNorm against ref::add and ref::rmsnorm on the same inputs: bf16-rounded
// where the kernel reads bf16, the exact fp32 values where it reads an fp32 delta.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/rmsnorm.cuh"
#include "reference/ops.h"

namespace megaops {
namespace {

using testing::DeviceBuffer;

// Which delta input the kernel gets: none, bf16 (delta) or fp32 (delta_f32).
enum class DeltaIn { kNone, kBf16, kF32 };

void run_case(int rows, int n, DeltaIn delta_in, bool with_out, bool pdl, std::mt19937_64& rng) {
  SCOPED_TRACE("rows=" + std::to_string(rows) + " n=" + std::to_string(n) +
               " delta=" + std::to_string(static_cast<int>(delta_in)) +
               " out=" + std::to_string(with_out) + " pdl=" + std::to_string(pdl));
  const bool with_delta = delta_in != DeltaIn::kNone;
  const size_t total = static_cast<size_t>(rows) * n;
  auto residual = testing::random_floats(total, -3, 3, rng);
  const auto delta_f32 = testing::random_floats(total, -1, 1, rng);
  const auto delta_bits = testing::to_bf16_bits(delta_f32);
  const auto weight_bits = testing::to_bf16_bits(testing::random_floats(n, 0.5f, 1.5f, rng));
  // The reference sees exactly what the kernel reads.
  const auto delta = delta_in == DeltaIn::kF32 ? delta_f32 : testing::from_bf16_bits(delta_bits);
  const auto weight = testing::from_bf16_bits(weight_bits);
  const float eps = 1e-5f;

  DeviceBuffer<float> d_res(total), d_delta_f32(total);
  DeviceBuffer<uint16_t> d_delta(total), d_w(n), d_out(total);
  d_res.upload(residual);
  d_delta.upload(delta_bits);
  d_delta_f32.upload(delta_f32);
  d_w.upload(weight_bits);
  d_out.poison();

  AddRmsNormParams p;
  p.residual = d_res.ptr;
  p.delta = delta_in == DeltaIn::kBf16 ? reinterpret_cast<const bf16*>(d_delta.ptr) : nullptr;
  p.delta_f32 = delta_in == DeltaIn::kF32 ? d_delta_f32.ptr : nullptr;
  p.weight = reinterpret_cast<const bf16*>(d_w.ptr);
  p.out = with_out ? reinterpret_cast<bf16*>(d_out.ptr) : nullptr;
  p.rows = rows;
  p.n = n;
  p.eps = eps;
  p.launch.pdl = pdl;
  ASSERT_EQ(launch_add_rmsnorm(p), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<float> expect_res = residual;
  if (with_delta) ref::add(residual.data(), delta.data(), expect_res.data(), total);
  const auto got_res = d_res.download();
  // Tolerance: the residual add is one fp32 addition on both sides (1e-5 stated, exact expected).
  EXPECT_LE(testing::rel_error(got_res.data(), expect_res.data(), total), 1e-5);

  const auto out_bits = d_out.download();
  if (!with_out) {
    for (uint16_t b : out_bits) ASSERT_EQ(b, 0xffff) << "out written although null";
    return;
  }
  std::vector<float> expect(total);
  ref::rmsnorm(expect_res.data(), weight.data(), expect.data(), rows, n, eps);
  const auto got = testing::from_bf16_bits(out_bits);
  // Tolerance: bf16 output vs fp32 reference (DESIGN.md).
  EXPECT_LE(testing::rel_error(got.data(), expect.data(), total), 2e-2);
  // With an fp32 delta nothing is rounded before the output: one bf16 rounding (~2^-9 relative
  // per element) is all that separates it from the reference.
  if (delta_in == DeltaIn::kF32)
    EXPECT_LE(testing::rel_error(got.data(), expect.data(), total), 1e-2);
}

TEST(AddRmsNorm, MatchesReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed());
  for (int n : {8, 24, 2056, 4096, 8192})
    for (int rows : {1, 3, 64})
      for (bool pdl : {false, true}) run_case(rows, n, DeltaIn::kBf16, true, pdl, rng);
}

TEST(AddRmsNorm, Fp32DeltaMatchesReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 2);
  for (int n : {8, 24, 2056, 4096, 8192})
    for (int rows : {1, 3, 64})
      for (bool pdl : {false, true}) run_case(rows, n, DeltaIn::kF32, true, pdl, rng);
}

TEST(AddRmsNorm, WithoutDeltaOrOutput) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 1);
  for (int n : {24, 4096}) {
    run_case(5, n, DeltaIn::kNone, true, false, rng);  // plain RMSNorm (first layer)
    run_case(5, n, DeltaIn::kBf16, false, true,
             rng);                                    // residual update only (after the last layer)
    run_case(5, n, DeltaIn::kF32, false, true, rng);  // same, fp32 delta
  }
}

TEST(AddRmsNorm, RejectsBadShapes) {
  MEGAOPS_REQUIRE_GPU();
  DeviceBuffer<float> res(64);
  DeviceBuffer<uint16_t> w(64), out(64);
  AddRmsNormParams p;
  p.residual = res.ptr;
  p.weight = reinterpret_cast<const bf16*>(w.ptr);
  p.out = reinterpret_cast<bf16*>(out.ptr);
  p.rows = 1;
  p.n = 20;  // not a multiple of 8
  EXPECT_EQ(launch_add_rmsnorm(p), cudaErrorInvalidValue);
  p.n = 16;
  p.weight = nullptr;
  EXPECT_EQ(launch_add_rmsnorm(p), cudaErrorInvalidValue);
}

TEST(AddRmsNorm, RejectsBadDeltas) {
  MEGAOPS_REQUIRE_GPU();
  DeviceBuffer<float> res(64), delta_f32(68);
  DeviceBuffer<uint16_t> delta(64), w(64), out(64);
  AddRmsNormParams p;
  p.residual = res.ptr;
  p.weight = reinterpret_cast<const bf16*>(w.ptr);
  p.out = reinterpret_cast<bf16*>(out.ptr);
  p.rows = 4;
  p.n = 16;
  p.delta = reinterpret_cast<const bf16*>(delta.ptr);
  p.delta_f32 = delta_f32.ptr;  // both deltas set
  EXPECT_EQ(launch_add_rmsnorm(p), cudaErrorInvalidValue);
  p.delta = nullptr;
  p.delta_f32 = delta_f32.ptr + 1;  // 4-byte aligned only
  EXPECT_EQ(launch_add_rmsnorm(p), cudaErrorInvalidValue);
  p.delta_f32 = delta_f32.ptr + 4;  // 16-byte aligned: accepted
  EXPECT_EQ(launch_add_rmsnorm(p), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace megaops
