// The planner plans for the GPU its evidence was measured on: the GPU's name, HBM read ceiling and
// SM count come from the profiles (or flags), evidence from several GPUs is refused, and a profile
// taken on an H100 is used shape by shape (before, the target was fixed to the H200 and such a
// profile matched no shape).
#include "planner/target_gpu.h"

#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/model_config.h"
#include "models/step_graph.h"
#include "planner/planner.h"
#include "planner/service_table.h"

namespace megaops {
namespace {

using nlohmann::json;

const char* H100 = "NVIDIA H100 80GB HBM3";

// A `megaops profile --json` file of qwen3-0.6b, batch 1, context 32, on `gpu`, every op taking
// `scale` times its first-principles time on the default (H200) model plus 3 us: what a slower
// GPU measures, and nothing the first-principles model could reproduce by itself.
json synthetic_profile(const std::string& gpu, double scale) {
  const ModelConfig cfg = preset_config("qwen3-0.6b");
  const OpGraph g = build_decode_graph(cfg, "qwen3-0.6b", 1, 32);
  const PlanResult fp = plan(g, ServiceTable(), PlanOptions(), CostModel());
  std::map<std::string, double> model_us;  // calibration key (op name|shape) -> model time
  for (const OpCalibration& c : fp.calibration) model_us[c.key] = c.model_us;
  json ops = json::array();
  for (const Op& op : g.ops)
    ops.push_back(
        {{"op", op.name},
         {"layer", op.layer},
         {"us", 3.0 + scale * model_us.at(op.name + "|" + shape_signature(op, g.context))}});
  return {{"gpu", gpu},
          {"hbm_read_ceiling_gbps", 3170.0},
          {"sms", 132},
          {"backend", "conventional"},
          {"model", "qwen3-0.6b"},
          {"shapes",
           {{"arch", "Qwen3ForCausalLM"},
            {"hidden", cfg.hidden_size},
            {"intermediate", cfg.intermediate_size},
            {"layers", cfg.num_layers},
            {"heads", cfg.num_heads},
            {"kv_heads", cfg.num_kv_heads},
            {"head_dim", cfg.head_dim},
            {"vocab", cfg.vocab_size}}},
          {"dtype", "bf16"},
          {"batch", 1},
          {"context", 32},
          {"ops", ops}};
}

// Plans qwen3-0.6b batch 1 from `profiles` as `megaops plan` does: the target GPU first, then the
// evidence under its CTA budget.
PlanResult plan_from(const std::vector<json>& profiles, CostModel* cost_out = nullptr) {
  CostModel cost;
  PlanOptions popt;
  std::vector<TargetGpu> on;
  for (size_t i = 0; i < profiles.size(); ++i)
    on.push_back(evidence_gpu(profiles[i].dump(), "p" + std::to_string(i) + ".json"));
  apply_target_gpu(resolve_target_gpu(on, {}, default_target_gpu(cost)), cost, popt);
  ServiceTable table;
  for (size_t i = 0; i < profiles.size(); ++i)
    table.load_profile_json(profiles[i].dump(), "p" + std::to_string(i) + ".json",
                            cost.machine.workers, build_step_graph);
  if (cost_out != nullptr) *cost_out = cost;
  const OpGraph g = build_decode_graph(preset_config("qwen3-0.6b"), "qwen3-0.6b", 1, 32);
  return plan(g, table, popt, cost);
}

TEST(TargetGpu, AnH100ProfileIsUsedShapeByShapeAndChangesThePrediction) {
  CostModel cost;
  const PlanResult h100 = plan_from({synthetic_profile(H100, 1.5)}, &cost);
  EXPECT_EQ(h100.gpu, H100);
  EXPECT_EQ(cost.gpu, H100);
  EXPECT_DOUBLE_EQ(cost.machine.bytes_per_us, 3.17e6);
  EXPECT_EQ(cost.machine.workers, 132);
  int unmatched = 0;
  for (const OpCalibration& c : h100.calibration) unmatched += c.measured_us < 0;
  EXPECT_EQ(unmatched, 0);  // every shape has its H100 evidence
  // The all-conventional baseline reproduces the profile (the sum of its ops); without the
  // profile the planner predicts the first-principles H200 step instead.
  const json prof = synthetic_profile(H100, 1.5);
  double sum = 0;
  for (const json& o : prof["ops"]) sum += o["us"].get<double>();
  EXPECT_NEAR(h100.baseline_us, sum, 1e-3 * sum);
  const PlanResult none = plan_from({});
  EXPECT_EQ(none.gpu, "NVIDIA H200");
  EXPECT_GT(h100.baseline_us, 1.4 * none.baseline_us);
  EXPECT_GT(h100.ranked.at(h100.pick).predicted_us, none.ranked.at(none.pick).predicted_us);
  // The same profile under the H200's key (the planner before it followed the evidence) matches
  // nothing.
  ServiceTable table;
  table.load_profile_json(prof.dump(), "p.json", 132, build_step_graph);
  const OpGraph g = build_decode_graph(preset_config("qwen3-0.6b"), "qwen3-0.6b", 1, 32);
  const PlanResult fixed = plan(g, table, PlanOptions(), CostModel());
  for (const OpCalibration& c : fixed.calibration) EXPECT_LT(c.measured_us, 0) << c.key;
}

TEST(TargetGpu, EvidenceFromSeveralGpusIsRefused) {
  const std::vector<TargetGpu> mixed = {
      evidence_gpu(synthetic_profile(H100, 1).dump(), "a.json"),
      evidence_gpu(synthetic_profile("NVIDIA H200", 1).dump(), "b.json")};
  try {
    resolve_target_gpu(mixed, {}, default_target_gpu(CostModel()));
    FAIL() << "mixed GPUs accepted";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.find("b.json: gpu: expected evidence from one GPU"), 0u) << m;
    EXPECT_NE(m.find(H100), std::string::npos) << m;
    EXPECT_NE(m.find("a.json"), std::string::npos) << m;
  }
  // --gpu naming another GPU than the evidence's is refused too.
  TargetGpuFlags other;
  other.gpu = "NVIDIA H200";
  EXPECT_THROW(resolve_target_gpu({mixed[0]}, other, default_target_gpu(CostModel())), InputError);
  // One GPU, two SM counts (a MIG slice beside the whole GPU): refused.
  json half = synthetic_profile(H100, 1);
  half["sms"] = 66;
  EXPECT_THROW(resolve_target_gpu({mixed[0], evidence_gpu(half.dump(), "c.json")}, {},
                                  default_target_gpu(CostModel())),
               InputError);
}

TEST(TargetGpu, CeilingAndSmsComeFromEvidenceFlagsOrTheDefaults) {
  const TargetGpu defaults = default_target_gpu(CostModel());
  EXPECT_EQ(defaults.name, "NVIDIA H200");
  EXPECT_EQ(defaults.sms, 132);
  EXPECT_DOUBLE_EQ(defaults.hbm_gbps, 4400);
  // Nothing given: the defaults.
  EXPECT_EQ(resolve_target_gpu({}, {}, defaults).name, "NVIDIA H200");
  // A file written before profiles recorded the ceiling: on the defaults' GPU, the defaults...
  json old = synthetic_profile("NVIDIA H200", 1);
  old.erase("hbm_read_ceiling_gbps");
  old.erase("sms");
  const TargetGpu h200 = resolve_target_gpu({evidence_gpu(old.dump(), "old.json")}, {}, defaults);
  EXPECT_DOUBLE_EQ(h200.hbm_gbps, 4400);
  EXPECT_EQ(h200.sms, 132);
  // ... on another GPU, an error asking for the flag, which then fills it in.
  old["gpu"] = H100;
  const std::vector<TargetGpu> old_h100 = {evidence_gpu(old.dump(), "old.json")};
  try {
    resolve_target_gpu(old_h100, {}, defaults);
    FAIL() << "an H100 without its ceiling took the H200's";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()).find("--hbm-gbps: expected the HBM read ceiling of " +
                                         std::string(H100)),
              0u)
        << e.what();
  }
  TargetGpuFlags flags;
  flags.hbm_gbps = 3170;
  flags.sms = 114;
  const TargetGpu t = resolve_target_gpu(old_h100, flags, defaults);
  EXPECT_EQ(t.name, H100);
  EXPECT_DOUBLE_EQ(t.hbm_gbps, 3170);
  EXPECT_EQ(t.sms, 114);
  // Flags alone plan for a GPU no evidence came from; the fixed splits follow its SMs.
  flags.gpu = "NVIDIA H100 PCIe";
  CostModel cost;
  PlanOptions popt;
  apply_target_gpu(resolve_target_gpu({}, flags, defaults), cost, popt);
  EXPECT_EQ(cost.gpu, "NVIDIA H100 PCIe");
  EXPECT_EQ(cost.machine.workers, 114);
  EXPECT_EQ(popt.splits, (std::vector<int>{57, 76}));
  // The defaults' splits are what they were.
  PlanOptions dp;
  apply_target_gpu(defaults, cost, dp);
  EXPECT_EQ(dp.splits, PlanOptions().splits);
}

