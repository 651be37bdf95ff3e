// The probe region (see persistent_region.cuh): the persistent loop with a body that records when,
// where and how often each task ran and checks that the payloads of the tasks it depends on are
// this step's. Tests run it on real schedules to check the loop's order and memory ordering
// without any op's arithmetic in the way.
#include "kernels/persistent_region.cuh"
#include "kernels/tile_sync.cuh"

namespace megaops {

namespace {

using Params = PersistentRegionProbeParams;

// Counts (once per task) a payload word of a dependency that is not this step's value. Every
// thread; ordinary loads only (the payloads are written while the kernel runs).
__device__ void probe_check_deps(const Params& p, uint32_t step, int32_t task) {
  const int32_t b = p.deps_begin[task];
  const int64_t words = static_cast<int64_t>(p.deps_begin[task + 1] - b) * PROBE_PAYLOAD_WORDS;
  bool stale = false;
  for (int64_t i = threadIdx.x; i < words; i += blockDim.x) {
    const int32_t dep = p.deps[b + i / PROBE_PAYLOAD_WORDS];
    const int word = static_cast<int>(i % PROBE_PAYLOAD_WORDS);
    const uint32_t got = p.payload[static_cast<int64_t>(dep) * PROBE_PAYLOAD_WORDS + word];
    stale |= got != probe_payload_value(p.payload_seed, step, dep, word);
  }
  if (__syncthreads_or(stale) && threadIdx.x == 0) {
    atomicAdd(p.stale_reads, 1u);
    atomicExch(p.first_stale, task);
  }
}

// Writes words [begin, end) of the task's payload, spread over the CTA's threads.
__device__ void probe_write_payload(const Params& p, uint32_t step, int32_t task, int begin,
                                    int end) {
  uint32_t* out = p.payload + static_cast<int64_t>(task) * PROBE_PAYLOAD_WORDS;
  for (int w = begin + static_cast<int>(threadIdx.x); w < end; w += blockDim.x)
    out[w] = probe_payload_value(p.payload_seed, step, task, w);
}

__global__ void __launch_bounds__(PERSISTENT_REGION_PROBE_THREADS)
    persistent_region_probe_kernel(const Params p) {
  const uint32_t step = p.step_ptr != nullptr ? ld_relaxed_gpu(p.step_ptr) : p.step;
  auto body = [&](int32_t op, int32_t tile, int32_t task) {
    (void)op;
    (void)tile;
    if (threadIdx.x == 0) {
      p.start_seq[task] = atomicAdd(p.sequence, 1u);
      p.task_cta[task] = static_cast<int32_t>(blockIdx.x);
      atomicAdd(&p.task_runs[task], 1u);
    }
    if (p.deps_begin != nullptr) probe_check_deps(p, step, task);
    // The payload is written in two halves with the body's delay between them, so a signal that
    // overtook the second half's stores would show as a stale read in a consumer.
    const uint64_t site = (static_cast<uint64_t>(step) << 40) ^ static_cast<uint64_t>(task);
    if (p.payload != nullptr) probe_write_payload(p, step, task, 0, PROBE_PAYLOAD_WORDS / 2);
    random_delay(p.body_delay, site);
    if (p.payload != nullptr)
      probe_write_payload(p, step, task, PROBE_PAYLOAD_WORDS / 2, PROBE_PAYLOAD_WORDS);
    // The task is done when every thread is.
    __syncthreads();
    if (threadIdx.x == 0) p.done_seq[task] = atomicAdd(p.sequence, 1u);
  };
  if (!persistent_region_run(p.sync, step, body) && threadIdx.x == 0) atomicAdd(p.rejected, 1u);
}

}  // namespace

cudaError_t launch_persistent_region_probe(const PersistentRegionProbeParams& p,
                                           cudaStream_t stream) {
  const bool outputs = p.sequence != nullptr && p.start_seq != nullptr && p.done_seq != nullptr &&
                       p.task_cta != nullptr && p.task_runs != nullptr && p.rejected != nullptr;
  // The payload check takes all five of its pointers or none.
  const int payload_fields = (p.deps_begin != nullptr) + (p.deps != nullptr) +
                             (p.payload != nullptr) + (p.stale_reads != nullptr) +
                             (p.first_stale != nullptr);
  if (p.sync.schedule == nullptr || p.sync.semaphores == nullptr || !outputs || p.num_ctas < 1 ||
      (payload_fields != 0 && payload_fields != 5))
    return cudaErrorInvalidValue;
  return launch_kernel(persistent_region_probe_kernel, dim3(p.num_ctas),
                       dim3(PERSISTENT_REGION_PROBE_THREADS), 0, LaunchOptions{stream, false}, p);
}

cudaError_t persistent_region_probe_max_resident_ctas(int* out) {
  int sms = 0;
  if (cudaError_t err = current_device_attribute(cudaDevAttrMultiProcessorCount, &sms);
      err != cudaSuccess)
    return err;
  KernelFootprint f;
  if (cudaError_t err = kernel_footprint(persistent_region_probe_kernel, 0,
                                         PERSISTENT_REGION_PROBE_THREADS, 0, &f);
      err != cudaSuccess)
    return err;
  *out = f.blocks_per_sm * sms;
  return cudaSuccess;
}

}  // namespace megaops
