// See plan.h. The reader checks every key it meets against the fields it knows, so a misspelt
// field is an error instead of a default silently taking its place.
#include "graph/plan.h"

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/error.h"
#include "core/matmul_dispatch.h"

namespace megaops {

namespace {

using nlohmann::json;

// Reads one JSON object of the plan; `path` is its field path ("decode.matmul"), "" at the top.
class Fields {
 public:
  Fields(const json& j, std::string origin, std::string path,
         std::initializer_list<const char*> known)
      : j_(j), origin_(std::move(origin)), path_(std::move(path)) {
    if (!j_.is_object()) fail(path_.empty() ? "" : path_, "expected an object, found " + j.dump());
    for (const auto& [key, value] : j_.items()) {
      bool ok = false;
      std::string names;
      for (const char* k : known) {
        ok |= key == k;
        names += (names.empty() ? "" : ", ") + std::string(k);
      }
      if (!ok) fail(at(key), "unknown key (expected one of " + names + ")");
    }
  }

  std::string at(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const std::string& origin() const { return origin_; }
  bool has(const char* key) const { return j_.contains(key); }
  const json& operator[](const char* key) const { return j_.at(key); }

  [[noreturn]] void fail(const std::string& field, const std::string& message) const {
    throw_input_error(origin_, field, message);
  }

  void read(const char* key, bool& out) const {
    if (!has(key)) return;
    const json& v = j_.at(key);
    if (!v.is_boolean()) fail(at(key), "expected true or false, found " + v.dump());
    out = v.get<bool>();
  }
  void read(const char* key, int& out, int64_t lo, int64_t hi) const {
    if (!has(key)) return;
    out = int_in(j_.at(key), at(key), lo, hi);
  }
  void read(const char* key, std::string& out) const {
    if (!has(key)) return;
    const json& v = j_.at(key);
    if (!v.is_string()) fail(at(key), "expected a string, found " + v.dump());
    out = v.get<std::string>();
  }
  // One of `choices`.
  void read_choice(const char* key, std::string& out,
                   std::initializer_list<const char*> choices) const {
    if (!has(key)) return;
    const json& v = j_.at(key);
    out = choice(v, at(key), choices);
  }

  int int_in(const json& v, const std::string& field, int64_t lo, int64_t hi) const {
    const std::string range = std::to_string(lo) + ".." + std::to_string(hi);
    if (!v.is_number_integer())
      fail(field, "expected an integer in " + range + ", found " + v.dump());
    // Unsigned values past int64 compare as huge: read them as unsigned first.
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
      fail(field, "expected " + range + ", found " + v.dump());
    const int64_t x = v.get<int64_t>();
    if (x < lo || x > hi) fail(field, "expected " + range + ", found " + v.dump());
    return static_cast<int>(x);
  }

  std::string choice(const json& v, const std::string& field,
                     std::initializer_list<const char*> choices) const {
    std::string names;
    size_t i = 0;
    for (const char* c : choices) {
      names += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + std::string(c);
      ++i;
    }
    if (v.is_string())
      for (const char* c : choices)
        if (v.get<std::string>() == c) return c;
    fail(field, "expected " + names + ", found " + v.dump());
  }

 private:
  const json& j_;
  std::string origin_, path_;
};

PlanBackend backend_of(const std::string& name) {
  if (name == "pdl_chain") return PlanBackend::PdlChain;
  if (name == "overlap") return PlanBackend::Overlap;
  return PlanBackend::Conventional;
}

void read_matmul(const Fields& parent, PlanMatmul& m) {
  const Fields f(
      parent["matmul"], parent.origin(), parent.at("matmul"),
      {"path", "stream_shapes", "stream_stages", "stream_kernel", "l2_evict_first", "tune"});
  f.read_choice("path", m.path, {"auto", "small", "stream", "cublaslt", "stream-for-small"});
  if (f.has("stream_shapes")) {
    const json& a = f["stream_shapes"];
    const std::string field = f.at("stream_shapes");
    if (!a.is_array()) f.fail(field, "expected an array of [n, k] pairs, found " + a.dump());
    m.stream_shapes.clear();
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string fi = field + "[" + std::to_string(i) + "]";
      if (!a[i].is_array() || a[i].size() != 2)
        f.fail(fi, "expected a pair [n, k], found " + a[i].dump());
      m.stream_shapes.push_back(
          {f.int_in(a[i][0], fi + "[0]", 1, 1 << 30), f.int_in(a[i][1], fi + "[1]", 1, 1 << 30)});
    }
  }
  if (f.has("stream_stages")) {
    const int s = f.int_in(f["stream_stages"], f.at("stream_stages"), 0, MATMUL_STREAM_STAGES_MAX);
    if (s != 0 && s < MATMUL_STREAM_STAGES_MIN)
      f.fail(f.at("stream_stages"),
             "expected 0 (the kernel's own) or " + std::to_string(MATMUL_STREAM_STAGES_MIN) + ".." +
                 std::to_string(MATMUL_STREAM_STAGES_MAX) + ", found " + std::to_string(s));
    m.stream_stages = s;
  }
  f.read_choice("stream_kernel", m.stream_kernel, {"auto", "ring", "bulk"});
  f.read("l2_evict_first", m.l2_evict_first);
  f.read("tune", m.tune);
}

void read_decode(const Fields& top, PlanDecode& d) {
  const Fields f(top["decode"], top.origin(), "decode",
                 {"backend", "pdl", "overlap_streams", "regions", "sharing", "folds",
                  "chain_counter_waits", "early_trigger_o_proj", "greedy_in_lm_head",
                  "conventional_arithmetic", "vendor_chunks", "persistent_stages",
                  "persistent_ctas_per_sm", "matmul"});
  std::string backend = plan_backend_name(d.backend);
  f.read_choice("backend", backend, {"conventional", "pdl_chain", "overlap"});
  d.backend = backend_of(backend);
  f.read("pdl", d.pdl);
  if (d.pdl && d.backend != PlanBackend::Conventional)
    f.fail(f.at("pdl"), std::string("only the conventional backend takes pdl (the ") + backend +
                            " step launches its own way), found true");
  if (d.backend == PlanBackend::PdlChain) d.overlap_streams = 1;
  f.read("overlap_streams", d.overlap_streams, 1, 8);
  if (d.backend == PlanBackend::PdlChain && d.overlap_streams != 1)
    f.fail(f.at("overlap_streams"), "expected 1 (one stream carries the pdl chain), found " +
                                        std::to_string(d.overlap_streams));
  if (f.has("regions")) {
    const json& a = f["regions"];
    const std::string field = f.at("regions");
    if (!a.is_array()) f.fail(field, "expected an array of regions, found " + a.dump());
    if (!a.empty() && d.backend == PlanBackend::Conventional)
      f.fail(field, "only the overlap and pdl_chain backends have regions, found " +
                        std::to_string(a.size()) + " with backend " + backend);
    d.regions.clear();
    for (size_t i = 0; i < a.size(); ++i) {
      const Fields r(a[i], f.origin(), field + "[" + std::to_string(i) + "]",
                     {"first_op", "backend", "cta_budget"});
      PlanRegion region;
      if (!r.has("first_op")) r.fail(r.at("first_op"), "missing (expected an op name)");
      r.read("first_op", region.first_op);
      if (region.first_op.empty()) r.fail(r.at("first_op"), "expected an op name, found \"\"");
      std::string rb = region_backend_name(region.backend);
      // A region runs on its step's backend (overlap or pdl_chain), conventionally or persistent.
      const char* own = d.backend == PlanBackend::PdlChain ? "pdl_chain" : "overlap";
      if (d.backend == PlanBackend::PdlChain) rb = "pdl_chain";
      r.read_choice("backend", rb, {"conventional", own, "persistent"});
      region.backend = rb == "conventional" ? RegionBackend::Conventional
                       : rb == "persistent" ? RegionBackend::Persistent
                       : rb == "pdl_chain"  ? RegionBackend::PdlChain
                                            : RegionBackend::Overlap;
      r.read("cta_budget", region.cta_budget, 0, 1 << 20);
      d.regions.push_back(region);
    }
  }
  if (f.has("sharing")) {
    const Fields g(f["sharing"], f.origin(), f.at("sharing"), {"policy", "split"});
    g.read_choice("policy", d.sharing.policy, {"serial", "fixed_split", "dynamic"});
    g.read("split", d.sharing.split, 0, 1 << 20);
    if (d.sharing.policy == "fixed_split" && d.sharing.split < 1)
      g.fail(g.at("split"), "expected the even regions' CTAs (>= 1) with fixed_split, found " +
                                std::to_string(d.sharing.split));
  }
  if (f.has("folds")) {
    const Fields g(f["folds"], f.origin(), f.at("folds"),
                   {"norms", "silu", "silu_epilogue_min_inter", "rope"});
    g.read("norms", d.folds.norms);
    g.read("silu", d.folds.silu);
    g.read("silu_epilogue_min_inter", d.folds.silu_epilogue_min_inter, -1, 1 << 20);
    g.read("rope", d.folds.rope);
  }
  f.read("chain_counter_waits", d.chain_counter_waits);
  f.read("early_trigger_o_proj", d.early_trigger_o_proj);
  f.read("greedy_in_lm_head", d.greedy_in_lm_head);
  f.read("conventional_arithmetic", d.conventional_arithmetic);
  f.read("vendor_chunks", d.vendor_chunks, 1, 64);
  f.read("persistent_stages", d.persistent_stages, 0, 16);
  if (d.persistent_stages == 1)
    f.fail(f.at("persistent_stages"), "expected 0 (the deepest ring that fits) or 2..16, found 1");
  f.read("persistent_ctas_per_sm", d.persistent_ctas_per_sm, 0, 3);
  if (f.has("matmul")) read_matmul(f, d.matmul);
}

}  // namespace

const char* plan_backend_name(PlanBackend b) {
  switch (b) {
    case PlanBackend::PdlChain:
      return "pdl_chain";
    case PlanBackend::Overlap:
      return "overlap";
    default:
      return "conventional";
  }
}

bool operator==(const Plan& a, const Plan& b) {
  auto regions = [](const PlanDecode& d) {
    std::vector<std::tuple<std::string, RegionBackend, int>> r;
    for (const PlanRegion& x : d.regions) r.push_back({x.first_op, x.backend, x.cta_budget});
    return r;
  };
  auto tie = [&](const Plan& p) {
    const PlanDecode& d = p.decode;
    const PlanMatmul& m = d.matmul;
    return std::make_tuple(
        p.model, p.batch, p.gpu, p.objective, p.source, p.predicted_us, d.backend, d.pdl,
        d.overlap_streams, regions(d), d.sharing.policy, d.sharing.split, d.folds.norms,
        d.folds.silu, d.folds.silu_epilogue_min_inter, d.folds.rope, d.chain_counter_waits,
        d.early_trigger_o_proj, d.greedy_in_lm_head, d.conventional_arithmetic, d.vendor_chunks,
        d.persistent_stages, d.persistent_ctas_per_sm, m.path, m.stream_shapes, m.stream_stages, m.stream_kernel,
        m.l2_evict_first, m.tune, p.prefill.path, p.prefill.chunk, p.prefill.attention);
  };
  return tie(a) == tie(b);
}

Plan parse_plan(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    // Drop nlohmann's "[json.exception.parse_error.101] " tag; the rest says where and why.
    std::string what = e.what();
    if (const size_t at = what.find("] "); at != std::string::npos) what = what.substr(at + 2);
    throw_input_error(origin, "", "not valid JSON: " + what);
  }
  if (!j.is_object()) throw_input_error(origin, "", "expected a JSON object, found " + j.dump());
  // Format and version first: a file of another format (the planner's JSON before version 1)
  // gets that said rather than its first unknown key.
  if (!j.contains("format"))
    throw_input_error(origin, "format",
                      std::string("missing (expected \"") + PLAN_FORMAT +
                          "\"; a plan written by megaops plan before version 1 must be written "
                          "again)");
  if (j["format"] != PLAN_FORMAT)
    throw_input_error(origin, "format",
                      std::string("expected \"") + PLAN_FORMAT + "\", found " + j["format"].dump());
  if (!j.contains("version"))
    throw_input_error(origin, "version", "missing (expected " + std::to_string(PLAN_VERSION) + ")");
  if (!j["version"].is_number_integer() || j["version"] != PLAN_VERSION)
    throw_input_error(origin, "version",
                      "expected " + std::to_string(PLAN_VERSION) +
                          " (the version this megaops reads), found " + j["version"].dump());
  const Fields f(j, origin, "",
                 {"format", "version", "model", "batch", "gpu", "objective", "source",
                  "predicted_us", "decode", "prefill"});
  Plan p;
  f.read("model", p.model);
  f.read("batch", p.batch, 1, 64);
  f.read("gpu", p.gpu);
  f.read_choice("objective", p.objective, {"step", "ttft"});
  f.read("source", p.source);
  if (f.has("predicted_us")) {
    const json& v = f["predicted_us"];
    if (!v.is_number() || v.get<double>() < 0)
      f.fail("predicted_us", "expected a number >= 0, found " + v.dump());
    p.predicted_us = v.get<double>();
  }
  if (f.has("decode")) read_decode(f, p.decode);
  if (f.has("prefill")) {
    const Fields g(f["prefill"], origin, "prefill", {"path", "chunk", "attention"});
    g.read_choice("path", p.prefill.path, {"layers", "graph"});
    g.read("chunk", p.prefill.chunk, 1, 1 << 20);
    g.read_choice("attention", p.prefill.attention, {"flash", "cudnn"});
  }
  return p;
}

