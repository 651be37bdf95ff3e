// The executor facade (runtime/conventional.h): the public API over the shared core
// (runtime/executor_core.h) — prefill, decode steps with the host one step behind, the runtime
// switches — and the random weight filler. Which backend records a decode step is the core's
// (graph_cache.cu's graph_for, enqueue_step below).
#include <algorithm>
#include <utility>

#include "core/parallel.h"
#include "core/tokens.h"
#include "runtime/conventional.h"
#include "runtime/executor_core.h"
#include "runtime/overlap.h"
#include "runtime/tp.h"

namespace megaops {

WeightFiller random_filler(uint64_t seed) {
  return [seed](const WeightSpec& spec, size_t index, float* out) {
    size_t numel = 1;
    for (int64_t d : spec.shape) numel *= static_cast<size_t>(d);
    parallel_for(numel, 1 << 20, [&](size_t b, size_t e) {
      random_weight_values(spec, static_cast<uint32_t>(index), seed, b, e - b, out + b);
    });
  };
}

ConventionalExecutor::ConventionalExecutor(const ModelConfig& cfg, const WeightFiller& weights,
                                           ExecutorOptions opt,
                                           const std::function<void(size_t, size_t)>& progress)
    : impl_(std::make_unique<ExecutorCore>()) {
  // Set up in a member function, not ExecutorCore's constructor: when it throws part-way, impl_
  // is complete and ~ExecutorCore frees what was made so far.
  impl_->setup(cfg, weights, opt, progress);
}

ConventionalExecutor::~ConventionalExecutor() = default;

const ModelConfig& ConventionalExecutor::config() const {
  return impl_->full_cfg;
}
const ExecutorOptions& ConventionalExecutor::options() const {
  return impl_->opt;
}
cudaStream_t ConventionalExecutor::stream() const {
  return impl_->stream;
}
const std::string& ConventionalExecutor::device_name() const {
  return impl_->device_name;
}
size_t ConventionalExecutor::weight_bytes() const {
  return impl_->weight_bytes;
}
void ConventionalExecutor::set_pdl(bool pdl) {
  impl_->opt.pdl = pdl;
}
void ConventionalExecutor::set_prefill_path(PrefillPath path) {
  if (path == PrefillPath::DecodeGraph && impl_->comm != nullptr)
    throw_input_error("executor", "prefill_path",
                      "the decode-graph prefill does not run with tensor parallelism yet");
  impl_->opt.prefill_path = path;
}
void ConventionalExecutor::set_prefill_attention(PrefillAttention attention) {
  impl_->opt.prefill_attention = attention;
}
std::string ConventionalExecutor::take_prefill_attention_note() {
  ExecutorCore& s = *impl_;
  if (s.cudnn_fallback.empty() || s.cudnn_fallback_told) return "";
  s.cudnn_fallback_told = true;
  return "prefill attention: cuDNN did not run (" + s.cudnn_fallback +
         "); the tensor-core kernel ran instead";
}
void ConventionalExecutor::set_backend(DecodeBackend backend) {
  if (backend == DecodeBackend::Overlap) impl_->setup_overlap();
  impl_->opt.backend = backend;
}
void ConventionalExecutor::set_overlap_delay(uint32_t max_ns, uint64_t seed) {
  impl_->opt.overlap_delay_max_ns = max_ns;
  impl_->opt.overlap_delay_seed = seed;
  // Delays are baked into the captured kernel parameters.
  impl_->drop_overlap_graphs();
}
void ConventionalExecutor::set_overlap_regions(
    const std::vector<ExecutorOptions::OverlapRegion>& regions) {
  ExecutorCore& s = *impl_;
  const std::vector<ExecutorOptions::OverlapRegion> before = s.opt.overlap_regions;
  s.opt.overlap_regions = regions;
  if (!s.ovl) return;  // applied (and validated) when the overlap state is set up
  try {
    s.apply_overlap_regions(*s.ovl);
  } catch (...) {
    s.opt.overlap_regions = before;
    throw;
  }
  // The op lists (budgets, segments) and the captured steps follow the regions.
  s.ovl->plans.clear();
  s.drop_overlap_graphs();
}
std::vector<std::string> ConventionalExecutor::overlap_op_names() const {
  impl_->setup_overlap();
  return impl_->ovl->op_names;
}

std::vector<TraceEvent> ConventionalExecutor::take_overlap_trace(uint64_t* dropped) {
  return impl_->take_overlap_trace(dropped);
}

// KV-cache bytes of one cached position over all layers (k and v, bf16).
static size_t kv_bytes_per_position(const ModelConfig& cfg) {
  return static_cast<size_t>(cfg.kv_dim()) * 2 /*k and v*/ * 2 /*bytes*/ * cfg.num_layers;
}

size_t ConventionalExecutor::kv_bytes_read() const {
  const ExecutorCore& s = *impl_;
  size_t positions = 0;
  for (int b = 0; b < s.batch; ++b) positions += static_cast<size_t>(s.host_pos[b]) + 1;
  return positions * kv_bytes_per_position(s.cfg);
}

size_t ConventionalExecutor::kv_bytes_per_step() const {
  const ExecutorCore& s = *impl_;
  return static_cast<size_t>(s.batch) * kv_bytes_per_position(s.cfg);
}

// A sampler's NONFINITE_LOGITS_TOKEN (core/tokens.h) is an error of the step that produced it,
// never a token handed on. `where` names the step; `positions` (may be null) each sequence's
// position in it.
static void check_sampled(const int32_t* tokens, int b, const std::string& where,
                          const std::vector<int>* positions) {
  for (int r = 0; r < b; ++r)
    if (tokens[r] == NONFINITE_LOGITS_TOKEN)
      throw Error(where + ": sequence " + std::to_string(r) +
                  (positions ? " at position " + std::to_string((*positions)[r]) : "") +
                  ": the logits hold NaN or Inf; no token was sampled");
}

static void check_ids(const std::vector<int>& ids, int vocab, const char* what) {
  for (int id : ids)
    if (id < 0 || id >= vocab)
      throw_input_error(what, "",
                        "token id " + std::to_string(id) + " outside the vocabulary [0, " +
                            std::to_string(vocab) + ")");
}

std::vector<int> ConventionalExecutor::prefill(const std::vector<std::vector<int>>& prompts) {
  ExecutorCore& s = *impl_;
  const int B = static_cast<int>(prompts.size());
  if (B < 1 || B > s.opt.max_batch)
    throw_input_error("prefill", "batch",
                      "expected 1.." + std::to_string(s.opt.max_batch) +
                          " sequences (the allocated batch), found " + std::to_string(B));
  for (int b = 0; b < B; ++b) {
    if (prompts[b].empty())
      throw_input_error("prefill", "prompt " + std::to_string(b), "empty prompt");
    check_ids(prompts[b], s.cfg.vocab_size, "prompt");
    if (static_cast<int>(prompts[b].size()) >= s.opt.max_seq)
      throw_input_error("prefill", "prompt " + std::to_string(b),
                        "context of " + std::to_string(prompts[b].size() + 1) +
                            " tokens exceeds the configured maximum " +
                            std::to_string(s.opt.max_seq));
  }
  // Flatten all prompts: token ids, positions and the sequence (slot) of every prompt row.
  std::vector<int32_t> ids, pos, slot;
  for (int b = 0; b < B; ++b)
    for (size_t i = 0; i < prompts[b].size(); ++i) {
      ids.push_back(prompts[b][i]);
      pos.push_back(static_cast<int32_t>(i));
      slot.push_back(b);
    }
  if (s.opt.prefill_path == PrefillPath::DecodeGraph)
    s.prefill_via_decode_graph(ids, pos, slot, B);
  else
    s.prefill_layers(ids, pos, slot, B);
  std::vector<int32_t> dpos(B), dctx(B), dslot(B);
  for (int b = 0; b < B; ++b) {
    dpos[b] = static_cast<int32_t>(prompts[b].size());
    dctx[b] = dpos[b] + 1;
    dslot[b] = b;
  }
  const uint32_t step1 = 1;
  MEGAOPS_CUDA_CHECK(
      cudaMemcpyAsync(s.step, &step1, sizeof(step1), cudaMemcpyHostToDevice, s.stream));
  MEGAOPS_CUDA_CHECK(
      cudaMemcpyAsync(s.dec_pos, dpos.data(), B * 4, cudaMemcpyHostToDevice, s.stream));
  MEGAOPS_CUDA_CHECK(
      cudaMemcpyAsync(s.dec_ctx, dctx.data(), B * 4, cudaMemcpyHostToDevice, s.stream));
  MEGAOPS_CUDA_CHECK(
      cudaMemcpyAsync(s.dec_slots, dslot.data(), B * 4, cudaMemcpyHostToDevice, s.stream));
  MEGAOPS_CUDA_CHECK(
      cudaMemcpyAsync(s.host_tokens, s.dec_tokens, B * 4, cudaMemcpyDeviceToHost, s.stream));
  MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  s.batch = B;
  s.host_pos.assign(dpos.begin(), dpos.end());
  check_sampled(s.host_tokens, B, "prefill", &s.host_pos);
  return std::vector<int>(s.host_tokens, s.host_tokens + B);
}

void ExecutorCore::check_step(cudaError_t err) {
  if (err == cudaSuccess) return;
  if (opt.backend == DecodeBackend::Overlap) overlap_check(err);  // throws
  if (peer) peer->watchdog->check(err, peer->site_names);
  MEGAOPS_CUDA_CHECK(err);
}

void ExecutorCore::enqueue_step(int b) {
  // Every status goes through the backend's watchdog (check_step). Overlap: after a trap the
  // context is dead and any call may fail first. Conventional under TpReduce::Peer: a hung wait
  // traps, its record names the site.
  if (!opt.debug_sync)
    check_step(cudaGraphLaunch(graph_for(b, opt.pdl), stream));
  else if (opt.backend == DecodeBackend::Overlap)
    // Eager on the W streams, then one synchronisation: per-op synchronisation would wait for a
    // consumer whose producer may not be issued yet (reverse issue order).
    record_overlap_step(b);
  else
    record_decode_step(b, opt.pdl);  // eager, checked op by op
}

void ExecutorCore::run_step(int b, int parity) {
  enqueue_step(b);
  check_step(cudaStreamSynchronize(stream));
  const int32_t* half = ring_half(parity);
  std::copy(half, half + b, host_tokens);
}

void ExecutorCore::prefill_via_decode_graph(const std::vector<int32_t>& ids,
                                            const std::vector<int32_t>& pos,
                                            const std::vector<int32_t>& slot, int B) {
  const int total = static_cast<int>(ids.size());
  const size_t V = static_cast<size_t>(cfg.vocab_size);
  if (!prefill_logits)
    prefill_logits = std::make_unique<CudaMemory>(static_cast<size_t>(opt.max_batch) * V * 4);
  float* staged = static_cast<float*>(prefill_logits->ptr);
  std::vector<int32_t> ctx(static_cast<size_t>(total));
  for (int r = 0; r < total; ++r) ctx[r] = pos[r] + 1;
  std::vector<int32_t> first(static_cast<size_t>(B));
  const uint32_t step0 = 0;  // every replay samples as the layer path's prefill does: step 0
  for (int c0 = 0; c0 < total; c0 += opt.max_batch) {
    const int t = std::min(opt.max_batch, total - c0);
    upload_rows(dec_tokens, ids, c0, t);
    upload_rows(dec_pos, pos, c0, t);
    upload_rows(dec_slots, slot, c0, t);
    upload_rows(dec_ctx, ctx, c0, t);
    MEGAOPS_CUDA_CHECK(
        cudaMemcpyAsync(step, &step0, sizeof(step0), cudaMemcpyHostToDevice, stream));
    run_step(t, pos[c0] & 1);  // synchronises: the host vectors above may change after it
    for (int r = c0; r < c0 + t; ++r) {
      if (r + 1 < total && slot[r + 1] == slot[r]) continue;  // not the sequence's last token
      first[slot[r]] = host_tokens[r - c0];
      MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(staged + slot[r] * V, logits + (r - c0) * V, V * 4,
                                         cudaMemcpyDeviceToDevice, stream));
    }
  }
  std::copy(first.begin(), first.end(), host_tokens);
  MEGAOPS_CUDA_CHECK(
      cudaMemcpyAsync(dec_tokens, host_tokens, B * 4, cudaMemcpyHostToDevice, stream));
  MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(logits, staged, B * V * 4, cudaMemcpyDeviceToDevice, stream));
}

