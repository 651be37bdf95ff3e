// A composition of a streaming pipeline (graph/pipeline.h): which groups (prefill, producer,
// local, codec) share a region, each region's backend and how the producer and consumer sides
// share the GPU. `megaops plan-pipeline` writes one per candidate (planner/pipeline_plan.h,
// pipeline_candidate_json); `megaops stream --composition` reads it strictly and runs it where an
// executor exists: serial, every group its own region, the prefill and the codec conventional,
// the producer and the local transformer conventional, conventional + PDL or the PDL chain, each
// as the decode plan (graph/plan.h) of its executor. docs/pipeline.md documents the format.
#pragma once

#include <string>
#include <vector>

#include "graph/plan.h"

namespace megaops {

constexpr const char* COMPOSITION_SCHEMA = "megaops-pipeline-composition/1";

struct CompositionRegion {
  std::vector<std::string> groups;  // consecutive of: prefill, producer, local, codec
  std::string backend;              // conventional, conventional_pdl, pdl_chain, persistent
};

struct PipelineComposition {
  std::string label;
  std::vector<CompositionRegion> regions;
  std::string policy = "serial";  // serial, fixed_split, dynamic
  int split = 0;
};

// Every group its own region, every one conventional, serial: what runs without a composition.
PipelineComposition default_composition();

// Reads a composition. Strict: unknown keys, groups not covering prefill, producer, local, codec
// in order, unknown backends or policies are an InputError "<origin>: <field>: expected ...,
// found ...". Fields other than regions and policy are informational.
PipelineComposition parse_composition(const std::string& text, const std::string& origin);

// The decode plans the producer's and the local transformer's executors run; InputError naming
// `origin` and the field where no executor runs the composition ("regions[1]: a region of
// several groups (producer+local) has no executor yet").
struct StagePlans {
  Plan producer, local;
};
StagePlans composition_stage_plans(const PipelineComposition& c, const std::string& origin);

}  // namespace megaops
