// `megaops check-logits`: teacher-forced comparison of the GPU executor against reference logits
// from HF transformers (scripts/hf_compare.py): the prompt, then each reference token fed in turn.
// bf16 error grows with depth, so the bound is the reference framework's own precision: where the
// reference file holds HF's bf16 logits of the same tokens (step_logits_bf16), every step's
// relative error must be within max(--tolerance, --bf16-factor x HF-bf16's worst error against its
// fp32 run); without them, within --tolerance. Our greedy token must equal the reference's
// wherever the reference's top-2 margin is wider than --tolerance (a fixed margin: the bf16-derived
// bound of a deep model can exceed every margin and would compare no token at all). The step runs
// a plan as generate's does (--plan FILE, the step flags, or the default plan for one sequence).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "core/run_options.h"
#include "io/safetensors.h"
#include "models/checkpoint.h"
#include "plan_flags.h"
#include "reference/ops.h"
#include "runtime_flags.h"

#ifdef MEGAOPS_HAVE_CUDA
#include "models/step_graph.h"
#include "planner/planner.h"
#include "runtime/conventional.h"
#endif

namespace megaops::cli {
namespace {

struct Opts {
  std::string model, expected, json_out, prefill = "layers";
  std::string plan_file;  // --plan
  double tol = 2e-2, bf16_factor = 1.25;
  bool pdl = false;
  RuntimeFlags runtime;
};

}  // namespace

#ifdef MEGAOPS_HAVE_CUDA
namespace {

std::vector<float> read_f32(const SafetensorsFile& f, const std::string& name) {
  const TensorView* t = f.find(name);
  if (!t) throw_input_error(f.path(), "tensor " + name, "missing");
  std::vector<float> out(t->numel());
  to_float(t->dtype, t->data, out.data(), out.size());
  return out;
}

// Token ids stored as floats: each must be an integer in [0, vocab).
std::vector<int> read_ids(const SafetensorsFile& f, const std::string& name, int vocab) {
  std::vector<int> ids;
  for (float v : read_f32(f, name)) {
    if (!(v >= 0 && v < static_cast<float>(vocab)) || v != std::floor(v))
      throw_input_error(
          f.path(), "tensor " + name,
          "expected token ids in [0, " + std::to_string(vocab) + "), found " + std::to_string(v));
    ids.push_back(static_cast<int>(v));
  }
  if (ids.empty()) throw_input_error(f.path(), "tensor " + name, "expected ids, found none");
  return ids;
}

// ||ours - want|| / ||want|| over one row; infinity if `ours` holds NaN or Inf.
double rel_error(const float* ours, const float* want, int n) {
  double num = 0, den = 0;
  for (int i = 0; i < n; ++i) {
    if (!std::isfinite(ours[i])) return INFINITY;
    num += (double(ours[i]) - want[i]) * (double(ours[i]) - want[i]);
    den += double(want[i]) * want[i];
  }
  return std::sqrt(num / den);
}

// The reference's top-2 margin, relative to the top logit's magnitude.
double top2_margin(const float* want, int n) {
  if (n < 2) return INFINITY;
  std::vector<float> sorted(want, want + n);
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
  return (sorted[0] - sorted[1]) / std::max(1e-6f, std::fabs(sorted[0]));
}

struct Reference {
  std::vector<int> prompt, tokens;
  std::vector<float> logits, logits_bf16;  // [steps, vocab]; bf16 empty when not recorded
};

Reference read_reference(const std::string& path, int vocab) {
  const auto f = SafetensorsFile::open(path);
  Reference r;
  r.prompt = read_ids(*f, "prompt_ids", vocab);
  r.tokens = read_ids(*f, "tokens", vocab);
  const size_t want = r.tokens.size() * static_cast<size_t>(vocab);
  r.logits = read_f32(*f, "step_logits");
  if (r.logits.size() != want)
    throw_input_error(path, "step_logits",
                      "expected " + std::to_string(want) + " values (tokens x vocab), found " +
                          std::to_string(r.logits.size()));
  if (f->find("step_logits_bf16")) {
    r.logits_bf16 = read_f32(*f, "step_logits_bf16");
    if (r.logits_bf16.size() != want)
      throw_input_error(path, "step_logits_bf16",
                        "expected " + std::to_string(want) + " values (tokens x vocab), found " +
                            std::to_string(r.logits_bf16.size()));
  }
  for (size_t i = 0; i < r.logits.size(); ++i)
    if (!std::isfinite(r.logits[i]))
      throw_input_error(path, "step_logits",
                        "expected finite values, found " + std::to_string(r.logits[i]) +
                            " at index " + std::to_string(i));
  return r;
}

int run_check(const Opts& o, PrefillPath prefill_path, PlanChoice plan) {
  const Checkpoint ckpt = Checkpoint::open(o.model);
  const int vocab = ckpt.config().vocab_size;
  const Reference ref = read_reference(o.expected, vocab);
  const size_t steps = ref.tokens.size();
  ExecutorOptions eo;
  eo.step_graph = build_step_graph;
  apply_runtime_flags(o.runtime, eo);
  eo.max_batch = 1;
  eo.max_seq =
      context_length(o.expected + ": prompt_ids/tokens",
                     {static_cast<int64_t>(ref.prompt.size()), static_cast<int64_t>(steps), 1},
                     ckpt.config().max_position_embeddings, o.model);
  eo.pdl = o.pdl;
  eo.prefill_path = prefill_path;
  settle_plan(plan, eo);
  // The graph path replays at most max_batch rows: the whole prompt in one replay if it fits.
  if (eo.prefill_path == PrefillPath::DecodeGraph)
    eo.max_batch = ttft_replays(static_cast<int>(ref.prompt.size())).replay_rows;
  print_plan_line(plan);
  ConventionalExecutor ex(ckpt.config(), checkpoint_filler(ckpt), eo);
  check_and_set_regions(plan, ex);
  ex.prefill({ref.prompt});
  print_prefill_attention_note(ex);

  // HF's own bf16 error against its fp32 run, per step and at worst: the yardstick.
  const bool have_bf16 = !ref.logits_bf16.empty();
  std::vector<double> hf_bf16(steps, 0.0);
  double hf_bf16_worst = 0;
  for (size_t s = 0; have_bf16 && s < steps; ++s) {
    hf_bf16[s] =
        rel_error(ref.logits_bf16.data() + s * vocab, ref.logits.data() + s * vocab, vocab);
    hf_bf16_worst = std::max(hf_bf16_worst, hf_bf16[s]);
  }
  const double bound = have_bf16 ? std::max(o.tol, o.bf16_factor * hf_bf16_worst) : o.tol;

  nlohmann::json per_step = nlohmann::json::array();
  int failures = 0, compared_tokens = 0, token_mismatch = 0;
  double worst = 0;
  for (size_t s = 0; s < steps; ++s) {
    if (s > 0) {
      const std::vector<int> forced{ref.tokens[s - 1]};
      ex.decode_step(&forced);
    }
    const std::vector<float> ours = ex.last_logits();
    const float* want = ref.logits.data() + s * vocab;
    const double rel = rel_error(ours.data(), want, vocab);
    worst = std::max(worst, rel);
    const double margin = top2_margin(want, vocab);
    const int ours_tok = ref::argmax(ours.data(), vocab);
    const bool must_match = margin > o.tol;
    if (must_match) {
      ++compared_tokens;
      if (ours_tok != ref.tokens[s]) ++token_mismatch;
    }
    if (!(rel <= bound)) ++failures;
    nlohmann::json row = {{"step", s},
                          {"rel_error", std::isfinite(rel) ? rel : -1.0},
                          {"ref_token", ref.tokens[s]},
                          {"our_token", ours_tok},
                          {"ref_margin", margin},
                          {"token_must_match", must_match}};
    if (have_bf16) row["hf_bf16_rel_error"] = hf_bf16[s];
    per_step.push_back(row);
  }
  const bool ok = failures == 0 && token_mismatch == 0;
  char yardstick[160];
  if (have_bf16)
    std::snprintf(yardstick, sizeof(yardstick),
                  "HF's own bf16 run %.3e; bound max(%.1e, %.2f x %.3e) = %.3e", hf_bf16_worst,
                  o.tol, o.bf16_factor, hf_bf16_worst, bound);
  else
    std::snprintf(yardstick, sizeof(yardstick),
                  "HF's bf16 run not recorded in the reference; bound %.3e", bound);
  std::printf(
      "check-logits %s: %zu steps, worst relative error %.3e against HF fp32 (%s), %d steps over; "
      "greedy tokens compared at %d steps with margin > tolerance, %d mismatches: %s\n",
      o.model.c_str(), steps, worst, yardstick, failures, compared_tokens, token_mismatch,
      ok ? "PASS" : "FAIL");
  if (!o.json_out.empty()) {
    nlohmann::json j = {{"model", o.model},
                        {"plan", nlohmann::json::parse(plan_to_json(plan.plan))},
                        {"tolerance", o.tol},
                        {"bound", bound},
                        {"worst_rel_error", std::isfinite(worst) ? worst : -1.0},
                        {"steps_over_bound", failures},
                        {"tokens_compared", compared_tokens},
                        {"token_mismatches", token_mismatch},
                        {"pass", ok},
                        {"steps", per_step}};
    if (have_bf16) {
      j["hf_bf16_worst_rel_error"] = hf_bf16_worst;
      j["bf16_factor"] = o.bf16_factor;
    }
    std::ofstream f(o.json_out);
    f << j.dump(2) << "\n";
    if (!f) throw Error(o.json_out + ": write failed");
  }
  return ok ? 0 : 1;
}

}  // namespace
#endif

Runner add_check_logits(CLI::App& app) {
  auto o = std::make_shared<Opts>();
  app.add_option("--model", o->model, "checkpoint directory")->required();
  app.add_option("--expected", o->expected, "reference safetensors from scripts/hf_compare.py")
      ->required();
  app.add_option("--tolerance", o->tol, "relative error always accepted (default 2e-2)");
  app.add_option("--bf16-factor", o->bf16_factor,
                 "also accept errors up to this multiple of HF's own bf16 error (default 1.25)");
  app.add_option("--json", o->json_out, "write per-step errors here");
  app.add_flag("--pdl", o->pdl, "use PDL launches");
  app.add_option("--prefill", o->prefill,
                 "layers (default) or graph: the prompt as rows of the captured decode step");
  add_runtime_flags(app, o->runtime);
  add_plan_option(app, o->plan_file);
  return [o, &app]() -> int {
    if (!(o->tol > 0) || !std::isfinite(o->tol))
      throw_input_error("--tolerance", "",
                        "expected a finite value > 0, found " + std::to_string(o->tol));
    if (!(o->bf16_factor > 0) || !std::isfinite(o->bf16_factor))
      throw_input_error("--bf16-factor", "",
                        "expected a finite value > 0, found " + std::to_string(o->bf16_factor));
    // The GPU's option, checked on builds without CUDA too.
    [[maybe_unused]] const PrefillPath prefill_path = parse_prefill_path(o->prefill, "--prefill");
    // The plan file is read and checked on every machine, before the model loads.
    [[maybe_unused]] const PlanChoice plan = choose_plan(app, o->plan_file, 1);
#ifdef MEGAOPS_HAVE_CUDA
    return run_check(*o, prefill_path, plan);
#else
    throw DeviceError("check-logits: this build has no CUDA support");
#endif
  };
}

}  // namespace megaops::cli
