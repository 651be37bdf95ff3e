// An unmodified cuBLASLt GEMM inside the overlap runtime at chunk granularity (DESIGN.md's "Tile
// contracts", kernels/tile_gate.cuh): a gate kernel waits for the producer's counter, the GEMM runs
// as C launches along N, each followed by a signal of its share, and a consumer on a third stream
// waits for the GEMM's counter and copies the output. Everything is issued consumer first, and the
// producer is delayed on the GPU, so a gate that does not hold lets the GEMM read poisoned (NaN)
// input and a signal that does not publish lets the consumer copy poisoned output. Two steps on the
// same monotonic counters check the per-step targets.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "core/dtype.h"
#include "gpu_test_util.h"
#include "kernels/matmul.cuh"
#include "kernels/tile_gate.cuh"
#include "reference/ops.h"
#include "sync/error_record.h"

namespace megaops {
namespace {

using testing::DeviceBuffer;

__global__ void spin_kernel(uint64_t ns) {
  const uint64_t start = globaltimer_ns();
  while (globaltimer_ns() - start < ns) {
  }
}

TEST(TileGate, ChunkedCublasLtBetweenProducerAndConsumer) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed());
  WatchdogRecord watchdog(5000);
  DeviceBuffer<uint32_t> counters(2);  // [0] producer of x, [1] the GEMM
  DeviceBuffer<uint32_t> step(1);
  MEGAOPS_CUDA_CHECK(cudaMemset(counters.ptr, 0, 2 * sizeof(uint32_t)));
  cudaStream_t producer, gemm, consumer;
  for (cudaStream_t* s : {&producer, &gemm, &consumer})
    MEGAOPS_CUDA_CHECK(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
  MatmulContext ctx;
  // DESIGN rule 1: nothing may load a module while a gate spins. Our kernels are preloaded; a
  // cuBLASLt kernel loads on its first launch, so every GEMM shape below runs once first (with
  // lazy loading, the first run of these in the loop deadlocked on the H200 behind the spinning
  // consumer gate).
  MEGAOPS_CUDA_CHECK(preload_tile_gate_kernels());
  cudaFuncAttributes attr;
  MEGAOPS_CUDA_CHECK(cudaFuncGetAttributes(&attr, spin_kernel));
  {
    DeviceBuffer<uint16_t> wx(size_t(12) * 256), ww(size_t(300) * 256);
    DeviceBuffer<float> wy(size_t(12) * 300);
    for (const int m : {1, 12})
      for (const int chunks : {1, 3, 4})
        for (int i = 0; i < chunks; ++i) {
          MatmulParams p;
          p.x = reinterpret_cast<const bf16*>(wx.ptr);
          p.ldx = 256;
          p.w = reinterpret_cast<const bf16*>(ww.ptr);
          p.y = wy.ptr;
          p.ldy = 300;
          p.y_dtype = DType::F32;
          p.m = m;
          p.n = 300 * (i + 1) / chunks - 300 * i / chunks;
          p.k = 256;
          p.launch = LaunchOptions{nullptr, false};
          ASSERT_EQ(ctx.run_cublaslt(p), cudaSuccess);
        }
    MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());
  }
  uint32_t s = 0;
  for (const int m : {1, 12})
    for (const int chunks : {1, 3, 4}) {
      ++s;  // the step: counters only grow, targets are s * TILE_SYNC_STEP_SUM
      const int n = 300, k = 256;
      std::vector<float> x = testing::random_floats(size_t(m) * k, -1.f, 1.f, rng);
      std::vector<float> w = testing::random_floats(size_t(n) * k, -1.f, 1.f, rng);
      round_to_bf16(x.data(), x.size());
      round_to_bf16(w.data(), w.size());
      std::vector<float> ref(size_t(m) * n);
      ref::matmul(x.data(), w.data(), ref.data(), m, k, n);
      const std::vector<uint16_t> x_bits = testing::to_bf16_bits(x);
      DeviceBuffer<uint16_t> x_dev(x.size()), x_stage(x.size()), w_dev(w.size());
      DeviceBuffer<float> y(ref.size()), y_copy(ref.size());
      w_dev.upload(testing::to_bf16_bits(w));
      x_stage.upload(x_bits);
      x_dev.poison();
      y.poison();
      y_copy.poison();
      MEGAOPS_CUDA_CHECK(cudaMemcpy(step.ptr, &s, sizeof(s), cudaMemcpyHostToDevice));
      MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());

