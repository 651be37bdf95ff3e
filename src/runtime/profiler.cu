// Per-op GPU times of one decode step (Executor::profile_decode_steps): the conventional step
// captured with an event recorded after every op (ExecutorCore::check records them while
// `profiling` is set), replayed, and the gaps between the events averaged.
#include "runtime/executor_core.h"

namespace megaops {

std::vector<Executor::OpTime> ExecutorCore::profile_decode_steps(int steps) {
  ExecutorCore& s = *this;
  if (s.batch == 0) throw_input_error("profile", "", "profile_decode_steps before prefill");
  for (int b = 0; b < s.batch; ++b)
    if (s.host_pos[b] + steps > s.opt.max_seq)
      throw_input_error(
          "profile", "steps",
          "sequence " + std::to_string(b) + " would pass max_seq " + std::to_string(s.opt.max_seq));
  const size_t max_ops = static_cast<size_t>(s.cfg.num_layers) * 16 + 16;
  while (s.prof_events.size() < max_ops + 1) {
    cudaEvent_t e;
    MEGAOPS_CUDA_CHECK(cudaEventCreate(&e));
    s.prof_events.push_back(e);
  }
  s.profiling = true;
  cudaGraph_t graph = nullptr;
  try {
    graph = s.capture_step([&] {
      s.prof_ops.clear();  // a second pass (cuBLASLt tuning) records the step again
      MEGAOPS_CUDA_CHECK(
          cudaEventRecordWithFlags(s.prof_events[0], s.stream, cudaEventRecordExternal));
      s.record_decode_step(s.batch, /*pdl=*/false);
    });
  } catch (...) {
    s.profiling = false;
    throw;
  }
  s.profiling = false;
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  MEGAOPS_CUDA_CHECK(err);
  std::vector<Executor::OpTime> out(s.prof_ops.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = {s.prof_ops[i].op, s.prof_ops[i].layer, 0.0};
  try {
    for (int r = 0; r < steps; ++r) {
      MEGAOPS_CUDA_CHECK(cudaGraphLaunch(exec, s.stream));
      MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(s.stream));
      for (size_t i = 0; i < out.size(); ++i) {
        float ms = 0;
        MEGAOPS_CUDA_CHECK(cudaEventElapsedTime(&ms, s.prof_events[i], s.prof_events[i + 1]));
        out[i].us += 1e3 * ms / steps;
      }
      for (int b = 0; b < s.batch; ++b) ++s.host_pos[b];
    }
  } catch (...) {
    cudaGraphExecDestroy(exec);
    throw;
  }
  cudaGraphExecDestroy(exec);
  return out;
}

}  // namespace megaops
