// See plan_flags.h.
#include "plan_flags.h"

#include <cstdio>
#include <utility>

#include "commands.h"
#include "core/error.h"
#include "io/text_file.h"
#include "models/model_config.h"

#ifdef MEGAOPS_HAVE_CUDA
#include "runtime/plan_options.h"
#endif

namespace megaops::cli {

namespace {

// Every command-line option that shapes a step, with the plan field that says the same. A
// command registers some of them (bench's overlap flags are trace's without the prefix).
const std::pair<const char*, const char*> STEP_FLAGS[] = {
    {"--backend", "decode.backend"},
    {"--pdl", "decode.pdl"},
    {"--prefill", "prefill.path"},
    {"--prefill-attention", "prefill.attention"},
    {"--overlap-streams", "decode.overlap_streams"},
    {"--streams", "decode.overlap_streams"},
    {"--overlap-pdl-chain", "decode.backend"},
    {"--pdl-chain", "decode.backend"},
    {"--overlap-chain-waits", "decode.chain_counter_waits"},
    {"--chain-waits", "decode.chain_counter_waits"},
    {"--overlap-fold-norms", "decode.folds.norms"},
    {"--fold-norms", "decode.folds.norms"},
    {"--overlap-fold-silu", "decode.folds.silu"},
    {"--fold-silu", "decode.folds.silu"},
    {"--overlap-fold-rope", "decode.folds.rope"},
    {"--fold-rope", "decode.folds.rope"},
    {"--overlap-v0", "decode.conventional_arithmetic"},
    {"--overlap-vendor-chunks", "decode.vendor_chunks"},
    {"--greedy-in-lm-head", "decode.greedy_in_lm_head"},
    {"--chain-o-early-trigger", "decode.early_trigger_o_proj"},
    {"--matmul-path", "decode.matmul.path"},
    {"--matmul-stream-shapes", "decode.matmul.stream_shapes"},
    {"--stream-stages", "decode.matmul.stream_stages"},
    {"--stream-kernel", "decode.matmul.stream_kernel"},
    {"--stream-l2-evict-first", "decode.matmul.l2_evict_first"},
    {"--matmul-tune", "decode.matmul.tune"},
};

bool given(const CLI::App& app, const char* name) {
  const CLI::Option* opt = app.get_option_no_throw(name);
  return opt != nullptr && opt->count() > 0;
}

}  // namespace

CLI::Option* add_plan_option(CLI::App& app, std::string& file) {
  return app.add_option("--plan", file,
                        "run this plan (a megaops-plan JSON, e.g. from `megaops plan --out`; "
                        "docs/plan-format.md); default: the fastest measured plan for the batch");
}

Plan read_plan_file(const std::string& path) {
  Plan p = parse_plan(read_text_file(path), path);
  check_plan_runnable(p, path);
  return p;
}

std::vector<std::string> given_step_flags(const CLI::App& app) {
  std::vector<std::string> out;
  for (const auto& [name, field] : STEP_FLAGS)
    if (given(app, name)) out.push_back(name);
  return out;
}

void refuse_step_flags(const CLI::App& app) {
  for (const auto& [name, field] : STEP_FLAGS)
    if (given(app, name))
      throw_input_error(
          name, "", std::string("cannot be combined with --plan (set ") + field + " in the plan)");
}

PlanChoice choose_plan(const CLI::App& app, const std::string& file, int batch,
                       bool tensor_parallel) {
  PlanChoice c;
  if (!file.empty()) {
    refuse_step_flags(app);
    c.kind = PlanKind::File;
    c.plan = read_plan_file(file);
    c.label = file;
  } else if (!given_step_flags(app).empty()) {
    c.kind = PlanKind::Flags;
    c.plan.batch = batch;
    c.label = "flags";
  } else {
    c = default_choice(batch, tensor_parallel);
  }
  return c;
}

PlanChoice default_choice(int batch, bool tensor_parallel) {
  PlanChoice c;
  c.kind = PlanKind::Default;
  c.plan = default_plan(batch);
  if (tensor_parallel && c.plan.decode.backend != PlanBackend::Conventional) {
    // The overlap step does not run with tensor parallelism: the fastest step that does.
    c.plan.decode = PlanDecode{};
    c.plan.decode.pdl = true;
    c.plan.source =
        "default for batch " + std::to_string(batch) +
        " with tensor parallelism (the overlap step does not run with it), conventional with pdl";
  }
  c.label = c.plan.source;
  return c;
}

int check_run_context(const std::string& model, const std::string& preset,
                      const std::string& options, std::initializer_list<int64_t> parts,
                      const std::vector<PlanChoice>& plans) {
  if (model.empty() == preset.empty())
    throw_input_error("--model/--preset", "", "give exactly one of --model DIR or --preset NAME");
  const ModelConfig cfg =
      model.empty() ? preset_config(preset) : read_model_config(model + "/config.json");
  const std::string& name = model.empty() ? preset : model;
  const int context = context_length(options, parts, cfg.max_position_embeddings, name);
  for (const PlanChoice& c : plans)
    check_plan_for_model(c.plan, c.label, cfg.max_position_embeddings, name);
  return context;
}

void print_plan_line(const PlanChoice& c, const std::string& suffix) {
  std::fprintf(stderr, "plan: %s (%s)%s\n", c.label.c_str(), describe(c.plan).c_str(),
               suffix.c_str());
}

#ifdef MEGAOPS_HAVE_CUDA
void settle_plan(PlanChoice& c, ExecutorOptions& eo) {
  if (c.kind == PlanKind::Flags) {
    const int batch = c.plan.batch;
    c.plan = plan_from_options(eo);
    c.plan.batch = batch;
  } else {
    apply_plan(c.plan, eo);
  }
  eo.overlap_regions.clear();
}

void check_and_set_regions(const PlanChoice& c, Executor& ex) {
  set_plan_regions(c.plan, c.label, ex);
  warn_if_other_gpu(c.plan, c.label, ex);
}

void warn_if_other_gpu(const Plan& p, const std::string& origin, const Executor& ex) {
  const std::string w = plan_gpu_warning(p, origin, ex.device_name());
  if (!w.empty()) std::fprintf(stderr, "%s\n", w.c_str());
}

void print_prefill_attention_note(Executor& ex) {
  const std::string note = ex.take_prefill_attention_note();
  if (!note.empty()) std::fprintf(stderr, "%s\n", note.c_str());
}
#endif

}  // namespace megaops::cli
