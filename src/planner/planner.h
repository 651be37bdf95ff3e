// The cut planner: which kernel boundaries of a step to keep. A candidate is a cover of the
// step's ordered op groups by contiguous regions, a backend per region (conventional, overlap,
// persistent) and a GPU-sharing policy between regions (serial, fixed CTA split, dynamic), or one
// of the whole-step backends (conventional with PDL, the PDL chain with a set of folds). Each is
// scored by simulating its tile graph (tile_sim.h) with per-op costs calibrated on the service
// table, ranked by the predicted objective, and explained against the all-conventional baseline.
// Pure C++: runs and is tested without a GPU. Model and schemas: docs/planner.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/matmul_dispatch.h"
#include "graph/op_graph.h"
#include "planner/service_table.h"
#include "planner/tile_sim.h"

namespace megaops {

// Region backends: Conventional (one kernel per op, a plain boundary between kernels), Overlap
// (kernels synchronised on tiles), Persistent (one resident launch). Whole-step backends, which
// the executors run only over a whole step (PlanOptions::step_backends): ConventionalPdl (the
// conventional step with its own kernels launched with PDL) and PdlChain (the overlap step's
// kernels on one stream under PDL, with the folds in Region::folds).
enum class Backend { Conventional, Overlap, Persistent, ConventionalPdl, PdlChain };

// The PDL chain's folds (the plan's decode.folds): norms into the streaming matmul after them,
// SiLU·mul into the streaming down projection, RoPE into the per-query-head decode attention.
// Where a fold applies is chain_folded_ops' rule.
enum ChainFold : uint32_t {
  CHAIN_FOLD_NORMS = 1,
  CHAIN_FOLD_SILU = 2,
  CHAIN_FOLD_ROPE = 4,
  CHAIN_FOLD_ALL = 7,
};
std::string chain_folds_name(uint32_t folds);  // "norms+silu+rope", "none"

bool is_whole_step_backend(Backend b);
enum class Policy { Serial, FixedSplit, Dynamic };
enum class Objective { Step, Ttft };

const char* backend_name(Backend b);
const char* policy_name(Policy p);
const char* objective_name(Objective o);

// Fixed costs of each backend and what the executors support. Defaults: the H200 here; the GPU
// (its name, memory bandwidth and SMs) is set from the evidence by apply_target_gpu
// (planner/target_gpu.h).
struct CostModel {
  MachineModel machine;
  double launch_us = 1.8;          // one kernel boundary inside a CUDA graph (DESIGN.md, measured)
  double overlap_region_us = 1.8;  // entering an overlap region: one boundary, kernels pre-issued
  double overlap_tile_us = 0.3;    // per tile of an overlap region: acquire wait + release signal
  double persistent_region_us = 1.8;
  double persistent_tile_us = 0.2;  // per tile of a persistent region: scheduler + semaphores
  // What one CTA slot of a persistent region streams, bytes/us: its matmul tasks consume their
  // weight ring stage after stage with one CTA's warps (kernels/persistent_region_ops.cuh), far
  // below the streaming kernel's three CTAs an SM. Measured (H100, 2026-12-07,
  // bench/results/2026-12-07-s31-persistent): a whole llama3.1-8b step as one region at two CTAs
  // an SM moved 1.97 TB/s over 132 SMs, 15 KB/us an SM (the chain: 2.92 TB/s).
  double persistent_worker_bytes_per_us = 15e3;
  double dynamic_tile_us = 0.1;     // per tile under a dynamic split: work-queue atomics
  // How the overlap executor synchronises: false = per tile (the design), true = per tensor (the
  // executor as it is: a consumer waits for its producer's whole output). overlap_handoff_us is
  // the latency from a producer's last tile to its consumers' first work under per-tensor waits
  // (measured 1.2-3.3 us, median 2.6, in a trace of the overlap step; docs/overlap-design.md).
  bool overlap_tensor_waits = false;
  double overlap_handoff_us = 0;
  // Vendor GEMMs in an overlap region (the executor as it is, docs/overlap-design.md): a matmul
  // the conventional step runs on cuBLASLt (core/matmul_dispatch.h) runs on its producer's
  // stream after it (one kernel boundary), so none of its weights stream before the producer
  // completed; nothing after it in the region is issued before it completes (a barrier: one
  // boundary), and that barrier is the next op's wait. Applies with overlap_tensor_waits.
  bool overlap_vendor_gemms = false;
  // A plan with any overlap region runs the whole step on the overlap executor: every op, in its
  // conventional regions (serial regions, in stream order) and in its overlap regions alike, is an
  // overlap kernel (a step read, a counter wait and a signal where the sync plan needs them) and
  // costs this much more than in the conventional step, on top of what the simulation models
  // for overlap regions (handoffs, budgets, prefetch). Measured by `megaops profile` in stream
  // order (StepFigures::serial_overlap_op_us); 0 = not modelled. Round 2 of the validation
  // applied it to conventional regions only and under-predicted every overlap candidate by
  // 4-16% (docs/planner-validation.md).
  double overlap_serial_op_us = 0;
  // Between two replays of a decode-graph prefill (the TTFT objective): the uploads of the rows'
  // tokens, positions, slots and lengths, the graph launch, the token read-back and a host
  // synchronisation. An estimate, not fitted: with it round 5 of the validation
  // (docs/planner-validation.md) predicted the graph prefills within -2% to +9% (+14% once).
  double prefill_replay_us = 30;
  // PDL (conventional+PDL and the chain), between two own kernels: kernel k's CTAs are scheduled
  // `pdl_launch_us` after every CTA of kernel k - 1 passed its own wait (each own kernel triggers
  // its dependents right after its wait), stream their weights into staging while k - 1 runs,
  // and are released `pdl_wait_us` after k - 1 completed (griddepcontrol.wait). A vendor GEMM has
  // no PDL prologue: the boundaries before and after one are plain (launch_us). pdl_wait_us is
  // measured: a grid handoff between two megaops kernels took 0.6-0.7 us in a trace of the chain
  // (bench/results/2026-11-30-s16-call1, ExecutorOptions::overlap_chain_counter_waits);
  // pdl_launch_us is an assumption until measured (it is hidden whenever k - 1 computes longer).
  double pdl_launch_us = 1.0;
  double pdl_wait_us = 0.65;
  // The chain's SiLU·mul in gate_up's epilogue from this intermediate size (the executor's
  // ExecutorOptions::overlap_silu_epilogue_min_inter, the plan's folds.silu_epilogue_min_inter).
  int silu_epilogue_min_inter = 8192;
  bool pdl_supported = true;          // executor_supports for conventional+PDL
  bool chain_supported = true;        // executor_supports for the PDL chain
  bool overlap_supported = true;      // executor_supports for overlap regions
  bool fixed_split_supported = true;  // executor_supports for the fixed-split sharing policy
  bool persistent_supported = true;   // executor_supports for persistent regions
  bool dynamic_supported = false;     // executor_supports for the dynamic sharing policy
  std::string gpu = "NVIDIA H200";    // the GPU planned for: the service-table key
  std::string dtype = "bf16";
};

// A group is a contiguous op range [first_op, last_op]. groups = prefix, then `repeats` copies of a
// period of `period` groups (the layers), then the suffix. Candidates are enumerated on one period
// and repeated on every layer; a graph without layers has period = 0.
struct Group {
  int first_op = 0, last_op = 0;
};
struct RegionGraph {
  std::vector<Group> groups;
  int prefix = 0, period = 0, repeats = 0;
};

// Decode or prefill step: [embedding] | per layer [input_layernorm, qkv_proj] [qkv_rope, attention,
// o_proj] [post_attention_layernorm, gate_up_proj, silu_mul, down_proj] | [final_norm .. end].
RegionGraph default_region_graph(const OpGraph& g);
// Every op its own group, no period (small synthetic graphs).
RegionGraph single_op_groups(const OpGraph& g);

struct Region {
  int first_op = 0, last_op = 0;
  Backend backend = Backend::Conventional;
  int cta_budget = 0;
  uint32_t folds = 0;  // PdlChain: the ChainFold bits asked for
};

struct Candidate {
  std::vector<Region> regions;
  Policy policy = Policy::Serial;
  int split = 0;             // fixed split: CTAs of even-indexed regions (odd ones get the rest)
  double predicted_us = 0;   // full planner
  double additive_us = 0;    // sum of standalone kernel times
  double no_overlap_us = 0;  // planner with overlap removed
  bool executor_supports = true;
  std::string reason;
  std::string label;  // compact, unique: template cover, backends, policy
};

struct PlanOptions {
  Objective objective = Objective::Step;
  std::vector<int> splits = {66, 88};  // fixed-split CTAs offered for the even regions
  bool include_unsupported = false;    // also rank candidates the executors cannot run yet
  int64_t max_candidates = 5000;       // enumeration cap: a larger space is an error
  std::vector<Backend> backends = {Backend::Conventional, Backend::Overlap, Backend::Persistent};
  // Whole-step backends ranked beside the compositions: conventional+PDL, and the PDL chain once
  // per distinct set of ops its folds remove (every subset of CHAIN_FOLD_ALL with
  // chain_fold_variants, else all folds).
  std::vector<Backend> step_backends = {Backend::ConventionalPdl, Backend::PdlChain};
  bool chain_fold_variants = true;
  // The PDL chain (all folds) with persistent regions: each template group (the prefix, each of a
  // layer's groups on every layer, the suffix) on the chain or persistent, adjacent groups of one
  // backend merged; step_advance stays on the chain. Ranked where the executors run a persistent
  // region over every op it would hold (persistent_refusal).
  bool chain_persistent = true;
};

struct OpCalibration {
  std::string key;          // op name + shape signature
  double measured_us = -1;  // service-table evidence per launch (with boundary); -1: none
  double model_us = 0;      // first-principles standalone time (with boundary)
  // Per-tile occupancy added so the model matches the evidence; negative where the model is
  // slower than measured (part of the tile's compute overlaps its loads), at most the whole
  // compute time of a tile.
  double extra_tile_us = 0;
  bool model_slower = false;  // slower than measured even with no compute time (loads alone)
};

// Op i of `g` alone on the whole GPU: its first-principles standalone time and, where `table`
// holds a conventional-step measurement of exactly its key (op, shape, cost.dtype, cost.gpu, the
// whole GPU), the per-tile occupancy that makes the standalone simulation reproduce it (bisected;
// docs/planner.md, "Calibration and evidence"). The simulations' work is added to *events and
// *tasks. key is left empty.
OpCalibration calibrate_op(const OpGraph& g, int i, const ServiceTable& table,
                           const CostModel& cost, int64_t* events, int64_t* tasks);

struct PlanResult {
  std::string model;
  std::string gpu;  // the GPU planned for (CostModel::gpu)
  int batch = 0;
  Objective objective = Objective::Step;
  double baseline_us = 0;               // all conventional, serial (calibrated)
  double uncalibrated_baseline_us = 0;  // all conventional from first principles only
  std::vector<Candidate> ranked;        // best first
  int pick = -1;                        // best candidate the executors support
  int additive_pick = -1;               // what "sum of standalone kernel times" would pick
  int no_overlap_pick = -1;             // what the planner without overlap would pick
  int baseline_rank = -1;               // where all-conventional (serial) ranks
  int64_t candidates = 0;
  int64_t sim_events = 0;  // total tile-simulation events (bounded work)
  int64_t sim_tasks = 0;
  std::vector<OpCalibration> calibration;
};

// Plans `g` (a decode step for Objective::Step, a prefill chunk for Objective::Ttft: its last op
// samples the first token). `rg` defaults to default_region_graph(g). Deterministic. Throws
// InputError when the candidate space exceeds options.max_candidates.
PlanResult plan(const OpGraph& g, const ServiceTable& table, const PlanOptions& options,
                const CostModel& cost, const RegionGraph* rg = nullptr);

// Time to first token with the prompt rows run through the decode step
// (ExecutorOptions::prefill_path = DecodeGraph): `rows` prompt tokens in replays of at most
// `max_rows` rows (the decode step's most rows). The tools size their executors by it too, so a
// measured graph prefill replays what the planner predicted. replay_rows = min(rows, max_rows),
// replays = ceil(rows / replay_rows) (a short last replay is counted as a full one: an upper
// bound).
struct TtftReplays {
  int replay_rows = 0;
  int replays = 0;
};
TtftReplays ttft_replays(int rows, int max_rows = MATMUL_SMALL_M_MAX);

// One TTFT candidate: the layer prefill (step_index = -1), or the decode-graph prefill replaying
// step candidate `step_index` of the step plan at replay_rows rows.
struct TtftCandidate {
  int step_index = -1;
  double predicted_us = 0, additive_us = 0, no_overlap_us = 0;
  bool executor_supports = true;
};
struct TtftPlan {
  TtftReplays replays;
  std::vector<TtftCandidate> ranked;  // best first; ties keep the layer prefill first
  int pick = -1, additive_pick = -1, no_overlap_pick = -1;
  int baseline_rank = -1;  // the layer prefill: the executors' default, every TTFT's reference
};
// Ranks the layer prefill, measured or predicted at `layers_us` (it has no overlap, so every
// selector sees the same time), against one decode-graph candidate per candidate of `step` (a
// step plan at replays.replay_rows rows): its predicted, additive and no-overlap times times the
// replays, plus replay_overhead_us per replay (the row uploads, the launch and the token
// read-back between replays). Deterministic.
TtftPlan rank_ttft(const PlanResult& step, double layers_us, TtftReplays replays,
                   double replay_overhead_us);

// Plan JSON of one ranked candidate: {model, batch, objective, regions:[{ops:[first,last],
// first_op, last_op, backend, cta_budget}], policy, split, predicted_us, baseline_us, reason,
// executor_supports}.
std::string plan_json(const PlanResult& r, const OpGraph& g, int index);

// Per op of `g`: FOLD_INTO_CONSUMER_PROLOGUE or FOLD_INTO_PRODUCER_EPILOGUE where the PDL chain
// with `folds` launches nothing for it because the kernel after or before it computes it, else 0,
// as the executor decides (runtime/overlap_ops.cu, pdl_chain.cu): a norm before a matmul
// on the streaming kernel (CHAIN_FOLD_NORMS); SiLU·mul in the epilogue of a streaming gate_up
// where the intermediate size is at least cost.silu_epilogue_min_inter (>= 0), else in the
// prologue of a streaming down projection (CHAIN_FOLD_SILU); qkv_rope before a decode attention
// of at most two rows, which takes the per-query-head kernel (CHAIN_FOLD_ROPE). Only where the
// graph's fold bits (Op::folds) allow it.
std::vector<char> chain_folded_ops(const OpGraph& g, uint32_t folds, const CostModel& cost);

// The tile graph of one candidate, as simulated (also used by the dumps).
struct TileGraph {
  std::vector<TileTask> tasks;
  std::vector<int> pool_workers;
  std::vector<int> op_first_tile;  // task id of each op's tile 0
  std::vector<int> op_done;        // join task id: all tiles of the op done
};
// keep_barriers: overlap and persistent regions keep each op's barrier ("overlap removed").
TileGraph build_tile_graph(const OpGraph& g, const std::vector<Region>& regions, Policy policy,
                           int split, const CostModel& cost,
                           const std::vector<double>& extra_tile_us, bool keep_barriers);

// Inspection dumps. The tile graph dumps refuse graphs of more than `max_tasks` tasks.
std::string region_graph_dot(const OpGraph& g, const RegionGraph& rg, const Candidate& c);
std::string region_graph_json(const OpGraph& g, const RegionGraph& rg, const Candidate& c);
std::string tile_graph_dot(const OpGraph& g, const TileGraph& t, const TileSimResult& r,
                           size_t max_tasks = 2000);
std::string tile_graph_json(const OpGraph& g, const TileGraph& t, const TileSimResult& r,
                            size_t max_tasks = 2000);

}  // namespace megaops
