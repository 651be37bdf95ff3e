// token_logprobs (include/megaops/engine.h): a generated token's log-probability and the top-N
// alternatives from one row of fp32 logits, on the host (the engine's thread, per token of each
// request that asks). Two passes over the row: the maximum and the top-N (a short sorted list,
// N <= 20, so no copy or sort of the vocabulary), then the sum of exponentials in double.
#include <algorithm>
#include <cmath>

#include "megaops/engine.h"

namespace megaops {

SampledLogprobs token_logprobs(const float* logits, int vocab, int token, int top_n) {
  const size_t n = static_cast<size_t>(std::clamp(top_n, 0, vocab));
  SampledLogprobs out;
  out.top.reserve(n + 1);
  float peak = -INFINITY;
  for (int i = 0; i < vocab; ++i) {
    const float x = logits[i];
    peak = std::max(peak, x);
    if (n == 0 || (out.top.size() == n && !(x > out.top.back().logprob))) continue;
    // After its equals: on ties the lower id (seen first) stays ahead.
    auto at = std::upper_bound(out.top.begin(), out.top.end(), x,
                               [](float v, const TokenLogprob& t) { return v > t.logprob; });
    out.top.insert(at, {i, x});
    if (out.top.size() > n) out.top.pop_back();
  }
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - peak);
  const double log_z = peak + std::log(sum);
  out.sampled = {token, static_cast<float>(logits[token] - log_z)};
  for (TokenLogprob& t : out.top) t.logprob = static_cast<float>(t.logprob - log_z);
  return out;
}

}  // namespace megaops