std::string plan_to_json(const Plan& p) {
  using oj = nlohmann::ordered_json;
  const PlanDecode& d = p.decode;
  oj regions = oj::array();
  for (const PlanRegion& r : d.regions)
    regions.push_back({{"first_op", r.first_op},
                       {"backend", region_backend_name(r.backend)},
                       {"cta_budget", r.cta_budget}});
  oj shapes = oj::array();
  for (const auto& [n, k] : d.matmul.stream_shapes) shapes.push_back({n, k});
  oj j;
  j["format"] = PLAN_FORMAT;
  j["version"] = PLAN_VERSION;
  j["model"] = p.model;
  j["batch"] = p.batch;
  j["gpu"] = p.gpu;
  j["objective"] = p.objective;
  j["source"] = p.source;
  if (p.predicted_us >= 0) j["predicted_us"] = p.predicted_us;
  j["decode"] = {{"backend", plan_backend_name(d.backend)},
                 {"pdl", d.pdl},
                 {"overlap_streams", d.overlap_streams},
                 {"regions", regions},
                 {"sharing", {{"policy", d.sharing.policy}, {"split", d.sharing.split}}},
                 {"folds",
                  {{"norms", d.folds.norms},
                   {"silu", d.folds.silu},
                   {"silu_epilogue_min_inter", d.folds.silu_epilogue_min_inter},
                   {"rope", d.folds.rope}}},
                 {"chain_counter_waits", d.chain_counter_waits},
                 {"early_trigger_o_proj", d.early_trigger_o_proj},
                 {"greedy_in_lm_head", d.greedy_in_lm_head},
                 {"conventional_arithmetic", d.conventional_arithmetic},
                 {"vendor_chunks", d.vendor_chunks},
                 {"persistent_stages", d.persistent_stages},
                 {"persistent_ctas_per_sm", d.persistent_ctas_per_sm},
                 {"matmul",
                  {{"path", d.matmul.path},
                   {"stream_shapes", shapes},
                   {"stream_stages", d.matmul.stream_stages},
                   {"stream_kernel", d.matmul.stream_kernel},
                   {"l2_evict_first", d.matmul.l2_evict_first},
                   {"tune", d.matmul.tune}}}};
  j["prefill"] = {{"path", p.prefill.path}};
  if (p.prefill.chunk > 0) j["prefill"]["chunk"] = p.prefill.chunk;
  j["prefill"]["attention"] = p.prefill.attention;
  return j.dump(2);
}

