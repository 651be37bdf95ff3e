// The server's /metrics text and its periodic stats line, from engine statistics.
#include "serve/metrics.h"

#include <gtest/gtest.h>

namespace megaops::serve {
namespace {

EngineStats stats() {
  EngineStats s;
  s.running = 3;
  s.waiting = 1;
  s.kv_blocks_used = 40;
  s.kv_blocks_free = 280;
  s.kv_blocks_total = 320;
  s.prompt_tokens_total = 5000;
  s.generation_tokens_total = 800;
  s.prefix_cache_queries_total = 4000;
  s.prefix_cache_hits_total = 1000;
  s.kv_blocks_cached = 12;
  s.finished_total["stop"] = 2;
  return s;
}

TEST(Metrics, PrometheusTextHasVllmsNamesAndThePrefixCache) {
  const std::string text = prometheus_text(stats(), {{200, 7}, {400, 1}}, "tiny \"m\"");
  for (const std::string line :
       {"megaops_num_requests_running{model_name=\"tiny \\\"m\\\"\"} 3",
        "megaops_kv_blocks_used{model_name=\"tiny \\\"m\\\"\"} 40",
        "megaops_prefix_cache_queries_total{model_name=\"tiny \\\"m\\\"\"} 4000",
        "megaops_prefix_cache_hits_total{model_name=\"tiny \\\"m\\\"\"} 1000",
        "megaops_kv_blocks_cached{model_name=\"tiny \\\"m\\\"\"} 12"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
}

TEST(Metrics, StatsLineGivesTheIntervalsRates) {
  EngineStats before = stats();
  EngineStats now = stats();
  now.prompt_tokens_total += 2000;
  now.generation_tokens_total += 500;
  now.prefix_cache_queries_total += 1000;
  now.prefix_cache_hits_total += 250;
  EXPECT_EQ(stats_log_line(now, before, 10.0),
            "serve: 3 running, 1 waiting, KV cache 12.5% used (40 of 320 blocks), prompt 200.0 "
            "tok/s, generation 50.0 tok/s, prefix cache hits 25.0%");
  EXPECT_NE(stats_log_line(before, before, 10.0).find("prefix cache hits -"), std::string::npos);
}

}  // namespace
}  // namespace megaops::serve
