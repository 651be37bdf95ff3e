// See service_table.h. Profile entries are mapped onto the op graph of the profile's own
// configuration to get each op's shape signature, so (op, layer) rows with equal shapes average
// into one entry per op.
#include "planner/service_table.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace megaops {

using nlohmann::json;

std::string shape_signature(const Op& op, int context) {
  std::string s =
      "m=" + std::to_string(op.m) + ",n=" + std::to_string(op.n) + ",k=" + std::to_string(op.k);
  if (op.kind == OpKind::Attention) s += ",ctx=" + std::to_string(context);
  return s;
}

std::string graph_signature(const OpGraph& g) {
  std::string s;
  for (const Op& op : g.ops) s += op.name + "(" + shape_signature(op, g.context) + ");";
  return s;
}

void ServiceTable::add(const ServiceKey& key, double us, int samples, const std::string& source) {
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    entries_[key] = ServiceEntry{key, us, samples, source};
    return;
  }
  ServiceEntry& e = it->second;
  e.us = (e.us * e.samples + us * samples) / (e.samples + samples);
  e.samples += samples;
}

std::optional<ServiceEntry> ServiceTable::lookup(const ServiceKey& key) const {
  auto it = entries_.find(key);
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

std::optional<StepFigures> ServiceTable::step_figures(const OpGraph& g, const std::string& dtype,
                                                      const std::string& gpu) const {
  auto it = steps_.find({graph_signature(g), dtype, gpu});
  if (it == steps_.end()) return std::nullopt;
  return it->second;
}

std::vector<ServiceEntry> ServiceTable::entries() const {
  std::vector<ServiceEntry> out;
  for (const auto& [k, e] : entries_) out.push_back(e);
  return out;
}

namespace {

json parse(const std::string& text, const std::string& origin) {
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw_input_error(origin, "", std::string("expected JSON, found a parse error: ") + e.what());
  }
}

template <typename T>
T field(const json& j, const char* name, const std::string& origin, const char* expected) {
  if (!j.contains(name))
    throw_input_error(origin, name, std::string("expected ") + expected + ", found nothing");
  try {
    return j.at(name).get<T>();
  } catch (const json::exception&) {
    throw_input_error(origin, name,
                      std::string("expected ") + expected + ", found " + j.at(name).dump());
  }
}

}  // namespace

