// See cuda_ops.h. The module's single GPU ops: one launcher call each, on the caller's stream.
#include <map>
#include <memory>
#include <mutex>

#include "core/cuda_check.h"
#include "cuda_ops.h"
#include "kernels/matmul.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/silu_mul.cuh"

namespace megaops::py {

namespace {

// The matmul context of `device` (cuBLASLt handle, workspace, the streaming kernel's counters),
// made on first use. The Python module is the only owner there is for it, so it is process-wide
// and never destroyed: at interpreter exit the CUDA runtime may already be torn down, and a
// handle destroyed after it fails. Calls hold the GIL, which serialises them (the context is not
// thread-safe); the mutex keeps that true for callers that release it.
MatmulContext& matmul_context(int device) {
  static std::mutex mutex;
  static auto* contexts = new std::map<int, std::unique_ptr<MatmulContext>>();
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<MatmulContext>& ctx = (*contexts)[device];
  if (!ctx) ctx = std::make_unique<MatmulContext>();
  return *ctx;
}

// Makes `device` current for one call and gives the caller's current device back after it (the
// caller, PyTorch say, keeps its own notion of the current device).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    MEGAOPS_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) MEGAOPS_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() { cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

LaunchOptions launch_on(uintptr_t stream) {
  LaunchOptions opt;
  opt.stream = reinterpret_cast<cudaStream_t>(stream);
  return opt;
}

// After the launch: its status, then on the legacy default stream the wait for the result.
void finish(cudaError_t launched, const char* op, uintptr_t stream) {
  if (launched != cudaSuccess)
    throw DeviceError(std::string("megaops.cuda_ops.") + op +
                      ": launch failed: " + cudaGetErrorString(launched));
  MEGAOPS_CUDA_CHECK(cudaGetLastError());
  if (stream == 0) MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(nullptr));
}

}  // namespace

void cuda_rmsnorm(const float* x, const void* w_bf16, void* y_bf16, int rows, int n, float eps,
                  int device, uintptr_t stream) {
  const DeviceScope scope(device);
  AddRmsNormParams p;
  p.launch = launch_on(stream);
  // No delta: the residual (x) is only read, never updated.
  p.residual = const_cast<float*>(x);
  p.weight = static_cast<const bf16*>(w_bf16);
  p.out = static_cast<bf16*>(y_bf16);
  p.rows = rows;
  p.n = n;
  p.eps = eps;
  finish(launch_add_rmsnorm(p), "rmsnorm", stream);
}

void cuda_matmul(const void* x_bf16, const void* w_bf16, float* y, int m, int n, int k, int device,
                 uintptr_t stream) {
  const DeviceScope scope(device);
  MatmulParams p = matmul_params(static_cast<const bf16*>(x_bf16), static_cast<const bf16*>(w_bf16),
                                 y, DType::F32, m, n, k);
  p.launch = launch_on(stream);
  finish(matmul_context(device).run(p), "matmul", stream);
}

void cuda_silu_mul(const float* gate_up, void* out_bf16, int m, int inter, int device,
                   uintptr_t stream) {
  const DeviceScope scope(device);
  SiluMulParams p;
  p.launch = launch_on(stream);
  p.gate_up_f32 = gate_up;
  p.out = static_cast<bf16*>(out_bf16);
  p.m = m;
  p.inter = inter;
  finish(launch_silu_mul(p), "silu_mul", stream);
}

void* cuda_alloc(size_t bytes, int device) {
  const DeviceScope scope(device);
  void* p = nullptr;
  MEGAOPS_CUDA_CHECK(cudaMalloc(&p, bytes == 0 ? 1 : bytes));
  return p;
}

void cuda_free(void* p) noexcept {
  cudaFree(p);
}

void cuda_copy_to_host(void* dst, const void* src, size_t bytes, int device) {
  const DeviceScope scope(device);
  MEGAOPS_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void cuda_copy_on_stream(void* dst, const void* src, size_t bytes, int device, uintptr_t stream) {
  const DeviceScope scope(device);
  const cudaStream_t s = reinterpret_cast<cudaStream_t>(stream);
  MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s));
  MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(s));
}

}  // namespace megaops::py
