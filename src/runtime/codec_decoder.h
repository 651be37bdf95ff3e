// The codec decoder of a streaming pipeline on the GPU: its op list (graph/pipeline.h, codec_ops)
// run in order, the convolutions on cuDNN (kernels/conv1d_cudnn.cuh), everything else and each
// conv's bias on the codec's own kernels (kernels/codec_pointwise.cuh), fp32 throughout. Weights:
// codec_weight_values(seed), as the CPU oracle (reference/pipeline_oracle.h, CodecDecoder).
//
// Buffers: one per live value (an op's output lives until its last reader: the next op, or the
// residual add of its block), assigned greedily and reused, each sized for max_batch streams of
// max_frames frames, plus one scratch for a convolution's padded output. cuDNN plans are built
// on first use for each (op, batch, frames) and kept.
#pragma once

#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "graph/pipeline.h"
#include "kernels/conv1d_cudnn.cuh"
#include "pipeline/stream.h"
#include "runtime/device_memory.h"

namespace megaops {

class CodecDecoderGpu {
 public:
  CodecDecoderGpu(const CodecConfig& c, uint64_t seed, int max_batch, int max_frames,
                  bool fast_engines);
  ~CodecDecoderGpu();
  CodecDecoderGpu(const CodecDecoderGpu&) = delete;
  CodecDecoderGpu& operator=(const CodecDecoderGpu&) = delete;

  // Decodes `frames` frames of every stream (codes [stream][frame * codebooks + q]) and returns
  // the samples of the frames from skip_frames on, [stream][(frames - skip_frames) * hop].
  // Throws InputError on codes outside the codebook, more streams than max_batch or more frames
  // than max_frames.
  StreamSamples decode(const StreamCodes& codes, int frames, int skip_frames);

  // Each op's GPU time (codec_ops order, a conv with its bias) in one decode of `frames` frames of
  // `batch` streams of valid codes: median over `repeats` decodes after one warm-up, microseconds.
  std::vector<double> time_ops(int batch, int frames, int repeats);

  // Whether any convolution plan built so far runs a fast engine (TF32, FFT, Winograd).
  bool any_fast_engine() const;

 private:
  void check_size(int batch, int frames) const;
  const CudnnConv1d& conv_plan(size_t op, int batch, int frames);
  // Runs every op on the uploaded codes; with `marks`, records marks[i] after op i.
  void run(int batch, int frames, const std::vector<cudaEvent_t>* marks);

  CodecConfig cfg_;
  std::vector<CodecOp> ops_;
  std::vector<WeightSpec> specs_;
  int max_batch_, max_frames_;
  bool fast_engines_;
  cudnnHandle_t handle_ = nullptr;
  cudaStream_t stream_ = nullptr;
  DeviceMemory mem_;
  std::vector<float*> weights_;  // per spec
  std::vector<int> buffer_of_;   // per op: its output buffer
  std::vector<float*> buffers_;
  float* scratch_ = nullptr;  // a convolution's padded output
  int32_t* codes_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::vector<float> host_out_;
  std::map<std::tuple<size_t, int, int>, std::unique_ptr<CudnnConv1d>> plans_;
};

}  // namespace megaops
