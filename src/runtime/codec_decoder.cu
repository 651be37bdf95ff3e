// See codec_decoder.h.
#include <algorithm>

#include "core/cuda_check.h"
#include "core/cudnn_check.h"
#include "kernels/codec_pointwise.cuh"
#include "runtime/codec_decoder.h"

namespace megaops {

namespace {

void check_launch(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw DeviceError(std::string("codec: ") + what + ": " + cudaGetErrorString(err));
}

// Per op, the index of the last op that reads its output (-1: none; the last op's output is the
// result, read by the host).
std::vector<int> last_uses(const std::vector<CodecOp>& ops) {
  std::vector<int> last(ops.size(), -1);
  for (size_t i = 1; i < ops.size(); ++i) {
    last[i - 1] = std::max(last[i - 1], static_cast<int>(i));
    if (ops[i].skip >= 0) last[ops[i].skip] = std::max(last[ops[i].skip], static_cast<int>(i));
  }
  last.back() = static_cast<int>(ops.size());
  return last;
}

}  // namespace

CodecDecoderGpu::CodecDecoderGpu(const CodecConfig& c, uint64_t seed, int max_batch, int max_frames,
                                 bool fast_engines)
    : cfg_(c),
      ops_(codec_ops(c)),
      specs_(codec_weight_specs(c)),
      max_batch_(max_batch),
      max_frames_(max_frames),
      fast_engines_(fast_engines) {
  if (max_batch < 1 || max_frames < 1)
    throw_input_error("codec", "max_batch, max_frames", "expected >= 1");
  MEGAOPS_CUDNN_CHECK(cudnnCreate(&handle_));
  MEGAOPS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  for (size_t i = 0; i < specs_.size(); ++i) {
    size_t n = 1;
    for (int64_t d : specs_[i].shape) n *= static_cast<size_t>(d);
    std::vector<float> v(n);
    codec_weight_values(specs_[i], static_cast<uint32_t>(i), seed, 0, n, v.data());
    float* dev = mem_.alloc_array<float>(specs_[i].name, n);
    MEGAOPS_CUDA_CHECK(cudaMemcpy(dev, v.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    weights_.push_back(dev);
  }
  // Buffers: greedy reuse over the values' lifetimes; every buffer holds the largest value.
  const std::vector<int> last = last_uses(ops_);
  size_t largest = 0, widest = 1;
  std::vector<int> free_buffers;
  int count = 0;
  for (size_t i = 0; i < ops_.size(); ++i) {
    const CodecOp& op = ops_[i];
    const size_t t_out = static_cast<size_t>(max_frames) * op.rate_in * op.stride;
    largest = std::max(largest, static_cast<size_t>(max_batch) * op.out_channels * t_out);
    if (op.code == OpCode::Conv1d || op.code == OpCode::ConvTranspose1d) {
      const size_t t_in = static_cast<size_t>(max_frames) * op.rate_in;
      const size_t wide = op.code == OpCode::Conv1d
                              ? t_in + static_cast<size_t>(op.kernel - 1) * op.dilation
                              : (t_in - 1) * op.stride + op.kernel;
      widest = std::max(widest, static_cast<size_t>(max_batch) * op.out_channels * wide);
    }
    // Inputs dying here free their buffers first: pointwise ops run in place, and a conv's
    // epilogue reads the scratch, not its input.
    for (size_t j = 0; j < i; ++j)
      if (last[j] == static_cast<int>(i) && buffer_of_[j] >= 0)
        free_buffers.push_back(buffer_of_[j]);
    if (free_buffers.empty()) free_buffers.push_back(count++);
    buffer_of_.push_back(free_buffers.back());
    free_buffers.pop_back();
  }
  for (int b = 0; b < count; ++b)
    buffers_.push_back(mem_.alloc_array<float>("codec activations " + std::to_string(b), largest));
  scratch_ = mem_.alloc_array<float>("codec conv scratch", widest);
  codes_ = mem_.alloc_array<int32_t>("codec codes",
                                     static_cast<size_t>(max_batch) * max_frames * c.codebooks);
}

CodecDecoderGpu::~CodecDecoderGpu() {
  plans_.clear();
  if (workspace_) cudaFree(workspace_);
  if (stream_) cudaStreamDestroy(stream_);
  if (handle_) cudnnDestroy(handle_);
}

void CodecDecoderGpu::check_size(int batch, int frames) const {
  if (batch < 1 || batch > max_batch_)
    throw_input_error(
        "codec", "streams",
        "expected 1.." + std::to_string(max_batch_) + ", found " + std::to_string(batch));
  if (frames < 1 || frames > max_frames_)
    throw_input_error("codec", "frames",
                      "expected 1.." + std::to_string(max_frames_) +
                          " (the decoder's buffers), found " + std::to_string(frames));
}

const CudnnConv1d& CodecDecoderGpu::conv_plan(size_t i, int batch, int frames) {
  const auto key = std::make_tuple(i, batch, frames);
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  const CodecOp& op = ops_[i];
  Conv1dShape s;
  s.transposed = op.code == OpCode::ConvTranspose1d;
  s.batch = batch;
  s.in_channels = op.in_channels;
  s.out_channels = op.out_channels;
  s.t_in = int64_t{frames} * op.rate_in;
  s.kernel = op.kernel;
  s.stride = op.stride;
  s.dilation = op.dilation;
  auto plan = std::make_unique<CudnnConv1d>(handle_, s, fast_engines_);
  if (plan->workspace_bytes() > workspace_bytes_) {
    MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (workspace_) MEGAOPS_CUDA_CHECK(cudaFree(workspace_));
    workspace_ = nullptr;
    MEGAOPS_CUDA_CHECK(cudaMalloc(&workspace_, plan->workspace_bytes()));
    workspace_bytes_ = plan->workspace_bytes();
  }
  return *plans_.emplace(key, std::move(plan)).first->second;
}

bool CodecDecoderGpu::any_fast_engine() const {
  for (const auto& [key, plan] : plans_)
    if (plan->fast_engine()) return true;
  return false;
}

void CodecDecoderGpu::run(int batch, int frames, const std::vector<cudaEvent_t>* marks) {
  for (size_t i = 0; i < ops_.size(); ++i) {
    const CodecOp& op = ops_[i];
    float* out = buffers_[buffer_of_[i]];
    const float* in = i > 0 ? buffers_[buffer_of_[i - 1]] : nullptr;
    const int64_t t_in = int64_t{frames} * op.rate_in, t_out = t_in * op.stride;
    CodecPointwiseParams pw;
    pw.batch = batch;
    pw.channels = op.out_channels;
    pw.t_len = t_out;
    pw.in = in;
    pw.in_row = t_out;
    pw.out = out;
    pw.launch.stream = stream_;
    switch (op.code) {
      case OpCode::CodebookEmbed: {
        CodebookEmbedParams e;
        e.codes = codes_;
        e.tables = weights_[op.weight];
        e.out = out;
        e.batch = batch;
        e.frames = frames;
        e.codebooks = cfg_.codebooks;
        e.codebook_size = cfg_.codebook_size;
        e.dim = cfg_.codebook_dim;
        e.launch.stream = stream_;
        check_launch(launch_codebook_embed(e), "codebook_embed");
        break;
      }
      case OpCode::Conv1d:
      case OpCode::ConvTranspose1d: {
        const CudnnConv1d& plan = conv_plan(i, batch, frames);
        plan.run(in, weights_[op.weight], scratch_, workspace_, stream_);
        pw.in = scratch_;
        pw.in_row = plan.shape().out_len();
        pw.bias = weights_[op.weight + 1];
        check_launch(launch_codec_pointwise(pw), "conv bias");
        break;
      }
      case OpCode::Elu:
        pw.act = CodecActivation::Elu;
        check_launch(launch_codec_pointwise(pw), "elu");
        break;
      case OpCode::Snake:
        pw.act = CodecActivation::Snake;
        pw.alpha = weights_[op.weight];
        pw.beta = weights_[op.weight + 1];
        check_launch(launch_codec_pointwise(pw), "snake");
        break;
      case OpCode::ResidualAdd:
        pw.skip = buffers_[buffer_of_[op.skip]];
        check_launch(launch_codec_pointwise(pw), "residual add");
        break;
      default:
        throw DeviceError(std::string("codec: unexpected op ") + op_code_name(op.code));
    }
    if (marks) MEGAOPS_CUDA_CHECK(cudaEventRecord((*marks)[i + 1], stream_));
  }
}

StreamSamples CodecDecoderGpu::decode(const StreamCodes& codes, int frames, int skip_frames) {
  const int batch = static_cast<int>(codes.size());
  check_size(batch, frames);
  if (skip_frames < 0 || skip_frames >= frames)
    throw_input_error("codec", "skip_frames", "expected 0.." + std::to_string(frames - 1));
  const size_t per = static_cast<size_t>(frames) * cfg_.codebooks;
  std::vector<int32_t> flat;
  flat.reserve(per * batch);
  for (const std::vector<int32_t>& s : codes) {
    if (s.size() != per)
      throw_input_error(
          "codec", "codes",
          "expected " + std::to_string(per) + " a stream, found " + std::to_string(s.size()));
    for (int32_t v : s)
      if (v < 0 || v >= cfg_.codebook_size)
        throw_input_error("codec", "codes",
                          "expected 0.." + std::to_string(cfg_.codebook_size - 1) + ", found " +
                              std::to_string(v));
    flat.insert(flat.end(), s.begin(), s.end());
  }
  MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(codes_, flat.data(), flat.size() * sizeof(int32_t),
                                     cudaMemcpyHostToDevice, stream_));
  run(batch, frames, nullptr);
  const int hop = codec_hop(cfg_);
  const size_t t_len = static_cast<size_t>(frames) * hop,
               skip = static_cast<size_t>(skip_frames) * hop;
  host_out_.resize(t_len * batch);
  MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(host_out_.data(), buffers_[buffer_of_.back()],
                                     host_out_.size() * sizeof(float), cudaMemcpyDeviceToHost,
                                     stream_));
  MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  StreamSamples out(batch);
  for (int b = 0; b < batch; ++b)
    out[b].assign(host_out_.begin() + b * t_len + skip, host_out_.begin() + (b + 1) * t_len);
  return out;
}

std::vector<double> CodecDecoderGpu::time_ops(int batch, int frames, int repeats) {
  check_size(batch, frames);
  if (repeats < 1) throw_input_error("codec", "repeats", "expected >= 1");
  std::vector<int32_t> flat(static_cast<size_t>(batch) * frames * cfg_.codebooks);
  for (size_t i = 0; i < flat.size(); ++i)
    flat[i] = static_cast<int32_t>((i * 2654435761u) % static_cast<size_t>(cfg_.codebook_size));
  MEGAOPS_CUDA_CHECK(
      cudaMemcpy(codes_, flat.data(), flat.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  std::vector<cudaEvent_t> marks(ops_.size() + 1);
  for (cudaEvent_t& e : marks) MEGAOPS_CUDA_CHECK(cudaEventCreate(&e));
  std::vector<std::vector<double>> samples(ops_.size());
  for (int r = 0; r <= repeats; ++r) {
    MEGAOPS_CUDA_CHECK(cudaEventRecord(marks[0], stream_));
    run(batch, frames, &marks);
    MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (r == 0) continue;  // warm-up: plans built, caches cold
    for (size_t i = 0; i < ops_.size(); ++i) {
      float ms = 0;
      MEGAOPS_CUDA_CHECK(cudaEventElapsedTime(&ms, marks[i], marks[i + 1]));
      samples[i].push_back(1000.0 * ms);
    }
  }
  for (cudaEvent_t e : marks) cudaEventDestroy(e);
  std::vector<double> out;
  for (std::vector<double>& s : samples) {
    std::sort(s.begin(), s.end());
    out.push_back(s[s.size() / 2]);
  }
  return out;
}

}  // namespace megaops