// Measured (bench/results/2026-12-04-s27-call4: the four presets, batch 1, 8 and 32, the PDL
// chain against conventional + PDL, two rounds each): at batch 1 the chain with its folds was the
// faster step on every preset (llama3.2-1b 0.739 against 0.848 ms/token, llama3.1-8b 3.78 against
// 4.07); at batch 8 and 32 conventional + PDL was (llama3.2-1b 1.052 against 1.111 at batch 8).
// Other batch sizes take the rule of their nearest measured neighbours: the chain at 1 only.
Plan default_plan(int batch) {
  Plan p;
  p.batch = batch;
  p.source = "default for batch " + std::to_string(batch) + ", fastest measured in " +
             DEFAULT_PLAN_EVIDENCE;
  if (batch == 1) {
    p.decode.backend = PlanBackend::PdlChain;
    p.decode.overlap_streams = 1;
  } else {
    p.decode.backend = PlanBackend::Conventional;
    p.decode.pdl = true;
  }
  return p;
}

void check_plan_for_model(const Plan& p, const std::string& origin, int max_positions,
                          const std::string& model) {
  if (p.prefill.chunk > max_positions)
    throw_input_error(origin, "prefill.chunk",
                      "expected 1.." + std::to_string(max_positions) +
                          " (max_position_embeddings of " + model + "), found " +
                          std::to_string(p.prefill.chunk));
}

