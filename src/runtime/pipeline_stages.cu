// See pipeline_stages.h.
#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "runtime/codec_decoder.h"
#include "runtime/executor.h"
#include "runtime/pipeline_stages.h"
#include "runtime/plan_options.h"

namespace megaops {

namespace {

// Codebook q's code from every codebook's logits of one row: the argmax of its slice, the lowest
// index winning ties and NaN never winning (ref::codebook_argmax).
int slice_argmax(const float* logits, int q, int c) {
  const float* s = logits + static_cast<size_t>(q) * c;
  int best = -1;
  for (int i = 0; i < c; ++i)
    if (s[i] == s[i] && (best < 0 || s[i] > s[best])) best = i;
  return best < 0 ? 0 : best;
}

// The decode plan's backend and PDL on an executor built for the chain (see GpuPipeline).
void switch_plan(Executor& ex, const Plan& plan, const char* stage) {
  const PlanDecode& d = plan.decode;
  if (d.backend == PlanBackend::Overlap || !d.regions.empty())
    throw_input_error(
        "stream", std::string(stage) + " plan",
        "expected conventional (PDL off or on) or the PDL chain, found " + describe(plan));
  if (d.backend == PlanBackend::PdlChain) {
    ex.set_backend(DecodeBackend::Overlap);
    ex.set_pdl(false);
  } else {
    ex.set_backend(DecodeBackend::Conventional);
    ex.set_pdl(d.pdl);
  }
}

// Executor options that run the chain when the backend is switched to overlap.
ExecutorOptions chain_capable(const ExecutorOptions& base) {
  Plan chain;
  chain.decode.backend = PlanBackend::PdlChain;
  chain.decode.overlap_streams = 1;
  ExecutorOptions eo = base;
  apply_plan(chain, eo);
  eo.backend = DecodeBackend::Conventional;
  eo.pdl = false;
  return eo;
}

class GpuPipelineStages : public GpuPipeline {
 public:
  GpuPipelineStages(const PipelineConfig& p, const GpuPipelineOptions& o) : p_(p) {
    if (!o.step_graph) throw_input_error("stream", "step_graph", "expected the step graph builder");
    if (o.max_batch < 1 || o.max_batch > 64)
      throw_input_error("stream", "batch", "expected 1..64, found " + std::to_string(o.max_batch));
    ExecutorOptions base;
    base.step_graph = o.step_graph;
    base.max_batch = o.max_batch;
    ExecutorOptions po = chain_capable(base);
    po.max_seq = p.schedule.prompt_tokens + p.schedule.stream_frames;
    po.prefill_chunk = std::min(po.prefill_chunk, o.max_batch * po.max_seq);
    producer_ = make_executor(p.producer, random_filler(o.seed), po);
    ExecutorOptions lo = chain_capable(base);
    lo.max_seq = p.local.codebooks;
    lo.prefill_chunk = std::min(lo.prefill_chunk, o.max_batch * lo.max_seq);
    local_ = make_executor(p.local.model, random_filler(o.seed + 1), lo);
    const int frames = o.codec_max_frames > 0 ? o.codec_max_frames : p.codec.context_frames;
    codec_ = std::make_unique<CodecDecoderGpu>(p.codec, o.seed + 2, o.max_batch, frames,
                                               o.codec_fast_engines);
    codec_label_ = std::string("codec cudnn fp32") +
                   (o.codec_fast_engines ? " (fast engines allowed)" : " (exact engines)");
    set_plans(o.producer_plan, o.local_plan);
  }

  void set_plans(const Plan& producer, const Plan& local) override {
    switch_plan(*producer_, producer, "producer");
    switch_plan(*local_, local, "local transformer");
    producer_plan_ = producer;
    local_plan_ = local;
    label_ =
        "cuda: producer " + describe(producer) + ", local " + describe(local) + ", " + codec_label_;
  }

