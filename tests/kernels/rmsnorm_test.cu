// GPU residual-add + RMSNorm against ref::add and ref::rmsnorm on the same bf16-rounded inputs.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/rmsnorm.cuh"
#include "reference/ops.h"

namespace megaops {
namespace {

using testing::DeviceBuffer;

void run_case(int rows, int n, bool with_delta, bool with_out, bool pdl, std::mt19937_64& rng) {
  SCOPED_TRACE("rows=" + std::to_string(rows) + " n=" + std::to_string(n) +
               " delta=" + std::to_string(with_delta) + " out=" + std::to_string(with_out) +
               " pdl=" + std::to_string(pdl));
  const size_t total = static_cast<size_t>(rows) * n;
  auto residual = testing::random_floats(total, -3, 3, rng);
  const auto delta_bits = testing::to_bf16_bits(testing::random_floats(total, -1, 1, rng));
  const auto weight_bits = testing::to_bf16_bits(testing::random_floats(n, 0.5f, 1.5f, rng));
  const auto delta = testing::from_bf16_bits(delta_bits);
  const auto weight = testing::from_bf16_bits(weight_bits);
  const float eps = 1e-5f;

  DeviceBuffer<float> d_res(total);
  DeviceBuffer<uint16_t> d_delta(total), d_w(n), d_out(total);
  d_res.upload(residual);
  d_delta.upload(delta_bits);
  d_w.upload(weight_bits);
  d_out.poison();

  AddRmsNormParams p;
  p.residual = d_res.ptr;
  p.delta = with_delta ? reinterpret_cast<const bf16*>(d_delta.ptr) : nullptr;
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
}

TEST(AddRmsNorm, MatchesReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed());
  for (int n : {8, 24, 2056, 4096, 8192})
    for (int rows : {1, 3, 64})
      for (bool pdl : {false, true}) run_case(rows, n, true, true, pdl, rng);
}

TEST(AddRmsNorm, WithoutDeltaOrOutput) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 1);
  for (int n : {24, 4096}) {
    run_case(5, n, false, true, false, rng);  // plain RMSNorm (first layer)
    run_case(5, n, true, false, true, rng);   // residual update only (after the last layer)
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

}  // namespace
}  // namespace megaops
