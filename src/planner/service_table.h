// The service table: measured times of ops, keyed by everything that makes a measurement
// comparable. A lookup returns evidence only when every key field matches exactly; the planner
// never transfers a time across shapes, dtypes, backends, CTA budgets or GPUs. Evidence comes from
// `megaops profile` JSON (a conventional step, per op and layer) and standalone op benchmark JSON
// (schema "megaops-op-bench/1"); both schemas are in docs/planner.md.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "graph/op_graph.h"

namespace megaops {

struct ServiceKey {
  std::string op;       // executor op name ("qkv_proj")
  std::string shape;    // shape_signature()
  std::string dtype;    // "bf16"
  std::string backend;  // "conventional" (in a conventional step), "standalone" (op benchmark)
  int cta_budget = 0;
  std::string gpu;  // CUDA device name ("NVIDIA H200")

  auto tie() const { return std::tie(op, shape, dtype, backend, cta_budget, gpu); }
  bool operator<(const ServiceKey& o) const { return tie() < o.tie(); }
  bool operator==(const ServiceKey& o) const { return tie() == o.tie(); }
};

struct ServiceEntry {
  ServiceKey key;
  double us = 0;       // mean time per launch, including the kernel boundary for profile entries
  int samples = 0;     // launches averaged (e.g. one per layer)
  std::string source;  // file the evidence came from
};

// "m=1,n=3072,k=2048" plus ",ctx=N" for attention (its time depends on the context length).
std::string shape_signature(const Op& op, int context);

// Every op's name and shape signature in order: what makes two steps' whole-step times
// comparable (model shapes, batch and context).
std::string graph_signature(const OpGraph& g);

// Whole-step figures of a profile (`megaops profile` JSON, optional fields), keyed like the
// entries: graph_signature, dtype, GPU.
struct StepFigures {
  // The per-op times were taken with an event after every op; graph_step_us is the same step
  // replayed without events, as `bench` times it. Their difference per op is subtracted from
  // every entry of the profile at load, so the entries add up to graph_step_us. 0 without it.
  double event_overhead_us = 0;
  // (serial_overlap_step_us - graph_step_us) / ops: what each op of a conventional region costs
  // more inside a plan that has overlap regions (the executor then runs the whole step on its
  // overlap path, the conventional regions as serial regions). -1 when the profile lacks it.
  double serial_overlap_op_us = -1;
  // The layer prefill of the profile's batch of prompts of `context` tokens, timed as `bench`
  // times TTFT (host clock around prefill); -1 when the profile lacks it.
  double prefill_us = -1;
  std::string source;
};

class ServiceTable {
 public:
  // Adds a measurement; entries with the same key are averaged (weighted by samples).
  void add(const ServiceKey& key, double us, int samples, const std::string& source);

  // Exact match on every key field, or nothing.
  std::optional<ServiceEntry> lookup(const ServiceKey& key) const;

  // A `megaops profile --json` file: backend "conventional", CTA budget = `full_budget` (the
  // profile runs every kernel on the whole GPU). Shapes come from the profile's own "shapes",
  // "batch" and "context", never from the model being planned. With "graph_step_us" (and
  // "step_us") the entries are corrected for the profile's events (StepFigures). Returns entries
  // added. `graphs` builds the decode graph of the profile's shapes (models/step_graph.h's
  // build_step_graph): the profile's ops are matched against it by name and layer.
  int load_profile_json(const std::string& text, const std::string& origin, int full_budget,
                        StepGraphBuilder graphs);

  // A standalone op benchmark file, schema "megaops-op-bench/1". Returns entries added.
  int load_bench_json(const std::string& text, const std::string& origin);

  size_t size() const { return entries_.size(); }
  std::vector<ServiceEntry> entries() const;

  // The whole-step figures of a loaded profile of exactly this step, dtype and GPU, or nothing.
  std::optional<StepFigures> step_figures(const OpGraph& g, const std::string& dtype,
                                          const std::string& gpu) const;

 private:
  std::map<ServiceKey, ServiceEntry> entries_;
  std::map<std::tuple<std::string, std::string, std::string>, StepFigures> steps_;
};

// CTA-wave estimate of an opaque op's time under a reduced CTA budget: its tiles run in waves of
// `budget` CTAs, so time(b) = time(full) * ceil(tiles / b) / ceil(tiles / full). Ignores that a
// bandwidth-bound op may reach the bandwidth with fewer CTAs (it overestimates those).
double cta_wave_estimate(double full_us, int64_t tiles, int full_budget, int budget);

}  // namespace megaops
