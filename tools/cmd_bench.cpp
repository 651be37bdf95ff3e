// `megaops bench`: decode throughput of the conventional executor, with and without PDL, and (with
// --backend overlap|both) of the overlap decode step, for a list of batch sizes. Times whole
// generations the way `generate` runs them (graph replay, token copied back every step), reports
// the median and spread over repeats, and puts every figure beside the HBM read ceiling measured in
// the same run and the bandwidth floor (weight bytes / ceiling).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "commands.h"
#include "core/error.h"
#include "core/run_options.h"
#include "graph/plan.h"
#include "io/text_file.h"
#include "models/checkpoint.h"
#include "models/model_config.h"
#include "plan_flags.h"
#include "runtime_flags.h"
#include "tp_launch.h"

#ifdef MEGAOPS_HAVE_CUDA
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "model_source.h"
#include "models/step_graph.h"
#include "planner/planner.h"
#include "runtime/conventional.h"
#endif

namespace megaops::cli {

namespace {

struct BenchOpts {
  TpOptions tp;          // --tp and the options of joining a tensor-parallel job
  RuntimeFlags runtime;  // --matmul-path, --watchdog-ms, ... (runtime_flags.h)
  std::string model, preset, batches, pdl = "both", backend = "conventional", json_out, git_sha;
  std::string prefill = "layers";
  std::string decode_loop = "stream";  // --decode-loop
  ChainOptions chain;                  // --overlap-chain-waits, --overlap-fold-*
  std::vector<std::string> plans;      // --plan, repeatable
  int prompt = 32, gen = 128, repeats = 3, overlap_streams = 3, overlap_vendor_chunks = 1;
  bool overlap_v0 = false, overlap_pdl_chain = false, step_times = false;
  uint64_t seed = 0;
  bool step_flags = false;            // a step flag was given (the rows are the flags' modes)
  std::vector<PlanChoice> plan_runs;  // the --plan files, read
};

// The rows of one table and one JSON file: a plan file's, or the command line's (the flags'
// modes, or the batches' default plans). Each item runs its plan at its batches.
struct Section {
  std::string file;  // the --plan file; empty: the command line's
  struct Item {
    PlanChoice plan;
    std::vector<int> batches;
  };
  std::vector<Item> items;
  bool conventional() const {
    return std::all_of(items.begin(), items.end(), [](const Item& i) {
      return i.plan.plan.decode.backend == PlanBackend::Conventional;
    });
  }
};

// What a plan fixes when the executor is built: the matmul dispatch, greedy sampling in the LM
// head and the prefill chunk, and for the overlap steps their kind and settings. bench runs
// several plans on one executor, switching only the backend, PDL, regions and prefill path.
Plan build_part(const Plan& p, bool overlap) {
  Plan k;
  k.decode.greedy_in_lm_head = p.decode.greedy_in_lm_head;
  k.decode.matmul = p.decode.matmul;
  k.prefill.chunk = p.prefill.chunk;
  if (overlap) {
    PlanDecode& d = k.decode;
    d.backend = p.decode.backend;
    d.overlap_streams = p.decode.overlap_streams;
    d.folds = p.decode.folds;
    d.chain_counter_waits = p.decode.chain_counter_waits;
    d.early_trigger_o_proj = p.decode.early_trigger_o_proj;
    d.conventional_arithmetic = p.decode.conventional_arithmetic;
    d.vendor_chunks = p.decode.vendor_chunks;
    d.persistent_stages = p.decode.persistent_stages;
    d.persistent_ctas_per_sm = p.decode.persistent_ctas_per_sm;
  }
  return k;
}

// The plan the executor is built with: the first of an overlap step (its settings are fixed at
// construction), else the first.
const PlanChoice& build_plan(const std::vector<PlanChoice>& plans) {
  for (const PlanChoice& c : plans)
    if (c.plan.decode.backend != PlanBackend::Conventional) return c;
  return plans.front();
}

// Plans that one executor cannot run one after another: an InputError naming the later file.
void check_one_executor(const std::vector<PlanChoice>& plans) {
  const PlanChoice& base = build_plan(plans);
  for (const PlanChoice& c : plans) {
    const bool overlap = c.plan.decode.backend != PlanBackend::Conventional &&
                         base.plan.decode.backend != PlanBackend::Conventional;
    if (!(build_part(c.plan, overlap) == build_part(base.plan, overlap)))
      throw_input_error(c.label, "decode",
                        "differs from " + base.label +
                            " in more than the backend, pdl, regions and prefill path (the plans "
                            "of one bench run on one executor; one overlap step at most)");
  }
}

#ifdef MEGAOPS_HAVE_CUDA
// The sections of this run, conventional ones first; `eo` holds the command line's options and
// gets the executor's.
std::vector<Section> sections_of(const BenchOpts& o, const std::vector<int>& batches,
                                 ExecutorOptions& eo) {
  std::vector<Section> sections;
  if (!o.plan_runs.empty()) {
    for (const PlanChoice& c : o.plan_runs) sections.push_back({c.label, {{c, batches}}});
    PlanChoice base = build_plan(o.plan_runs);
    settle_plan(base, eo);
  } else if (o.step_flags) {
    // Today's rows: every PDL mode of the conventional backend, one row of the overlap step.
    Section s;
    auto add_row = [&](DecodeBackend backend, bool pdl) {
      ExecutorOptions m = eo;
      m.backend = backend;
      m.pdl = pdl;
      PlanChoice c{PlanKind::Flags, {}, "flags"};
      settle_plan(c, m);
      s.items.push_back({c, batches});
    };
    const std::vector<bool> pdl_modes =
        o.pdl == "both" ? std::vector<bool>{false, true} : std::vector<bool>{o.pdl == "on"};
    if (o.backend == "conventional" || o.backend == "both")
      for (bool pdl : pdl_modes) add_row(DecodeBackend::Conventional, pdl);
    if (o.backend == "overlap" || o.backend == "both") add_row(DecodeBackend::Overlap, false);
    sections.push_back(s);
  } else {
    // Each batch its default plan; batches of one plan share an item.
    Section s;
    std::vector<PlanChoice> plans;
    for (int b : batches) {
      const PlanChoice c = default_choice(b, o.tp.tp > 1);
      auto same = [&](const Section::Item& i) {
        return build_part(i.plan.plan, true) == build_part(c.plan, true) &&
               i.plan.plan.decode.pdl == c.plan.decode.pdl;
      };
      const auto at = std::find_if(s.items.begin(), s.items.end(), same);
      if (at == s.items.end()) {
        s.items.push_back({c, {b}});
      } else {
        at->batches.push_back(b);
        std::string list;
        for (int x : at->batches) list += (list.empty() ? "" : ",") + std::to_string(x);
        at->plan.label =
            "default for batch " + list + ", fastest measured in " + DEFAULT_PLAN_EVIDENCE;
        at->plan.plan.source = at->plan.label;
      }
      plans.push_back(c);
    }
    sections.push_back(s);
    PlanChoice base = build_plan(plans);
    settle_plan(base, eo);
  }
  // Conventional sections first, and within a section the conventional items: setting up the
  // overlap executor asks every kernel it preloads for the shared-memory carveout (DESIGN rule
  // 1), a process-wide attribute, so a conventional row measured after it would not time the
  // step users run.
  std::stable_partition(sections.begin(), sections.end(),
                        [](const Section& s) { return s.conventional(); });
  for (Section& s : sections)
    std::stable_partition(s.items.begin(), s.items.end(), [](const Section::Item& i) {
      return i.plan.plan.decode.backend == PlanBackend::Conventional;
    });
  return sections;
}

// What the rows and reports of one run share.
struct BenchRun {
  const BenchOpts& o;
  const ModelSource& src;
  ConventionalExecutor& ex;
  const cudaDeviceProp& prop;
  double ceiling_gbps;  // the HBM read ceiling measured in this run
  double floor_ms;      // the bandwidth floor: weight bytes / ceiling
  bool lead;            // rank 0 (or no --tp): prints and writes
  size_t sections;      // more than one: each prints its file, and --json names a folder
};

// One configuration's timed repeats (the warm-up is not among them).
struct Timings {
  std::vector<double> step_ms, ttft_ms;           // each repeat's decode ms per step, and TTFT
  std::vector<std::vector<double>> each_step_ms;  // --step-times: every timed repeat's steps
  double gbps_sum = 0;                            // each repeat's achieved GB/s, summed
};

// The executor's options from the command line, before the sections settle their plans.
ExecutorOptions executor_options(const BenchOpts& o, const ModelSource& src, const TpComm* comm,
                                 int max_batch) {
  ExecutorOptions eo;
  eo.step_graph = build_step_graph;
  apply_runtime_flags(o.runtime, eo);
  set_tp_options(eo, o.tp, comm);
  eo.max_batch = max_batch;
  eo.max_seq = context_length("--prompt/--gen", {o.prompt, o.gen}, src.cfg.max_position_embeddings,
                              src.name);
  eo.prefill_path = parse_prefill_path(o.prefill, "--prefill");
  eo.overlap_streams = o.overlap_streams;
  eo.overlap_pdl_chain = o.overlap_pdl_chain;
  apply_chain_options(o.chain, eo);
  eo.overlap_conventional_arithmetic = !o.overlap_v0;
  eo.overlap_vendor_chunks = o.overlap_vendor_chunks;
  return eo;
}

// Times whole generations of `prompts` on the executor as it is set: one warm-up (which also
// captures) and --repeats timed ones, fewer when interrupted.
Timings time_generations(ConventionalExecutor& ex, const BenchOpts& o,
                         const std::vector<std::vector<int>>& prompts) {
  Timings t;
  for (int r = 0; r <= o.repeats && !g_interrupted; ++r) {  // r == 0 warms up and captures
    const auto t0 = std::chrono::steady_clock::now();
    ex.prefill(prompts);
    const auto t1 = std::chrono::steady_clock::now();
    size_t kv_bytes = 0;
    std::vector<double> steps;
    auto prev = t1;
    // Each step's wall time ends when its tokens are on the host.
    auto step_done = [&](int, const std::vector<int>&) {
      if (!o.step_times) return;
      const auto now = std::chrono::steady_clock::now();
      steps.push_back(std::chrono::duration<double, std::milli>(now - prev).count());
      prev = now;
    };
    if (o.decode_loop == "stream") {
      // The KV bytes each step reads, from the positions before any step runs.
      const size_t kv0 = ex.kv_bytes_read(), kv_step = ex.kv_bytes_per_step();
      for (int g = 1; g < o.gen; ++g) kv_bytes += kv0 + (g - 1) * kv_step;
      ex.decode_steps(o.gen - 1, step_done);
    } else {
      for (int g = 1; g < o.gen; ++g) {
        kv_bytes += ex.kv_bytes_read();
        step_done(g - 1, ex.decode_step());  // returns with the step's tokens on the host
      }
    }
    const auto t2 = std::chrono::steady_clock::now();
    if (r == 0) continue;
    if (o.step_times) t.each_step_ms.push_back(std::move(steps));
    const double dec_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
    const double per_step = dec_ms / (o.gen - 1);
    t.step_ms.push_back(per_step);
    t.ttft_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    const double bytes = static_cast<double>(ex.weight_bytes()) * (o.gen - 1) + kv_bytes;
    t.gbps_sum += bytes / (dec_ms * 1e-3) / 1e9;
  }
  return t;
}

// A section's plan lines and the heading of its table (rank 0 only).
void print_section_head(const BenchRun& r, const Section& section, bool show_backend) {
  if (!r.lead) return;
  if (r.sections > 1) std::printf("plan %s\n", section.file.c_str());
  for (const Section::Item& item : section.items) {
    std::string list;
    for (int b : item.batches) {
      if (!list.empty()) list += ",";
      list += std::to_string(b);
    }
    print_plan_line(item.plan, item.plan.kind == PlanKind::Default ? "" : ", batch " + list);
  }
  if (show_backend) std::printf("%-12s ", "backend");
  std::printf("%-14s %5s %4s %22s %10s %9s %8s %7s %9s\n", "model", "batch", "pdl",
              "ms/token med [min,max]", "tok/s", "TTFT ms", "GB/s", "%ceil", "floor ms");
}

// One configuration's row: printed in the table (rank 0 only) and returned for the JSON.
nlohmann::json report_row(const BenchRun& r, bool show_backend, const Plan& plan,
                          DecodeBackend backend, int b, const Timings& t) {
  const bool pdl = plan.decode.pdl;
  const double med = median(t.step_ms);
  const double gbps = t.gbps_sum / t.step_ms.size();
  const double lo = *std::min_element(t.step_ms.begin(), t.step_ms.end());
  const double hi = *std::max_element(t.step_ms.begin(), t.step_ms.end());
  char range[64];
  std::snprintf(range, sizeof(range), "%.4f [%.4f,%.4f]", med, lo, hi);
  if (r.lead) {
    if (show_backend) std::printf("%-12s ", backend_name(backend));
    std::printf("%-14s %5d %4s %22s %10.1f %9.3f %8.1f %6.1f%% %9.4f\n", r.src.name.c_str(), b,
                pdl ? "on" : "off", range, b * 1e3 / med, median(t.ttft_ms), gbps,
                100.0 * gbps / r.ceiling_gbps, r.floor_ms);
    std::fflush(stdout);
  }
  nlohmann::json row = {{"batch", b},
                        {"pdl", pdl},
                        {"executor", backend_name(backend)},
                        {"ms_per_token_median", med},
                        {"ms_per_token_min", lo},
                        {"ms_per_token_max", hi},
                        {"ms_per_token_all", t.step_ms},
                        {"tokens_per_s", b * 1e3 / med},
                        {"ttft_ms_median", median(t.ttft_ms)},
                        {"achieved_gbps", gbps},
                        {"pct_of_hbm_read_ceiling", 100.0 * gbps / r.ceiling_gbps},
                        {"plan", nlohmann::json::parse(plan_to_json(plan))}};
  if (r.o.step_times) row["step_ms"] = t.each_step_ms;
  return row;
}

// Writes a section's --json report: the run's settings, its rows and the plans that ran.
void write_report(const BenchRun& r, const Section& section, const nlohmann::json& rows) {
  const BenchOpts& o = r.o;
  const ExecutorOptions& xo = r.ex.options();
  const Plan& first = section.items.front().plan.plan;
  nlohmann::json regions = nlohmann::json::array();
  for (const PlanRegion& pr : first.decode.regions)
    regions.push_back({{"first_op", pr.first_op}, {"backend", region_backend_name(pr.backend)}});
  nlohmann::json j = {
      {"git_sha", o.git_sha},
      {"tp", o.tp.tp},
      {"date_utc", utc_now()},
      {"gpu", r.prop.name},
      {"sm_count", r.prop.multiProcessorCount},
      {"model", r.src.name},
      {"prompt_tokens", o.prompt},
      {"new_tokens", o.gen},
      {"decode_loop", o.decode_loop},
      {"repeats", o.repeats},
      {"overlap_streams", xo.overlap_streams},
      {"overlap_pdl_chain", xo.overlap_pdl_chain},
      {"overlap_chain_waits", xo.overlap_chain_counter_waits ? "counter" : "grid"},
      {"overlap_fold_norms", xo.overlap_fold_norms},
      {"overlap_fold_silu", xo.overlap_fold_silu},
      {"overlap_silu_epilogue_min_inter", xo.overlap_silu_epilogue_min_inter},
      {"overlap_fold_rope", xo.overlap_fold_rope},
      {"overlap_arithmetic", xo.overlap_conventional_arithmetic ? "conventional" : "v0"},
      {"overlap_vendor_chunks", xo.overlap_vendor_chunks},
      {"prefill_path", first.prefill.path},
      {"prefill_attention", first.prefill.attention},
      {"max_batch", xo.max_batch},
      {"overlap_regions", regions},
      {"weight_bytes", r.ex.weight_bytes()},
      {"hbm_read_ceiling_gbps", r.ceiling_gbps},
      {"bandwidth_floor_ms", r.floor_ms},
      {"results", rows}};
  // The plan that ran (each row holds its own too): one, or the section's several.
  if (section.items.size() == 1) {
    j["plan"] = nlohmann::json::parse(plan_to_json(first));
  } else {
    j["plans"] = nlohmann::json::array();
    for (const Section::Item& item : section.items)
      j["plans"].push_back(nlohmann::json::parse(plan_to_json(item.plan.plan)));
  }
  std::string out = o.json_out;
  if (!section.file.empty()) {
    j["plan_file"] = section.file;
    j["plan_predicted_us"] = first.predicted_us;
    // Several plans: --json names a folder, one file per plan, named after the plan's file.
    if (r.sections > 1)
      out = (std::filesystem::path(o.json_out) / std::filesystem::path(section.file).filename())
                .string();
  }
  std::ofstream f(out);
  if (!f) throw Error("cannot write " + out);
  f << j.dump(2) << "\n";
}

// Times, prints and reports one section's rows; false when interrupted.
bool run_section(const BenchRun& r, const Section& section) {
  const BenchOpts& o = r.o;
  ConventionalExecutor& ex = r.ex;
  const bool show_backend = !section.conventional();
  print_section_head(r, section, show_backend);
  nlohmann::json rows = nlohmann::json::array();
  for (const Section::Item& item : section.items) {
    const Plan& plan = item.plan.plan;
    const DecodeBackend backend = plan.decode.backend == PlanBackend::Conventional
                                      ? DecodeBackend::Conventional
                                      : DecodeBackend::Overlap;
    ex.set_overlap_regions({});
    check_and_set_regions(item.plan, ex);
    ex.set_prefill_path(parse_prefill_path(plan.prefill.path, item.plan.label, "prefill.path"));
    ex.set_prefill_attention(
        parse_prefill_attention(plan.prefill.attention, item.plan.label, "prefill.attention"));
    for (int b : item.batches) {
      const std::vector<std::vector<int>> prompts = make_prompts(r.src.cfg, b, o.prompt, o.seed);
      ex.set_backend(backend);
      ex.set_pdl(plan.decode.pdl);
      const Timings t = time_generations(ex, o, prompts);
      if (r.lead) print_prefill_attention_note(ex);
      if (g_interrupted) return false;
      rows.push_back(report_row(r, show_backend, plan, backend, b, t));
    }
  }
  if (r.lead && !o.json_out.empty()) write_report(r, section, rows);
  return true;
}

int run(const BenchOpts& o) {
  const std::vector<int> batches = parse_int_list(o.batches, "--batch");
  // Tensor parallelism (--tp): this rank's GPU and communicator; only rank 0 prints and writes.
  const bool lead = o.tp.rank <= 0;
  const std::unique_ptr<TpComm> comm = open_tp_comm(o.tp);
  const ModelSource src = open_model_source(o.model, o.preset, o.seed);
  const int max_batch = *std::max_element(batches.begin(), batches.end());

  int device = 0;
  MEGAOPS_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device);
  if (lead) std::fprintf(stderr, "measuring the HBM read ceiling...\n");
  // In a child process, before this one loads the model: measured in this process, the ceiling
  // kernel slowed every later step (tools/cmd_hbm_ceiling.cpp says by how much).
  const double ceiling_gbps = measure_hbm_ceiling_isolated(4096, 20, device);

