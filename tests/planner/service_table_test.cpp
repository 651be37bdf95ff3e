// The service table: exact-key lookups only (a measurement never transfers to another shape,
// dtype, backend, CTA budget or GPU), the profile and op-benchmark loaders, the CTA-wave estimate.
#include "planner/service_table.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "io/text_file.h"
#include "models/step_graph.h"
#include "test_util.h"

namespace megaops {
namespace {

const std::string PROFILE =
    std::string(MEGAOPS_SOURCE_DIR) + "/bench/results/2026-11-29-70bc941/profile_llama3.2-1b.json";

// The profile's evidence for op `name` (layer 0, or -1 for ops outside the layers) of the
// llama3.2-1b batch-1 decode step at context 32.
std::optional<ServiceEntry> evidence_1b(const ServiceTable& t, const std::string& name, int layer) {
  const OpGraph g = build_decode_graph(preset_config("llama3.2-1b"), "llama3.2-1b", 1, 32);
  const Op& op = g.ops[find_op(g, name, layer)];
  return t.lookup({name, shape_signature(op, 32), "bf16", "conventional", 132, "NVIDIA H200"});
}

TEST(ServiceTable, LookupNeedsEveryKeyFieldToMatch) {
  ServiceTable t;
  const ServiceKey k{"qkv_proj", "m=1,n=3072,k=2048,", "bf16", "conventional", 132, "NVIDIA H200"};
  t.add(k, 9.0, 1, "a");
  t.add(k, 11.0, 3, "b");
  ASSERT_TRUE(t.lookup(k));
  EXPECT_DOUBLE_EQ(t.lookup(k)->us, (9.0 + 33.0) / 4);
  EXPECT_EQ(t.lookup(k)->samples, 4);
  auto miss = [&](auto change) {
    ServiceKey m = k;
    change(m);
    return !t.lookup(m).has_value();
  };
  EXPECT_TRUE(miss([](ServiceKey& m) { m.op = "o_proj"; }));
  EXPECT_TRUE(miss([](ServiceKey& m) { m.shape = "m=2,n=3072,k=2048,"; }));
  EXPECT_TRUE(miss([](ServiceKey& m) { m.dtype = "f32"; }));
  EXPECT_TRUE(miss([](ServiceKey& m) { m.backend = "standalone"; }));
  EXPECT_TRUE(miss([](ServiceKey& m) { m.cta_budget = 66; }));
  EXPECT_TRUE(miss([](ServiceKey& m) { m.gpu = "NVIDIA H100 NVL"; }));
}

TEST(ServiceTable, LoadsTheMeasuredProfileOneEntryPerOpShape) {
  ServiceTable t;
  EXPECT_EQ(t.load_profile_json(read_text_file(PROFILE), PROFILE, 132, build_step_graph), 149);
  // 14 ops; the layer ops share shapes, so they average over the 16 layers.
  EXPECT_EQ(t.size(), 14u);
  const ModelConfig cfg = preset_config("llama3.2-1b");
  const OpGraph g = build_decode_graph(cfg, "llama3.2-1b", 1, 32);
  const auto e = evidence_1b(t, "lm_head", -1);
  ASSERT_TRUE(e);
  EXPECT_NEAR(e->us, 127.335, 1e-3);
  const auto q = evidence_1b(t, "qkv_proj", 0);
  ASSERT_TRUE(q);
  EXPECT_EQ(q->samples, 16);
  // Attention evidence is for context 32 only.
  const Op& att = g.ops[find_op(g, "decode_attention", 0)];
  EXPECT_FALSE(t.lookup(
      {"decode_attention", shape_signature(att, 64), "bf16", "conventional", 132, "NVIDIA H200"}));
  double sum = 0;
  for (const ServiceEntry& s : t.entries()) sum += s.us * s.samples;
  EXPECT_NEAR(sum, 1585.267, 1e-2);
}

// The profile's whole-step figures: the per-op times (an event after every op) lose the events'
// cost per op, so they add up to the step replayed without events, and the overlap executor's
// serial-region cost per op is kept for the plan of exactly this step.
TEST(ServiceTable, ProfileStepFiguresTakeTheEventsOffEveryOp) {
  nlohmann::json j = nlohmann::json::parse(read_text_file(PROFILE));
  const double step = j.at("step_us").get<double>();  // 1585.267 over 149 ops
  j["graph_step_us"] = step - 149 * 3.0;
  j["serial_overlap_step_us"] = step - 149 * 3.0 + 149 * 1.5;
  ServiceTable t;
  EXPECT_EQ(t.load_profile_json(j.dump(), "p.json", 132, build_step_graph), 149);
  double sum = 0;
  for (const ServiceEntry& s : t.entries()) sum += s.us * s.samples;
  EXPECT_NEAR(sum, step - 149 * 3.0, 1e-6);
  const auto e = evidence_1b(t, "lm_head", -1);
  ASSERT_TRUE(e);
  EXPECT_NEAR(e->us, 127.335 - 3.0, 1e-3);
  const ModelConfig cfg = preset_config("llama3.2-1b");
  const OpGraph g = build_decode_graph(cfg, "llama3.2-1b", 1, 32);
  const auto fig = t.step_figures(g, "bf16", "NVIDIA H200");
  ASSERT_TRUE(fig);
  EXPECT_NEAR(fig->event_overhead_us, 3.0, 1e-9);
  EXPECT_NEAR(fig->serial_overlap_op_us, 1.5, 1e-9);
  EXPECT_EQ(fig->source, "p.json");
  // Only for exactly this step, dtype and GPU.
  EXPECT_FALSE(
      t.step_figures(build_decode_graph(cfg, "llama3.2-1b", 8, 32), "bf16", "NVIDIA H200"));
  EXPECT_FALSE(
      t.step_figures(build_decode_graph(cfg, "llama3.2-1b", 1, 64), "bf16", "NVIDIA H200"));
  EXPECT_FALSE(t.step_figures(g, "f32", "NVIDIA H200"));
  EXPECT_FALSE(t.step_figures(g, "bf16", "NVIDIA H100 NVL"));
  // Without the serial figure: -1 (not measured); a profile without graph_step_us: no figures.
  j.erase("serial_overlap_step_us");
  ServiceTable t2;
  t2.load_profile_json(j.dump(), "p2.json", 132, build_step_graph);
  ASSERT_TRUE(t2.step_figures(g, "bf16", "NVIDIA H200"));
  EXPECT_EQ(t2.step_figures(g, "bf16", "NVIDIA H200")->serial_overlap_op_us, -1);
  ServiceTable t3;
  t3.load_profile_json(read_text_file(PROFILE), PROFILE, 132, build_step_graph);
  EXPECT_FALSE(t3.step_figures(g, "bf16", "NVIDIA H200"));
  // Bad figures: one line naming the file and field.
  for (const auto& bad : {nlohmann::json(-5.0), nlohmann::json(0.0), nlohmann::json("fast")}) {
    nlohmann::json b = j;
    b["graph_step_us"] = bad;
    testing::expect_input_error(
        [&] { ServiceTable().load_profile_json(b.dump(), "b.json", 132, build_step_graph); },
        {"b.json", "graph_step_us", "expected a positive number"});
  }
  nlohmann::json b = j;
  b.erase("step_us");
  testing::expect_input_error(
      [&] { ServiceTable().load_profile_json(b.dump(), "c.json", 132, build_step_graph); },
      {"c.json", "step_us", "found nothing"});
}

TEST(ServiceTable, LoadsOpBenchmarksAndRejectsMalformedFiles) {
  ServiceTable t;
  const std::string bench = R"({"schema": "megaops-op-bench/1", "gpu": "NVIDIA H200",
    "dtype": "bf16", "entries": [
      {"op": "o_proj", "shape": "m=1,n=2048,k=2048,", "backend": "standalone",
       "cta_budget": 66, "us": 7.5, "samples": 20}]})";
  EXPECT_EQ(t.load_bench_json(bench, "b.json"), 1);
  EXPECT_TRUE(t.lookup({"o_proj", "m=1,n=2048,k=2048,", "bf16", "standalone", 66, "NVIDIA H200"}));
  EXPECT_FALSE(
      t.lookup({"o_proj", "m=1,n=2048,k=2048,", "bf16", "standalone", 132, "NVIDIA H200"}));
  testing::expect_input_error([&] { t.load_bench_json("{", "x.json"); }, {"x.json", "JSON"});
  testing::expect_input_error(
      [&] { t.load_bench_json(R"({"schema": "other"})", "x.json"); },
      {"x.json", "schema", "expected \"megaops-op-bench/1\"", "found \"other\""});
  testing::expect_input_error(
      [&] {
        t.load_bench_json(R"({"schema": "megaops-op-bench/1", "gpu": "g", "dtype": "bf16",
          "entries": [{"op": "a", "shape": "s", "backend": "b", "cta_budget": 0, "us": 1}]})",
                          "y.json");
      },
      {"y.json", "cta_budget", "expected >= 1"});
  testing::expect_input_error(
      [&] { t.load_profile_json(R"({"backend": "overlap"})", "p.json", 132, build_step_graph); },
      {"p.json", "backend", "expected \"conventional\""});
}

TEST(ServiceTable, CtaWaveEstimate) {
  // 264 tiles: 2 waves on 132 CTAs, 4 on 66, 3 on 100.
  EXPECT_DOUBLE_EQ(cta_wave_estimate(10, 264, 132, 66), 20);
  EXPECT_DOUBLE_EQ(cta_wave_estimate(10, 264, 132, 100), 15);
  EXPECT_DOUBLE_EQ(cta_wave_estimate(10, 100, 132, 100), 10);
  EXPECT_THROW(cta_wave_estimate(10, 100, 132, 0), InputError);
}

}  // namespace
}  // namespace megaops
