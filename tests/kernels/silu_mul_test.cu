// The SwiGLU launcher's parameter checks. Its comparison with ref::silu_mul (bf16 and fp32 gate|up)
// runs in the op table, tests/ops/op_harness_test.cu (silu_mul_* rows).
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/silu_mul.cuh"

namespace megaops {
namespace {

using testing::DeviceBuffer;

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
