// token_logprobs (include/megaops/engine.h): a generated token's log-probability and the top-N
// alternatives from one row of fp32 logits, on the host. The log-softmax sums in double so the
// values do not depend on the vocabulary's size beyond float rounding of the result.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "megaops/engine.h"

namespace megaops {

SampledLogprobs token_logprobs(const float* logits, int vocab, int token, int top_n) {
  double peak = -INFINITY;
  for (int i = 0; i < vocab; ++i) peak = std::max(peak, static_cast<double>(logits[i]));
  double sum = 0;
  for (int i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - peak);
  const double log_z = peak + std::log(sum);
  const auto logprob = [&](int i) { return static_cast<float>(logits[i] - log_z); };
  SampledLogprobs out;
  out.sampled = {token, logprob(token)};
  const int n = std::clamp(top_n, 0, vocab);
  std::vector<int> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (int k = 0; k < n; ++k) out.top.push_back({ids[k], logprob(ids[k])});
  return out;
}

}  // namespace megaops
