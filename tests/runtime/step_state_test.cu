// step_advance against what it must leave: positions and context lengths one further, the step
// counter one up, and (StepAdvanceParams::host_tokens) the step's tokens in the mapped host
// ring's half of positions[0]'s parity, the other half untouched.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/cuda_check.h"
#include "gpu_test_util.h"
#include "runtime/step_state.cuh"

namespace megaops {
namespace {

TEST(StepAdvance, WritesTheTokensIntoTheHalfOfRowZerosParity) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed());
  constexpr int LD = 8;
  for (int b : {1, 3, 8}) {
    SCOPED_TRACE("b = " + std::to_string(b));
    std::vector<int32_t> pos(b), tok(b);
    for (int i = 0; i < b; ++i) {
      pos[i] = static_cast<int32_t>(rng() % 1000);
      tok[i] = static_cast<int32_t>(rng() % 128256);
    }
    int32_t *d_pos, *d_ctx, *d_tok, *ring;
    uint32_t* d_step;
    MEGAOPS_CUDA_CHECK(cudaMalloc(&d_pos, b * 4));
    MEGAOPS_CUDA_CHECK(cudaMalloc(&d_ctx, b * 4));
    MEGAOPS_CUDA_CHECK(cudaMalloc(&d_tok, b * 4));
    MEGAOPS_CUDA_CHECK(cudaMalloc(&d_step, 4));
    MEGAOPS_CUDA_CHECK(cudaHostAlloc(&ring, 2 * LD * 4, cudaHostAllocMapped));
    MEGAOPS_CUDA_CHECK(cudaMemcpy(d_pos, pos.data(), b * 4, cudaMemcpyHostToDevice));
    MEGAOPS_CUDA_CHECK(cudaMemcpy(d_tok, tok.data(), b * 4, cudaMemcpyHostToDevice));
    MEGAOPS_CUDA_CHECK(cudaMemset(d_ctx, 0xff, b * 4));
    const uint32_t step0 = 41;
    MEGAOPS_CUDA_CHECK(cudaMemcpy(d_step, &step0, 4, cudaMemcpyHostToDevice));
    StepAdvanceParams p;
    p.positions = d_pos;
    p.ctx_lens = d_ctx;
    p.step = d_step;
    p.b = b;
    p.tokens = d_tok;
    p.host_tokens = ring;
    p.tokens_ld = LD;
    for (int round = 0; round < 2; ++round) {         // both parities
      for (int i = 0; i < 2 * LD; ++i) ring[i] = -7;  // poison
      const int half = (pos[0] + round) & 1;
      ASSERT_EQ(launch_step_advance(p), cudaSuccess);
      MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());
      for (int i = 0; i < LD; ++i) {
        EXPECT_EQ(ring[half * LD + i], i < b ? tok[i] : -7) << "half " << half << " row " << i;
        EXPECT_EQ(ring[(1 - half) * LD + i], -7) << "other half row " << i;
      }
      std::vector<int32_t> got_pos(b), got_ctx(b);
      uint32_t got_step = 0;
      MEGAOPS_CUDA_CHECK(cudaMemcpy(got_pos.data(), d_pos, b * 4, cudaMemcpyDeviceToHost));
      MEGAOPS_CUDA_CHECK(cudaMemcpy(got_ctx.data(), d_ctx, b * 4, cudaMemcpyDeviceToHost));
      MEGAOPS_CUDA_CHECK(cudaMemcpy(&got_step, d_step, 4, cudaMemcpyDeviceToHost));
      for (int i = 0; i < b; ++i) {
        EXPECT_EQ(got_pos[i], pos[i] + round + 1);
        EXPECT_EQ(got_ctx[i], pos[i] + round + 2);
      }
      EXPECT_EQ(got_step, step0 + round + 1);
    }
    // A ring without tokens, or narrower than the batch, is refused.
    StepAdvanceParams bad = p;
    bad.tokens = nullptr;
    EXPECT_EQ(launch_step_advance(bad), cudaErrorInvalidValue);
    bad = p;
    bad.tokens_ld = b - 1;
    EXPECT_EQ(launch_step_advance(bad), cudaErrorInvalidValue);
    cudaFree(d_pos);
    cudaFree(d_ctx);
    cudaFree(d_tok);
    cudaFree(d_step);
    cudaFreeHost(ring);
  }
}

}  // namespace
}  // namespace megaops
