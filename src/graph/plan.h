// The plan: every choice that shapes a decode step (the backend, its PDL setting, the overlap
// step's streams and regions, the chain's folds and waits, the matmul dispatch) and how prefill
// runs, as one versioned JSON object that every command running a decode step accepts
// (`--plan FILE`) and `megaops plan` writes. Plain data: runtime/plan_options.h turns a plan into
// ExecutorOptions and back. docs/plan-format.md documents the format field by field.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace megaops {

constexpr const char* PLAN_FORMAT = "megaops-plan";
constexpr int PLAN_VERSION = 1;

// How decode steps run. PdlChain is the overlap step on one stream with every own kernel launched
// with PDL (ExecutorOptions::overlap_pdl_chain); Overlap is the multi-stream tile overlap.
enum class PlanBackend { Conventional, PdlChain, Overlap };

const char* plan_backend_name(PlanBackend b);  // "conventional", "pdl_chain", "overlap"

// How one region of the overlap step runs: conventional (one op at a time on one stream, full
// grids), overlap (its ops overlap on the W streams under tile waits; decode.backend overlap),
// pdl_chain (its ops on the PDL chain; decode.backend pdl_chain), or persistent (one resident
// launch of the region kernel taking the region's tile tasks; runtime/persistent.h).
enum class RegionBackend { Conventional, Overlap, Persistent, PdlChain };
// "conventional", "overlap", "persistent", "pdl_chain"
const char* region_backend_name(RegionBackend b);

struct PlanRegion {
  std::string first_op;  // the executor's op name ("embedding", "layer 3 o_proj")
  RegionBackend backend = RegionBackend::Overlap;
  int cta_budget = 0;  // CTAs the region's ops may hold at once; 0: the executor chooses
};

// How regions share the GPU: serial (each region after the one before, behind a barrier), a fixed
// CTA split between co-running regions (even-indexed regions get `split` CTAs, odd ones the rest)
// or dynamic sharing. Only serial runs today.
struct PlanSharing {
  std::string policy = "serial";  // serial, fixed_split, dynamic
  int split = 0;                  // fixed_split: CTAs of the even-indexed regions
};

// The defaults are ExecutorOptions' (runtime/executor_options.h), field by field.
struct PlanFolds {
  bool norms = true;
  bool silu = true;
  int silu_epilogue_min_inter = 8192;  // negative: never; 0: wherever gate_up streams
  bool rope = true;
};

struct PlanMatmul {
  std::string path = "auto";  // auto, small, stream, cublaslt, stream-for-small
  std::vector<std::pair<int, int>> stream_shapes;  // (n, k) put on the streaming kernel
  int stream_stages = 0;               // 0 (the kernel's own) or MATMUL_STREAM_STAGES_MIN..MAX
  std::string stream_kernel = "auto";  // auto (bulk where the GPU has it), ring, bulk
  bool l2_evict_first = true;
  bool tune = false;
};

struct PlanDecode {
  PlanBackend backend = PlanBackend::Conventional;
  bool pdl = false;                 // conventional only
  int overlap_streams = 3;          // 1..8; the PDL chain runs on 1
  std::vector<PlanRegion> regions;  // overlap only; empty: one overlap region
  PlanSharing sharing;
  PlanFolds folds;  // the PDL chain's
  bool chain_counter_waits = false;
  bool early_trigger_o_proj = true;
  bool greedy_in_lm_head = true;
  bool conventional_arithmetic = true;
  int vendor_chunks = 1;      // 1..64
  int persistent_stages = 0;  // persistent regions' weight ring: 0 (deepest that fits) or 2..16
  int persistent_ctas_per_sm = 0;  // persistent regions' CTAs an SM: 0 (the default) or 1..3
  PlanMatmul matmul;
};

struct PlanPrefill {
  std::string path = "layers";  // layers or graph (core/run_options.h, PrefillPath)
  // Most tokens per prefill chunk, 1..the model's max_position_embeddings (check_plan_for_model);
  // 0: not set, the executor's default (ExecutorOptions::prefill_chunk, capped at the run's
  // context).
  int chunk = 0;
  std::string attention = "flash";  // flash or cudnn (core/run_options.h, PrefillAttention)
};

struct Plan {
  std::string model;  // informational (bench takes it when no --model / --preset is given)
  int batch = 1;      // the batch it was made for, 1..64
  // The GPU it was made for, as CUDA names the device ("NVIDIA H100 80GB HBM3"); "": not said
  // (plans written before the field, hand-written ones, the defaults). plan_gpu_warning says when
  // a plan runs on another GPU.
  std::string gpu;
  std::string objective = "step";  // step or ttft
  std::string source;              // who made it: "megaops plan ...", "default for batch 1", ...
  double predicted_us = -1;        // the planner's prediction; -1: none
  PlanDecode decode;
  PlanPrefill prefill;
};

// Field by field (plan.cpp is C++20, the header stays C++17 for nvcc).
bool operator==(const Plan& a, const Plan& b);

// Reads a plan. Strict: an unknown key, a wrong type, an out-of-range value, a wrong format or
// version, an unknown backend, or a field the backend does not take (pdl outside conventional,
// regions outside overlap, more than one stream in the chain) is an InputError
// "<origin>: <field path>: expected ..., found ...". Every field but format and version is
// optional and defaults to the struct's value.
Plan parse_plan(const std::string& text, const std::string& origin);

// The plan as JSON with every field, in a stable order; parse_plan(plan_to_json(p)) == p.
std::string plan_to_json(const Plan& p);

// Where the defaults were measured (a bench results folder), named in their source.
constexpr const char* DEFAULT_PLAN_EVIDENCE = "bench/results/2026-12-04-s27-call4";

// The fastest measured configuration for a batch size (see plan.cpp for the measurements).
Plan default_plan(int batch);

// The warning line for running `p` (from `origin`) on the GPU CUDA names `device`, or "" where
// the plan names no GPU or this one: "<origin>: made for GPU A, running on GPU B: ...".
std::string plan_gpu_warning(const Plan& p, const std::string& origin, const std::string& device);

// One short line: "pdl chain, folds norms+silu+rope", "conventional, pdl on",
// "overlap W=3, 4 regions".
std::string describe(const Plan& p);

// Whether this build's executors run `p`: serial sharing, and a CTA budget only on persistent
// regions (the others take the executor's). Otherwise an InputError naming the file and the field
// ("decode.sharing.policy: ... co-running regions have no executor yet"). What a persistent
// region can hold depends on the batch and the GPU: the executor refuses the rest, naming the
// region and the op.
void check_plan_runnable(const Plan& p, const std::string& origin);

// Checks what a plan can only be checked against once the model is known, before anything runs:
// prefill.chunk at most the model's context (`max_positions`, its max_position_embeddings).
// InputError "<origin>: prefill.chunk: expected 1..N (max_position_embeddings of MODEL), found X".
void check_plan_for_model(const Plan& p, const std::string& origin, int max_positions,
                          const std::string& model);

// Checks the regions' first ops against `op_names`, the executor's overlap op names in step order
// (the last one, step_advance, cannot start a region): each must exist, the first must be
// op_names[0] and each must come after the one before. InputError
// "<origin>: decode.regions[i].first_op: ..." naming the op.
void check_plan_regions(const Plan& p, const std::string& origin,
                        const std::vector<std::string>& op_names);

}  // namespace megaops
