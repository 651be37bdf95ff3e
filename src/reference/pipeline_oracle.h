// The CPU oracle of a streaming pipeline (graph/pipeline.h): the producer and the local
// transformer as fp32 decoders (reference/model.h) and the codec decoder from the ops of
// reference/codec_ops.h, with the deterministic random weights the GPU stages use. The oracle for
// tests and `megaops stream --cpu`, never a product path.
//
// Seeds: the producer's weights are random_weight_values(seed), the local transformer's
// (seed + 1), the codec's codec_weight_values(seed + 2).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/pipeline.h"
#include "pipeline/stream.h"
#include "reference/model.h"

namespace megaops::ref {

// The deterministic random fp32 weights of `cfg` for `seed` (random_weight_values: the same
// values the GPU executors' random_filler(seed) uploads).
Weights random_weights(const ModelConfig& cfg, uint64_t seed);

// One op's output as the codec ran it (codec_ops order): [channels, t_len] of one stream.
using CodecObserver = std::function<void(int op, const CodecOp&, const std::vector<float>& out)>;

// The codec decoder with random weights for `seed`.
class CodecDecoder {
 public:
  CodecDecoder(const CodecConfig& c, uint64_t seed);

  // Decodes `frames` frames of one stream, codes [frame * codebooks + q]: frames * hop samples.
  // Throws InputError on a code outside the codebook.
  std::vector<float> decode(const std::vector<int32_t>& codes, int frames,
                            const CodecObserver& observer = {}) const;

  const CodecConfig& config() const { return cfg_; }
  const std::vector<float>& weight(const std::string& name) const;

 private:
  CodecConfig cfg_;
  std::vector<CodecOp> ops_;
  std::vector<WeightSpec> specs_;
  std::unordered_map<std::string, std::vector<float>> weights_;
};

// Every stage on the CPU, for up to `batch` streams.
class PipelineOracle : public PipelineStages {
 public:
  PipelineOracle(const PipelineConfig& p, uint64_t seed, int batch);

  std::vector<int> producer_prefill(const std::vector<std::vector<int>>& prompts) override;
  std::vector<int> producer_step() override;
  StreamCodes local_frame(const std::vector<int>& code0) override;
  StreamSamples codec_window(const StreamCodes& codes, int frames, int skip_frames) override;
  std::string backend() const override { return "cpu oracle, fp32"; }

  const CodecDecoder& codec() const { return codec_; }

 private:
  PipelineConfig p_;
  int batch_;
  Weights producer_w_, local_w_;
  CodecDecoder codec_;
  std::vector<std::unique_ptr<Model>> producers_;  // one KV cache per stream
  std::unique_ptr<Model> local_;                   // reset for every frame of every stream
  std::vector<int> last_;                          // each stream's last codebook-0 code
};

}  // namespace megaops::ref