std::string plan_gpu_warning(const Plan& p, const std::string& origin, const std::string& device) {
  if (p.gpu.empty() || p.gpu == device) return "";
  return origin + ": warning: made for " + p.gpu + ", running on " + device +
         ": its choices were predicted for the other GPU (plan again with this GPU's profiles)";
}

std::string describe(const Plan& p) {
  const PlanDecode& d = p.decode;
  std::string s;
  switch (d.backend) {
    case PlanBackend::Conventional:
      s = std::string("conventional, pdl ") + (d.pdl ? "on" : "off");
      break;
    case PlanBackend::PdlChain: {
      // SiLU·mul is folded one way or the other (into down, or gate_up's epilogue) unless both
      // are off.
      const bool silu = d.folds.silu || d.folds.silu_epilogue_min_inter >= 0;
      std::string folds;
      for (const auto& [on, name] : {std::pair<bool, const char*>{d.folds.norms, "norms"},
                                     {silu, "silu"},
                                     {d.folds.rope, "rope"}})
        if (on) folds += (folds.empty() ? "" : "+") + std::string(name);
      s = "pdl chain, " + (folds.empty() ? std::string("no folds") : "folds " + folds);
      if (d.chain_counter_waits) s += ", counter waits";
      if (!d.regions.empty()) s += ", " + std::to_string(d.regions.size()) + " regions";
      break;
    }
    case PlanBackend::Overlap: {
      s = "overlap W=" + std::to_string(d.overlap_streams) + ", " +
          (d.regions.size() <= 1 ? std::string("one region")
                                 : std::to_string(d.regions.size()) + " regions");
      int conventional = 0;
      for (const PlanRegion& r : d.regions)
        conventional += r.backend == RegionBackend::Conventional;
      if (conventional > 0) s += " (" + std::to_string(conventional) + " conventional)";
      if (d.sharing.policy != "serial") s += ", " + d.sharing.policy;
    }
      if (!d.conventional_arithmetic) s += ", v0 arithmetic";
      break;
  }
  if (p.prefill.path != "layers") s += ", " + p.prefill.path + " prefill";
  if (p.prefill.attention != "flash") s += ", " + p.prefill.attention + " prefill attention";
  return s;
}

