// GPU SwiGLU against ref::silu_mul on the same bf16 inputs.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/silu_mul.cuh"
#include "reference/ops.h"

namespace megaops {
namespace {

using testing::DeviceBuffer;

TEST(SiluMul, MatchesReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed());
  for (int inter : {8, 24, 2056, 4096, 14336})
    for (int m : {1, 3, 64})
      for (bool pdl : {false, true}) {
        SCOPED_TRACE("m=" + std::to_string(m) + " inter=" + std::to_string(inter) +
                     " pdl=" + std::to_string(pdl));
        const size_t n = static_cast<size_t>(m) * inter;
        const auto bits = testing::to_bf16_bits(testing::random_floats(2 * n, -8, 8, rng));
        const auto gate_up = testing::from_bf16_bits(bits);
        std::vector<float> gate(n), up(n), expect(n);
        for (int r = 0; r < m; ++r)
          for (int i = 0; i < inter; ++i) {
            gate[static_cast<size_t>(r) * inter + i] =
                gate_up[static_cast<size_t>(r) * 2 * inter + i];
            up[static_cast<size_t>(r) * inter + i] =
                gate_up[static_cast<size_t>(r) * 2 * inter + inter + i];
          }
        ref::silu_mul(gate.data(), up.data(), expect.data(), n);

        DeviceBuffer<uint16_t> d_in(2 * n), d_out(n);
        d_in.upload(bits);
        d_out.poison();
        SiluMulParams p;
        p.gate_up = reinterpret_cast<const bf16*>(d_in.ptr);
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

}  // namespace
}  // namespace megaops
