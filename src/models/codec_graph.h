// The op graphs of a streaming pipeline (graph/pipeline.h): the codec decoder's graph over a
// window of frames, built from its op list (codec_ops), and every group's graph at one batch size
// (the producer's prefill and decode step and the local transformer's step come from
// models/step_graph.h).
//
// Codec tensors are fp32, [batch x time, channels] at each op's sample rate; weights fp32 (the
// GPU decoder runs cuDNN in fp32). A conv reads every channel of its input rows (AllRow), an
// activation or residual add the same columns (SameColumns). Tiles: the same number of row
// blocks (time blocks, up to 8) for every op, so a tile reads the time block of the same index
// of its producer, and column blocks of at least GraphOptions::min_tile_cols, at most
// max_tiles_per_op tiles an op.
#pragma once

#include "graph/op_graph.h"
#include "graph/pipeline.h"

namespace megaops {

// The codec decoder over `frames` frames of `batch` streams (context = frames).
OpGraph build_codec_graph(const CodecConfig& c, int batch, int frames,
                          const GraphOptions& opt = {});

// Every group's graph at `batch` streams: the producer's prefill of batch x prompt_tokens rows,
// its decode step at the context of the first publication (prompt_tokens + h), the local
// transformer's step at half its frame (codebooks / 2 positions), and the codec over the first
// chunk's window and over a window of left context + chunk_frames.
PipelineGraphs build_pipeline_graphs(const PipelineConfig& p, int batch);

}  // namespace megaops
