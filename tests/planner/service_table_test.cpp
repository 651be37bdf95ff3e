// The service table: exact-key lookups only (a measurement never transfers to another shape,
// dtype, backend, CTA budget or GPU), the profile and op-benchmark loaders, the CTA-wave estimate.
#include "planner/service_table.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/text_file.h"
#include "test_util.h"

namespace megaops {
namespace {

const std::string PROFILE =
    std::string(MEGAOPS_SOURCE_DIR) + "/bench/results/2026-11-29-70bc941/profile_llama3.2-1b.json";

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
  EXPECT_EQ(t.load_profile_json(read_text_file(PROFILE), PROFILE, 132), 149);
  // 14 ops; the layer ops share shapes, so they average over the 16 layers.
  EXPECT_EQ(t.size(), 14u);
  const ModelConfig cfg = preset_config("llama3.2-1b");
  const OpGraph g = build_decode_graph(cfg, "llama3.2-1b", 1, 32);
  const Op& lm = g.ops[find_op(g, "lm_head", -1)];
  const auto e =
      t.lookup({"lm_head", shape_signature(lm, 32), "bf16", "conventional", 132, "NVIDIA H200"});
  ASSERT_TRUE(e);
  EXPECT_NEAR(e->us, 127.335, 1e-3);
  const Op& qkv = g.ops[find_op(g, "qkv_proj", 0)];
  const auto q =
      t.lookup({"qkv_proj", shape_signature(qkv, 32), "bf16", "conventional", 132, "NVIDIA H200"});
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
      [&] { t.load_profile_json(R"({"backend": "overlap"})", "p.json", 132); },
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