  ExecutorOptions eo = executor_options(o, src, comm.get(), max_batch);
  const std::vector<Section> sections = sections_of(o, batches, eo);
  // Built for the conventional step: each row sets its backend and PDL, and the overlap state is
  // set up on the first overlap row (after every conventional one: sections_of).
  eo.backend = DecodeBackend::Conventional;
  eo.pdl = false;
  // A decode-graph prefill replays at most max_batch rows: room for the largest batch's prompt
  // tokens in one replay where the executor's limit allows (rows beyond the batch hold no state).
  bool any_graph_prefill = false;
  for (const Section& s : sections)
    for (const Section::Item& i : s.items) any_graph_prefill |= i.plan.plan.prefill.path == "graph";
  if (any_graph_prefill) eo.max_batch = ttft_replays(max_batch * o.prompt).replay_rows;
  ConventionalExecutor ex(src.cfg, src.weights, eo,
                          [&](size_t d, size_t t) { print_progress("loading " + src.name, d, t); });
  const double floor_ms = ex.weight_bytes() / (ceiling_gbps * 1e9) * 1e3;

  if (sections.size() > 1 && lead && !o.json_out.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o.json_out, ec);
    if (ec)
      throw_input_error("--json", "", "cannot create folder " + o.json_out + ": " + ec.message());
  }
  const BenchRun r{o, src, ex, prop, ceiling_gbps, floor_ms, lead, sections.size()};
  for (const Section& section : sections)
    if (!run_section(r, section)) return interrupt_status();
  return 0;
}
#endif

}  // namespace