TEST(TargetGpu, BadRecordsAndFlagsNameTheField) {
  auto bad_file = [](json j, const std::string& field) {
    try {
      evidence_gpu(j.dump(), "e.json");
      ADD_FAILURE() << j.dump();
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()).find("e.json: " + field + ": expected"), 0u) << e.what();
    }
  };
  json j = synthetic_profile(H100, 1);
  json k = j;
  k.erase("gpu");
  bad_file(k, "gpu");
  k = j;
  k["gpu"] = "";
  bad_file(k, "gpu");
  k = j;
  k["hbm_read_ceiling_gbps"] = -5;
  bad_file(k, "hbm_read_ceiling_gbps");
  k["hbm_read_ceiling_gbps"] = "fast";
  bad_file(k, "hbm_read_ceiling_gbps");
  k = j;
  k["sms"] = 0;
  bad_file(k, "sms");
  k["sms"] = 1.5;
  bad_file(k, "sms");
  const TargetGpu d = default_target_gpu(CostModel());
  TargetGpuFlags f;
  f.hbm_gbps = 0;
  EXPECT_THROW(resolve_target_gpu({}, f, d), InputError);
  f = {};
  f.sms = -1;
  EXPECT_THROW(resolve_target_gpu({}, f, d), InputError);
  f = {};
  f.gpu = "";
  EXPECT_THROW(resolve_target_gpu({}, f, d), InputError);
  // A GPU named by flag alone needs its ceiling and SMs.
  f = {};
  f.gpu = "NVIDIA A100-SXM4-80GB";
  EXPECT_THROW(resolve_target_gpu({}, f, d), InputError);
}

}  // namespace
}  // namespace megaops
