// The plan format (graph/plan.h): a full plan round-trips, a minimal one takes the defaults, and
// every malformed file is one InputError naming the file and the field path.
#include "graph/plan.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "test_util.h"

namespace megaops {
namespace {

using nlohmann::json;

const char* MINIMAL = R"({"format": "megaops-plan", "version": 1})";

// A plan with every field away from its default.
Plan unusual_plan() {
  Plan p;
  p.model = "llama3.2-1b";
  p.batch = 8;
  p.gpu = "NVIDIA H100 80GB HBM3";
  p.objective = "ttft";
  p.source = "test";
  p.predicted_us = 812.5;
  PlanDecode& d = p.decode;
  d.backend = PlanBackend::Overlap;
  d.overlap_streams = 4;
  d.regions = {{"embedding", RegionBackend::Conventional, 40},
               {"layer 3 o_proj", RegionBackend::Persistent, 92}};
  d.sharing = {"fixed_split", 40};
  d.folds = {false, false, -1, false};
  d.chain_counter_waits = true;
  d.early_trigger_o_proj = false;
  d.greedy_in_lm_head = false;
  d.conventional_arithmetic = false;
  d.vendor_chunks = 4;
  d.matmul = {"stream-for-small", {{4096, 4096}, {128256, 2048}}, 4, "ring", false, true};
  p.prefill = {"graph", 512, "cudnn"};
  return p;
}

TEST(Plan, RoundTripsEveryField) {
  const Plan p = unusual_plan();
  const std::string text = plan_to_json(p);
  EXPECT_EQ(parse_plan(text, "p.json"), p);
  EXPECT_EQ(plan_to_json(parse_plan(text, "p.json")), text);  // stable order
  for (int b : {1, 2, 8, 32}) {
    const Plan d = default_plan(b);
    EXPECT_EQ(parse_plan(plan_to_json(d), "d.json"), d) << b;
  }
}

// A plan written before plans named their GPU (every other field, no "gpu") reads as before, for
// no GPU in particular; one that names a GPU warns on another one only.
TEST(Plan, NamesTheGpuItWasMadeForAndOlderPlansStillRead) {
  const Plan p = unusual_plan();
  json old = json::parse(plan_to_json(p));
  ASSERT_EQ(old["gpu"], "NVIDIA H100 80GB HBM3");
  old.erase("gpu");
  const Plan read = parse_plan(old.dump(), "old.json");
  EXPECT_EQ(read.gpu, "");
  Plan expected = p;
  expected.gpu = "";
  EXPECT_EQ(read, expected);
  EXPECT_EQ(plan_gpu_warning(read, "old.json", "NVIDIA H200"), "");
  EXPECT_EQ(plan_gpu_warning(p, "p.json", "NVIDIA H100 80GB HBM3"), "");
  const std::string w = plan_gpu_warning(p, "p.json", "NVIDIA H200");
  EXPECT_EQ(w.find("p.json: warning: made for NVIDIA H100 80GB HBM3, running on NVIDIA H200"), 0u)
      << w;
  EXPECT_EQ(w.find('\n'), std::string::npos) << w;
  for (const char* bad : {R"({"format": "megaops-plan", "version": 1, "gpu": 3})",
                          R"({"format": "megaops-plan", "version": 1, "gpu": null})"})
    EXPECT_THROW(parse_plan(bad, "g.json"), InputError) << bad;
}

TEST(Plan, WritesFormatAndVersionFirst) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(plan_to_json(Plan{}));
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j.begin().key(), "format");
  EXPECT_EQ(j["format"], "megaops-plan");
  EXPECT_EQ(j["version"], 1);
  EXPECT_FALSE(j.contains("predicted_us"));  // none: left out
}

