// GPU embedding gather against ref::embedding: a copy of bf16 values into fp32 is exact, so the
// comparison is exact too.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/embedding.cuh"
#include "reference/ops.h"

namespace megaops {
namespace {

using testing::DeviceBuffer;

void run_embedding_case(int n, int hidden, int vocab, bool pdl, std::mt19937_64& rng) {
  SCOPED_TRACE("n=" + std::to_string(n) + " hidden=" + std::to_string(hidden) +
               " pdl=" + std::to_string(pdl));
  const auto table_bits = testing::to_bf16_bits(
      testing::random_floats(static_cast<size_t>(vocab) * hidden, -2, 2, rng));
  const auto table = testing::from_bf16_bits(table_bits);
  std::vector<int32_t> ids(n);
  std::uniform_int_distribution<int> pick(0, vocab - 1);
  for (auto& id : ids) id = pick(rng);
  ids[0] = vocab - 1;  // the last row: catches an off-by-one in the row offset

  DeviceBuffer<uint16_t> d_table(table_bits.size());
  DeviceBuffer<int32_t> d_ids(n);
  DeviceBuffer<float> d_out(static_cast<size_t>(n) * hidden);
  d_table.upload(table_bits);
  d_ids.upload(ids);
  d_out.poison();

  EmbeddingParams p;
  p.ids = d_ids.ptr;
  p.table = reinterpret_cast<const bf16*>(d_table.ptr);
  p.out = d_out.ptr;
  p.n = n;
  p.hidden = hidden;
  p.vocab = vocab;
  p.launch.pdl = pdl;
  ASSERT_EQ(launch_embedding(p), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<float> expect(static_cast<size_t>(n) * hidden);
  ref::embedding(table.data(), ids.data(), expect.data(), n, hidden);
  const auto got = d_out.download();
  // Tolerance: exact (bf16 -> fp32 is lossless).
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], expect[i]) << "at " << i;
}

TEST(Embedding, MatchesReference) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed());
  for (int hidden : {8, 24, 2056, 4096})
    for (int n : {1, 7, 64})
      for (bool pdl : {false, true}) run_embedding_case(n, hidden, 1000, pdl, rng);
}

TEST(Embedding, RejectsBadShapes) {
  MEGAOPS_REQUIRE_GPU();
  DeviceBuffer<uint16_t> table(64);
  DeviceBuffer<int32_t> ids(1);
  DeviceBuffer<float> out(64);
  EmbeddingParams p;
  p.ids = ids.ptr;
  p.table = reinterpret_cast<const bf16*>(table.ptr);
  p.out = out.ptr;
  p.n = 1;
  p.vocab = 4;
  p.hidden = 12;  // not a multiple of 8
  EXPECT_EQ(launch_embedding(p), cudaErrorInvalidValue);
  p.hidden = 16;
  p.table = nullptr;
  EXPECT_EQ(launch_embedding(p), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace megaops
