// See pipeline_composition.h.
#include "graph/pipeline_composition.h"

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace megaops {

namespace {

using nlohmann::json;

const char* GROUPS[] = {"prefill", "producer", "local", "codec"};
const char* BACKENDS[] = {"conventional", "conventional_pdl", "pdl_chain", "persistent"};

std::string short_json(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 60) + "..." : s;
}

}  // namespace

PipelineComposition default_composition() {
  PipelineComposition c;
  c.label = "P:conv | B:conv | L:conv | C:conv serial";
  for (const char* g : GROUPS) c.regions.push_back({{g}, "conventional"});
  return c;
}

PipelineComposition parse_composition(const std::string& text, const std::string& origin) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw_input_error(origin, "", std::string("malformed JSON: ") + e.what());
  }
  if (!root.is_object()) throw_input_error(origin, "", "expected a JSON object");
  for (auto it = root.begin(); it != root.end(); ++it) {
    static const char* known[] = {
        "schema", "pipeline",          "batch",     "rank",  "label", "regions", "policy",
        "split",  "executor_supports", "predicted", "reason"};
    bool ok = false;
    for (const char* k : known) ok = ok || it.key() == k;
    if (!ok) throw_input_error(origin, it.key(), "unknown field");
  }
  if (!root.contains("schema") || root["schema"] != COMPOSITION_SCHEMA)
    throw_input_error(origin, "schema",
                      std::string("expected \"") + COMPOSITION_SCHEMA + "\", found " +
                          (root.contains("schema") ? short_json(root["schema"]) : "nothing"));
  PipelineComposition c;
  if (root.contains("label") && root["label"].is_string()) c.label = root["label"];
  if (!root.contains("policy") || !root["policy"].is_string())
    throw_input_error(origin, "policy", "expected serial, fixed_split or dynamic");
  c.policy = root["policy"];
  if (c.policy != "serial" && c.policy != "fixed_split" && c.policy != "dynamic")
    throw_input_error(origin, "policy",
                      "expected serial, fixed_split or dynamic, found \"" + c.policy + "\"");
  if (root.contains("split")) {
    if (!root["split"].is_number_integer() || root["split"].get<int64_t>() < 0 ||
        root["split"].get<int64_t>() > 100000)
      throw_input_error(origin, "split",
                        "expected a CTA count, found " + short_json(root["split"]));
    c.split = root["split"].get<int>();
  }
  const json* regions = root.contains("regions") ? &root["regions"] : nullptr;
  if (!regions || !regions->is_array() || regions->empty())
    throw_input_error(origin, "regions", "expected a non-empty array of regions");
  int next = 0;
  for (size_t i = 0; i < regions->size(); ++i) {
    const std::string field = "regions[" + std::to_string(i) + "]";
    const json& r = (*regions)[i];
    if (!r.is_object() || !r.contains("groups") || !r["groups"].is_array() || r["groups"].empty() ||
        !r.contains("backend") || !r["backend"].is_string() || r.size() != 2)
      throw_input_error(origin, field, "expected {\"groups\": [...], \"backend\": \"...\"}");
    CompositionRegion reg;
    for (const json& g : r["groups"]) {
      const std::string want = next < 4 ? GROUPS[next] : "no further group";
      if (!g.is_string() || g.get<std::string>() != want)
        throw_input_error(
            origin, field + ".groups",
            "expected \"" + want +
                "\" (regions cover prefill, producer, local, codec in order), found " +
                short_json(g));
      reg.groups.push_back(g);
      ++next;
    }
    reg.backend = r["backend"];
    bool ok = false;
    for (const char* b : BACKENDS) ok = ok || reg.backend == b;
    if (!ok)
      throw_input_error(
          origin, field + ".backend",
          "expected conventional, conventional_pdl, pdl_chain or persistent, found \"" +
              reg.backend + "\"");
    c.regions.push_back(std::move(reg));
  }
  if (next != 4)
    throw_input_error(origin, "regions",
                      std::string("expected the groups to end with codec, found them end with ") +
                          GROUPS[next - 1]);
  return c;
}

StagePlans composition_stage_plans(const PipelineComposition& c, const std::string& origin) {
  if (c.policy != "serial")
    throw_input_error(origin, "policy",
                      "expected serial (" + c.policy + " sharing has no executor yet)");
  StagePlans out;
  for (size_t i = 0; i < c.regions.size(); ++i) {
    const CompositionRegion& r = c.regions[i];
    const std::string field = "regions[" + std::to_string(i) + "]";
    if (r.groups.size() > 1) {
      std::string names;
      for (const std::string& g : r.groups) names += (names.empty() ? "" : "+") + g;
      throw_input_error(origin, field,
                        "a region of several groups (" + names + ") has no executor yet");
    }
    const std::string& g = r.groups[0];
    if (r.backend == "persistent")
      throw_input_error(origin, field + ".backend", "persistent regions have no executor yet");
    if ((g == "prefill" || g == "codec") && r.backend != "conventional")
      throw_input_error(origin, field + ".backend",
                        "expected conventional for the " + g + " (its only executor), found \"" +
                            r.backend + "\"");
    if (g != "producer" && g != "local") continue;
    Plan& p = g == "producer" ? out.producer : out.local;
    p.source = "composition " + origin;
    if (r.backend == "conventional_pdl") p.decode.pdl = true;
    if (r.backend == "pdl_chain") {
      p.decode.backend = PlanBackend::PdlChain;
      p.decode.overlap_streams = 1;
    }
  }
  return out;
}

}  // namespace megaops