TEST(Plan, MinimalTakesTheDefaults) {
  const Plan p = parse_plan(MINIMAL, "p.json");
  EXPECT_EQ(p, Plan{});
  EXPECT_EQ(p.decode.backend, PlanBackend::Conventional);
  EXPECT_FALSE(p.decode.pdl);
  EXPECT_EQ(p.decode.overlap_streams, 3);
  EXPECT_EQ(p.decode.folds.silu_epilogue_min_inter, 8192);
  EXPECT_EQ(p.prefill.path, "layers");
  EXPECT_EQ(p.prefill.attention, "flash");
  // The chain's one stream is implied.
  const Plan c = parse_plan(
      R"({"format": "megaops-plan", "version": 1, "decode": {"backend": "pdl_chain"}})", "c.json");
  EXPECT_EQ(c.decode.backend, PlanBackend::PdlChain);
  EXPECT_EQ(c.decode.overlap_streams, 1);
}

// The batch-1 default is the PDL chain with its folds, the others conventional with PDL
// (bench/results/2026-12-04-s27-call4), and the source says so.
TEST(Plan, DefaultIsTheFastestMeasuredPerBatch) {
  const Plan one = default_plan(1);
  EXPECT_EQ(one.decode.backend, PlanBackend::PdlChain);
  EXPECT_EQ(one.decode.overlap_streams, 1);
  EXPECT_FALSE(one.decode.pdl);
  EXPECT_TRUE(one.decode.folds.norms && one.decode.folds.silu && one.decode.folds.rope);
  EXPECT_EQ(describe(one), "pdl chain, folds norms+silu+rope");
  EXPECT_NE(one.source.find("default for batch 1"), std::string::npos) << one.source;
  EXPECT_NE(one.source.find("2026-12-04-s27-call4"), std::string::npos) << one.source;
  for (int b : {2, 8, 32, 64}) {
    const Plan p = default_plan(b);
    EXPECT_EQ(p.decode.backend, PlanBackend::Conventional) << b;
    EXPECT_TRUE(p.decode.pdl) << b;
    EXPECT_EQ(p.batch, b);
    EXPECT_EQ(describe(p), "conventional, pdl on");
  }
}

TEST(Plan, DescribesInOneShortLine) {
  Plan p;
  EXPECT_EQ(describe(p), "conventional, pdl off");
  p.decode.backend = PlanBackend::Overlap;
  EXPECT_EQ(describe(p), "overlap W=3, one region");
  p.decode.regions = {{"embedding", RegionBackend::Overlap},
                      {"a", RegionBackend::Conventional},
                      {"b", RegionBackend::Overlap},
                      {"c", RegionBackend::Conventional}};
  EXPECT_EQ(describe(p), "overlap W=3, 4 regions (2 conventional)");
  p = default_plan(1);
  p.decode.folds = {false, false, -1, true};
  p.decode.chain_counter_waits = true;
  EXPECT_EQ(describe(p), "pdl chain, folds rope, counter waits");
  p.decode.folds.rope = false;
  p.prefill.path = "graph";
  EXPECT_EQ(describe(p), "pdl chain, no folds, counter waits, graph prefill");
  p.prefill.attention = "cudnn";
  EXPECT_EQ(describe(p),
            "pdl chain, no folds, counter waits, graph prefill, cudnn prefill attention");
}

struct BadPlan {
  std::string text;
  std::vector<std::string> must_mention;  // beyond "p.json: "
};

