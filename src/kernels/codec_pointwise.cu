// See codec_pointwise.cuh. Both kernels are grid-stride loops over their outputs; the embedding
// has one thread per (stream, dim, frame) summing its codebooks in order (the oracle's order).
#include <algorithm>

#include "kernels/codec_pointwise.cuh"

namespace megaops {
namespace {

constexpr int THREADS = 256;
constexpr int64_t MAX_BLOCKS = 8192;

__global__ void codebook_embed_kernel(CodebookEmbedParams p) {
  const int64_t total = int64_t{p.batch} * p.dim * p.frames;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i % p.frames, d = (i / p.frames) % p.dim, b = i / (int64_t{p.frames} * p.dim);
    const int32_t* codes = p.codes + (b * p.frames + t) * p.codebooks;
    float acc = 0.0f;
    for (int q = 0; q < p.codebooks; ++q)
      acc += p.tables[(int64_t{q} * p.codebook_size + codes[q]) * p.dim + d];
    p.out[i] = acc;
  }
}

__global__ void codec_pointwise_kernel(CodecPointwiseParams p) {
  const int64_t total = int64_t{p.batch} * p.channels * p.t_len;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i % p.t_len, row = i / p.t_len, c = row % p.channels;
    float x = p.in[row * p.in_row + t];
    if (p.bias) x += p.bias[c];
    if (p.act == CodecActivation::Elu) {
      x = x > 0.0f ? x : expm1f(x);
    } else if (p.act == CodecActivation::Snake) {
      const float s = sinf(p.alpha[c] * x);
      x = x + s * s / p.beta[c];
    }
    if (p.skip) x += p.skip[i];
    p.out[i] = x;
  }
}

unsigned blocks_for(int64_t total) {
  return static_cast<unsigned>(std::clamp<int64_t>((total + THREADS - 1) / THREADS, 1, MAX_BLOCKS));
}

}  // namespace

cudaError_t launch_codebook_embed(const CodebookEmbedParams& p) {
  if (!p.codes || !p.tables || !p.out || p.batch < 1 || p.frames < 1 || p.codebooks < 1 ||
      p.codebook_size < 1 || p.dim < 1)
    return cudaErrorInvalidValue;
  return launch_kernel(codebook_embed_kernel, dim3(blocks_for(int64_t{p.batch} * p.dim * p.frames)),
                       dim3(THREADS), 0, p.launch, p);
}

cudaError_t launch_codec_pointwise(const CodecPointwiseParams& p) {
  if (!p.in || !p.out || p.batch < 1 || p.channels < 1 || p.t_len < 1 || p.in_row < p.t_len ||
      (p.act == CodecActivation::Snake && (!p.alpha || !p.beta)) ||
      (p.in == p.out && p.in_row != p.t_len))
    return cudaErrorInvalidValue;
  return launch_kernel(codec_pointwise_kernel,
                       dim3(blocks_for(int64_t{p.batch} * p.channels * p.t_len)), dim3(THREADS), 0,
                       p.launch, p);
}

}  // namespace megaops
