// The graph cache: a decode step is captured once per (batch size, PDL, backend) into a CUDA graph
// and replayed; every backend's step records into the executor's stream, so one capture path
// serves them all (DESIGN rule 3: nothing in a captured step changes between replays).
#include "runtime/executor_core.h"

namespace megaops {

// Captures what `record` enqueues on `stream` into a graph (the caller owns it). When the
// capture met cuBLASLt problems without a tuned algorithm, they are tuned on the GPU now and the
// step is captured again with the tuned algorithms (kernels/matmul.cuh, tune_pending).
cudaGraph_t ExecutorCore::capture_step(const std::function<void()>& record) {
  for (int pass = 0;; ++pass) {
    cudaGraph_t graph = nullptr;
    MEGAOPS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    capturing = true;
    try {
      record();
    } catch (...) {
      capturing = false;
      cudaStreamEndCapture(stream, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    capturing = false;
    MEGAOPS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    if (pass > 0 || mm->pending_tuning() == 0) return graph;
    cudaGraphDestroy(graph);
    mm->tune_pending(stream);
  }
}

cudaGraphExec_t ExecutorCore::graph_for(int b, bool pdl) {
  const DecodeBackend backend = opt.backend;
  auto it = graphs.find({b, pdl, backend});
  if (it != graphs.end()) return it->second;
  // The overlap step's op list allocates and uploads (persistent regions): not inside the capture.
  if (backend == DecodeBackend::Overlap) overlap_plan(b);
  cudaGraph_t graph = capture_step([&] {
    if (backend == DecodeBackend::Overlap)
      record_overlap_step(b);
    else
      record_decode_step(b, pdl);
  });
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  MEGAOPS_CUDA_CHECK(err);
  graphs[{b, pdl, backend}] = exec;
  return exec;
}

void ExecutorCore::drop_overlap_graphs() {
  for (auto it = graphs.begin(); it != graphs.end();) {
    if (std::get<2>(it->first) == DecodeBackend::Overlap) {
      cudaGraphExecDestroy(it->second);
      it = graphs.erase(it);
    } else {
      ++it;
    }
  }
}

}  // namespace megaops
