// See pipeline_oracle.h.
#include "reference/pipeline_oracle.h"

#include "core/error.h"
#include "reference/codec_ops.h"
#include "reference/ops.h"

namespace megaops::ref {

Weights random_weights(const ModelConfig& cfg, uint64_t seed) {
  Weights w;
  w.cfg = cfg;
  const std::vector<WeightSpec> specs = expected_weights(cfg);
  for (size_t i = 0; i < specs.size(); ++i) {
    size_t n = 1;
    for (int64_t d : specs[i].shape) n *= static_cast<size_t>(d);
    std::vector<float> v(n);
    random_weight_values(specs[i], static_cast<uint32_t>(i), seed, 0, n, v.data());
    w.tensors.emplace(specs[i].name, std::move(v));
  }
  return w;
}

CodecDecoder::CodecDecoder(const CodecConfig& c, uint64_t seed)
    : cfg_(c), ops_(codec_ops(c)), specs_(codec_weight_specs(c)) {
  for (size_t i = 0; i < specs_.size(); ++i) {
    size_t n = 1;
    for (int64_t d : specs_[i].shape) n *= static_cast<size_t>(d);
    std::vector<float> v(n);
    codec_weight_values(specs_[i], static_cast<uint32_t>(i), seed, 0, n, v.data());
    weights_.emplace(specs_[i].name, std::move(v));
  }
}

const std::vector<float>& CodecDecoder::weight(const std::string& name) const {
  auto it = weights_.find(name);
  if (it == weights_.end()) throw InputError("codec weight '" + name + "' does not exist");
  return it->second;
}

std::vector<float> CodecDecoder::decode(const std::vector<int32_t>& codes, int frames,
                                        const CodecObserver& observer) const {
  const int q = cfg_.codebooks;
  if (frames < 1 || codes.size() != static_cast<size_t>(frames) * q)
    throw_input_error("codec", "codes",
                      "expected " + std::to_string(frames) + " frames x " + std::to_string(q) +
                          " codebooks, found " + std::to_string(codes.size()) + " codes");
  for (int32_t c : codes)
    if (c < 0 || c >= cfg_.codebook_size)
      throw_input_error("codec", "codes",
                        "expected codes in 0.." + std::to_string(cfg_.codebook_size - 1) +
                            ", found " + std::to_string(c));
  std::vector<std::vector<float>> out(ops_.size());
  for (size_t i = 0; i < ops_.size(); ++i) {
    const CodecOp& op = ops_[i];
    const int t_in = frames * op.rate_in, t_out = t_in * op.stride;
    out[i].assign(static_cast<size_t>(op.out_channels) * t_out, 0.0f);
    const float* x = i > 0 ? out[i - 1].data() : nullptr;
    float* y = out[i].data();
    const std::string w = op.weight >= 0 ? specs_[op.weight].name : "";
    switch (op.code) {
      case OpCode::CodebookEmbed:
        codebook_embed(codes.data(), weight("codec.codebooks").data(), y, frames, q,
                       cfg_.codebook_size, cfg_.codebook_dim);
        break;
      case OpCode::Conv1d:
        conv1d(x, weight(w).data(), weight(specs_[op.weight + 1].name).data(), y, op.in_channels,
               op.out_channels, t_in, op.kernel, op.dilation);
        break;
      case OpCode::ConvTranspose1d:
        conv_transpose1d(x, weight(w).data(), weight(specs_[op.weight + 1].name).data(), y,
                         op.in_channels, op.out_channels, t_in, op.kernel, op.stride);
        break;
      case OpCode::Elu:
        elu(x, y, out[i].size());
        break;
      case OpCode::Snake:
        snake(x, weight(w).data(), weight(specs_[op.weight + 1].name).data(), y, op.in_channels,
              t_in);
        break;
      case OpCode::ResidualAdd:
        add(x, out.at(op.skip).data(), y, out[i].size());
        break;
      default:
        throw Error(std::string("codec: unexpected op ") + op_code_name(op.code));
    }
    if (observer) observer(static_cast<int>(i), op, out[i]);
    // Free what no later op reads (a residual add reads its block's input).
    if (i > 0) {
      bool needed = false;
      for (size_t j = i + 1; j < ops_.size(); ++j) needed = needed || ops_[j].skip == int(i) - 1;
      if (!needed) std::vector<float>().swap(out[i - 1]);
    }
  }
  return out.back();
}

PipelineOracle::PipelineOracle(const PipelineConfig& p, uint64_t seed, int batch)
    : p_(p),
      batch_(batch),
      producer_w_(random_weights(p.producer, seed)),
      local_w_(random_weights(p.local.model, seed + 1)),
      codec_(p.codec, seed + 2) {
  if (batch < 1 || batch > 64)
    throw_input_error("stream", "batch", "expected 1..64, found " + std::to_string(batch));
  local_ = std::make_unique<Model>(local_w_, p.local.codebooks);
}

std::vector<int> PipelineOracle::producer_prefill(const std::vector<std::vector<int>>& prompts) {
  if (prompts.empty() || static_cast<int>(prompts.size()) > batch_)
    throw_input_error(
        "stream", "prompts",
        "expected 1.." + std::to_string(batch_) + ", found " + std::to_string(prompts.size()));
  producers_.clear();
  last_.clear();
  const int vocab = p_.producer.vocab_size;
  const int positions = p_.schedule.prompt_tokens + p_.schedule.stream_frames;
  for (const std::vector<int>& prompt : prompts) {
    producers_.push_back(std::make_unique<Model>(producer_w_, positions));
    const std::vector<float> logits = producers_.back()->forward(prompt);
    last_.push_back(argmax(logits.data() + logits.size() - vocab, vocab));
  }
  return last_;
}

std::vector<int> PipelineOracle::producer_step() {
  if (producers_.empty()) throw Error("stream: producer_step before producer_prefill");
  const int vocab = p_.producer.vocab_size;
  for (size_t b = 0; b < producers_.size(); ++b) {
    const std::vector<float> logits = producers_[b]->forward({last_[b]});
    last_[b] = argmax(logits.data(), vocab);
  }
  return last_;
}

StreamCodes PipelineOracle::local_frame(const std::vector<int>& code0) {
  const int q = p_.local.codebooks, c = p_.local.codebook_size;
  StreamCodes out(code0.size());
  for (size_t b = 0; b < code0.size(); ++b) {
    local_->reset();
    out[b].push_back(code0[b]);
    int token = code0[b];  // codebook 0's rows of the embedding table
    for (int k = 1; k < q; ++k) {
      const std::vector<float> logits = local_->forward({token});
      const int code = codebook_argmax(logits.data(), k, c);
      out[b].push_back(code);
      token = k * c + code;  // codebook k's rows
    }
  }
  return out;
}

StreamSamples PipelineOracle::codec_window(const StreamCodes& codes, int frames, int skip_frames) {
  const int hop = codec_hop(p_.codec);
  StreamSamples out;
  for (const std::vector<int32_t>& s : codes) {
    std::vector<float> all = codec_.decode(s, frames);
    out.emplace_back(all.begin() + static_cast<size_t>(skip_frames) * hop, all.end());
  }
  return out;
}

}  // namespace megaops::ref
