// See metrics.h.
#include "serve/metrics.h"

#include <cstdio>
#include <sstream>

namespace megaops::serve {

namespace {

// Label values escape backslash, double quote and newline (the exposition format's rule).
std::string escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

}  // namespace

std::string prometheus_text(const EngineStats& s, const std::map<int, uint64_t>& responses,
                            const std::string& model_name) {
  std::ostringstream out;
  const std::string label = "model_name=\"" + escaped(model_name) + "\"";
  const auto metric = [&](const char* name, const char* type, const char* help, double value) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n'
        << name << '{' << label << "} " << number(value) << '\n';
  };
  const auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << " histogram\n";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds.size(); ++i) {
      cumulative += h.counts[i];
      out << name << "_bucket{" << label << ",le=\"" << number(h.bounds[i]) << "\"} " << cumulative
          << '\n';
    }
    out << name << "_bucket{" << label << ",le=\"+Inf\"} " << h.count << '\n'
        << name << "_sum{" << label << "} " << number(h.sum) << '\n'
        << name << "_count{" << label << "} " << h.count << '\n';
  };
  metric("megaops_num_requests_running", "gauge", "Requests in the running batch.", s.running);
  metric("megaops_num_requests_waiting", "gauge", "Requests queued for the running batch.",
         s.waiting);
  metric("megaops_kv_blocks_used", "gauge", "KV cache blocks held by requests.", s.kv_blocks_used);
  metric("megaops_kv_blocks_free", "gauge", "KV cache blocks free.", s.kv_blocks_free);
  metric("megaops_kv_cache_usage_perc", "gauge", "Fraction of the KV cache's blocks in use.",
         s.kv_blocks_total ? static_cast<double>(s.kv_blocks_used) / s.kv_blocks_total : 0.0);
  metric("megaops_prompt_tokens_total", "counter", "Prompt tokens of requests that started.",
         static_cast<double>(s.prompt_tokens_total));
  metric("megaops_generation_tokens_total", "counter", "Tokens generated.",
         static_cast<double>(s.generation_tokens_total));
  metric("megaops_num_preemptions_total", "counter",
         "Requests preempted (KV blocks freed, recomputed later).",
         static_cast<double>(s.preemptions_total));
  metric("megaops_engine_steps_total", "counter", "Engine steps run.",
         static_cast<double>(s.steps_total));
  metric("megaops_prefix_cache_queries_total", "counter",
         "Prompt tokens looked up in the prefix cache at admission.",
         static_cast<double>(s.prefix_cache_queries_total));
  metric("megaops_prefix_cache_hits_total", "counter",
         "Prompt tokens whose K/V came from the prefix cache.",
         static_cast<double>(s.prefix_cache_hits_total));
  metric("megaops_kv_blocks_cached", "gauge",
         "KV cache blocks registered in the prefix cache (held or free).", s.kv_blocks_cached);
  out << "# HELP megaops_request_success_total Requests finished, by finish reason.\n"
      << "# TYPE megaops_request_success_total counter\n";
  for (const char* reason : {"stop", "length", "abort", "error"}) {
    const auto it = s.finished_total.find(reason);
    out << "megaops_request_success_total{" << label << ",finished_reason=\"" << reason << "\"} "
        << (it == s.finished_total.end() ? 0 : it->second) << '\n';
  }
  histogram("megaops_time_to_first_token_seconds",
            "Time from a request's arrival to its first token.", s.ttft_s);
  histogram("megaops_inter_token_latency_seconds", "Time between a request's successive tokens.",
            s.inter_token_s);
  histogram("megaops_model_step_seconds",
            "Time of one model step: the running batch's forward pass and sampling, host to host.",
            s.model_step_s);
  histogram("megaops_engine_iteration_seconds",
            "Time of one engine-loop iteration that ran a step: admission, scheduling, the model "
            "step, output processing and delivery to the requests.",
            s.engine_iteration_s);
  out << "# HELP megaops_http_responses_total HTTP responses, by status code.\n"
      << "# TYPE megaops_http_responses_total counter\n";
  for (const auto& [status, count] : responses)
    out << "megaops_http_responses_total{" << label << ",status=\"" << status << "\"} " << count
        << '\n';
  return out.str();
}

std::string stats_log_line(const EngineStats& now, const EngineStats& before, double seconds) {
  const double dt = seconds > 0 ? seconds : 1;
  const double prompt = static_cast<double>(now.prompt_tokens_total - before.prompt_tokens_total);
  const double gen =
      static_cast<double>(now.generation_tokens_total - before.generation_tokens_total);
  const uint64_t queries = now.prefix_cache_queries_total - before.prefix_cache_queries_total;
  const uint64_t hits = now.prefix_cache_hits_total - before.prefix_cache_hits_total;
  char hit_rate[32] = "-";
  if (queries > 0)
    std::snprintf(hit_rate, sizeof(hit_rate), "%.1f%%",
                  100.0 * static_cast<double>(hits) / static_cast<double>(queries));
  char line[320];
  std::snprintf(line, sizeof(line),
                "serve: %d running, %d waiting, KV cache %.1f%% used (%d of %d blocks), prompt "
                "%.1f tok/s, generation %.1f tok/s, prefix cache hits %s",
                now.running, now.waiting,
                now.kv_blocks_total ? 100.0 * now.kv_blocks_used / now.kv_blocks_total : 0.0,
                now.kv_blocks_used, now.kv_blocks_total, prompt / dt, gen / dt, hit_rate);
  return line;
}

}  // namespace megaops::serve
