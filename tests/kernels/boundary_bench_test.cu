// The kernel-boundary benchmark (kernels/boundary_bench.cuh): its chains run in order through
// memory, plain and under PDL (a chained kernel that read its predecessor's word before the
// predecessor wrote it would leave a word other than k + 1), its times are finite, and bad sizes
// are refused before any work.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "gpu_test_util.h"
#include "kernels/boundary_bench.cuh"
#include "kernels/hbm_read.cuh"

namespace megaops {
namespace {

TEST(BoundaryBench, ChainsRunInOrderPlainAndWithPdl) {
  MEGAOPS_REQUIRE_GPU();
  // Small slices (the boundaries dominate, so a PDL wait that let a kernel through early would
  // have the most room to show) and large ones (every SM busy with the predecessor).
  for (size_t bytes : {size_t{4096}, size_t{16} << 20}) {
    const BoundaryBenchResult r = measure_kernel_boundaries(bytes, 16, 3);
    ASSERT_EQ(r.plain_words.size(), 16u);
    ASSERT_EQ(r.pdl_words.size(), 16u);
    for (unsigned k = 0; k < 16; ++k) {
      EXPECT_EQ(r.plain_words[k], k + 1) << bytes << " bytes, kernel " << k;
      EXPECT_EQ(r.pdl_words[k], k + 1) << bytes << " bytes, kernel " << k;
    }
    for (double us : {r.flat_us, r.plain_us, r.pdl_us}) {
      EXPECT_TRUE(std::isfinite(us) && us > 0) << us;
    }
    std::printf("%zu bytes a kernel: plain boundary %.3f us, pdl boundary %.3f us\n", bytes,
                r.plain_boundary_us(), r.pdl_boundary_us());
  }
}

TEST(BoundaryBench, RefusesBadSizes) {
  MEGAOPS_REQUIRE_GPU();
  EXPECT_THROW(measure_kernel_boundaries(4096, 1, 3), InputError);
  EXPECT_THROW(measure_kernel_boundaries(8, 4, 3), InputError);
  EXPECT_THROW(measure_kernel_boundaries(4096, 4, 0), InputError);
  HbmReadParams p;  // no buffers
  EXPECT_EQ(hbm_read(p), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace megaops
