// The verdict of `megaops check-logits`: a run's logits, one row per teacher-forced step, against
// HF transformers' fp32 logits of the same tokens. bf16 error grows with depth, so where the
// reference also holds HF's own bf16 logits, the bound follows HF's bf16 error — but capped, so a
// deep model's bound stays a bound, and never loosened by a reference whose bf16 run is itself far
// off (as HF's bf16 run was 82% from its fp32 run after a 4,096-token prompt): such a reference is
// reported as unreliable and the verdict keeps the fixed tolerance. Pure CPU code.
#pragma once

#include <string>
#include <vector>

namespace megaops::ref {

// unreliable_above sits between what HF's bf16 runs measured on sound references (at most 0.20:
// llama3.1-8b, 32-token prompt, bench/results/2026-12-04-s27-call5) and the broken one (0.82).
struct LogitsCheckOptions {
  double tolerance = 2e-2;        // relative error always accepted
  double bf16_factor = 1.25;      // accept this multiple of HF's own bf16 error...
  double bf16_cap = 5e-2;         // ... up to this bound at most
  double unreliable_above = 0.5;  // HF's bf16 error above this: the reference's bf16 is not used
};

struct LogitsStep {
  double rel_error = 0;           // ||ours - fp32|| / ||fp32||; infinity with NaN or Inf in ours
  double hf_bf16_rel_error = -1;  // HF's bf16 against its fp32; -1: not recorded
  double ref_margin = 0;          // the reference's top-2 margin, relative to its top logit
  int ref_token = -1, our_token = -1;
  bool token_must_match = false;  // margin wider than the tolerance
};

struct LogitsVerdict {
  std::vector<LogitsStep> steps;
  double hf_bf16_worst = -1;  // -1: the reference holds no bf16 logits
  bool reference_unreliable = false;
  double bound = 0;
  double worst = 0;
  int steps_over_bound = 0, tokens_compared = 0, token_mismatches = 0;
  bool pass = false;
  std::string yardstick;  // how the bound was set, in words
};

// InputError naming the first option that is not a finite value > 0 ("--bf16-cap: expected ...").
void check_logits_options(const LogitsCheckOptions& options);

// ||ours - want|| / ||want|| over one row of n; infinity if `ours` holds NaN or Inf.
double logits_rel_error(const float* ours, const float* want, int n);

// The top-2 margin of `want`, relative to the top logit's magnitude (infinity for n < 2).
double top2_margin(const float* want, int n);

// Judges `ours` ([steps, vocab]) against the reference: `fp32` ([steps, vocab]), `bf16` (the same
// shape, or empty when not recorded) and `tokens` (steps). Every step's relative error must be
// within the bound: max(tolerance, min(bf16_cap, bf16_factor x HF's worst bf16 error)) where the
// reference's bf16 error is at most unreliable_above, else the tolerance; our greedy token must
// equal the reference's wherever its top-2 margin is wider than the tolerance. InputError on
// mismatched sizes or options outside their ranges.
LogitsVerdict judge_logits(const LogitsCheckOptions& options, int vocab,
                           const std::vector<float>& fp32, const std::vector<float>& bf16,
                           const std::vector<int>& tokens, const std::vector<float>& ours);

}  // namespace megaops::ref
