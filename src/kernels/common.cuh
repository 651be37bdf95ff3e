// What every kernel file shares: the bf16 type, programmatic dependent launch (PDL) hooks, and the
// one generic launcher all launchers go through (so PDL and error checking are set in one place).
//
// PDL contract: a kernel may issue loads of its own weights before pdl_wait(), never reads a
// predecessor's output before it, and calls pdl_launch_dependents() once its successor may start
// being scheduled. Without PDL on the launch both calls are no-ops.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace megaops {

using bf16 = __nv_bfloat16;

// Blocks until the preceding kernel in the stream has completed (or triggered) when launched with
// PDL; a no-op otherwise.
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next PDL-launched kernel in the stream begin its prologue.
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;");
#endif
}

// Where and how to launch: every launcher's params end in one of these.
struct LaunchOptions {
  cudaStream_t stream = nullptr;
  bool pdl = false;  // programmatic dependent launch (Hopper+)
  // Preferred shared-memory carveout of this launch (percent of the unified L1 / shared storage,
  // or a cudaSharedmemCarveout value); -1 leaves the kernel's own attribute. Under PDL a kernel's
  // CTAs start on an SM while its predecessor's still run there only if the SM's L1 / shared
  // split suits both, so the executor gives a kernel the split of the one launched after it
  // (docs/perf-notes.md, "The shared-memory carveout and the streaming kernel under PDL").
  int carveout = -1;
};

// Launches `kernel` with cudaLaunchKernelEx, adding the PDL and carveout attributes when asked;
// returns the launch status (cudaGetLastError semantics).
template <typename... KArgs, typename... Args>
cudaError_t launch_kernel(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                          const LaunchOptions& opt, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = opt.stream;
  cudaLaunchAttribute attr[2];
  cfg.attrs = attr;
  if (opt.pdl) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[cfg.numAttrs++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (opt.carveout >= 0) {
    attr[cfg.numAttrs].id = cudaLaunchAttributePreferredSharedMemoryCarveout;
    attr[cfg.numAttrs++].val.sharedMemCarveout = static_cast<unsigned>(opt.carveout);
  }
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
}

// An attribute of the current device (launchers size their grids by its SM count).
inline cudaError_t current_device_attribute(cudaDeviceAttr attr, int* value) {
  int device = 0;
  if (const cudaError_t err = cudaGetDevice(&device); err != cudaSuccess) return err;
  return cudaDeviceGetAttribute(value, attr, device);
}

inline unsigned ceil_div(unsigned a, unsigned b) {
  return (a + b - 1) / b;
}

#if defined(__CUDACC__)  // host compilers reach this header through launcher headers
// Eight bf16 values from one 16-byte load, widened to float.
__device__ __forceinline__ void bf16x8_to_float(const uint4& raw, float* f) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 v = __bfloat1622float2(h[i]);
    f[2 * i] = v.x;
    f[2 * i + 1] = v.y;
  }
}
#endif

}  // namespace megaops
