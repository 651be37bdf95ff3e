// The embedding launcher's parameter checks. Its comparison with ref::embedding (exact: a copy of
// bf16 values into fp32) runs in the op table, tests/ops/op_harness_test.cu (embedding_* rows).
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "kernels/embedding.cuh"

namespace megaops {
namespace {

using testing::DeviceBuffer;

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