TEST(Plan, EveryErrorNamesTheFileAndTheField) {
  auto with = [](const std::string& rest) {
    return R"({"format": "megaops-plan", "version": 1, )" + rest + "}";
  };
  const std::vector<BadPlan> cases = {
      {"{", {"not valid JSON"}},
      {"[1, 2]", {"expected a JSON object"}},
      {R"({"version": 1})", {"format: missing", "megaops-plan"}},
      {R"({"format": "megaops-plan/0", "version": 1})", {"format: expected \"megaops-plan\""}},
      {R"({"format": "megaops-plan"})", {"version: missing"}},
      {R"({"format": "megaops-plan", "version": 2})", {"version: expected 1", "found 2"}},
      {R"({"format": "megaops-plan", "version": "1"})", {"version: expected 1"}},
      {with(R"("regoins": [])"), {"regoins: unknown key"}},
      {with(R"("batch": 0)"), {"batch: expected 1..64, found 0"}},
      {with(R"("batch": 1.5)"), {"batch: expected an integer"}},
      {with(R"("batch": 18446744073709551615)"), {"batch: expected 1..64"}},
      {with(R"("objective": "latency")"), {"objective: expected step or ttft, found \"latency\""}},
      {with(R"("model": 3)"), {"model: expected a string, found 3"}},
      {with(R"("predicted_us": -2)"), {"predicted_us: expected a number >= 0"}},
      {with(R"("decode": [])"), {"decode: expected an object"}},
      {with(R"("decode": {"backend": "fast"})"),
       {"decode.backend: expected conventional, pdl_chain or overlap, found \"fast\""}},
      {with(R"("decode": {"pdl": 1})"), {"decode.pdl: expected true or false, found 1"}},
      {with(R"("decode": {"backend": "overlap", "pdl": true})"),
       {"decode.pdl: only the conventional backend takes pdl"}},
      {with(R"("decode": {"backend": "pdl_chain", "overlap_streams": 3})"),
       {"decode.overlap_streams: expected 1", "found 3"}},
      {with(R"("decode": {"overlap_streams": 9})"), {"decode.overlap_streams: expected 1..8"}},
      {with(R"("decode": {"regions": [{"first_op": "embedding"}]})"),
       {"decode.regions: only the overlap and pdl_chain backends have regions", "conventional"}},
      {with(R"("decode": {"backend": "overlap", "regions": {}})"),
       {"decode.regions: expected an array"}},
      {with(R"("decode": {"backend": "overlap", "regions": [{"backend": "overlap"}]})"),
       {"decode.regions[0].first_op: missing"}},
      {with(R"("decode": {"backend": "overlap", "regions": [{"first_op": "embedding",
            "serial": true}]})"),
       {"decode.regions[0].serial: unknown key"}},
      {with(R"("decode": {"backend": "overlap", "regions": [{"first_op": "embedding",
            "backend": "megakernel"}]})"),
       {"decode.regions[0].backend: expected conventional, overlap or persistent", "megakernel"}},
      {with(R"("decode": {"backend": "overlap", "regions": [{"first_op": "embedding",
            "cta_budget": -1}]})"),
       {"decode.regions[0].cta_budget"}},
      {with(R"("decode": {"backend": "overlap", "sharing": {"policy": "greedy"}})"),
       {"decode.sharing.policy: expected serial, fixed_split or dynamic", "greedy"}},
      {with(R"("decode": {"backend": "overlap", "sharing": {"policy": "fixed_split"}})"),
       {"decode.sharing.split: expected the even regions' CTAs"}},
      {with(R"("decode": {"backend": "overlap", "regions": [{"first_op": ""}]})"),
       {"decode.regions[0].first_op: expected an op name"}},
      {with(R"("decode": {"folds": {"norms": "on"}})"),
       {"decode.folds.norms: expected true or false, found \"on\""}},
      {with(R"("decode": {"folds": {"silu_epilogue_min_inter": -5}})"),
       {"decode.folds.silu_epilogue_min_inter: expected -1..1048576"}},
      {with(R"("decode": {"folds": {"attention": true}})"),
       {"decode.folds.attention: unknown key"}},
      {with(R"("decode": {"vendor_chunks": 0})"), {"decode.vendor_chunks: expected 1..64"}},
      {with(R"("decode": {"matmul": {"path": "fast"}})"),
       {"decode.matmul.path: expected auto, small, stream, cublaslt or stream-for-small"}},
      {with(R"("decode": {"matmul": {"stream_shapes": [[4096]]}})"),
       {"decode.matmul.stream_shapes[0]: expected a pair [n, k]"}},
      {with(R"("decode": {"matmul": {"stream_shapes": [[4096, 0]]}})"),
       {"decode.matmul.stream_shapes[0][1]: expected 1..1073741824, found 0"}},
      {with(R"("decode": {"matmul": {"stream_stages": 1}})"),
       {"decode.matmul.stream_stages: expected 0 (the kernel's own) or 2..16, found 1"}},
      {with(R"("decode": {"matmul": {"stream_kernel": "tma"}})"),
       {"decode.matmul.stream_kernel: expected auto, ring or bulk, found \"tma\""}},
      {with(R"("decode": {"matmul": {"tune": null}})"), {"decode.matmul.tune: expected true"}},
      {with(R"("prefill": {"path": "decode"})"),
       {"prefill.path: expected layers or graph, found \"decode\""}},
      {with(R"("prefill": {"chunk": 0})"), {"prefill.chunk: expected 1..1048576, found 0"}},
      {with(R"("prefill": {"chunks": 8})"), {"prefill.chunks: unknown key"}},
      {with(R"("prefill": {"attention": "sdpa"})"),
       {"prefill.attention: expected flash or cudnn, found \"sdpa\""}},
  };
  for (const BadPlan& c : cases) {
    try {
      parse_plan(c.text, "p.json");
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("p.json: ", 0), 0u) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      for (const std::string& m : c.must_mention)
        EXPECT_NE(what.find(m), std::string::npos) << "missing '" << m << "' in: " << what;
    }
  }
}

