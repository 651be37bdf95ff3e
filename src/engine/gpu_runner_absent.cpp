// The GPU runner factory of a build without CUDA (CMakeLists.txt compiles this file only then):
// there is no GPU to run on, and every front end says so instead of failing to link.
#include "core/error.h"
#include "engine/gpu_runner.h"

namespace megaops {

bool gpu_runner_available() {
  return false;
}

std::unique_ptr<ModelRunner> make_gpu_runner(const Checkpoint&, const GpuRunnerOptions&) {
  throw Error("the GPU runner: this megaops was built without CUDA");
}

std::unique_ptr<ModelRunner> make_gpu_executor_adapter(const Checkpoint&, const GpuRunnerOptions&) {
  throw Error("the GPU runner: this megaops was built without CUDA");
}

bool is_executor_adapter(const ModelRunner&) {
  return false;
}

std::string gpu_device_name() {
  return "";
}

}  // namespace megaops
