// Token values shared by the GPU samplers, the CPU oracle and the code that reads their output.
#pragma once

#include <cstdint>

namespace megaops {

// What a sampler returns instead of a token for a row of logits holding NaN or Inf: such a row has
// no meaningful next token, and whoever reads it reports an error naming the step.
constexpr int32_t NONFINITE_LOGITS_TOKEN = -1;

}  // namespace megaops
