// See stream_evidence.h.
#ifdef MEGAOPS_HAVE_CUDA

#include "stream_evidence.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "models/codec_graph.h"
#include "planner/service_table.h"

namespace megaops::cli {

namespace {

void write_json(const std::string& path, const nlohmann::json& j) {
  std::ofstream f(path, std::ios::trunc);
  if (!f || !(f << j.dump(1) << "\n") || !f.flush()) throw Error("cannot write " + path);
}

// The `megaops profile --json` fields the service table loads (docs/planner.md, "JSON").
nlohmann::json profile_json(const std::string& gpu, const std::string& model, const ModelConfig& c,
                            int batch, int context, int steps,
                            const GpuPipeline::StageProfile& prof) {
  nlohmann::json ops = nlohmann::json::array();
  double total = 0;
  for (const Executor::OpTime& t : prof.ops) {
    ops.push_back({{"op", t.op}, {"layer", t.layer}, {"us", t.us}});
    total += t.us;
  }
  return {{"gpu", gpu},
          {"backend", "conventional"},
          {"model", model},
          {"shapes",
           {{"arch", arch_name(c.arch)},
            {"hidden", c.hidden_size},
            {"intermediate", c.intermediate_size},
            {"layers", c.num_layers},
            {"heads", c.num_heads},
            {"kv_heads", c.num_kv_heads},
            {"head_dim", c.head_dim},
            {"vocab", c.vocab_size}}},
          {"dtype", "bf16"},
          {"batch", batch},
          {"context", context},
          {"steps_averaged", steps},
          {"whole_step_decode_steps", steps},
          {"step_us", total},
          {"graph_step_us", prof.graph_step_us},
          {"source", "megaops stream --evidence-out"},
          {"ops", ops}};
}

}  // namespace

void write_stream_evidence(const PipelineConfig& p, int batch, uint64_t seed, GpuPipeline& stages,
                           const std::string& dir) {
  std::filesystem::create_directories(dir);
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) throw DeviceError("stream: no device");
  const PipelineGraphs g = build_pipeline_graphs(p, batch);
  // The producer at the first publication's context; as many steps as the stream has left.
  const int pctx = g.producer_step.context;
  const int psteps = std::min(16, p.schedule.prompt_tokens + p.schedule.stream_frames - pctx);
  write_json(dir + "/producer.json",
             profile_json(prop.name, p.name + " producer", p.producer, batch, pctx, psteps,
                          stages.profile_stage(true, pctx, psteps)));
  const int lctx = g.local_step.context;
  const int lsteps = p.local.codebooks - lctx;
  write_json(dir + "/local.json",
             profile_json(prop.name, p.name + " local", p.local.model, batch, lctx, lsteps,
                          stages.profile_stage(false, lctx, lsteps)));
  nlohmann::json entries = nlohmann::json::array();
  for (const OpGraph* cg : {&g.codec_first, &g.codec_chunk}) {
    const int repeats = 20;
    const std::vector<double> us = time_codec_ops(p, batch, cg->context, seed + 2, repeats, true);
    for (size_t i = 0; i < us.size(); ++i)
      entries.push_back({{"op", cg->ops[i].name},
                         {"shape", shape_signature(cg->ops[i], cg->context)},
                         {"backend", "conventional"},
                         {"cta_budget", prop.multiProcessorCount},
                         {"us", us[i]},
                         {"samples", repeats}});
  }
  write_json(dir + "/codec.json", {{"schema", "megaops-op-bench/1"},
                                   {"gpu", prop.name},
                                   {"dtype", "fp32"},
                                   {"source", "megaops stream --evidence-out, " + p.name},
                                   {"entries", entries}});
  std::fprintf(stderr,
               "stream: evidence in %s: producer at context %d (%d steps), local at %d (%d), codec "
               "windows of %d and %d frames\n",
               dir.c_str(), pctx, psteps, lctx, lsteps, g.codec_first.context,
               g.codec_chunk.context);
}

}  // namespace megaops::cli

#endif