  StageProfile profile_stage(bool producer, int context, int steps) override {
    Executor& ex = producer ? *producer_ : *local_;
    const ModelConfig& cfg = producer ? p_.producer : p_.local.model;
    const int max_seq = ex.options().max_seq;
    if (context < 1 || steps < 1 || context + steps > max_seq)
      throw_input_error(
          "stream", "profile",
          "expected context >= 1, steps >= 1 and context + steps <= " + std::to_string(max_seq) +
              ", found " + std::to_string(context) + " + " + std::to_string(steps));
    std::vector<std::vector<int>> prompts(ex.options().max_batch);
    for (size_t b = 0; b < prompts.size(); ++b)
      for (int i = 0; i < context; ++i)
        prompts[b].push_back(static_cast<int>((b * 7919 + i * 104729) % cfg.vocab_size));
    StageProfile out;
    ex.prefill(prompts);
    ex.profile_decode_steps(steps);  // warm-up: first replays pay for cold caches
    ex.prefill(prompts);
    out.ops = ex.profile_decode_steps(steps);
    // The conventional step without events, PDL off (the profile's definition), then the plans
    // of set_plans again.
    Plan conventional;
    switch_plan(ex, conventional, "profile");
    ex.prefill(prompts);
    ex.decode_steps(1, {});  // warm-up: the capture
    ex.prefill(prompts);
    const auto t0 = std::chrono::steady_clock::now();
    ex.decode_steps(steps, {});
    out.graph_step_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        steps;
    set_plans(producer_plan_, local_plan_);
    return out;
  }

  std::vector<int> producer_prefill(const std::vector<std::vector<int>>& prompts) override {
    return producer_->prefill(prompts);
  }

  std::vector<int> producer_step() override { return producer_->decode_step(); }

  StreamCodes local_frame(const std::vector<int>& code0) override {
    const int n = static_cast<int>(code0.size()), q = p_.local.codebooks,
              c = p_.local.codebook_size, vocab = p_.local.model.vocab_size;
    StreamCodes out(n);
    std::vector<std::vector<int>> first(n);
    for (int b = 0; b < n; ++b) {
      out[b].push_back(code0[b]);
      first[b] = {code0[b]};  // codebook 0's rows of the embedding table
    }
    local_->prefill(first);
    std::vector<int> forced(n);
    for (int k = 1; k < q; ++k) {
      const std::vector<float> logits = local_->last_logits();
      if (logits.size() != static_cast<size_t>(n) * vocab)
        throw DeviceError("stream: the local transformer gave " + std::to_string(logits.size()) +
                          " logits for " + std::to_string(n) + " rows");
      for (int b = 0; b < n; ++b) {
        const int code = slice_argmax(logits.data() + static_cast<size_t>(b) * vocab, k, c);
        out[b].push_back(code);
        forced[b] = k * c + code;  // codebook k's rows
      }
      if (k + 1 < q) local_->decode_step(&forced);
    }
    return out;
  }

  StreamSamples codec_window(const StreamCodes& codes, int frames, int skip_frames) override {
    return codec_->decode(codes, frames, skip_frames);
  }

  std::string backend() const override { return label_; }

 private:
  PipelineConfig p_;
  std::unique_ptr<Executor> producer_, local_;
  std::unique_ptr<CodecDecoderGpu> codec_;
  std::string label_, codec_label_;
  Plan producer_plan_, local_plan_;
};

}  // namespace

std::unique_ptr<GpuPipeline> make_gpu_pipeline_stages(const PipelineConfig& p,
                                                      const GpuPipelineOptions& o) {
  return std::make_unique<GpuPipelineStages>(p, o);
}

std::vector<double> time_codec_ops(const PipelineConfig& p, int batch, int frames, uint64_t seed,
                                   int repeats, bool fast_engines) {
  CodecDecoderGpu codec(p.codec, seed, batch, frames, fast_engines);
  return codec.time_ops(batch, frames, repeats);
}

}  // namespace megaops
