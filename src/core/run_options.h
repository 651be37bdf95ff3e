// The names of three run options of the executors (runtime/conventional.h): how decode steps run
// and how prefill runs the prompts and their attention. Here, not beside the executor, so the tools
// parse and check them on any machine (a plan file's "prefill", `generate --prefill` with `--cpu`),
// with one error text.
#pragma once

#include <string>

namespace megaops {

// How decode steps run. Prefill runs on the prefill kernels unless ExecutorOptions::prefill_path
// sends it through the decode step (and so through this backend).
//   Conventional: one stream, one kernel after the other (optionally with PDL).
//   Overlap: docs/overlap-design.md. Ops round-robin on overlap_streams streams, each op waiting
//     on its producer's monotonic tile counter instead of a kernel boundary, all matmuls on the
//     small-m kernel, CTA budgets so that the kernels that can be live together fit on the GPU.
//     PDL is ignored (never set on overlap launches: it would let more than overlap_streams
//     kernels be live and void the budgets), except in the PDL chain (overlap_pdl_chain).
enum class DecodeBackend { Conventional, Overlap };

const char* backend_name(DecodeBackend b);
// "conventional" or "overlap"; otherwise throws InputError naming `where` (an option, or a file)
// and `field`, the accepted names and `text`.
DecodeBackend parse_backend(const std::string& text, const std::string& where,
                            const std::string& field = "");

// How prefill runs the prompts (ExecutorOptions::prefill_path).
//   Layers: every prompt token through the prefill kernels (cuBLASLt GEMMs, causal prefill
//     attention), prefill_chunk tokens at a time, launched eagerly.
//   DecodeGraph: the prompt tokens as the rows of decode steps, at most max_batch rows per replay
//     of the captured step (the decode backend's, with its PDL setting and plan). A row carries
//     its sequence's slot, its position and a context of position + 1, so the step writes every
//     row's K / V into the cache before its decode attention reads keys [0, position]: the causal
//     prefill. One replay instead of ~10 eager launches a layer gets a short prompt its first
//     token sooner; each replay reads all the weights, so many replays lose to Layers.
enum class PrefillPath { Layers, DecodeGraph };

const char* prefill_path_name(PrefillPath p);
// "layers" or "graph"; otherwise an InputError as parse_backend's.
PrefillPath parse_prefill_path(const std::string& text, const std::string& where,
                               const std::string& field = "");

// Which kernel runs the layer prefill's causal attention (ExecutorOptions::prefill_attention).
//   Flash: the own tensor-core kernel (kernels/attention_prefill.cuh), one launch a chunk.
//   Cudnn: cuDNN's fused SDPA (kernels/attention_cudnn.h), one call per sequence of a chunk, on
//     the cuDNN library loaded at run time (ExecutorOptions::cudnn_lib); where cuDNN cannot be
//     loaded or has no plan for a shape, that part runs on Flash and the executor says so once.
enum class PrefillAttention { Flash, Cudnn };

const char* prefill_attention_name(PrefillAttention a);
// "flash" or "cudnn"; otherwise an InputError as parse_backend's.
PrefillAttention parse_prefill_attention(const std::string& text, const std::string& where,
                                         const std::string& field = "");

}  // namespace megaops