const char* region_backend_name(RegionBackend b) {
  switch (b) {
    case RegionBackend::Conventional:
      return "conventional";
    case RegionBackend::Persistent:
      return "persistent";
    case RegionBackend::PdlChain:
      return "pdl_chain";
    default:
      return "overlap";
  }
}

void check_plan_runnable(const Plan& p, const std::string& origin) {
  const PlanDecode& d = p.decode;
  for (size_t r = 0; r < d.regions.size(); ++r) {
    const std::string field = "decode.regions[" + std::to_string(r) + "]";
    if (d.regions[r].cta_budget != 0 && d.regions[r].backend != RegionBackend::Persistent)
      throw_input_error(origin, field + ".cta_budget",
                        "expected 0 (the executor chooses the CTA budgets of the conventional and "
                        "overlap regions it runs one after another), found " +
                            std::to_string(d.regions[r].cta_budget));
  }
  if (d.sharing.policy != "serial")
    throw_input_error(origin, "decode.sharing.policy",
                      "expected serial (co-running regions under a CTA split or dynamic sharing "
                      "have no executor yet), found " +
                          d.sharing.policy);
}

void check_plan_regions(const Plan& p, const std::string& origin,
                        const std::vector<std::string>& op_names) {
  size_t prev = 0;
  for (size_t r = 0; r < p.decode.regions.size(); ++r) {
    const std::string field = "decode.regions[" + std::to_string(r) + "].first_op";
    const std::string& name = p.decode.regions[r].first_op;
    size_t k = 0;
    while (k + 1 < op_names.size() && op_names[k] != name) ++k;
    if (k + 1 >= op_names.size())
      throw_input_error(origin, field,
                        "no op named '" + name +
                            "' in this model's decode step (names as "
                            "'embedding', 'layer 0 qkv_proj', ..., 'lm_head')");
    if (r == 0 && k != 0)
      throw_input_error(origin, field,
                        "expected '" + op_names[0] + "' (the first op), found '" + name + "'");
    if (r > 0 && k <= prev)
      throw_input_error(origin, field,
                        "expected an op after '" + op_names[prev] + "', found '" + name + "'");
    prev = k;
  }
}

}  // namespace megaops
