// `megaops check-logits`: teacher-forced comparison of the GPU executor against reference logits
// from HF transformers (scripts/hf_compare.py): the prompt, then each reference token fed in turn;
// every step's logits must be within the relative tolerance, and our greedy token must equal the
// reference's wherever the reference's top-2 margin is wider than that tolerance.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "models/checkpoint.h"
#include "reference/ops.h"

#ifdef MEGAOPS_HAVE_CUDA
#include "planner/planner.h"
#include "runtime/conventional.h"
#endif

namespace megaops::cli {

#ifdef MEGAOPS_HAVE_CUDA
namespace {

std::vector<float> read_f32(const SafetensorsFile& f, const std::string& name) {
  const TensorView* t = f.find(name);
  if (!t) throw_input_error(f.path(), "tensor " + name, "missing");
  std::vector<float> out(t->numel());
  to_float(t->dtype, t->data, out.data(), out.size());
  return out;
}

}  // namespace
#endif

Runner add_check_logits(CLI::App& app) {
  struct Opts {
    std::string model, expected, json_out, prefill = "layers";
    double tol = 2e-2;
    bool pdl = false;
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--model", o->model, "checkpoint directory")->required();
  app.add_option("--expected", o->expected, "reference safetensors from scripts/hf_compare.py")
      ->required();
  app.add_option("--tolerance", o->tol, "per-step relative error bound");
  app.add_option("--json", o->json_out, "write per-step errors here");
  app.add_flag("--pdl", o->pdl, "use PDL launches");
  app.add_option("--prefill", o->prefill,
                 "layers (default) or graph: the prompt as rows of the captured decode step");
  return [o]() -> int {
#ifdef MEGAOPS_HAVE_CUDA
    const PrefillPath prefill_path = parse_prefill_path(o->prefill, "--prefill");
    const Checkpoint ckpt = Checkpoint::open(o->model);
    const auto ref = SafetensorsFile::open(o->expected);
    const std::vector<float> prompt_f = read_f32(*ref, "prompt_ids");
    const std::vector<float> tokens_f = read_f32(*ref, "tokens");
    const std::vector<float> logits = read_f32(*ref, "step_logits");
    const int vocab = ckpt.config().vocab_size;
    const size_t steps = tokens_f.size();
    if (logits.size() != steps * vocab)
      throw_input_error(o->expected, "step_logits",
                        "expected " + std::to_string(steps * vocab) + " values, found " +
                            std::to_string(logits.size()));
    std::vector<int> prompt(prompt_f.begin(), prompt_f.end());
    ExecutorOptions eo;
    eo.max_batch = 1;
    eo.max_seq = static_cast<int>(prompt.size() + steps + 1);
    eo.pdl = o->pdl;
    eo.prefill_path = prefill_path;
    // The graph path replays at most max_batch rows: the whole prompt in one replay if it fits.
    if (prefill_path == PrefillPath::DecodeGraph)
      eo.max_batch = ttft_replays(static_cast<int>(prompt.size())).replay_rows;
    ConventionalExecutor ex(ckpt.config(), checkpoint_filler(ckpt), eo);
    ex.prefill({prompt});
    nlohmann::json per_step = nlohmann::json::array();
    int failures = 0, compared_tokens = 0, token_mismatch = 0;
    double worst = 0;
    for (size_t s = 0; s < steps; ++s) {
      if (s > 0) {
        const std::vector<int> forced{static_cast<int>(tokens_f[s - 1])};
        ex.decode_step(&forced);
      }
      const std::vector<float> ours = ex.last_logits();
      const float* want = logits.data() + s * vocab;
      double num = 0, den = 0;
      bool finite = true;
      for (int i = 0; i < vocab; ++i) {
        finite = finite && std::isfinite(ours[i]);
        num += (double(ours[i]) - want[i]) * (double(ours[i]) - want[i]);
        den += double(want[i]) * want[i];
      }
      const double rel = finite ? std::sqrt(num / den) : INFINITY;
      worst = std::max(worst, rel);
      // Reference top-2 margin, relative to the top logit's magnitude.
      std::vector<float> sorted(want, want + vocab);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
      const double margin = (sorted[0] - sorted[1]) / std::max(1e-6f, std::fabs(sorted[0]));
      const int ours_tok = ref::argmax(ours.data(), vocab);
      const int ref_tok = static_cast<int>(tokens_f[s]);
      const bool must_match = margin > o->tol;
      if (must_match) {
        ++compared_tokens;
        if (ours_tok != ref_tok) ++token_mismatch;
      }
      if (rel > o->tol) ++failures;
      per_step.push_back({{"step", s},
                          {"rel_error", finite ? rel : -1.0},
                          {"ref_token", ref_tok},
                          {"our_token", ours_tok},
                          {"ref_margin", margin},
                          {"token_must_match", must_match}});
    }
    const bool ok = failures == 0 && token_mismatch == 0;
    std::printf(
        "check-logits %s: %zu steps, worst relative error %.3e (tolerance %.1e), %d steps over; "
        "greedy tokens compared at %d steps with margin > tolerance, %d mismatches: %s\n",
        o->model.c_str(), steps, worst, o->tol, failures, compared_tokens, token_mismatch,
        ok ? "PASS" : "FAIL");
    if (!o->json_out.empty()) {
      std::ofstream f(o->json_out);
      f << nlohmann::json{{"model", o->model},
                          {"tolerance", o->tol},
                          {"worst_rel_error", worst},
                          {"steps_over_tolerance", failures},
                          {"tokens_compared", compared_tokens},
                          {"token_mismatches", token_mismatch},
                          {"pass", ok},
                          {"steps", per_step}}
               .dump(2)
        << "\n";
    }
    return ok ? 0 : 1;
#else
    throw DeviceError("check-logits: this build has no CUDA support");
#endif
  };
}

}  // namespace megaops::cli
