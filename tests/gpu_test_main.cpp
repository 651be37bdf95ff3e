// Links into the GPU test binary so it exists (and reports its tests as skipped) even when a
// checkout has no GPU test sources yet; gtest_main provides main().
#include <gtest/gtest.h>