int ServiceTable::load_profile_json(const std::string& text, const std::string& origin,
                                    int full_budget, StepGraphBuilder graphs) {
  const json j = parse(text, origin);
  const auto backend = field<std::string>(j, "backend", origin, "a string");
  if (backend != "conventional")
    throw_input_error(origin, "backend", "expected \"conventional\", found \"" + backend + "\"");
  const json& sh = j.contains("shapes") ? j.at("shapes") : json();
  if (!sh.is_object()) throw_input_error(origin, "shapes", "expected an object, found nothing");
  ModelConfig cfg;
  const auto arch = field<std::string>(sh, "arch", origin, "an architecture name");
  if (arch == "Qwen3ForCausalLM") {
    cfg.arch = Arch::Qwen3;
  } else if (arch != "LlamaForCausalLM") {
    throw_input_error(origin, "shapes.arch",
                      "expected LlamaForCausalLM or Qwen3ForCausalLM, found " + arch);
  }
  cfg.hidden_size = field<int>(sh, "hidden", origin, "an integer");
  cfg.intermediate_size = field<int>(sh, "intermediate", origin, "an integer");
  cfg.num_layers = field<int>(sh, "layers", origin, "an integer");
  cfg.num_heads = field<int>(sh, "heads", origin, "an integer");
  cfg.num_kv_heads = field<int>(sh, "kv_heads", origin, "an integer");
  cfg.head_dim = field<int>(sh, "head_dim", origin, "an integer");
  cfg.vocab_size = field<int>(sh, "vocab", origin, "an integer");
  const int batch = field<int>(j, "batch", origin, "an integer");
  const int context = field<int>(j, "context", origin, "an integer");
  const auto gpu = field<std::string>(j, "gpu", origin, "a string");
  const auto dtype = field<std::string>(j, "dtype", origin, "a string");
  StepRequest req;
  req.step = StepKind::Decode;
  req.rows = batch;
  req.sequences = batch;
  req.context = context;
  const OpGraph g = graphs(cfg, req);
  if (!j.contains("ops") || !j.at("ops").is_array())
    throw_input_error(origin, "ops", "expected an array, found nothing");
  const json& rows = j.at("ops");
  StepFigures fig;
  fig.source = origin;
  auto positive = [&](const char* name) {
    const double v = field<double>(j, name, origin, "a positive number of microseconds");
    if (!(v > 0) || !std::isfinite(v))
      throw_input_error(origin, name,
                        "expected a positive number of microseconds, found " + std::to_string(v));
    return v;
  };
  const bool has_graph_step = j.contains("graph_step_us");
  if (has_graph_step) {
    if (rows.empty()) throw_input_error(origin, "ops", "expected at least one op, found none");
    const double step = positive("step_us"), graph_step = positive("graph_step_us");
    fig.event_overhead_us = (step - graph_step) / static_cast<double>(rows.size());
    if (j.contains("prefill_us")) fig.prefill_us = positive("prefill_us");
    if (j.contains("serial_overlap_step_us"))
      fig.serial_overlap_op_us = std::max(0.0, (positive("serial_overlap_step_us") - graph_step) /
                                                   static_cast<double>(rows.size()));
  }
  int added = 0;
  for (const json& o : rows) {
    const auto name = field<std::string>(o, "op", origin, "an op name");
    const int layer = field<int>(o, "layer", origin, "an integer");
    const double us = field<double>(o, "us", origin, "a number");
    if (!(us >= 0) || !std::isfinite(us))
      throw_input_error(origin, "ops.us",
                        "expected a finite time >= 0, found " + std::to_string(us));
    const int idx = find_op(g, name, layer);
    if (idx < 0)
      throw_input_error(
          origin, "ops.op",
          "expected an op of the decode graph, found " + name + " layer " + std::to_string(layer));
    add({name, shape_signature(g.ops[idx], context), dtype, backend, full_budget, gpu},
        std::max(0.0, us - fig.event_overhead_us), 1, origin);
    ++added;
  }
  if (has_graph_step) steps_[{graph_signature(g), dtype, gpu}] = fig;
  return added;
}

int ServiceTable::load_bench_json(const std::string& text, const std::string& origin) {
  const json j = parse(text, origin);
  const auto schema = field<std::string>(j, "schema", origin, "\"megaops-op-bench/1\"");
  if (schema != "megaops-op-bench/1")
    throw_input_error(origin, "schema",
                      "expected \"megaops-op-bench/1\", found \"" + schema + "\"");
  const auto gpu = field<std::string>(j, "gpu", origin, "a string");
  const auto dtype = field<std::string>(j, "dtype", origin, "a string");
  if (!j.contains("entries") || !j.at("entries").is_array())
    throw_input_error(origin, "entries", "expected an array, found nothing");
  int added = 0;
  for (const json& e : j.at("entries")) {
    ServiceKey k;
    k.op = field<std::string>(e, "op", origin, "an op name");
    k.shape = field<std::string>(e, "shape", origin, "a shape signature");
    k.backend = field<std::string>(e, "backend", origin, "a backend name");
    k.cta_budget = field<int>(e, "cta_budget", origin, "an integer");
    k.dtype = dtype;
    k.gpu = gpu;
    const double us = field<double>(e, "us", origin, "a number");
    if (k.cta_budget < 1)
      throw_input_error(origin, "entries.cta_budget",
                        "expected >= 1, found " + std::to_string(k.cta_budget));
    if (!(us >= 0) || !std::isfinite(us))
      throw_input_error(origin, "entries.us",
                        "expected a finite time >= 0, found " + std::to_string(us));
    add(k, us, e.contains("samples") ? field<int>(e, "samples", origin, "an integer") : 1, origin);
    ++added;
  }
  return added;
}

double cta_wave_estimate(double full_us, int64_t tiles, int full_budget, int budget) {
  if (budget < 1 || full_budget < 1 || tiles < 1)
    throw_input_error("cta wave estimate", "budget", "expected positive tiles and budgets");
  const double waves_full = std::ceil(static_cast<double>(tiles) / full_budget);
  const double waves = std::ceil(static_cast<double>(tiles) / budget);
  return full_us * waves / waves_full;
}

}  // namespace megaops
