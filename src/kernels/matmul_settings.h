// How a MatmulContext (kernels/matmul.cuh) dispatches, as data its owner sets: ExecutorOptions::
// matmul, from the CLI's matmul flags. Host-only, so tools and options headers include it without
// the kernels' device headers. The defaults are the production rule; the rest are developer knobs
// for measuring the paths in situ.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/matmul_dispatch.h"

namespace megaops {

struct MatmulSettings {
  // A forced path (`small`, `stream`, `cublaslt`; `stream` falls back to the shape rule where the
  // streaming kernel cannot run), `stream-for-small` (the streaming kernel where the rule picks
  // the small-m kernel) or `auto` (the rule): parse_matmul_path.
  std::optional<MatmulPath> forced_path;
  bool stream_for_small = false;
  // (n, k) of the weights put on the streaming kernel (where it fits), the rest by the rule; for
  // measuring one op's kernel in the step: parse_matmul_stream_shapes.
  std::vector<std::pair<int, int>> stream_shapes;
  // Ring slots of the streaming kernel: 0 (its default) or MATMUL_STREAM_STAGES_MIN..MAX.
  int stream_stages = 0;
  // The streaming kernel's version: bulk copies from a producer warp (true; sm_90 only) or the
  // cp.async ring (false); unset: bulk where the GPU has it.
  std::optional<bool> stream_bulk;
  // The bulk kernel's weight copies with an L2 evict_first policy (StreamMatmulArgs::
  // l2_evict_first); off is a diagnostic (see MatmulContext::stream_l2_evict_first_).
  bool stream_l2_evict_first = true;
  // cuBLASLt algorithm tuning for decode-sized problems (MatmulContext::tune_pending).
  bool tune = false;
};

// Parsers of the settings' command-line spellings; each throws InputError naming `what` (the
// option) and the value.
void parse_matmul_path(const std::string& v, MatmulSettings* s, const std::string& what);
std::vector<std::pair<int, int>> parse_matmul_stream_shapes(const std::string& v,
                                                            const std::string& what);
int parse_stream_stages(const std::string& v, const std::string& what);
// "ring" -> false, "bulk" -> true (InputError where this GPU has no bulk copies).
bool parse_stream_kernel(const std::string& v, const std::string& what);

}  // namespace megaops
