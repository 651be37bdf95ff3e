// The codec decoder's own kernels (runtime/codec_decoder.h), the ones around its cuDNN
// convolutions (kernels/conv1d_cudnn.cuh):
//   - the residual VQ decode: out[b, d, t] = sum_q tables[q, codes[b, t, q], d];
//   - one pointwise kernel for everything after a convolution:
//     out[b, c, t] = act(in[b, c, t] + bias[c]) + skip[b, c, t] for t < t_len, act none, ELU or
//     SnakeBeta (x + sin(alpha[c] x)^2 / beta[c]). `in` may have longer rows than `out` (a cuDNN
//     convolution's padded output, whose first t_len samples are the causal ones): the conv's
//     epilogue (bias, trim), an activation, and a residual add are all this kernel.
// fp32 throughout; CPU oracles in reference/codec_ops.h.
#pragma once

#include <cstdint>

#include "kernels/common.cuh"

namespace megaops {

struct CodebookEmbedParams {
  const int32_t* codes = nullptr;  // [batch, frames, codebooks], each in [0, codebook_size)
  const float* tables = nullptr;   // [codebooks, codebook_size, dim]
  float* out = nullptr;            // [batch, dim, frames]
  int batch = 0, frames = 0, codebooks = 0, codebook_size = 0, dim = 0;
  LaunchOptions launch;
};
cudaError_t launch_codebook_embed(const CodebookEmbedParams& p);

enum class CodecActivation { None, Elu, Snake };

struct CodecPointwiseParams {
  const float* in = nullptr;  // [batch, channels, in_row] (in_row >= t_len)
  int64_t in_row = 0;
  const float* bias = nullptr;   // [channels] or null
  const float* alpha = nullptr;  // Snake: [channels]
  const float* beta = nullptr;   // Snake: [channels]
  const float* skip = nullptr;   // [batch, channels, t_len] or null
  float* out = nullptr;          // [batch, channels, t_len]; may be `skip`, not `in` when in_row
                                 // != t_len
  int batch = 0, channels = 0;
  int64_t t_len = 0;
  CodecActivation act = CodecActivation::None;
  LaunchOptions launch;
};
cudaError_t launch_codec_pointwise(const CodecPointwiseParams& p);

}  // namespace megaops
