// Standalone matmul timing (see matmul_bench.h).
#include <algorithm>
#include <string>
#include <vector>

#include "core/counter_rng.h"
#include "core/cuda_check.h"
#include "core/cuda_owners.h"
#include "core/error.h"
#include "kernels/hbm_read.cuh"
#include "kernels/matmul.cuh"
#include "kernels/matmul_bench.h"
#include "kernels/matmul_stream.cuh"

namespace megaops {

namespace {

// bf16 values in [-1, 1) from the counter RNG: the timings do not depend on the values, but NaN
// or denormal patterns could.
__global__ void fill_bf16_kernel(uint16_t* p, size_t count, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x)
    p[i] = static_cast<uint16_t>(__float_as_uint(2.f * counter_uniform(seed, i, 0) - 1.f) >> 16);
}

}  // namespace

bool matmul_bench_supported(const MatmulBenchCase& c) {
  if (c.path == "stream") return matmul_stream_fits(c.m, c.k);
  if (c.path == "stream-bulk")
    return matmul_stream_fits(c.m, c.k) && matmul_stream_bulk_supported();
  if (c.path == "small") return c.m <= MATMUL_SMALL_M_MAX;
  return c.path == "cublaslt" || c.path == "cublaslt-tuned" || c.path == "read";
}

MatmulBenchTime time_matmul(const MatmulBenchCase& c) {
  if (!matmul_bench_path_known(c.path))
    throw InputError("bench-matmul: path: expected " + matmul_bench_paths_text() + ", found '" +
                     c.path + "'");
  if (c.m < 1 || c.n < 1 || c.k < 8 || c.k % 8 != 0 || c.launches < 1 || c.repeats < 1)
    throw InputError(
        "bench-matmul: expected m, n >= 1, k a positive multiple of 8, launches and "
        "repeats >= 1");
  if (!matmul_bench_supported(c))
    throw InputError("bench-matmul: path " + c.path + " does not take m=" + std::to_string(c.m) +
                     " k=" + std::to_string(c.k));
  const size_t w_elems = static_cast<size_t>(c.n) * c.k;
  const size_t w_bytes = w_elems * 2;
  // At least 2 copies, enough for ~1 GB of distinct weights per rotation (L2 is 50-60 MB), at most
  // 8.
  const int copies = static_cast<int>(std::clamp<size_t>((size_t{1} << 30) / w_bytes, 2, 8));
  CudaMemory w(w_bytes * copies), x(static_cast<size_t>(c.m) * c.k * 2),
      y(static_cast<size_t>(c.m) * c.n * 4), sink(sizeof(unsigned));
  fill_bf16_kernel<<<1024, 256>>>(static_cast<uint16_t*>(w.ptr), w_elems * copies, 1234);
  fill_bf16_kernel<<<64, 256>>>(static_cast<uint16_t*>(x.ptr), static_cast<size_t>(c.m) * c.k, 77);
  MEGAOPS_CUDA_CHECK(cudaGetLastError());
  MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());

  MatmulContext ctx;
  const bool streaming = matmul_bench_path_streams(c.path);
  if (streaming) ctx.set_stream_stages(c.stream_stages);
  ctx.set_stream_bulk(c.path == "stream-bulk");
  // cublaslt: the heuristic's first answer; cublaslt-tuned: the algorithm the executor's capture
  // would tune (MatmulContext::tune_pending).
  ctx.set_tuning(c.path == "cublaslt-tuned");
  CudaStream stream;
  auto launch = [&](int i) {
    MatmulParams p;
    p.x = static_cast<const bf16*>(x.ptr);
    p.ldx = c.k;
    p.w = static_cast<const bf16*>(w.ptr) + static_cast<size_t>(i % copies) * w_elems;
    p.y = y.ptr;
    p.ldy = c.n;
    p.y_dtype = DType::F32;
    p.m = c.m;
    p.n = c.n;
    p.k = c.k;
    p.launch = LaunchOptions{stream.s, c.pdl};
    // read: the weight bytes alone (n x k bf16, a multiple of 16 bytes as k % 8 == 0), never
    // with PDL (the read kernel has no predecessor to wait for).
    if (c.path == "read")
      return hbm_read(HbmReadParams{p.w, w_bytes, static_cast<unsigned*>(sink.ptr),
                                    LaunchOptions{stream.s, false}});
    return c.path == "small" ? ctx.run_small_m(p)
           : streaming       ? ctx.run_stream(p)
                             : ctx.run_cublaslt(p);  // cublaslt or cublaslt-tuned
  };
  // Eager launches first: a failing path reports here, outside capture.
  for (int i = 0; i < copies; ++i) MEGAOPS_CUDA_CHECK(launch(i));
  MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(stream.s));
  CudaGraph graph;
  for (int pass = 0; pass < 2; ++pass) {  // the second pass runs what the first one queued tuned
    if (graph.g) cudaGraphDestroy(graph.g);
    graph.g = nullptr;
    MEGAOPS_CUDA_CHECK(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
    cudaError_t launch_err = cudaSuccess;
    for (int i = 0; i < c.launches && launch_err == cudaSuccess; ++i) launch_err = launch(i);
    MEGAOPS_CUDA_CHECK(cudaStreamEndCapture(stream.s, &graph.g));
    MEGAOPS_CUDA_CHECK(launch_err);
    if (ctx.pending_tuning() == 0) break;
    ctx.tune_pending(stream.s);
  }
  MEGAOPS_CUDA_CHECK(cudaGraphInstantiate(&graph.exec, graph.g, 0));
  MEGAOPS_CUDA_CHECK(cudaGraphLaunch(graph.exec, stream.s));  // warm-up
  const std::vector<float> ms = timed_runs_ms(
      stream.s, c.repeats, [&] { MEGAOPS_CUDA_CHECK(cudaGraphLaunch(graph.exec, stream.s)); });
  const double per_launch_us = 1e3 / c.launches;
  return {ms[ms.size() / 2] * per_launch_us, ms.front() * per_launch_us, ms.back() * per_launch_us,
          copies};
}

}  // namespace megaops
