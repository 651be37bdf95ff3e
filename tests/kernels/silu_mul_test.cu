// GPU SwiGLU against ref::silu_mul on the same inputs (bf16-rounded for the bf16 input, exact for
// the fp32 one).
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/silu_mul.cuh"
#include "reference/ops.h"

namespace megaops {
namespace {

using testing::DeviceBuffer;

// f32_in: the kernel reads gate_up_f32 (exact fp32 values) instead of the bf16 gate_up.
void run_case(int m, int inter, bool f32_in, bool pdl, std::mt19937_64& rng) {
  SCOPED_TRACE("m=" + std::to_string(m) + " inter=" + std::to_string(inter) +
               " f32_in=" + std::to_string(f32_in) + " pdl=" + std::to_string(pdl));
  const size_t n = static_cast<size_t>(m) * inter;
  const auto in_f32 = testing::random_floats(2 * n, -8, 8, rng);
  const auto bits = testing::to_bf16_bits(in_f32);
  // The reference sees exactly what the kernel reads.
  const auto gate_up = f32_in ? in_f32 : testing::from_bf16_bits(bits);
  std::vector<float> gate(n), up(n), expect(n);
  for (int r = 0; r < m; ++r)
    for (int i = 0; i < inter; ++i) {
      gate[static_cast<size_t>(r) * inter + i] = gate_up[static_cast<size_t>(r) * 2 * inter + i];
      up[static_cast<size_t>(r) * inter + i] =
          gate_up[static_cast<size_t>(r) * 2 * inter + inter + i];
    }
  ref::silu_mul(gate.data(), up.data(), expect.data(), n);

  DeviceBuffer<uint16_t> d_in(2 * n), d_out(n);
  DeviceBuffer<float> d_in_f32(2 * n);
  d_in.upload(bits);
  d_in_f32.upload(in_f32);
  d_out.poison();
  SiluMulParams p;
  p.gate_up = f32_in ? nullptr : reinterpret_cast<const bf16*>(d_in.ptr);
  p.gate_up_f32 = f32_in ? d_in_f32.ptr : nullptr;
  p.out = reinterpret_cast<bf16*>(d_out.ptr);
  p.m = m;
  p.inter = inter;
  p.launch.pdl = pdl;
  ASSERT_EQ(launch_silu_mul(p), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto got = testing::from_bf16_bits(d_out.download());
  // Tolerance: bf16 output vs fp32 reference (DESIGN.md), one rounding of the result.
  EXPECT_LE(testing::rel_error(got.data(), expect.data(), n), 2e-2);
  EXPECT_LE(testing::rel_error(got.data(), expect.data(), n), 8e-3);  // ~2^-8 rounding
}

TEST(SiluMul, MatchesReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed());
  for (int inter : {8, 24, 2056, 4096, 14336})
    for (int m : {1, 3, 64})
      for (bool pdl : {false, true}) run_case(m, inter, false, pdl, rng);
}

TEST(SiluMul, Fp32InputMatchesReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 1);
  for (int inter : {8, 24, 2056, 4096, 14336})
    for (int m : {1, 3, 64})
      for (bool pdl : {false, true}) run_case(m, inter, true, pdl, rng);
}

TEST(SiluMul, RejectsBadShapes) {
  MEGAOPS_REQUIRE_GPU();
  DeviceBuffer<uint16_t> in(64), out(32);
  SiluMulParams p;
  p.gate_up = reinterpret_cast<const bf16*>(in.ptr);
  p.out = reinterpret_cast<bf16*>(out.ptr);
  p.m = 1;
  p.inter = 12;
  EXPECT_EQ(launch_silu_mul(p), cudaErrorInvalidValue);
}

TEST(SiluMul, RejectsBadInputs) {
  MEGAOPS_REQUIRE_GPU();
  DeviceBuffer<uint16_t> in(32), out(16);
  DeviceBuffer<float> in_f32(36);
  SiluMulParams p;
  p.out = reinterpret_cast<bf16*>(out.ptr);
  p.m = 2;
  p.inter = 8;
  EXPECT_EQ(launch_silu_mul(p), cudaErrorInvalidValue);  // neither input set
  p.gate_up = reinterpret_cast<const bf16*>(in.ptr);
  p.gate_up_f32 = in_f32.ptr;  // both set
  EXPECT_EQ(launch_silu_mul(p), cudaErrorInvalidValue);
  p.gate_up = nullptr;
  p.gate_up_f32 = in_f32.ptr + 2;  // 8-byte aligned only
  EXPECT_EQ(launch_silu_mul(p), cudaErrorInvalidValue);
  p.gate_up_f32 = in_f32.ptr + 4;  // 16-byte aligned: accepted
  EXPECT_EQ(launch_silu_mul(p), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace megaops
