// Standalone matmul timing (see matmul_bench.h).
#include <algorithm>
#include <string>
#include <vector>

#include "core/cuda_check.h"
#include "core/error.h"
#include "kernels/matmul.cuh"
#include "kernels/matmul_bench.h"

namespace megaops {

namespace {

// bf16 values in [-1, 1) from a hash of (seed, index): the timings do not depend on the values,
// but NaN or denormal patterns could.
__global__ void fill_bf16_kernel(uint16_t* p, size_t count, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < count;
       i += size_t{gridDim.x} * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9e3779b1u ^ seed;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    const float f = static_cast<float>(h & 0xffffff) / float(1 << 23) - 1.f;
    p[i] = static_cast<uint16_t>(__float_as_uint(f) >> 16);
  }
}

struct DeviceMem {
  void* p = nullptr;
  explicit DeviceMem(size_t bytes) { MEGAOPS_CUDA_CHECK(cudaMalloc(&p, bytes)); }
  ~DeviceMem() { cudaFree(p); }
  DeviceMem(const DeviceMem&) = delete;
  DeviceMem& operator=(const DeviceMem&) = delete;
};

struct StreamOwner {
  cudaStream_t s = nullptr;
  StreamOwner() { MEGAOPS_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~StreamOwner() { cudaStreamDestroy(s); }
};

struct EventOwner {
  cudaEvent_t e = nullptr;
  EventOwner() { MEGAOPS_CUDA_CHECK(cudaEventCreate(&e)); }
  ~EventOwner() { cudaEventDestroy(e); }
};

struct GraphOwner {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~GraphOwner() {
    if (exec) cudaGraphExecDestroy(exec);
    if (g) cudaGraphDestroy(g);
  }
};

}  // namespace

bool matmul_bench_supported(const MatmulBenchCase& c) {
  if (c.path == "stream") return matmul_stream_fits(c.m, c.k);
  if (c.path == "small") return c.m <= MATMUL_SMALL_M_MAX;
  return c.path == "cublaslt";
}

MatmulBenchTime time_matmul(const MatmulBenchCase& c) {
  if (c.path != "small" && c.path != "stream" && c.path != "cublaslt")
    throw InputError("bench-matmul: path: expected small, stream or cublaslt, found '" + c.path +
                     "'");
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
  DeviceMem w(w_bytes * copies), x(static_cast<size_t>(c.m) * c.k * 2),
      y(static_cast<size_t>(c.m) * c.n * 4);
  fill_bf16_kernel<<<1024, 256>>>(static_cast<uint16_t*>(w.p), w_elems * copies, 1234);
  fill_bf16_kernel<<<64, 256>>>(static_cast<uint16_t*>(x.p), static_cast<size_t>(c.m) * c.k, 77);
  MEGAOPS_CUDA_CHECK(cudaGetLastError());
  MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());

  MatmulContext ctx;
  if (c.path == "stream") ctx.set_stream_stages(c.stream_stages);
  StreamOwner stream;
  auto launch = [&](int i) {
    MatmulParams p;
    p.x = static_cast<const bf16*>(x.p);
    p.ldx = c.k;
    p.w = static_cast<const bf16*>(w.p) + static_cast<size_t>(i % copies) * w_elems;
    p.y = y.p;
    p.ldy = c.n;
    p.y_dtype = DType::F32;
    p.m = c.m;
    p.n = c.n;
    p.k = c.k;
    p.launch = LaunchOptions{stream.s, c.pdl};
    return c.path == "small"    ? ctx.run_small_m(p)
           : c.path == "stream" ? ctx.run_stream(p)
                                : ctx.run_cublaslt(p);
  };
  // Eager launches first: a failing path reports here, outside capture.
  for (int i = 0; i < copies; ++i) MEGAOPS_CUDA_CHECK(launch(i));
  MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(stream.s));
  GraphOwner graph;
  MEGAOPS_CUDA_CHECK(cudaStreamBeginCapture(stream.s, cudaStreamCaptureModeThreadLocal));
  cudaError_t launch_err = cudaSuccess;
  for (int i = 0; i < c.launches && launch_err == cudaSuccess; ++i) launch_err = launch(i);
  MEGAOPS_CUDA_CHECK(cudaStreamEndCapture(stream.s, &graph.g));
  MEGAOPS_CUDA_CHECK(launch_err);
  MEGAOPS_CUDA_CHECK(cudaGraphInstantiate(&graph.exec, graph.g, 0));
  MEGAOPS_CUDA_CHECK(cudaGraphLaunch(graph.exec, stream.s));  // warm-up
  EventOwner e0, e1;
  std::vector<double> us;
  for (int r = 0; r < c.repeats; ++r) {
    MEGAOPS_CUDA_CHECK(cudaEventRecord(e0.e, stream.s));
    MEGAOPS_CUDA_CHECK(cudaGraphLaunch(graph.exec, stream.s));
    MEGAOPS_CUDA_CHECK(cudaEventRecord(e1.e, stream.s));
    MEGAOPS_CUDA_CHECK(cudaEventSynchronize(e1.e));
    float ms = 0;
    MEGAOPS_CUDA_CHECK(cudaEventElapsedTime(&ms, e0.e, e1.e));
    us.push_back(1e3 * ms / c.launches);
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us.front(), us.back(), copies};
}

}  // namespace megaops