// Reads one --plan and takes its model and batch where the command line gives none. Several plans
// run one after another on one executor: they must be of one model and one batch.
static void read_bench_plan(BenchOpts& o, const std::string& path) {
  const PlanChoice c{PlanKind::File, read_plan_file(path), path};
  const Plan& p = c.plan;
  if (o.model.empty() && o.preset.empty()) {
    if (p.model.empty())
      throw_input_error(path, "model", "missing (or give --model DIR or --preset NAME)");
    const std::vector<std::string> presets = preset_names();
    (std::find(presets.begin(), presets.end(), p.model) != presets.end() ? o.preset : o.model) =
        p.model;
  } else if (!o.plan_runs.empty() && p.model != (o.preset.empty() ? o.model : o.preset)) {
    throw_input_error(path, "model",
                      "expected '" + (o.preset.empty() ? o.model : o.preset) +
                          "' (the first plan's), found '" + p.model + "'");
  }
  const std::string b = std::to_string(p.batch);
  if (o.batches.empty()) {
    o.batches = b;
  } else if (!o.plan_runs.empty() && o.batches != b) {
    throw_input_error(path, "batch", "expected " + o.batches + " (the first plan's), found " + b);
  }
  o.plan_runs.push_back(c);
}

Runner add_bench(CLI::App& app) {
  auto o = std::make_shared<BenchOpts>();
  if (const char* sha = std::getenv("MEGAOPS_GIT_SHA")) o->git_sha = sha;
  app.add_option("--model", o->model, "Hugging Face checkpoint directory");
  app.add_option("--preset", o->preset, "random weights of a named architecture (no files)");
  app.add_option("--batch", o->batches, "batch sizes, e.g. 1,8,32 (default 1, or the plan's)");
  app.add_option("--prompt", o->prompt, "prompt tokens per sequence");
  app.add_option("--gen", o->gen, "new tokens per sequence (the first comes from prefill)");
  app.add_option("--repeats", o->repeats, "timed generations per configuration");
  app.add_option("--pdl", o->pdl, "off, on or both");
  app.add_option("--backend", o->backend,
                 "decode backend: conventional (default), overlap or both");
  app.add_option("--prefill", o->prefill,
                 "layers (default: the prefill kernels) or graph (the prompt tokens as rows of "
                 "the captured decode step, on the decode backend; TTFT of short prompts)");
  app.add_option("--overlap-streams", o->overlap_streams,
                 "W of the overlap backend: kernels live at once (1..8, default 3)");
  app.add_flag("--overlap-pdl-chain", o->overlap_pdl_chain,
               "overlap step at --overlap-streams 1 as a PDL chain: each own kernel launched "
               "with PDL, waiting on the kernel before it");
  add_chain_options(app, o->chain, "--overlap-");
  app.add_flag("--overlap-v0", o->overlap_v0,
               "overlap step of v0: every matmul on the small-m kernel, capped attention splits");
  app.add_option("--overlap-vendor-chunks", o->overlap_vendor_chunks,
                 "launches per cuBLASLt matmul of the overlap step, along N (default 1)");
  app.add_option("--decode-loop", o->decode_loop,
                 "stream (default): each step enqueued before the host reads the previous one's "
                 "tokens, as a serving loop runs them; sync: the host waits for every step's "
                 "tokens before it launches the next");
  app.add_flag("--step-times", o->step_times,
               "also write every decode step's wall time (ms, each timed repeat) to the JSON");
  add_seed_option(app, o->seed, "seed of the random weights and prompts");
  app.add_option("--json", o->json_out, "write results as JSON here");
  app.add_option("--git-sha", o->git_sha, "recorded in the JSON (default $MEGAOPS_GIT_SHA)");
  app.add_option("--plan", o->plans,
                 "run this plan (a megaops-plan JSON, e.g. from `megaops plan --out`; "
                 "docs/plan-format.md); repeatable: the plans (one model and batch) run one after "
                 "another on one executor, and --json names a folder that gets one file per "
                 "plan, named like the plan's file. Default: each batch's fastest measured plan");
  add_tp_options(app, o->tp);
  add_runtime_flags(app, o->runtime);
  return [o, &app]() -> int {
    // A plan is the whole step: no step flag beside it.
    if (!o->plans.empty()) refuse_step_flags(app);
    for (const std::string& p : o->plans) read_bench_plan(*o, p);
    if (o->plan_runs.size() > 1) check_one_executor(o->plan_runs);
    o->step_flags = !given_step_flags(app).empty();
    if (o->batches.empty()) o->batches = "1";
    if (o->overlap_pdl_chain && o->overlap_streams != 1)
      throw_input_error("--overlap-pdl-chain", "",
                        "needs --overlap-streams 1 (one stream carries the chain), found " +
                            std::to_string(o->overlap_streams));
    check_chain_options(o->chain, "--overlap-");
    check_one_of("--decode-loop", o->decode_loop, {"stream", "sync"});
    if (o->prompt < 1 || o->gen < 2 || o->repeats < 1)
      throw_input_error("bench", "--prompt/--gen/--repeats",
                        "expected prompt >= 1, gen >= 2, repeats >= 1");
    for (int b : parse_int_list(o->batches, "--batch"))
      if (b < 1 || b > 64)
        throw_input_error("--batch", "", "expected 1..64, found " + std::to_string(b));
    check_one_of("--pdl", o->pdl, {"off", "on", "both"});
    check_one_of("--backend", o->backend, {"conventional", "overlap", "both"});
    if (o->overlap_streams < 1 || o->overlap_streams > 8)
      throw_input_error("--overlap-streams", "",
                        "expected 1..8, found " + std::to_string(o->overlap_streams));
    if (o->overlap_vendor_chunks < 1 || o->overlap_vendor_chunks > 64)
      throw_input_error("--overlap-vendor-chunks", "",
                        "expected 1..64, found " + std::to_string(o->overlap_vendor_chunks));
    // A bad value is an error before any GPU work, on any build.
    [[maybe_unused]] const PrefillPath prefill_path = parse_prefill_path(o->prefill, "--prefill");
    check_run_context(o->model, o->preset, "--prompt/--gen", {o->prompt, o->gen}, o->plan_runs);
#ifdef MEGAOPS_HAVE_CUDA
    if (!gpu_available()) throw DeviceError("bench: no CUDA device; bench needs a GPU");
    TpRanks ranks(o->tp);  // --tp N: starts ranks 1..N-1 here, or joins a job
    const int status = run(*o);
    ranks.join();
    return status;
#else
    throw DeviceError("bench: this build has no CUDA support");
#endif
  };
}

}  // namespace megaops::cli
