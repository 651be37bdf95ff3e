// See logits_check.h.
#include "reference/logits_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>

#include "core/error.h"
#include "reference/ops.h"

namespace megaops::ref {

double logits_rel_error(const float* ours, const float* want, int n) {
  double num = 0, den = 0;
  for (int i = 0; i < n; ++i) {
    if (!std::isfinite(ours[i])) return INFINITY;
    num += (double(ours[i]) - want[i]) * (double(ours[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

double top2_margin(const float* want, int n) {
  if (n < 2) return INFINITY;
  std::vector<float> sorted(want, want + n);
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
  return (sorted[0] - sorted[1]) / std::max(1e-6f, std::fabs(sorted[0]));
}

namespace {

void check_positive(double v, const char* name) {
  if (!(v > 0) || !std::isfinite(v))
    throw_input_error(name, "", "expected a finite value > 0, found " + std::to_string(v));
}

std::string format(const char* fmt, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), fmt, a, b, c);
  return buf;
}

}  // namespace

void check_logits_options(const LogitsCheckOptions& o) {
  check_positive(o.tolerance, "--tolerance");
  check_positive(o.bf16_factor, "--bf16-factor");
  check_positive(o.bf16_cap, "--bf16-cap");
  check_positive(o.unreliable_above, "--unreliable-above");
}

LogitsVerdict judge_logits(const LogitsCheckOptions& o, int vocab, const std::vector<float>& fp32,
                           const std::vector<float>& bf16, const std::vector<int>& tokens,
                           const std::vector<float>& ours) {
  check_logits_options(o);
  if (vocab < 1) throw_input_error("check-logits", "vocab", "expected >= 1");
  const size_t steps = tokens.size();
  const size_t want = steps * static_cast<size_t>(vocab);
  if (fp32.size() != want || ours.size() != want || (!bf16.empty() && bf16.size() != want))
    throw_input_error("check-logits", "logits",
                      "expected " + std::to_string(want) +
                          " values (steps x vocab) in each of "
                          "the reference's and ours, found " +
                          std::to_string(fp32.size()) + ", " + std::to_string(bf16.size()) +
                          " and " + std::to_string(ours.size()));
  LogitsVerdict v;
  v.steps.resize(steps);
  const bool have_bf16 = !bf16.empty();
  if (have_bf16) {
    v.hf_bf16_worst = 0;
    for (size_t s = 0; s < steps; ++s) {
      v.steps[s].hf_bf16_rel_error =
          logits_rel_error(bf16.data() + s * vocab, fp32.data() + s * vocab, vocab);
      v.hf_bf16_worst = std::max(v.hf_bf16_worst, v.steps[s].hf_bf16_rel_error);
    }
  }
  // A NaN in HF's bf16 run is as unreliable as a large error.
  v.reference_unreliable = have_bf16 && !(v.hf_bf16_worst <= o.unreliable_above);
  if (!have_bf16) {
    v.bound = o.tolerance;
    v.yardstick = format("HF's bf16 run not recorded in the reference; bound %.3e", v.bound);
  } else if (v.reference_unreliable) {
    v.bound = o.tolerance;
    v.yardstick = format(
        "reference unreliable: HF bf16 vs fp32 rel err %.3e (over %.1e), so it does not loosen "
        "the bound; bound %.3e",
        v.hf_bf16_worst, o.unreliable_above, v.bound);
  } else {
    v.bound = std::max(o.tolerance, std::min(o.bf16_cap, o.bf16_factor * v.hf_bf16_worst));
    v.yardstick = format("HF's own bf16 run %.3e; bound max(%.1e, min(%.1e, ", v.hf_bf16_worst,
                         o.tolerance, o.bf16_cap) +
                  format("%.2f x %.3e)) = %.3e", o.bf16_factor, v.hf_bf16_worst, v.bound);
  }
  for (size_t s = 0; s < steps; ++s) {
    LogitsStep& st = v.steps[s];
    const float* w = fp32.data() + s * vocab;
    st.rel_error = logits_rel_error(ours.data() + s * vocab, w, vocab);
    v.worst = std::max(v.worst, st.rel_error);
    st.ref_margin = top2_margin(w, vocab);
    st.ref_token = tokens[s];
    st.our_token = argmax(ours.data() + s * vocab, vocab);
    st.token_must_match = st.ref_margin > o.tolerance;
    if (st.token_must_match) {
      ++v.tokens_compared;
      v.token_mismatches += st.our_token != st.ref_token;
    }
    v.steps_over_bound += !(st.rel_error <= v.bound);
  }
  v.pass = v.steps_over_bound == 0 && v.token_mismatches == 0;
  return v;
}

}  // namespace megaops::ref
