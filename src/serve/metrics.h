// /metrics: the engine's statistics and the server's response counts in Prometheus' text
// exposition format, named as vLLM names its metrics (prefix megaops_ instead of vllm:), so the
// dashboards users have for vLLM need only the prefix changed.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "megaops/engine.h"

namespace megaops::serve {

// `responses` counts HTTP responses by status code.
std::string prometheus_text(const EngineStats& s, const std::map<int, uint64_t>& responses,
                            const std::string& model_name);

// The line `megaops serve` logs every --log-stats-interval seconds while it works (vLLM's
// periodic engine log): requests running and waiting, KV cache use, prompt and generation
// throughput over the interval `seconds` since `before`, and the interval's prefix cache hit
// rate ("-" when nothing was looked up).
std::string stats_log_line(const EngineStats& now, const EngineStats& before, double seconds);

}  // namespace megaops::serve
