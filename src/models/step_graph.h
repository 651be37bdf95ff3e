// The step graph of a dense decoder (Llama 3, Qwen 3): the op graph (graph/op_graph.h) of one
// decode step or one prefill chunk, built from the model's configuration. This is the one
// description of what a step computes: the executors run it (handed build_step_graph through
// ExecutorOptions::step_graph), the planner composes it, the profiler names its ops, and the CPU
// oracle runs the same op list (tests/models/step_graph_test.cpp checks it op by op).
//
// Per step: embedding, per layer [input_layernorm, qkv_proj, qkv_rope, decode_attention or
// prefill_attention, o_proj, (all_reduce), post_attention_layernorm, gate_up_proj, silu_mul,
// down_proj, (all_reduce)], final_norm, lm_head, sample, and for decode step_advance. Weights and
// the KV cache bf16; the residual stream, matmul outputs and logits fp32; matmul inputs bf16. The
// residual add of each block is fused into the next norm.
#pragma once

#include <string>

#include "graph/op_graph.h"
#include "models/model_config.h"

namespace megaops {

// The graph `req` asks for (StepGraphBuilder). Throws InputError on an invalid config or sizes.
OpGraph build_step_graph(const ModelConfig& cfg, const StepRequest& req);

// One decode step for `batch` sequences attending to `context` cached positions each.
OpGraph build_decode_graph(const ModelConfig& cfg, const std::string& model, int batch, int context,
                           const GraphOptions& opt = {});

// One prefill chunk of `tokens` tokens of one sequence after `context` cached positions, ending
// with the LM head and sampling of the last row (the first token).
OpGraph build_prefill_graph(const ModelConfig& cfg, const std::string& model, int tokens,
                            int context, const GraphOptions& opt = {});

}  // namespace megaops