// Regions name the executor's ops in step order; step_advance (the last) cannot start one.
// What the format holds but no executor runs yet is one error naming the field.
TEST(Plan, WhatNoExecutorRunsIsNamed) {
  Plan p;
  p.decode.backend = PlanBackend::Overlap;
  p.decode.regions = {{"embedding", RegionBackend::Overlap},
                      {"layer 0 o_proj", RegionBackend::Conventional}};
  EXPECT_NO_THROW(check_plan_runnable(p, "p.json"));
  // Persistent regions run, with or without a CTA budget.
  p.decode.regions[1] = {"layer 0 o_proj", RegionBackend::Persistent, 66};
  EXPECT_NO_THROW(check_plan_runnable(p, "p.json"));
  p.decode.regions[1] = {"layer 0 o_proj", RegionBackend::Overlap, 66};
  testing::expect_input_error([&] { check_plan_runnable(p, "p.json"); },
                              {"decode.regions[1].cta_budget", "found 66"});
  p.decode.regions[1].cta_budget = 0;
  p.decode.sharing = {"dynamic", 0};
  testing::expect_input_error([&] { check_plan_runnable(p, "p.json"); },
                              {"decode.sharing.policy", "found dynamic"});
}

TEST(Plan, RegionsAreCheckedAgainstTheOpNames) {
  const std::vector<std::string> names = {"embedding", "layer 0 qkv_proj", "layer 0 o_proj",
                                          "lm_head", "step_advance"};
  Plan p;
  p.decode.backend = PlanBackend::Overlap;
  p.decode.regions = {{"embedding", RegionBackend::Overlap},
                      {"layer 0 o_proj", RegionBackend::Conventional}};
  EXPECT_NO_THROW(check_plan_regions(p, "p.json", names));
  auto error = [&](std::vector<PlanRegion> regions) -> std::string {
    p.decode.regions = std::move(regions);
    try {
      check_plan_regions(p, "p.json", names);
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(
      error({{"embedding", RegionBackend::Overlap}, {"layer 9 o_proj", RegionBackend::Overlap}})
          .find("p.json: decode.regions[1].first_op: no op named 'layer 9 o_proj'"),
      std::string::npos);
  EXPECT_NE(error({{"layer 0 qkv_proj", RegionBackend::Overlap}})
                .find("decode.regions[0].first_op: expected 'embedding' (the first op)"),
            std::string::npos);
  EXPECT_NE(error({{"embedding", RegionBackend::Overlap},
                   {"layer 0 o_proj", RegionBackend::Overlap},
                   {"layer 0 qkv_proj", RegionBackend::Overlap}})
                .find("decode.regions[2].first_op: expected an op after 'layer 0 o_proj'"),
            std::string::npos);
  EXPECT_NE(error({{"embedding", RegionBackend::Overlap}, {"step_advance", RegionBackend::Overlap}})
                .find("no op named 'step_advance'"),
            std::string::npos);
}

}  // namespace
}  // namespace megaops
