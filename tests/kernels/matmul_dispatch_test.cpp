// The default matmul dispatch (kernels/matmul_dispatch.h) is a pure rule on the shape and PDL,
// shared by MatmulContext and the planner: checked here on the CPU for the shapes of the presets.
#include "kernels/matmul_dispatch.h"

#include <gtest/gtest.h>

namespace megaops {
namespace {

TEST(MatmulDispatch, SmallModelsStayOnSmallMWithAndWithoutPdl) {
  for (bool pdl : {false, true}) {
    EXPECT_EQ(matmul_dispatch_path(1, 3072, 2048, pdl), MatmulPath::SmallM);  // llama3.2-1b QKV
    EXPECT_EQ(matmul_dispatch_path(1, 2048, 2048, pdl), MatmulPath::SmallM);  // its O
    EXPECT_EQ(matmul_dispatch_path(1, 4096, 1024, pdl), MatmulPath::SmallM);  // qwen3-0.6b QKV
    EXPECT_EQ(matmul_dispatch_path(1, 1024, 2048, pdl), MatmulPath::SmallM);  // its O
  }
}

TEST(MatmulDispatch, EightBQkvAndOStreamOnlyUnderPdlAtBatchOne) {
  // llama3.1-8b / qwen3-8b: QKV 6144 x 4096, O 4096 x 4096.
  EXPECT_EQ(matmul_dispatch_path(1, 6144, 4096, true), MatmulPath::Stream);
  EXPECT_EQ(matmul_dispatch_path(1, 4096, 4096, true), MatmulPath::Stream);
  EXPECT_EQ(matmul_dispatch_path(1, 6144, 4096, false), MatmulPath::CublasLt);
  EXPECT_EQ(matmul_dispatch_path(1, 4096, 4096), MatmulPath::CublasLt);  // PDL off by default
  for (int m : {2, 8, 32})
    EXPECT_EQ(matmul_dispatch_path(m, 6144, 4096, true), MatmulPath::CublasLt) << "m " << m;
}

TEST(MatmulDispatch, LongWeightStreamsStayOnCublasLt) {
  for (bool pdl : {false, true}) {
    EXPECT_EQ(matmul_dispatch_path(1, 28672, 4096, pdl), MatmulPath::CublasLt);   // 8B gate_up
    EXPECT_EQ(matmul_dispatch_path(1, 4096, 14336, pdl), MatmulPath::CublasLt);   // 8B down
    EXPECT_EQ(matmul_dispatch_path(1, 128256, 4096, pdl), MatmulPath::CublasLt);  // 8B LM head
    EXPECT_EQ(matmul_dispatch_path(1, 16384, 2048, pdl), MatmulPath::CublasLt);   // 1B gate_up
    EXPECT_EQ(matmul_dispatch_path(32, 3072, 2048, pdl), MatmulPath::CublasLt);   // prefill
  }
}

}  // namespace
}  // namespace megaops