std::vector<int> ConventionalExecutor::decode_step(const std::vector<int>* forced) {
  ExecutorCore& s = *impl_;
  if (s.batch == 0) throw_input_error("decode", "", "decode_step before prefill");
  for (int b = 0; b < s.batch; ++b)
    if (s.host_pos[b] >= s.opt.max_seq)
      throw_input_error("decode", "sequence " + std::to_string(b),
                        "context of " + std::to_string(s.host_pos[b] + 1) +
                            " tokens exceeds the configured maximum " +
                            std::to_string(s.opt.max_seq));
  if (forced) {
    if (static_cast<int>(forced->size()) != s.batch)
      throw_input_error(
          "decode", "forced tokens",
          "expected " + std::to_string(s.batch) + ", found " + std::to_string(forced->size()));
    check_ids(*forced, s.cfg.vocab_size, "forced tokens");
    std::copy(forced->begin(), forced->end(), s.host_tokens);
    MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(s.dec_tokens, s.host_tokens, s.batch * 4,
                                       cudaMemcpyHostToDevice, s.stream));
  }
  s.run_step(s.batch, s.host_pos[0] & 1);
  check_sampled(s.host_tokens, s.batch, "decode step", &s.host_pos);
  for (int b = 0; b < s.batch; ++b) ++s.host_pos[b];
  return std::vector<int>(s.host_tokens, s.host_tokens + s.batch);
}

