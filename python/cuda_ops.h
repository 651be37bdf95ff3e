// Single GPU ops for the Python module's megaops.cuda_ops: the executor's kernels (RMSNorm,
// matmul through MatmulContext, SiLU·mul) launched on raw device pointers the module took from
// DLPack tensors and checked. Plain C++ so that megaops_module.cpp, a host source, can call them;
// the launches live in cuda_ops.cu, compiled by nvcc.
#pragma once

#include <cstdint>

namespace megaops::py {

// Every function runs on `device`; on `stream` (a cudaStream_t; 0: the legacy default stream,
// synchronised before returning, so the result is ready). Throws DeviceError on a CUDA failure
// and InputError on shapes the kernel cannot take (checked by the module first).

// y [rows, n] bf16 = x [rows, n] fp32 / sqrt(mean(x^2) + eps) * w [n] bf16; n % 8 == 0.
void cuda_rmsnorm(const float* x, const void* w_bf16, void* y_bf16, int rows, int n, float eps,
                  int device, uintptr_t stream);

// y [m, n] fp32 = x [m, k] bf16 . w [n, k]^T bf16 (HF Linear layout); k % 8 == 0. Dispatches on
// the shape as the executor does (small-m / streaming kernels, cuBLASLt for large m).
void cuda_matmul(const void* x_bf16, const void* w_bf16, float* y, int m, int n, int k, int device,
                 uintptr_t stream);

// out [m, inter] bf16 = silu(gate_up[:, :inter]) * gate_up[:, inter:], gate_up [m, 2 * inter]
// fp32; inter % 8 == 0.
void cuda_silu_mul(const float* gate_up, void* out_bf16, int m, int inter, int device,
                   uintptr_t stream);

// Device memory for a result: cudaMalloc on `device` (DeviceError on failure), freed by
// cuda_free (what the returned array's capsule calls).
void* cuda_alloc(size_t bytes, int device);
void cuda_free(void* p) noexcept;

// Copies device memory to the host (cudaMemcpy, synchronous).
void cuda_copy_to_host(void* dst, const void* src, size_t bytes, int device);
// Copies device memory to device memory on `stream`, after the work already queued there, and
// waits for it.
void cuda_copy_on_stream(void* dst, const void* src, size_t bytes, int device, uintptr_t stream);

}  // namespace megaops::py
