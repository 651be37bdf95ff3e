// `--plan FILE` for the commands that run a decode step (generate, bench, profile, trace): which
// plan a run takes and one stderr line saying so. A plan file, when given, is the whole step: the
// flags that shape a step (--backend, --pdl, the overlap and chain flags, --prefill, the matmul and
// fold flags of runtime_flags.h) are refused beside it. Without one, a command given step flags
// runs the plan they make (source "flags"), and a command given none runs default_plan(batch).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "graph/plan.h"

#ifdef MEGAOPS_HAVE_CUDA
#include "runtime/executor.h"
#include "runtime/executor_options.h"
#endif

namespace megaops::cli {

enum class PlanKind { File, Default, Flags };

struct PlanChoice {
  PlanKind kind = PlanKind::Default;
  Plan plan;          // Flags: filled by settle_plan from the options the flags made
  std::string label;  // the file, or the plan's source
};

// Registers --plan FILE (one) on `app`.
CLI::Option* add_plan_option(CLI::App& app, std::string& file);

// Reads and checks a plan file, and that this build's executors run it (check_plan_runnable);
// InputError naming the file (and the field) otherwise.
Plan read_plan_file(const std::string& path);

// The step-shaping options given on `app`'s command line, by name ("--pdl").
std::vector<std::string> given_step_flags(const CLI::App& app);

// With a plan file: refuses the first step flag given, in one line ("--pdl: cannot be combined
// with --plan (set decode.pdl in the plan)").
void refuse_step_flags(const CLI::App& app);

// The plan a run of `batch` sequences takes: the file (step flags refused), the flags' plan (kind
// Flags, settled by settle_plan) or default_plan(batch) (conventional with PDL where that is the
// overlap step and `tensor_parallel`: the overlap step does not run with it).
PlanChoice choose_plan(const CLI::App& app, const std::string& file, int batch,
                       bool tensor_parallel = false);

// default_plan(batch) as a choice, conventional with PDL where that is an overlap step and
// `tensor_parallel`.
PlanChoice default_choice(int batch, bool tensor_parallel);

// Before any GPU work, on every build: the configuration of exactly one of `model` (a checkpoint
// directory: its config.json, no weights) and `preset`, the run's context (context_length of
// `parts`, named by `options`) against its max_position_embeddings, and each plan against it
// (check_plan_for_model: prefill.chunk). One error line naming the option or the plan file and
// field. Returns the context (the executor's max_seq).
int check_run_context(const std::string& model, const std::string& preset,
                      const std::string& options, std::initializer_list<int64_t> parts,
                      const std::vector<PlanChoice>& plans);

// "plan: LABEL (DESCRIPTION)" + suffix on stderr.
void print_plan_line(const PlanChoice& c, const std::string& suffix = "");

#ifdef MEGAOPS_HAVE_CUDA
// Kind Flags: the plan of `eo` (the options the flags made). Otherwise: the plan into `eo`. The
// regions stay out of `eo`: check_and_set_regions sets them once the executor can name its ops.
void settle_plan(PlanChoice& c, ExecutorOptions& eo);

// The plan's regions checked against the executor's op names (one error line naming the plan and
// the op) and set on `ex`; then warn_if_other_gpu.
void check_and_set_regions(const PlanChoice& c, Executor& ex);

// One warning line on stderr where `p` was made for another GPU than `ex` runs on
// (plan_gpu_warning).
void warn_if_other_gpu(const Plan& p, const std::string& origin, const Executor& ex);
// After a prefill: the executor's prefill-attention note (cuDNN asked for but not run, and why)
// on stderr, once per executor.
void print_prefill_attention_note(Executor& ex);
#endif

}  // namespace megaops::cli
