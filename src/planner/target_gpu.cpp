// See target_gpu.h.
#include "planner/target_gpu.h"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace megaops {

namespace {

constexpr double MAX_HBM_GBPS = 100000;  // 100 TB/s: far above any GPU, below nonsense
constexpr int MAX_SMS = 4096;

void check_hbm(double gbps, const std::string& origin, const std::string& field) {
  if (!(gbps > 0 && gbps <= MAX_HBM_GBPS) || !std::isfinite(gbps))
    throw_input_error(
        origin, field,
        "expected an HBM read ceiling in GB/s, 0 < x <= 100000, found " + std::to_string(gbps));
}

void check_sms(int sms, const std::string& origin, const std::string& field) {
  if (sms < 1 || sms > MAX_SMS)
    throw_input_error(origin, field, "expected an SM count 1..4096, found " + std::to_string(sms));
}

}  // namespace

TargetGpu evidence_gpu(const std::string& text, const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw_input_error(origin, "", std::string("expected JSON, found a parse error: ") + e.what());
  }
  if (!j.is_object()) throw_input_error(origin, "", "expected a JSON object, found " + j.dump());
  TargetGpu g;
  g.source = origin;
  if (!j.contains("gpu") || !j.at("gpu").is_string() || j.at("gpu").get<std::string>().empty())
    throw_input_error(origin, "gpu",
                      "expected the name of the GPU it was measured on, found " +
                          (j.contains("gpu") ? j.at("gpu").dump() : std::string("nothing")));
  g.name = j.at("gpu").get<std::string>();
  if (j.contains("hbm_read_ceiling_gbps")) {
    const nlohmann::json& v = j.at("hbm_read_ceiling_gbps");
    if (!v.is_number())
      throw_input_error(origin, "hbm_read_ceiling_gbps",
                        "expected a number of GB/s, found " + v.dump());
    g.hbm_gbps = v.get<double>();
    check_hbm(g.hbm_gbps, origin, "hbm_read_ceiling_gbps");
  }
  if (j.contains("sms")) {
    const nlohmann::json& v = j.at("sms");
    if (!v.is_number_integer())
      throw_input_error(origin, "sms", "expected an integer, found " + v.dump());
    g.sms = v.get<int>();
    check_sms(g.sms, origin, "sms");
  }
  return g;
}

TargetGpu default_target_gpu(const CostModel& cost) {
  TargetGpu g;
  g.name = cost.gpu;
  g.hbm_gbps = cost.machine.bytes_per_us / 1e3;
  g.sms = cost.machine.workers;
  g.source = "the cost model's defaults";
  return g;
}

TargetGpu resolve_target_gpu(const std::vector<TargetGpu>& evidence, const TargetGpuFlags& flags,
                             const TargetGpu& defaults) {
  if (flags.gpu && flags.gpu->empty())
    throw_input_error("--gpu", "", "expected a GPU name as CUDA reports it, found nothing");
  if (flags.hbm_gbps) check_hbm(*flags.hbm_gbps, "--hbm-gbps", "");
  if (flags.sms) check_sms(*flags.sms, "--sms", "");
  TargetGpu t;
  if (!evidence.empty()) {
    t.name = evidence.front().name;
    t.source = evidence.front().source;
    for (const TargetGpu& e : evidence)
      if (e.name != t.name)
        throw_input_error(e.source, "gpu",
                          "expected evidence from one GPU, found \"" + e.name + "\" here and \"" +
                              t.name + "\" in " + t.source +
                              " (plan each GPU from its own profiles)");
    if (flags.gpu && *flags.gpu != t.name)
      throw_input_error("--gpu", "",
                        "expected the GPU the evidence was measured on, \"" + t.name + "\" (" +
                            t.source + "), found \"" + *flags.gpu + "\"");
    const TargetGpu* sms_from = nullptr;
    for (const TargetGpu& e : evidence) {
      if (t.hbm_gbps == 0 && e.hbm_gbps > 0) t.hbm_gbps = e.hbm_gbps;
      if (e.sms == 0) continue;
      if (sms_from != nullptr && e.sms != sms_from->sms)
        throw_input_error(e.source, "sms",
                          "expected " + std::to_string(sms_from->sms) + " SMs, as " +
                              sms_from->source + " records for " + t.name + ", found " +
                              std::to_string(e.sms));
      sms_from = &e;
      t.sms = e.sms;
    }
  } else if (flags.gpu) {
    t.name = *flags.gpu;
    t.source = "--gpu";
  } else {
    t = defaults;
  }
  if (flags.hbm_gbps) t.hbm_gbps = *flags.hbm_gbps;
  if (flags.sms) t.sms = *flags.sms;
  if (t.name == defaults.name) {
    if (t.hbm_gbps == 0) t.hbm_gbps = defaults.hbm_gbps;
    if (t.sms == 0) t.sms = defaults.sms;
  }
  if (t.hbm_gbps == 0)
    throw_input_error("--hbm-gbps", "",
                      "expected the HBM read ceiling of " + t.name + " (" + t.source +
                          " does not record one; `megaops hbm-ceiling` measures it), found "
                          "nothing");
  if (t.sms == 0)
    throw_input_error("--sms", "",
                      "expected the SM count of " + t.name + " (" + t.source +
                          " does not record one), found nothing");
  return t;
}

void apply_target_gpu(const TargetGpu& gpu, CostModel& cost, PlanOptions& options) {
  cost.gpu = gpu.name;
  cost.machine.bytes_per_us = gpu.hbm_gbps * 1e3;  // GB/s = 1e3 bytes per us
  cost.machine.workers = gpu.sms;
  options.splits.clear();
  for (int s : {gpu.sms / 2, gpu.sms * 2 / 3})
    if (s >= 1 && s < gpu.sms && (options.splits.empty() || options.splits.back() != s))
      options.splits.push_back(s);
}

}  // namespace megaops
