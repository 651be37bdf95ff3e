// The pipeline file (docs/pipeline-format.md): a JSON description of a streaming pipeline's three
// stages (producer, local transformer, codec decoder) and its streaming schedule, read strictly
// into a PipelineConfig (graph/pipeline.h). Every problem is one InputError
// "<file>: <field path>: expected ..., found ...": an unknown field or stage, a missing one, a
// wrong type, shapes that do not chain between layers or stages, a chunk longer than the codec's
// context, a lookahead beyond the stream.
#pragma once

#include <string>

#include "graph/pipeline.h"

namespace megaops {

// Reads and validates a pipeline file.
PipelineConfig read_pipeline(const std::string& path);

// Parses pipeline file text; `origin` names the file in error messages.
PipelineConfig parse_pipeline(const std::string& json_text, const std::string& origin);

}  // namespace megaops
