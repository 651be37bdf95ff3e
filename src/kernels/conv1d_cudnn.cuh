// A causal 1-D convolution or transposed convolution as a cuDNN execution plan, built with the
// cuDNN graph (backend) API of the CUDA toolkit's libcudnn: a vendor kernel inside the plan, as
// cuBLASLt is for large GEMMs. fp32 tensors [batch, channels, 1, t] (a 1-D conv is a 2-D conv of
// height 1), fp32 compute; engines that trade accuracy for speed (TF32 tensor cores, FFT,
// Winograd) only where allowed.
//
// cuDNN pads symmetrically, so each op writes a "wide" output whose first t_len samples are the
// causal result (the codec's pointwise kernel, kernels/codec_pointwise.cuh, reads those and adds
// the bias):
//   conv1d:  padding (kernel - 1) * dilation on both sides; output n reads inputs
//            [n - (kernel - 1) * dilation, n]: out_len = t_in + (kernel - 1) * dilation;
//   transposed: the backward-data convolution of a stride-`stride` conv, no padding:
//            out_len = (t_in - 1) * stride + kernel, of which the first t_in * stride are kept
//            (all trimming on the right, as the CPU oracle's conv_transpose1d).
// Weights in PyTorch's layouts: conv1d [out, in, kernel], transposed [in, out, kernel].
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <string>

namespace megaops {

struct Conv1dShape {
  bool transposed = false;
  int batch = 1, in_channels = 1, out_channels = 1;
  int64_t t_in = 1;
  int kernel = 1, stride = 1, dilation = 1;

  int64_t out_len() const {
    return transposed ? (t_in - 1) * stride + kernel : t_in + int64_t{kernel - 1} * dilation;
  }
  int64_t causal_len() const { return transposed ? t_in * stride : t_in; }
  double flops() const;  // multiply-adds x 2 of the causal part
};

class CudnnConv1d {
 public:
  // Builds the plan: the first engine of cuDNN's heuristics (mode A, then the fallback list) that
  // finalizes, skipping engines noted for TF32 tensor cores, down-converted inputs, reduced
  // precision reductions, FFT or Winograd unless fast_engines. Throws DeviceError when no engine
  // supports the shape.
  CudnnConv1d(cudnnHandle_t handle, const Conv1dShape& shape, bool fast_engines);
  ~CudnnConv1d();
  CudnnConv1d(const CudnnConv1d&) = delete;
  CudnnConv1d& operator=(const CudnnConv1d&) = delete;

  // y [batch, out_channels, out_len()] from x [batch, in_channels, t_in] and w, on `stream`; x, w
  // and y 16-byte aligned (cudaMalloc'ed buffers are). `workspace` holds at least
  // workspace_bytes(). Throws DeviceError on a misaligned tensor or a failed execution.
  void run(const float* x, const float* w, float* y, void* workspace, cudaStream_t stream) const;

  size_t workspace_bytes() const { return workspace_; }
  const Conv1dShape& shape() const { return shape_; }
  // Whether the engine chosen is one of those fast ones.
  bool fast_engine() const { return fast_; }

 private:
  cudnnHandle_t handle_;
  Conv1dShape shape_;
  cudnnBackendDescriptor_t plan_ = nullptr;
  size_t workspace_ = 0;
  bool fast_ = false;
};

}  // namespace megaops
