// `megaops check-logits`: teacher-forced comparison of the GPU executor against reference logits
// from HF transformers (scripts/hf_compare.py): the prompt, then each reference token fed in turn.
// The verdict is reference/logits_check.h's: bf16 error grows with depth, so where the reference
// file holds HF's bf16 logits of the same tokens (step_logits_bf16) every step's relative error
// must be within max(--tolerance, min(--bf16-cap, --bf16-factor x HF-bf16's worst error against
// its fp32 run)); without them, or where HF's bf16 run is itself further than --unreliable-above
// from its fp32 run (reported: "reference unreliable"), within --tolerance. Our greedy token must
// equal the reference's wherever the reference's top-2 margin is wider than --tolerance. The step
// runs a plan as generate's does (--plan FILE, the step flags, or the default plan for one
// sequence).
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
#include "reference/logits_check.h"
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
  ref::LogitsCheckOptions check;
  bool pdl = false;
  RuntimeFlags runtime;
};

}  // namespace

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

}  // namespace

#ifdef MEGAOPS_HAVE_CUDA
namespace {

int run_check(const Opts& o, PrefillPath prefill_path, PlanChoice plan, const Checkpoint& ckpt,
              const Reference& ref, int max_seq) {
  const int vocab = ckpt.config().vocab_size;
  const size_t steps = ref.tokens.size();
  ExecutorOptions eo;
  eo.step_graph = build_step_graph;
  apply_runtime_flags(o.runtime, eo);
  eo.max_batch = 1;
  eo.max_seq = max_seq;
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
  std::vector<float> ours;
  ours.reserve(ref.logits.size());
  for (size_t s = 0; s < steps; ++s) {
    if (s > 0) {
      const std::vector<int> forced{ref.tokens[s - 1]};
      ex.decode_step(&forced);
    }
    const std::vector<float> row = ex.last_logits();
    ours.insert(ours.end(), row.begin(), row.end());
  }
  const ref::LogitsVerdict v =
      ref::judge_logits(o.check, vocab, ref.logits, ref.logits_bf16, ref.tokens, ours);
  std::printf(
      "check-logits %s: %zu steps, worst relative error %.3e against HF fp32 (%s), %d steps over; "
      "greedy tokens compared at %d steps with margin > tolerance, %d mismatches: %s\n",
      o.model.c_str(), steps, v.worst, v.yardstick.c_str(), v.steps_over_bound, v.tokens_compared,
      v.token_mismatches, v.pass ? "PASS" : "FAIL");
  if (!o.json_out.empty()) {
    nlohmann::json per_step = nlohmann::json::array();
    for (size_t s = 0; s < steps; ++s) {
      const ref::LogitsStep& st = v.steps[s];
      nlohmann::json row = {{"step", s},
                            {"rel_error", std::isfinite(st.rel_error) ? st.rel_error : -1.0},
                            {"ref_token", st.ref_token},
                            {"our_token", st.our_token},
                            {"ref_margin", st.ref_margin},
                            {"token_must_match", st.token_must_match}};
      if (v.hf_bf16_worst >= 0) row["hf_bf16_rel_error"] = st.hf_bf16_rel_error;
      per_step.push_back(row);
    }
    nlohmann::json j = {{"model", o.model},
                        {"plan", nlohmann::json::parse(plan_to_json(plan.plan))},
                        {"tolerance", o.check.tolerance},
                        {"bound", v.bound},
                        {"worst_rel_error", std::isfinite(v.worst) ? v.worst : -1.0},
                        {"steps_over_bound", v.steps_over_bound},
                        {"tokens_compared", v.tokens_compared},
                        {"token_mismatches", v.token_mismatches},
                        {"pass", v.pass},
                        {"steps", per_step}};
    if (v.hf_bf16_worst >= 0) {
      j["hf_bf16_worst_rel_error"] = std::isfinite(v.hf_bf16_worst) ? v.hf_bf16_worst : -1.0;
      j["bf16_factor"] = o.check.bf16_factor;
      j["bf16_cap"] = o.check.bf16_cap;
      j["reference_unreliable"] = v.reference_unreliable;
      j["unreliable_above"] = o.check.unreliable_above;
    }
    std::ofstream f(o.json_out);
    f << j.dump(2) << "\n";
    if (!f) throw Error(o.json_out + ": write failed");
  }
  return v.pass ? 0 : 1;
}

}  // namespace
#endif

Runner add_check_logits(CLI::App& app) {
  auto o = std::make_shared<Opts>();
  app.add_option("--model", o->model, "checkpoint directory")->required();
  app.add_option("--expected", o->expected, "reference safetensors from scripts/hf_compare.py")
      ->required();
  app.add_option("--tolerance", o->check.tolerance,
                 "relative error always accepted (default 2e-2)");
  app.add_option("--bf16-factor", o->check.bf16_factor,
                 "also accept errors up to this multiple of HF's own bf16 error (default 1.25)...");
  app.add_option("--bf16-cap", o->check.bf16_cap,
                 "... but never more than this relative error (default 5e-2)");
  app.add_option("--unreliable-above", o->check.unreliable_above,
                 "HF's bf16 error above this marks the reference unreliable: it does not loosen "
                 "the bound (default 0.5)");
  app.add_option("--json", o->json_out, "write per-step errors here");
  app.add_flag("--pdl", o->pdl, "use PDL launches");
  app.add_option("--prefill", o->prefill,
                 "layers (default) or graph: the prompt as rows of the captured decode step");
  add_runtime_flags(app, o->runtime);
  add_plan_option(app, o->plan_file);
  return [o, &app]() -> int {
    // The verdict's options, checked on builds without CUDA too.
    ref::check_logits_options(o->check);
    // The GPU's option, checked on builds without CUDA too.
    [[maybe_unused]] const PrefillPath prefill_path = parse_prefill_path(o->prefill, "--prefill");
    // The plan file is read and checked on every machine, before the model loads.
    [[maybe_unused]] const PlanChoice plan = choose_plan(app, o->plan_file, 1);
    // The checkpoint's configuration, the reference and the context they need, before any GPU
    // work.
    const Checkpoint ckpt = Checkpoint::open(o->model);
    const int max_positions = ckpt.config().max_position_embeddings;
    const Reference ref = read_reference(o->expected, ckpt.config().vocab_size);
    [[maybe_unused]] const int max_seq = context_length(
        o->expected + ": prompt_ids/tokens",
        {static_cast<int64_t>(ref.prompt.size()), static_cast<int64_t>(ref.tokens.size()), 1},
        max_positions, o->model);
    check_plan_for_model(plan.plan, plan.label, max_positions, o->model);
#ifdef MEGAOPS_HAVE_CUDA
    return run_check(*o, prefill_path, plan, ckpt, ref, max_seq);
#else
    throw DeviceError("check-logits: this build has no CUDA support");
#endif
  };
}

}  // namespace megaops::cli
