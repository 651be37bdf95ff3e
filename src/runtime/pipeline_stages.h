// The GPU stages of a streaming pipeline (pipeline/stream.h's PipelineStages): the producer and
// the local transformer each on an executor of their own (runtime/executor.h) running the decode
// plan the composition gives it (graph/pipeline_composition.h), and the codec decoder on the GPU
// (runtime/codec_decoder.h: cuDNN convolutions). Random weights: the producer's
// random_filler(seed), the local transformer's (seed + 1), the codec's codec_weight_values(seed +
// 2), as the CPU oracle (reference/pipeline_oracle.h).
//
// The local transformer's per-codebook heads are the rows [q * C, (q + 1) * C) of its LM head: the
// executor computes every codebook's logits and the host takes the argmax of codebook q's slice
// from last_logits(), then feeds q * C + code as the next input (decode_step with forced tokens).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "graph/op_graph.h"
#include "graph/pipeline.h"
#include "graph/plan.h"
#include "pipeline/stream.h"
#include "runtime/executor.h"

namespace megaops {

struct GpuPipelineOptions {
  StepGraphBuilder step_graph = nullptr;  // models/step_graph.h's build_step_graph
  Plan producer_plan, local_plan;         // their decode plans
  int max_batch = 1;                      // streams (1..64)
  uint64_t seed = 0;
  // Most frames one codec call decodes: the context (stream_chunks' windows) by default; the whole
  // stream where run_pipeline_whole decodes it in one call.
  int codec_max_frames = 0;
  // Let cuDNN pick TF32 tensor-core, FFT and Winograd engines for the fp32 convolutions.
  bool codec_fast_engines = true;
};

// The GPU stages. One object runs every runnable composition: its executors are built for the PDL
// chain and switch between the conventional step (PDL off or on) and the chain (set_plans), so a
// validation run times every composition with the weights loaded once.
class GpuPipeline : public PipelineStages {
 public:
  // Switches the producer's and the local transformer's decode plans (backend and PDL only: the
  // other plan fields stay those of construction). InputError on a plan these executors cannot
  // switch to (an overlap plan with regions or several streams).
  virtual void set_plans(const Plan& producer, const Plan& local) = 0;

  // Evidence for the planner: the per-op GPU times of one decode step of the producer (or the
  // local transformer) at `context` cached positions (prompts of that many tokens, then `steps`
  // decode steps averaged), as runtime/executor.h's profile_decode_steps measures them, and the
  // conventional step replayed without events over `steps` steps (what `megaops profile` writes
  // as graph_step_us). The executor keeps the plans of set_plans.
  struct StageProfile {
    std::vector<Executor::OpTime> ops;
    double graph_step_us = 0;
  };
  virtual StageProfile profile_stage(bool producer, int context, int steps) = 0;
};

std::unique_ptr<GpuPipeline> make_gpu_pipeline_stages(const PipelineConfig& p,
                                                      const GpuPipelineOptions& o);

// Each codec op's GPU time alone (codec_ops order; a conv with its bias), over `frames` frames of
// `batch` streams: median of `repeats` timed runs after a warm-up, in microseconds, each op timed
// with events around it inside one decode of the window.
std::vector<double> time_codec_ops(const PipelineConfig& p, int batch, int frames, uint64_t seed,
                                   int repeats, bool fast_engines);

}  // namespace megaops
