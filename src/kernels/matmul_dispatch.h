// The matmul dispatch rule, by the name kernels/ and tools/ include it: the rule itself is in
// core/matmul_dispatch.h, where the planner can read it without depending on kernels/.
#pragma once

#include "core/matmul_dispatch.h"