      TileSync to_gemm;
      to_gemm.step = step.ptr;
      to_gemm.wait_counter[0] = counters.ptr;
      to_gemm.wait_target_per_step[0] = TILE_SYNC_STEP_SUM;
      to_gemm.signal_counter = counters.ptr + 1;
      to_gemm.watchdog = watchdog.params();
      TileSync to_consumer = to_gemm;
      to_consumer.wait_counter[0] = counters.ptr + 1;
      to_consumer.signal_counter = nullptr;
      TileSync producer_signal = to_gemm;
      producer_signal.signal_counter = counters.ptr;

      // Consumer first, then the GEMM, then the (delayed) producer.
      ASSERT_EQ(launch_tile_gate(to_consumer, consumer), cudaSuccess);
      MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(y_copy.ptr, y.ptr, ref.size() * sizeof(float),
                                         cudaMemcpyDeviceToDevice, consumer));
      ASSERT_EQ(launch_tile_gate(to_gemm, gemm), cudaSuccess);
      for (int i = 0; i < chunks; ++i) {
        const int n0 = n * i / chunks, n1 = n * (i + 1) / chunks;
        MatmulParams p;
        p.x = reinterpret_cast<const bf16*>(x_dev.ptr);
        p.ldx = k;
        p.w = reinterpret_cast<const bf16*>(w_dev.ptr) + int64_t(n0) * k;
        p.y = y.ptr + n0;
        p.ldy = n;
        p.y_dtype = DType::F32;
        p.m = m;
        p.n = n1 - n0;
        p.k = k;
        p.launch = LaunchOptions{gemm, false};
        ASSERT_EQ(ctx.run_cublaslt(p), cudaSuccess);
        ASSERT_EQ(launch_tile_signal(to_gemm, tile_gate_chunk_share(i, chunks), gemm), cudaSuccess);
      }
      spin_kernel<<<1, 1, 0, producer>>>(200000);  // 200 us: the others are waiting by then
      MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(x_dev.ptr, x_stage.ptr, x_bits.size() * 2,
                                         cudaMemcpyDeviceToDevice, producer));
      ASSERT_EQ(launch_tile_signal(producer_signal, TILE_SYNC_STEP_SUM, producer), cudaSuccess);
      watchdog.check(cudaDeviceSynchronize());

      const std::vector<float> out = y_copy.download();
      EXPECT_LE(testing::rel_error(out.data(), ref.data(), ref.size()), 1e-2)
          << "m " << m << " chunks " << chunks;
      EXPECT_EQ(out, y.download()) << "the consumer copied before the GEMM finished";
      const std::vector<uint32_t> c = counters.download();
      EXPECT_EQ(c[0], s * TILE_SYNC_STEP_SUM);
      EXPECT_EQ(c[1], s * TILE_SYNC_STEP_SUM) << "chunk shares must add up to one step";
    }
  for (cudaStream_t st : {producer, gemm, consumer}) cudaStreamDestroy(st);
}

TEST(TileGate, RejectsBadParams) {
  MEGAOPS_REQUIRE_GPU();
  DeviceBuffer<uint32_t> counter(1), step(1);
  TileSync no_step;
  no_step.wait_counter[0] = counter.ptr;
  no_step.signal_counter = counter.ptr;
  EXPECT_EQ(launch_tile_gate(no_step, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(launch_tile_signal(no_step, 1, nullptr), cudaErrorInvalidValue);
  TileSync nothing;
  nothing.step = step.ptr;
  EXPECT_EQ(launch_tile_gate(nothing, nullptr), cudaErrorInvalidValue);  // no producer to wait on
  EXPECT_EQ(launch_tile_signal(nothing, 1, nullptr), cudaErrorInvalidValue);  // no counter
  TileSync ok = nothing;
  ok.signal_counter = counter.ptr;
  EXPECT_EQ(launch_tile_signal(ok, 0, nullptr), cudaErrorInvalidValue);  // nothing to add
  EXPECT_EQ(tile_gate_chunk_share(0, 3) + 2 * tile_gate_chunk_share(1, 3), TILE_SYNC_STEP_SUM);
}

}  // namespace
}  // namespace megaops