std::vector<int> ConventionalExecutor::decode_steps(
    int steps, const std::function<void(int, const std::vector<int>&)>& on_tokens) {
  ExecutorCore& s = *impl_;
  if (s.batch == 0) throw_input_error("decode", "", "decode_steps before prefill");
  if (steps < 1)
    throw_input_error("decode", "steps", "expected >= 1, found " + std::to_string(steps));
  for (int b = 0; b < s.batch; ++b)
    if (s.host_pos[b] + steps > s.opt.max_seq)
      throw_input_error("decode", "sequence " + std::to_string(b),
                        "context of " + std::to_string(s.host_pos[b] + steps) + " tokens after " +
                            std::to_string(steps) + " steps exceeds the configured maximum " +
                            std::to_string(s.opt.max_seq));
  std::vector<int> tokens;
  if (s.opt.debug_sync) {  // eager steps are checked op by op: nothing to overlap
    for (int i = 0; i < steps; ++i) {
      tokens = decode_step();
      if (on_tokens) on_tokens(i, tokens);
    }
    return tokens;
  }
  for (cudaEvent_t& e : s.ring_done)
    if (e == nullptr) MEGAOPS_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  // Step i's tokens land in the ring's half of its position's parity (step_advance); step i + 2
  // writes the same half, and is enqueued only after the host has read step i's (the loop
  // below), so no step overwrites a half being read.
  const int parity0 = s.host_pos[0] & 1;
  auto slot = [&s, parity0](int i) { return s.ring_half((parity0 + i) & 1); };
  auto enqueue = [&s](int i) {
    s.enqueue_step(s.batch);
    s.check_step(cudaEventRecord(s.ring_done[i % 2], s.stream));
    for (int b = 0; b < s.batch; ++b) ++s.host_pos[b];  // the device's state once it runs
  };
  enqueue(0);
  for (int i = 0; i < steps; ++i) {
    if (i + 1 < steps) enqueue(i + 1);  // reads step i's tokens on the device
    s.check_step(cudaEventSynchronize(s.ring_done[i % 2]));
    check_sampled(slot(i), s.batch,
                  "decode step " + std::to_string(i + 1) + " of " + std::to_string(steps), nullptr);
    tokens.assign(slot(i), slot(i) + s.batch);
    if (on_tokens) on_tokens(i, tokens);
  }
  std::copy(tokens.begin(), tokens.end(), s.host_tokens);
  return tokens;
}

std::vector<Executor::OpTime> ConventionalExecutor::profile_decode_steps(int steps) {
  return impl_->profile_decode_steps(steps);
}

std::vector<float> ConventionalExecutor::last_logits() const {
  const ExecutorCore& s = *impl_;
  std::vector<float> out(static_cast<size_t>(s.batch) * s.cfg.vocab_size);
  MEGAOPS_CUDA_CHECK(
      cudaMemcpy(out.data(), s.logits, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

ConventionalExecutor::DeviceLogits ConventionalExecutor::device_logits() const {
  return {impl_->logits, impl_->batch};
}

std::unique_ptr<Executor> make_executor(const ModelConfig& cfg, const WeightFiller& weights,
                                        ExecutorOptions opt,
                                        const std::function<void(size_t, size_t)>& progress) {
  return std::make_unique<ConventionalExecutor>(cfg, weights, std::move(opt), progress);
}

}  // namespace megaops
