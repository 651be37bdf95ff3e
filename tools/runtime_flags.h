// The command-line flags of the runtime's settings that every command running an executor shares
// (matmul dispatch, greedy sampling in the LM head, the chain's early trigger, the watchdog, the
// prefill attention kernel and the cuDNN library it may load): one
// place turns them into ExecutorOptions, so nothing in src/ reads the environment.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#ifdef MEGAOPS_HAVE_CUDA
#include "runtime/conventional.h"
#endif

namespace megaops::cli {

// As typed; empty strings leave the executor's default. Checked by apply_runtime_flags.
struct RuntimeFlags {
  bool greedy_in_lm_head = true;
  bool chain_o_early_trigger = true;
  std::string matmul_path;           // small | stream | cublaslt | stream-for-small | auto
  std::string matmul_stream_shapes;  // NxK,NxK
  std::string stream_stages;         // ring slots of the streaming kernel
  std::string stream_kernel;         // ring | bulk
  bool stream_l2_evict_first = true;
  bool matmul_tune = false;
  std::string watchdog_ms;        // overlap and peer-reduce waits
  std::string tile_wait_max_ns;   // back-off cap of every bounded wait
  std::string prefill_attention;  // flash | cudnn
  std::string cudnn_lib;          // the cuDNN library the cudnn prefill attention loads
};

void add_runtime_flags(CLI::App& app, RuntimeFlags& f);

#ifdef MEGAOPS_HAVE_CUDA
// The flags into `eo`; InputError naming the flag on a bad value.
void apply_runtime_flags(const RuntimeFlags& f, ExecutorOptions& eo);
#endif

}  // namespace megaops::cli
