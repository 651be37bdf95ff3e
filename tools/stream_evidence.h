// `megaops stream --evidence-out DIR` (GPU): the planner's evidence for one pipeline at one batch,
// measured in the stream's own process with its own stages: DIR/producer.json and DIR/local.json
// (the decode steps' per-op times in `megaops profile --json`'s schema, at the contexts the
// planner keys them by: plan-pipeline's profile_contexts) and DIR/codec.json (the codec ops at the
// planner's two windows, megaops-op-bench/1). `megaops plan-pipeline --profile` reads all three.
#pragma once

#ifdef MEGAOPS_HAVE_CUDA

#include <string>

#include "graph/pipeline.h"
#include "runtime/pipeline_stages.h"

namespace megaops::cli {

void write_stream_evidence(const PipelineConfig& p, int batch, uint64_t seed, GpuPipeline& stages,
                           const std::string& dir);

}  // namespace megaops::cli

#endif
