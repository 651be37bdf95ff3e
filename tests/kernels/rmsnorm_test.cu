// GPU residual-add + RMSNorm with a null output (the residual update after the last layer) against
// ref::add, and the launcher's parameter checks. The normalised output against ref::add +
// ref::rmsnorm, for every delta kind over the models' widths, runs in the op table
// (tests/ops/op_harness_test.cu: add_rmsnorm_*, add_rmsnorm_f32delta_* and rmsnorm_* rows).
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/rmsnorm.cuh"
#include "reference/ops.h"

namespace megaops {
namespace {

using testing::DeviceBuffer;

// add_rmsnorm with out = null: only the residual update, residual += delta (bf16 or fp32 delta),
// against ref::add on the values the kernel reads.
void run_without_output(int rows, int n, bool f32_delta, std::mt19937_64& rng) {
  SCOPED_TRACE("rows=" + std::to_string(rows) + " n=" + std::to_string(n) +
               " f32_delta=" + std::to_string(f32_delta));
  const size_t total = static_cast<size_t>(rows) * n;
  const auto residual = testing::random_floats(total, -3, 3, rng);
  const auto delta_f32 = testing::random_floats(total, -1, 1, rng);
  const auto delta_bits = testing::to_bf16_bits(delta_f32);
  const auto weight_bits = testing::to_bf16_bits(testing::random_floats(n, 0.5f, 1.5f, rng));
  // The reference sees exactly what the kernel reads.
  const auto delta = f32_delta ? delta_f32 : testing::from_bf16_bits(delta_bits);

  DeviceBuffer<float> d_res(total), d_delta_f32(total);
  DeviceBuffer<uint16_t> d_delta(total), d_w(n);
  d_res.upload(residual);
  d_delta.upload(delta_bits);
  d_delta_f32.upload(delta_f32);
  d_w.upload(weight_bits);

  AddRmsNormParams p;
  p.residual = d_res.ptr;
  p.delta = f32_delta ? nullptr : reinterpret_cast<const bf16*>(d_delta.ptr);
  p.delta_f32 = f32_delta ? d_delta_f32.ptr : nullptr;
  p.weight = reinterpret_cast<const bf16*>(d_w.ptr);
  p.out = nullptr;
  p.rows = rows;
  p.n = n;
  p.eps = 1e-5f;
  p.launch.pdl = true;
  ASSERT_EQ(launch_add_rmsnorm(p), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<float> expect_res(total);
  ref::add(residual.data(), delta.data(), expect_res.data(), total);
  const auto got_res = d_res.download();
  // Tolerance: the residual add is one fp32 addition on both sides (1e-5 stated, exact expected).
  EXPECT_LE(testing::rel_error(got_res.data(), expect_res.data(), total), 1e-5);
}

TEST(AddRmsNorm, WithoutOutput) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 1);
  for (int n : {24, 4096}) {
    run_without_output(5, n, false, rng);
    run_without_output(5, n, true, rng);
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
