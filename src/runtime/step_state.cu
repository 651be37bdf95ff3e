// See step_state.cuh.
#include "runtime/step_state.cuh"

namespace megaops {

namespace {

__global__ void step_advance_kernel(int32_t* positions, int32_t* ctx_lens, uint32_t* step, int b) {
  pdl_wait();  // the sampler (our predecessor) has read `step`
  const int i = threadIdx.x;
  if (i < b) {
    const int32_t next = positions[i] + 1;
    positions[i] = next;
    ctx_lens[i] = next + 1;
  }
  if (i == 0) *step += 1;
  pdl_launch_dependents();
}

}  // namespace

cudaError_t launch_step_advance(const StepAdvanceParams& p) {
  if (!p.positions || !p.ctx_lens || !p.step || p.b < 1 || p.b > 1024) return cudaErrorInvalidValue;
  return launch_kernel(step_advance_kernel, dim3(1), dim3(((p.b + 31) / 32) * 32), 0, p.launch,
                       p.positions, p.ctx_lens, p.step, p.b);
}

}  // namespace megaops
