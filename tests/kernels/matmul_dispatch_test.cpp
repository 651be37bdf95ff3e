// The default matmul dispatch (kernels/matmul_dispatch.h) is a pure rule on the shape, PDL and
// whether the GPU runs the streaming kernel's bulk version, shared by MatmulContext and the
// planner: checked here on the CPU for the shapes of the presets.
#include "kernels/matmul_dispatch.h"

#include <gtest/gtest.h>

namespace megaops {
namespace {

TEST(MatmulDispatch, SmallModelsStreamAtBatchOneWhereBulkCopiesRun) {
  for (bool pdl : {false, true}) {
    EXPECT_EQ(matmul_dispatch_path(1, 3072, 2048, pdl), MatmulPath::Stream);  // llama3.2-1b QKV
    EXPECT_EQ(matmul_dispatch_path(1, 2048, 2048, pdl), MatmulPath::Stream);  // its O
    EXPECT_EQ(matmul_dispatch_path(1, 2048, 8192, pdl), MatmulPath::Stream);  // its down
    EXPECT_EQ(matmul_dispatch_path(1, 4096, 1024, pdl), MatmulPath::Stream);  // qwen3-0.6b QKV
    EXPECT_EQ(matmul_dispatch_path(1, 1024, 2048, pdl), MatmulPath::Stream);  // its O
    EXPECT_EQ(matmul_dispatch_path(1, 1024, 3072, pdl), MatmulPath::Stream);  // its down
    EXPECT_EQ(matmul_dispatch_path(1, 6144, 1024, pdl), MatmulPath::Stream);  // its gate_up
    // Batch 2 and up, and GPUs without bulk copies: the small-m kernel and cuBLASLt as before.
    for (int m : {2, 8}) {
      EXPECT_EQ(matmul_dispatch_path(m, 3072, 2048, pdl), MatmulPath::SmallM) << "m " << m;
      EXPECT_EQ(matmul_dispatch_path(m, 2048, 8192, pdl), MatmulPath::CublasLt) << "m " << m;
    }
    EXPECT_EQ(matmul_dispatch_path(1, 3072, 2048, pdl, false), MatmulPath::SmallM);
    EXPECT_EQ(matmul_dispatch_path(1, 1024, 2048, pdl, false), MatmulPath::SmallM);
    EXPECT_EQ(matmul_dispatch_path(1, 2048, 8192, pdl, false), MatmulPath::CublasLt);
    EXPECT_EQ(matmul_dispatch_path(1, 6144, 1024, pdl, false), MatmulPath::SmallM);
    EXPECT_EQ(matmul_dispatch_path(2, 6144, 1024, pdl), MatmulPath::SmallM);
  }
}

TEST(MatmulDispatch, EightBQkvAndOStreamOnlyUnderPdlAtBatchOne) {
  // llama3.1-8b / qwen3-8b: QKV 6144 x 4096, O 4096 x 4096; either streaming version.
  for (bool bulk : {true, false}) {
    EXPECT_EQ(matmul_dispatch_path(1, 6144, 4096, true, bulk), MatmulPath::Stream);
    EXPECT_EQ(matmul_dispatch_path(1, 4096, 4096, true, bulk), MatmulPath::Stream);
    EXPECT_EQ(matmul_dispatch_path(1, 6144, 4096, false, bulk), MatmulPath::CublasLt);
    for (int m : {2, 8, 32})
      EXPECT_EQ(matmul_dispatch_path(m, 6144, 4096, true, bulk), MatmulPath::CublasLt) << "m " << m;
  }
  EXPECT_EQ(matmul_dispatch_path(1, 4096, 4096), MatmulPath::CublasLt);  // PDL off by default
}

// The long weight streams (gate_up, the 8B's down, the LM heads) at batch 1: on the bulk kernel
// with either PDL setting since its ring is aligned (matmul_dispatch.h); on cuBLASLt without bulk
// copies, at larger batches and for prefill.
TEST(MatmulDispatch, LongWeightStreamsOnTheBulkKernelAtBatchOne) {
  for (bool pdl : {false, true}) {
    for (bool bulk : {true, false}) {
      const MatmulPath want = bulk ? MatmulPath::Stream : MatmulPath::CublasLt;
      EXPECT_EQ(matmul_dispatch_path(1, 28672, 4096, pdl, bulk), want);   // llama3.1-8b gate_up
      EXPECT_EQ(matmul_dispatch_path(1, 4096, 14336, pdl, bulk), want);   // its down
      EXPECT_EQ(matmul_dispatch_path(1, 24576, 4096, pdl, bulk), want);   // qwen3-8b gate_up
      EXPECT_EQ(matmul_dispatch_path(1, 4096, 12288, pdl, bulk), want);   // its down
      EXPECT_EQ(matmul_dispatch_path(1, 16384, 2048, pdl, bulk), want);   // llama3.2-1b gate_up
      EXPECT_EQ(matmul_dispatch_path(1, 128256, 4096, pdl, bulk), want);  // llama3.1-8b LM head
      EXPECT_EQ(matmul_dispatch_path(1, 151936, 4096, pdl, bulk), want);  // qwen3-8b's
      EXPECT_EQ(matmul_dispatch_path(1, 128256, 2048, pdl, bulk), want);  // llama3.2-1b's
      EXPECT_EQ(matmul_dispatch_path(1, 151936, 1024, pdl, bulk), want);  // qwen3-0.6b's
      EXPECT_EQ(matmul_dispatch_path(32, 3072, 2048, pdl, bulk), MatmulPath::CublasLt);  // prefill
      for (int m : {2, 8, 32}) {
        EXPECT_EQ(matmul_dispatch_path(m, 28672, 4096, pdl, bulk), MatmulPath::CublasLt) << m;
        EXPECT_EQ(matmul_dispatch_path(m, 4096, 14336, pdl, bulk), MatmulPath::CublasLt) << m;
        EXPECT_EQ(matmul_dispatch_path(m, 16384, 2048, pdl, bulk), MatmulPath::CublasLt) << m;
        EXPECT_EQ(matmul_dispatch_path(m, 128256, 4096, pdl, bulk), MatmulPath::CublasLt) << m;
      }
    }
    // Past the rules' bounds: between the gate_up and LM head widths, k past the 8B's, and x too
    // long for shared memory (k > 16384 at m = 1).
    EXPECT_EQ(matmul_dispatch_path(1, 32769, 4096, pdl), MatmulPath::CublasLt);
    EXPECT_EQ(matmul_dispatch_path(1, 65535, 4096, pdl), MatmulPath::CublasLt);
    EXPECT_EQ(matmul_dispatch_path(1, 65536, 4096, pdl), MatmulPath::Stream);
    EXPECT_EQ(matmul_dispatch_path(1, 28672, 4104, pdl), MatmulPath::CublasLt);
    EXPECT_EQ(matmul_dispatch_path(1, 4096, 16392, pdl), MatmulPath::CublasLt);
    EXPECT_EQ(matmul_dispatch_path(1, 128256, 16392, pdl), MatmulPath::CublasLt);
  }
}

// The dynamic schedule where a launch has six row blocks a CTA or more: the 8B-class gate_up
// (3584 / 3072 row blocks on 396 CTAs) and the LM heads, not the 1B's gate_up (2048) or the
// launches of a few blocks a CTA.
TEST(MatmulDispatch, DynamicScheduleForManyRowBlocksACta) {
  EXPECT_TRUE(matmul_stream_dynamic(28672 / 8, 396));
  EXPECT_TRUE(matmul_stream_dynamic(24576 / 8, 396));
  EXPECT_TRUE(matmul_stream_dynamic(128256 / 8, 396));
  EXPECT_FALSE(matmul_stream_dynamic(16384 / 8, 396));
  EXPECT_FALSE(matmul_stream_dynamic(4096 / 8, 264));
  EXPECT_TRUE(matmul_stream_dynamic(6 * 100, 100));
  EXPECT_FALSE(matmul_stream_dynamic(6 * 100 - 1, 100));
  EXPECT_FALSE(matmul_stream_dynamic(100, 0));
}

// The bulk streaming kernel's CTAs an SM: what fits, but two at most for rows of 4096 and more in
// matrices of at most 8192 rows.
TEST(MatmulDispatch, LongRowsStreamWithTwoCtasAnSm) {
  EXPECT_EQ(matmul_stream_ctas_per_sm(3, 3072, 2048), 3);   // llama3.2-1b QKV
  EXPECT_EQ(matmul_stream_ctas_per_sm(3, 16384, 2048), 3);  // its gate_up
  EXPECT_EQ(matmul_stream_ctas_per_sm(3, 4096, 4095), 3);
  EXPECT_EQ(matmul_stream_ctas_per_sm(3, 6144, 4096), 2);   // the 8B presets' QKV
  EXPECT_EQ(matmul_stream_ctas_per_sm(3, 4096, 4096), 2);   // their O
  EXPECT_EQ(matmul_stream_ctas_per_sm(3, 2048, 8192), 2);   // llama3.2-1b down
  EXPECT_EQ(matmul_stream_ctas_per_sm(3, 4096, 14336), 2);  // llama3.1-8b down
  EXPECT_EQ(matmul_stream_ctas_per_sm(3, 8192, 4096), 2);
  EXPECT_EQ(matmul_stream_ctas_per_sm(3, 8193, 4096), 3);
  EXPECT_EQ(matmul_stream_ctas_per_sm(3, 28672, 4096), 3);   // llama3.1-8b gate_up
  EXPECT_EQ(matmul_stream_ctas_per_sm(3, 128256, 4096), 3);  // its LM head
  EXPECT_EQ(matmul_stream_ctas_per_sm(2, 4096, 14336), 2);   // what fits stays the bound below two
  EXPECT_EQ(matmul_stream_ctas_per_sm(1, 4096, 14336), 1);
  EXPECT_EQ(matmul_stream_ctas_per_sm(1, 1024, 1024), 1);
}

}  // namespace
}  // namespace megaops
