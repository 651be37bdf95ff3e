// cuDNN's fused SDPA as the prefill attention (kernels/attention_cudnn.h) against
// ref::attention_prefill (fp32, CPU) and against the own tensor-core kernel on the same bf16
// inputs: one sequence at a time, awkward lengths (1, 17, 1000), queries that start at position 0
// and ones that continue a cached prefix (chunked prefill: causal alignment at the bottom right),
// GQA ratios 1, 4 and 8, head_dim 64 and 128. The KV cache holds NaN past each sequence's last
// position, so a read past a query's visible keys fails the test; the output is poisoned with NaN
// before each run, with poisoned guard rows around the sequence's rows, so an unwritten element or
// a write outside the sequence fails it too. cuDNN is loaded at run time: without it (or without a
// GPU) these tests are skipped, saying why. MEGAOPS_TEST_CUDNN_LIB names the library to load
// (default libcudnn.so.9 from the loader's search path).
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/attention_cudnn.h"
#include "kernels/attention_prefill.cuh"
#include "kernels/attention_test_util.h"
#include "kernels/cudnn_library.h"

namespace megaops {
namespace {

using testing::DeviceBuffer;
using testing::PrefillSeq;
using Shape = testing::AttentionShape;

std::string test_cudnn_lib() {
  const char* env = std::getenv("MEGAOPS_TEST_CUDNN_LIB");
  return env ? env : "";
}

// One handle for the whole test binary (cuDNN's library is process-wide anyway).
CudnnAttention& shared_cudnn() {
  static CudnnAttention c(test_cudnn_lib());
  return c;
}

#define REQUIRE_CUDNN()                                                                  \
  do {                                                                                   \
    MEGAOPS_REQUIRE_GPU();                                                               \
    if (!shared_cudnn().available())                                                     \
      GTEST_SKIP() << "cuDNN unavailable: " << shared_cudnn().unavailable_reason();      \
    std::printf("cuDNN %s (%s)\n", cudnn_version_text(shared_cudnn().version()).c_str(), \
                shared_cudnn().library_path().c_str());                                  \
  } while (0)

constexpr int GUARD_ROWS = 3;  // poisoned rows before and after the sequence's output

// Sequence `sq` (one slot) through cuDNN and through launch_prefill_attention_flash: each within
// 2e-2 of the fp32 reference (DESIGN.md's bf16 bound; both round P to bf16 before P.V), within
// 2e-2 of each other, finite, and cuDNN's guard rows untouched.
void run_case(const Shape& s, const PrefillSeq& sq, int max_seq, std::mt19937_64& rng) {
  SCOPED_TRACE(testing::describe(s, {sq}, false));
  const testing::PrefillInputs in(s, {sq}, sq.slot + 1, max_seq, rng);
  testing::PrefillDeviceInputs dev(in, false);
  const size_t token = in.token(), n = sq.n_q * token;
  const std::vector<float> expect = in.reference(0);

  DeviceBuffer<uint16_t> out(n + 2 * GUARD_ROWS * token);
  out.poison();
  const size_t slot0 = static_cast<size_t>(sq.slot) * max_seq * in.cache.row;
  CudnnAttentionParams p;
  p.q = reinterpret_cast<const __nv_bfloat16*>(dev.q.ptr);
  p.k = reinterpret_cast<const __nv_bfloat16*>(dev.k.ptr) + slot0;
  p.v = reinterpret_cast<const __nv_bfloat16*>(dev.v.ptr) + slot0;
  p.out = reinterpret_cast<__nv_bfloat16*>(out.ptr) + GUARD_ROWS * token;
  p.t_q = sq.n_q;
  p.t_kv = sq.pos0 + sq.n_q;
  p.num_heads = s.num_heads;
  p.num_kv_heads = s.num_kv_heads;
  p.head_dim = s.head_dim;
  p.scale = in.scale;
  CudnnAttention& c = shared_cudnn();
  ASSERT_EQ(c.run(p), cudaSuccess) << c.last_error();
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<uint16_t> bits = out.download();
  for (size_t i = 0; i < GUARD_ROWS * token; ++i) {
    ASSERT_EQ(bits[i], 0xffff) << "cuDNN wrote before the sequence's rows, element " << i;
    ASSERT_EQ(bits[GUARD_ROWS * token + n + i], 0xffff)
        << "cuDNN wrote after the sequence's rows, element " << i;
  }
  const std::vector<float> got = testing::from_bf16_bits(
      std::vector<uint16_t>(bits.begin() + GUARD_ROWS * token, bits.end() - GUARD_ROWS * token));
  // rel_error is infinite where got holds a NaN (an unwritten element, or a key past the visible
  // ones read into it).
  EXPECT_LE(testing::rel_error(got.data(), expect.data(), n), 2e-2) << "cuDNN vs reference";

  dev.out.poison();
  ASSERT_EQ(launch_prefill_attention_flash(dev.params), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> own = testing::from_bf16_bits(dev.out.download());
  EXPECT_LE(testing::rel_error(own.data(), expect.data(), n), 2e-2) << "own kernel vs reference";
  EXPECT_LE(testing::rel_error(got.data(), own.data(), n), 2e-2) << "cuDNN vs own kernel";
}

// GQA ratios 1, 4 and 8 at head_dim 64 and 128, the 1B (32 / 8, 64) and 8B (32 / 8, 128) among
// them.
const Shape CUDNN_SHAPES[] = {{8, 8, 64}, {32, 8, 64}, {16, 2, 64}, {32, 8, 128}, {16, 2, 128}};

TEST(PrefillAttentionCudnn, OneSequenceMatchesReference) {
  REQUIRE_CUDNN();
  std::mt19937_64 rng(testing::test_seed() + 31);
  for (const Shape& s : CUDNN_SHAPES)
    for (int n_q : {1, 17, 1000}) run_case(s, {1, 0, n_q}, 1024, rng);
}

// Queries that continue a cached prefix: t_q < t_kv, causal at the bottom right.
TEST(PrefillAttentionCudnn, ContinuedPromptMatchesReference) {
  REQUIRE_CUDNN();
  std::mt19937_64 rng(testing::test_seed() + 32);
  for (const Shape& s : CUDNN_SHAPES) {
    run_case(s, {0, 5, 17}, 1100, rng);
    run_case(s, {2, 300, 1}, 400, rng);  // one query over 301 keys
    run_case(s, {1, 37, 1000}, 1100, rng);
    run_case(s, {0, 1000, 17}, 1100, rng);  // a short chunk after a long one
  }
}

// Many key tiles: the online softmax over thousands of keys, a slot whose cache rows past the
// sequence hold NaN up to max_seq.
TEST(PrefillAttentionCudnn, LongSequenceMatchesReference) {
  REQUIRE_CUDNN();
  std::mt19937_64 rng(testing::test_seed() + 33);
  run_case({8, 1, 128}, {0, 0, 2000}, 2048, rng);
  run_case({4, 1, 64}, {1, 37, 1900}, 2048, rng);
}

// A shape seen again takes the cached graph; the count of built graphs says so.
TEST(PrefillAttentionCudnn, BuildsOneGraphPerShape) {
  REQUIRE_CUDNN();
  std::mt19937_64 rng(testing::test_seed() + 34);
  CudnnAttention& c = shared_cudnn();
  run_case({8, 2, 64}, {0, 3, 29}, 64, rng);
  const int built = c.graphs_built();
  run_case({8, 2, 64}, {0, 3, 29}, 64, rng);  // same shape, fresh inputs
  EXPECT_EQ(c.graphs_built(), built);
  run_case({8, 2, 64}, {0, 4, 29}, 64, rng);  // one more key
  EXPECT_EQ(c.graphs_built(), built + 1);
}

TEST(PrefillAttentionCudnn, RejectsBadParamsWithoutRunning) {
  REQUIRE_CUDNN();
  CudnnAttention& c = shared_cudnn();
  DeviceBuffer<uint16_t> buf(4096);
  auto* b = reinterpret_cast<__nv_bfloat16*>(buf.ptr);
  CudnnAttentionParams p;
  p.q = p.k = p.v = b;
  p.out = b;
  p.t_q = 4;
  p.t_kv = 4;
  p.num_heads = 8;
  p.num_kv_heads = 3;  // does not divide the heads
  p.head_dim = 64;
  EXPECT_EQ(c.run(p), cudaErrorInvalidValue);
  EXPECT_NE(c.last_error().find("num_kv_heads 3"), std::string::npos) << c.last_error();
  p.num_kv_heads = 2;
  p.t_kv = 3;  // fewer keys than queries
  EXPECT_EQ(c.run(p), cudaErrorInvalidValue);
  p.t_kv = 4;
  p.k = b + 1;  // 2 bytes off 16-byte alignment
  EXPECT_EQ(c.run(p), cudaErrorInvalidValue);
  EXPECT_NE(c.last_error().find("aligned"), std::string::npos) << c.last_error();
  p.k = b;
  p.head_dim = 60;
  EXPECT_EQ(c.run(p), cudaErrorInvalidValue);
  p.head_dim = 64;
  p.t_q = 0;  // nothing to do
  EXPECT_EQ(c.run(p), cudaSuccess);
}

// No device needed: a library that cannot be loaded is reported with its name, and run() then
// declines without launching anything.
TEST(PrefillAttentionCudnn, UnloadableLibraryIsReported) {
  CudnnAttention c("/nonexistent/libcudnn.so.9");
  EXPECT_FALSE(c.available());
  EXPECT_NE(c.unavailable_reason().find("/nonexistent/libcudnn.so.9"), std::string::npos)
      << c.unavailable_reason();
  CudnnAttentionParams p;
  p.t_q = p.t_kv = 1;
  p.num_heads = p.num_kv_heads = 1;
  p.head_dim = 64;
  alignas(16) static uint16_t host[64];  // never touched: nothing runs
  p.q = p.k = p.v = reinterpret_cast<const __nv_bfloat16*>(host);
  p.out = reinterpret_cast<__nv_bfloat16*>(host);
  EXPECT_EQ(c.run(p), cudaErrorNotSupported);
  EXPECT_EQ(c.last_error(), c.unavailable_reason());
}

}  // namespace
}  // namespace megaops
