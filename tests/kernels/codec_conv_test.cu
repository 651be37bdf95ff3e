// The codec decoder's GPU ops against their CPU oracles (reference/codec_ops.h), on fresh random
// inputs with poisoned outputs and awkward sizes: the cuDNN convolution and transposed
// convolution (kernels/conv1d_cudnn.cuh) followed by the bias / trim epilogue, the residual VQ
// decode and the pointwise kernel (ELU, Snake, residual add). Tolerances (DESIGN.md): fp32 engines
// <= 1e-5 relative; fast engines (TF32 tensor cores, 10-bit mantissa inputs; FFT; Winograd)
// <= 5e-3 relative.
#include <cudnn.h>
#include <gtest/gtest.h>

#include <random>

#include "core/cudnn_check.h"
#include "gpu_test_util.h"
#include "kernels/codec_pointwise.cuh"
#include "kernels/conv1d_cudnn.cuh"
#include "reference/codec_ops.h"
#include "reference/ops.h"

namespace megaops {
namespace {

using testing::DeviceBuffer;
using testing::random_floats;
using testing::rel_error;

struct Handle {
  cudnnHandle_t h = nullptr;
  Handle() { MEGAOPS_CUDNN_CHECK(cudnnCreate(&h)); }
  ~Handle() { cudnnDestroy(h); }
};

// Runs the conv on the GPU (wide output, then the bias epilogue) and on the CPU; returns the
// relative error over every stream.
double conv_error(const Conv1dShape& s, bool fast, std::mt19937_64& rng) {
  Handle handle;
  const CudnnConv1d conv(handle.h, s, fast);
  if (!fast) EXPECT_FALSE(conv.fast_engine());
  const int cin = s.in_channels, cout = s.out_channels;
  const auto x = random_floats(static_cast<size_t>(s.batch) * cin * s.t_in, -1, 1, rng);
  const auto w = random_floats(static_cast<size_t>(cin) * cout * s.kernel, -0.3f, 0.3f, rng);
  const auto b = random_floats(cout, -0.5f, 0.5f, rng);
  DeviceBuffer<float> dx(x.size()), dw(w.size()), db(b.size());
  DeviceBuffer<float> wide(static_cast<size_t>(s.batch) * cout * s.out_len());
  DeviceBuffer<float> out(static_cast<size_t>(s.batch) * cout * s.causal_len());
  DeviceBuffer<uint8_t> ws(std::max<size_t>(conv.workspace_bytes(), 1));
  dx.upload(x);
  dw.upload(w);
  db.upload(b);
  wide.poison();
  out.poison();
  conv.run(dx.ptr, dw.ptr, wide.ptr, ws.ptr, nullptr);
  CodecPointwiseParams p;
  p.in = wide.ptr;
  p.in_row = s.out_len();
  p.bias = db.ptr;
  p.out = out.ptr;
  p.batch = s.batch;
  p.channels = cout;
  p.t_len = s.causal_len();
  EXPECT_EQ(launch_codec_pointwise(p), cudaSuccess);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<float> got = out.download();
  std::vector<float> want(got.size());
  for (int n = 0; n < s.batch; ++n) {
    const float* xi = x.data() + static_cast<size_t>(n) * cin * s.t_in;
    float* yi = want.data() + static_cast<size_t>(n) * cout * s.causal_len();
    if (s.transposed)
      ref::conv_transpose1d(xi, w.data(), b.data(), yi, cin, cout, s.t_in, s.kernel, s.stride);
    else
      ref::conv1d(xi, w.data(), b.data(), yi, cin, cout, s.t_in, s.kernel, s.dilation);
  }
  return rel_error(got.data(), want.data(), want.size());
}

std::vector<Conv1dShape> shapes() {
  std::vector<Conv1dShape> out;
  for (auto [tr, batch, cin, cout, t, k, st, d] : {std::tuple{false, 3, 5, 7, 37, 3, 1, 1},
                                                   {false, 2, 16, 8, 111, 7, 1, 3},
                                                   {false, 1, 64, 1, 500, 3, 1, 1},
                                                   {false, 4, 32, 32, 9, 1, 1, 1},
                                                   {true, 3, 6, 5, 13, 4, 2, 1},
                                                   {true, 2, 32, 16, 11, 16, 8, 1},
                                                   {true, 1, 8, 3, 7, 10, 5, 1},
                                                   {true, 5, 16, 16, 3, 2, 2, 1}}) {
    Conv1dShape s;
    s.transposed = tr;
    s.batch = batch;
    s.in_channels = cin;
    s.out_channels = cout;
    s.t_in = t;
    s.kernel = k;
    s.stride = st;
    s.dilation = d;
    out.push_back(s);
  }
  return out;
}

TEST(CodecConv, Fp32MatchesOracle) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed());
  for (const Conv1dShape& s : shapes())
    EXPECT_LE(conv_error(s, false, rng), 1e-5)
        << (s.transposed ? "transposed " : "") << s.in_channels << "->" << s.out_channels << " t "
        << s.t_in << " k " << s.kernel << " stride " << s.stride << " dil " << s.dilation;
}

TEST(CodecConv, FastEnginesMatchOracle) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 1);
  for (const Conv1dShape& s : shapes())
    EXPECT_LE(conv_error(s, true, rng), 5e-3)
        << (s.transposed ? "transposed " : "") << s.in_channels << "->" << s.out_channels;
}

TEST(CodecConv, RejectsBadShapes) {
  MEGAOPS_REQUIRE_GPU();
  Handle handle;
  Conv1dShape s;
  s.transposed = true;
  s.kernel = 2;
  s.stride = 4;  // kernel < stride: output samples uncovered
  EXPECT_THROW(CudnnConv1d(handle.h, s, true), DeviceError);
  s = Conv1dShape{};
  s.t_in = 0;
  EXPECT_THROW(CudnnConv1d(handle.h, s, true), DeviceError);
}

TEST(CodecPointwise, EmbedAndActivationsMatchOracle) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 2);
  const int batch = 3, frames = 13, q = 4, c = 37, dim = 19;
  const auto tables = random_floats(static_cast<size_t>(q) * c * dim, -1, 1, rng);
  std::vector<int32_t> codes(static_cast<size_t>(batch) * frames * q);
  std::uniform_int_distribution<int> pick(0, c - 1);
  for (int32_t& v : codes) v = pick(rng);
  DeviceBuffer<float> dt(tables.size()), emb(static_cast<size_t>(batch) * dim * frames);
  DeviceBuffer<int32_t> dc(codes.size());
  dt.upload(tables);
  dc.upload(codes);
  emb.poison();
  CodebookEmbedParams e{dc.ptr, dt.ptr, emb.ptr, batch, frames, q, c, dim, {}};
  ASSERT_EQ(launch_codebook_embed(e), cudaSuccess);
  std::vector<float> want(emb.n);
  for (int b = 0; b < batch; ++b)
    ref::codebook_embed(codes.data() + static_cast<size_t>(b) * frames * q, tables.data(),
                        want.data() + static_cast<size_t>(b) * dim * frames, frames, q, c, dim);
  std::vector<float> got = emb.download();
  EXPECT_LE(rel_error(got.data(), want.data(), want.size()), 1e-6);

  // ELU, Snake and a residual add over [batch, dim, frames], from `emb` (still on the device).
  const auto alpha = random_floats(dim, 0.5f, 1.5f, rng),
             beta = random_floats(dim, 0.5f, 1.5f, rng);
  const auto skip = random_floats(emb.n, -1, 1, rng);
  DeviceBuffer<float> da(dim), dbeta(dim), dskip(emb.n), out(emb.n);
  da.upload(alpha);
  dbeta.upload(beta);
  dskip.upload(skip);
  for (CodecActivation act :
       {CodecActivation::Elu, CodecActivation::Snake, CodecActivation::None}) {
    out.poison();
    CodecPointwiseParams p;
    p.in = emb.ptr;
    p.in_row = frames;
    p.alpha = da.ptr;
    p.beta = dbeta.ptr;
    p.skip = act == CodecActivation::None ? dskip.ptr : nullptr;
    p.out = out.ptr;
    p.batch = batch;
    p.channels = dim;
    p.t_len = frames;
    p.act = act;
    ASSERT_EQ(launch_codec_pointwise(p), cudaSuccess);
    std::vector<float> ref_out(emb.n);
    for (int b = 0; b < batch; ++b) {
      const size_t off = static_cast<size_t>(b) * dim * frames;
      if (act == CodecActivation::Elu)
        ref::elu(want.data() + off, ref_out.data() + off, static_cast<size_t>(dim) * frames);
      else if (act == CodecActivation::Snake)
        ref::snake(want.data() + off, alpha.data(), beta.data(), ref_out.data() + off, dim, frames);
      else
        ref::add(want.data() + off, skip.data() + off, ref_out.data() + off,
                 static_cast<size_t>(dim) * frames);
    }
    got = out.download();
    EXPECT_LE(rel_error(got.data(), ref_out.data(), ref_out.size()), 1e-5) << static_cast<int>(act);
  }
  CodecPointwiseParams bad;
  EXPECT_EQ(launch_codec_pointwise(bad), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace megaops
