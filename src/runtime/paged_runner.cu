// The paged runner (runtime/paged_runner.h): set-up from the options and plans, the validation of
// a step, and the decode buckets (one captured step per bucket, replayed with the step inputs
// copied at its head). The packed prompt pass is paged_runner_prefill.cu.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <unordered_set>
#include <utility>

#include "core/error.h"
#include "core/tokens.h"
#include "runtime/overlap.h"
#include "runtime/paged_runner_impl.h"
#include "runtime/plan_options.h"

namespace megaops {

namespace {

constexpr const char* WHERE = "paged runner";

// The plan of each bucket: Plan::batch == bucket, else default_plan(bucket).
std::map<int, Plan> bucket_plans(const std::vector<Plan>& plans, const std::vector<int>& buckets) {
  std::map<int, Plan> by;
  for (size_t i = 0; i < plans.size(); ++i) {
    const int b = plans[i].batch;
    const std::string field = "plans[" + std::to_string(i) + "].batch";
    if (std::find(buckets.begin(), buckets.end(), b) == buckets.end()) {
      std::string list;
      for (int x : buckets) list += (list.empty() ? "" : ", ") + std::to_string(x);
      throw_input_error(WHERE, field,
                        "expected a bucket (" + list + "), found " + std::to_string(b));
    }
    if (!by.emplace(b, plans[i]).second)
      throw_input_error(WHERE, field, "a second plan for batch " + std::to_string(b));
  }
  for (int b : buckets)
    if (by.find(b) == by.end()) by.emplace(b, default_plan(b));
  return by;
}

// What every bucket's plan must share (one matmul context, one LM head rule) ...
Plan matmul_part(const Plan& p) {
  Plan x;
  x.decode.matmul = p.decode.matmul;
  x.decode.greedy_in_lm_head = p.decode.greedy_in_lm_head;
  return x;
}

// ... and what every overlap-backend bucket's plan must share (one overlap state).
Plan overlap_part(const Plan& p) {
  Plan x;
  x.decode = p.decode;
  x.decode.pdl = false;
  x.decode.matmul = PlanMatmul{};
  x.decode.greedy_in_lm_head = true;
  return x;
}

}  // namespace

std::vector<int> paged_runner_buckets(int max_decode_rows) {
  std::vector<int> out;
  for (int b = 1; b < max_decode_rows; b *= 2) out.push_back(b);
  if (max_decode_rows >= 1) out.push_back(max_decode_rows);
  return out;
}

void PinnedBuffer::allocate(size_t bytes) {
  if (ptr_) throw Error("internal: PinnedBuffer allocated twice");
  void* p = nullptr;
  MEGAOPS_CUDA_CHECK(cudaHostAlloc(&p, std::max<size_t>(bytes, 16), cudaHostAllocMapped));
  ptr_ = static_cast<uint8_t*>(p);
  std::memset(ptr_, 0, std::max<size_t>(bytes, 16));
}

PinnedBuffer::~PinnedBuffer() {
  if (ptr_) cudaFreeHost(ptr_);
}

PagedRunner::PagedRunner(const ModelConfig& cfg, const WeightFiller& weights,
                         PagedRunnerOptions opt,
                         const std::function<void(size_t, size_t)>& progress)
    : opt_(std::move(opt)), core_(std::make_unique<ExecutorCore>()) {
  check_options(cfg);
  buckets_ = paged_runner_buckets(opt_.max_decode_rows);
  const ExecutorOptions eo = executor_options(cfg);
  core_->setup(cfg, weights, eo, progress);
  opt_.kv.num_blocks = core_->opt.kv_num_blocks;  // the count chosen where 0 asked for it
  for (const auto& [b, run] : runs_)
    if (run.backend == DecodeBackend::Overlap) core_->setup_overlap();  // preloads every kernel
  stride_ = core_->kv.table_stride;
  scratch_ = opt_.kv.num_blocks;
  head_bytes_ = core_->step_inputs_head;
  allocate_staging();
}

PagedRunner::~PagedRunner() {
  if (core_ && core_->stream) cudaStreamSynchronize(core_->stream);
  for (auto& [b, exec] : graphs_) cudaGraphExecDestroy(exec);
}

void PagedRunner::check_options(const ModelConfig& cfg) const {
  const int max_rows = opt_.batch_invariant ? 32 : MATMUL_SMALL_M_MAX;
  if (opt_.max_decode_rows < 1 || opt_.max_decode_rows > max_rows)
    throw_input_error(WHERE, "max_decode_rows",
                      "expected 1.." + std::to_string(max_rows) +
                          (opt_.batch_invariant ? " (batch-invariant: the small-m kernel's rows "
                                                  "sum alike up to 32)"
                                                : "") +
                          ", found " + std::to_string(opt_.max_decode_rows));
  if (opt_.max_context < 1 || opt_.max_context > cfg.max_position_embeddings)
    throw_input_error(WHERE, "max_context",
                      "expected 1.." + std::to_string(cfg.max_position_embeddings) +
                          " (max_position_embeddings), found " + std::to_string(opt_.max_context));
  const int64_t most = static_cast<int64_t>(opt_.max_decode_rows) * opt_.max_context;
  if (opt_.max_step_tokens < opt_.max_decode_rows || opt_.max_step_tokens > most)
    throw_input_error(WHERE, "max_step_tokens",
                      "expected max_decode_rows.." + std::to_string(most) +
                          " (max_decode_rows x max_context), found " +
                          std::to_string(opt_.max_step_tokens));
  if (!kv_block_size_ok(opt_.kv.block_size))
    throw_input_error(
        WHERE, "kv.block_size",
        "expected a power of two (16, 32, ...), found " + std::to_string(opt_.kv.block_size));
  if (opt_.kv.num_blocks < 0)
    throw_input_error(WHERE, "kv.num_blocks",
                      "expected >= 1, or 0 (what fits: executor.kv_memory_utilization), found " +
                          std::to_string(opt_.kv.num_blocks));
  for (size_t i = 0; i < opt_.plans.size(); ++i)
    for (const PlanRegion& r : opt_.plans[i].decode.regions)
      if (r.backend == RegionBackend::Persistent)
        throw_input_error(
            WHERE, "plans[" + std::to_string(i) + "].decode.regions",
            "a persistent region (at " + r.first_op + "): the paged runner runs none yet");
}

ExecutorOptions PagedRunner::executor_options(const ModelConfig& cfg) {
  const std::map<int, Plan> plans = bucket_plans(opt_.plans, buckets_);
  ExecutorOptions eo = opt_.executor;
  const Plan& first = plans.at(buckets_.front());
  const Plan* overlap = nullptr;
  for (const auto& [b, p] : plans) {
    if (!(matmul_part(p) == matmul_part(first)))
      throw_input_error(WHERE, "plans",
                        "the plan for batch " + std::to_string(b) +
                            " sets another matmul dispatch or greedy_in_lm_head than batch " +
                            std::to_string(buckets_.front()) + "'s; one runner takes one");
    if (p.decode.backend == PlanBackend::Conventional) continue;
    if (overlap == nullptr) overlap = &p;
    if (!(overlap_part(p) == overlap_part(*overlap)))
      throw_input_error(WHERE, "plans",
                        "the plans for batch " + std::to_string(overlap->batch) + " and " +
                            std::to_string(b) +
                            " run different overlap steps; one runner takes one");
  }
  // The shared settings (all alike), then the overlap plan's overlap settings, if any; the
  // prompt path is the first plan's.
  apply_plan(first, eo);
  if (overlap != nullptr) {
    apply_plan(*overlap, eo);
    for (const PlanRegion& r : overlap->decode.regions)
      eo.overlap_regions.push_back({r.first_op, r.backend == RegionBackend::Conventional});
  }
  eo.prefill_path = parse_prefill_path(first.prefill.path, WHERE, "plans: prefill.path");
  for (const auto& [b, p] : plans) {
    BucketRun& run = runs_[b];
    run.backend = p.decode.backend == PlanBackend::Conventional ? DecodeBackend::Conventional
                                                                : DecodeBackend::Overlap;
    run.pdl = p.decode.backend == PlanBackend::Conventional && p.decode.pdl;
    run.text = describe(p);
  }
  eo.backend = DecodeBackend::Conventional;  // per bucket (runs_) from here on
  eo.pdl = false;
  prefill_by_buckets_ = eo.prefill_path == PrefillPath::DecodeGraph;
  eo.max_batch = opt_.max_decode_rows;
  eo.max_seq = opt_.max_context;
  eo.prefill_chunk = opt_.max_step_tokens;
  eo.kv_block_size = opt_.kv.block_size;
  eo.kv_num_blocks = opt_.kv.num_blocks;
  eo.kv_table_rows = opt_.max_decode_rows + PAGED_PREFILL_SEQS_PER_PASS;
  if (opt_.batch_invariant) {
    if (overlap != nullptr && !eo.overlap_conventional_arithmetic)
      throw_input_error(WHERE, "batch_invariant",
                        "needs the overlap step's conventional arithmetic (the v0 step caps "
                        "attention's splits by its CTA budget)");
    eo.matmul.forced_path = MatmulPath::SmallM;
    eo.matmul.stream_for_small = false;
    eo.matmul.stream_shapes.clear();
    eo.decode_attention_splits =
        decode_attention_default_splits(1, cfg.num_kv_heads, opt_.max_context);
    eo.decode_attention_per_head = 0;
    prefill_by_buckets_ = true;
  }
  // "cuda:" and each run of buckets with one plan: "b1 pdl chain, ...; b2-32 conventional, ...".
  backend_text_ = "cuda:";
  for (size_t i = 0; i < buckets_.size();) {
    size_t j = i;
    while (j + 1 < buckets_.size() && runs_[buckets_[j + 1]].text == runs_[buckets_[i]].text) ++j;
    backend_text_ += (i ? "; b" : "b") + std::to_string(buckets_[i]) +
                     (j > i ? "-" + std::to_string(buckets_[j]) : "") + " " +
                     runs_[buckets_[i]].text;
    i = j + 1;
  }
  if (opt_.batch_invariant) backend_text_ += "; batch-invariant";
  return eo;
}

void PagedRunner::allocate_staging() {
  const size_t table_bytes = static_cast<size_t>(core_->opt.kv_table_rows) * stride_ * 4;
  inputs_.allocate(head_bytes_ + table_bytes);
  prompt_.allocate(3 * static_cast<size_t>(opt_.max_step_tokens) * 4);
  prompt_sample_.allocate(PAGED_PREFILL_SEQS_PER_PASS * sizeof(SampleRow));
  prompt_tokens_.allocate(PAGED_PREFILL_SEQS_PER_PASS * sizeof(int32_t));
  dev_prompt_sample_ =
      core_->mem.alloc_array<SampleRow>("prompt rows' sampling", opt_.max_decode_rows);
  dev_prompt_tokens_ = core_->mem.alloc_array<int32_t>("prompt rows' tokens", opt_.max_decode_rows);
}

// ---- validation ----

SampleRow PagedRunner::sample_row(const RunnerSeq& s) const {
  SampleRow r;
  r.seed = s.sampling.seed;
  r.temperature = s.sampling.temperature;
  r.top_k = s.sampling.top_k;
  r.top_p = s.sampling.top_p;
  r.step = static_cast<uint32_t>(s.sample_index);
  r.rng_row = 0;  // the request's own stream (engine/model_runner.h)
  return r;
}

void PagedRunner::validate_seq(const RunnerSeq& s, size_t i,
                               std::unordered_set<int64_t>& written) const {
  const std::string f = "seqs[" + std::to_string(i) + "]";
  const int n = static_cast<int>(s.tokens.size());
  const int vocab = core_->cfg.vocab_size, bs = opt_.kv.block_size;
  if (n == 0) throw_input_error(WHERE, f + ".tokens", "expected at least one token, found none");
  for (int t = 0; t < n; ++t)
    if (s.tokens[t] < 0 || s.tokens[t] >= vocab)
      throw_input_error(WHERE, f + ".tokens[" + std::to_string(t) + "]",
                        "expected a token id in [0, " + std::to_string(vocab) + "), found " +
                            std::to_string(s.tokens[t]));
  const int64_t end = static_cast<int64_t>(s.start_pos) + n;
  if (s.start_pos < 0 || end > opt_.max_context)
    throw_input_error(WHERE, f + ".start_pos",
                      "positions [" + std::to_string(s.start_pos) + ", " + std::to_string(end) +
                          ") are outside [0, " + std::to_string(opt_.max_context) +
                          ") (max_context)");
  const int64_t need = (end + bs - 1) / bs;
  if (static_cast<int64_t>(s.block_table.size()) < need)
    throw_input_error(WHERE, f + ".block_table",
                      "expected at least " + std::to_string(need) + " blocks for " +
                          std::to_string(end) + " positions, found " +
                          std::to_string(s.block_table.size()));
  for (int64_t j = 0; j < need; ++j)
    if (s.block_table[j] < 0 || s.block_table[j] >= opt_.kv.num_blocks)
      throw_input_error(WHERE, f + ".block_table[" + std::to_string(j) + "]",
                        "expected a block id in [0, " + std::to_string(opt_.kv.num_blocks) +
                            "), found " + std::to_string(s.block_table[j]));
  // Every position this step writes is written once: two rows writing one cache row would race.
  for (int64_t p = s.start_pos; p < end; ++p) {
    const int64_t row = static_cast<int64_t>(s.block_table[p / bs]) * bs + p % bs;
    if (!written.insert(row).second)
      throw_input_error(WHERE, f + ".block_table",
                        "position " + std::to_string(p) + " is in block " +
                            std::to_string(s.block_table[p / bs]) +
                            ", whose row another position of this step also writes");
  }
  if (!s.sample) return;
  const SamplingParams& sp = s.sampling;
  if (std::isnan(sp.temperature) || std::isinf(sp.temperature))
    throw_input_error(WHERE, f + ".sampling.temperature",
                      "expected a finite number, found " + std::to_string(sp.temperature));
  if (!(sp.top_p > 0.0f))
    throw_input_error(WHERE, f + ".sampling.top_p",
                      "expected > 0, found " + std::to_string(sp.top_p));
  if (s.sample_index < 0)
    throw_input_error(WHERE, f + ".sample_index",
                      "expected >= 0, found " + std::to_string(s.sample_index));
}

void PagedRunner::validate(const std::vector<RunnerSeq>& seqs) const {
  int64_t rows = 0;
  for (const RunnerSeq& s : seqs) rows += static_cast<int64_t>(s.tokens.size());
  if (rows > opt_.max_step_tokens)
    throw_input_error(WHERE, "seqs",
                      "expected at most " + std::to_string(opt_.max_step_tokens) +
                          " rows (max_step_tokens), found " + std::to_string(rows));
  std::set<uint64_t> ids;
  std::unordered_set<int64_t> written;  // the cache rows this step writes
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!ids.insert(seqs[i].request_id).second)
      throw_input_error(
          WHERE, "seqs[" + std::to_string(i) + "].request_id",
          "request " + std::to_string(seqs[i].request_id) + " appears twice in one step");
    validate_seq(seqs[i], i, written);
  }
}

// ---- a step ----

std::vector<int> PagedRunner::run(const std::vector<RunnerSeq>& seqs) {
  validate(seqs);
  std::vector<int> out(seqs.size(), -1);
  kept_.clear();
  logits_.clear();
  // Decode rows: one-token seqs, up to the largest bucket; the rest is the prompt pass's (all of
  // it the buckets' when prompts go through them).
  std::vector<size_t> bucket_seqs, prompt_seqs;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const bool decode_row =
        seqs[i].tokens.size() == 1 && static_cast<int>(bucket_seqs.size()) < opt_.max_decode_rows;
    (prefill_by_buckets_ || decode_row ? bucket_seqs : prompt_seqs).push_back(i);
  }
  if (!prompt_seqs.empty()) run_prefill(seqs, prompt_seqs, out);
  if (!bucket_seqs.empty()) run_bucket_rows(seqs, bucket_seqs, out);
  for (size_t i = 0; i < seqs.size(); ++i) {
    if (!seqs[i].sample) continue;
    if (out[i] == NONFINITE_LOGITS_TOKEN)
      throw Error(std::string(WHERE) + ": request " + std::to_string(seqs[i].request_id) +
                  " at position " +
                  std::to_string(seqs[i].start_pos + static_cast<int>(seqs[i].tokens.size()) - 1) +
                  ": the logits hold NaN or Inf; no token was sampled");
    if (seqs[i].want_logits) {
      const std::vector<float>& row = kept_.at(i);
      logits_.insert(logits_.end(), row.begin(), row.end());
    }
  }
  kept_.clear();
  return out;
}

void PagedRunner::stage_table_row(int row, const RunnerSeq& s) {
  int32_t* t =
      reinterpret_cast<int32_t*>(inputs_.get() + head_bytes_) + static_cast<size_t>(row) * stride_;
  const int64_t end = static_cast<int64_t>(s.start_pos) + static_cast<int64_t>(s.tokens.size());
  const int need = static_cast<int>((end + opt_.kv.block_size - 1) / opt_.kv.block_size);
  std::copy(s.block_table.begin(), s.block_table.begin() + need, t);
  std::fill(t + need, t + stride_, scratch_);
}

bool PagedRunner::keep_logits_row(const RunnerSeq& s, size_t seq, int r) {
  if (!s.want_logits) return false;
  const size_t V = static_cast<size_t>(core_->cfg.vocab_size);
  std::vector<float>& row = kept_[seq];
  row.resize(V);
  MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(row.data(), core_->logits + static_cast<size_t>(r) * V,
                                     V * sizeof(float), cudaMemcpyDeviceToHost, core_->stream));
  return true;
}

// ---- the decode buckets ----

int PagedRunner::bucket_for(int rows) const {
  for (int b : buckets_)
    if (b >= rows) return b;
  throw Error("internal: no bucket for " + std::to_string(rows) + " rows");
}

void PagedRunner::run_bucket_rows(const std::vector<RunnerSeq>& seqs,
                                  const std::vector<size_t>& which, std::vector<int>& out) {
  std::vector<BucketRow> rows;
  for (size_t s : which) {
    const RunnerSeq& q = seqs[s];
    const int n = static_cast<int>(q.tokens.size());
    for (int i = 0; i < n; ++i)
      rows.push_back({s, q.start_pos + i, q.tokens[i], q.sample && i == n - 1});
  }
  const size_t most = static_cast<size_t>(opt_.max_decode_rows);
  for (size_t r0 = 0; r0 < rows.size(); r0 += most)
    replay(seqs, rows, r0, std::min(rows.size(), r0 + most), out);
}

void PagedRunner::replay(const std::vector<RunnerSeq>& seqs, const std::vector<BucketRow>& rows,
                         size_t r0, size_t r1, std::vector<int>& out) {
  ExecutorCore& c = *core_;
  const int n = static_cast<int>(r1 - r0);
  const int bucket = bucket_for(n);
  uint8_t* in = inputs_.get();
  auto at = [&](const void* dev) {  // the staging twin of a device pointer in the region
    return in + (static_cast<const uint8_t*>(dev) - c.step_inputs);
  };
  int32_t* tokens = reinterpret_cast<int32_t*>(at(c.dec_tokens));
  int32_t* pos = reinterpret_cast<int32_t*>(at(c.dec_pos));
  int32_t* ctx = reinterpret_cast<int32_t*>(at(c.dec_ctx));
  int32_t* slots = reinterpret_cast<int32_t*>(at(c.dec_slots));
  SampleRow* sample = reinterpret_cast<SampleRow*>(at(c.dec_sample));
  // One table row per seq of the replay (a seq's rows share it: the rope fold recognises the keys
  // its launch writes by (slot, position)), then one of scratch blocks for the padding rows.
  std::map<size_t, int> slot_of;
  for (size_t r = r0; r < r1; ++r) {
    const BucketRow& row = rows[r];
    auto [it, fresh] = slot_of.emplace(row.seq, static_cast<int>(slot_of.size()));
    if (fresh) stage_table_row(it->second, seqs[row.seq]);
    const int i = static_cast<int>(r - r0);
    tokens[i] = row.token;
    pos[i] = row.pos;
    ctx[i] = row.pos + 1;
    slots[i] = it->second;
    sample[i] = row.sample ? sample_row(seqs[row.seq]) : SampleRow{};
  }
  if (n < bucket) {
    const int pad = static_cast<int>(slot_of.size());
    int32_t* t = reinterpret_cast<int32_t*>(in + head_bytes_) + static_cast<size_t>(pad) * stride_;
    std::fill(t, t + stride_, scratch_);
    for (int i = n; i < bucket; ++i) {
      tokens[i] = 0;
      pos[i] = 0;
      ctx[i] = 1;
      slots[i] = pad;
      sample[i] = SampleRow{};
    }
  }
  c.opt.backend = runs_.at(bucket).backend;
  if (c.opt.debug_sync) {
    record_bucket(bucket);  // eager, checked op by op
  } else {
    c.check_step(cudaGraphLaunch(graph_for_bucket(bucket), c.stream));
  }
  c.check_step(cudaStreamSynchronize(c.stream));
  // step_advance wrote the tokens into the ring's half of row 0's position parity.
  const int32_t* got = c.ring_half(pos[0] & 1);
  bool copied = false;
  for (size_t r = r0; r < r1; ++r) {
    if (!rows[r].sample) continue;
    out[rows[r].seq] = got[r - r0];
    copied |= keep_logits_row(seqs[rows[r].seq], rows[r].seq, static_cast<int>(r - r0));
  }
  if (copied) MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(c.stream));
}

void PagedRunner::record_bucket(int bucket) {
  ExecutorCore& c = *core_;
  const BucketRun& run = runs_.at(bucket);
  CopyStepInputsParams cp;
  cp.src = inputs_.get();
  cp.dst = c.step_inputs;
  cp.bytes = head_bytes_ + static_cast<size_t>(bucket) * stride_ * sizeof(int32_t);
  cp.launch = c.launch(false);
  c.check(launch_copy_step_inputs(cp), "copy step inputs");
  if (run.backend == DecodeBackend::Overlap)
    c.record_overlap_step(bucket);
  else
    c.record_decode_step(bucket, run.pdl);
}

cudaGraphExec_t PagedRunner::graph_for_bucket(int bucket) {
  auto it = graphs_.find(bucket);
  if (it != graphs_.end()) return it->second;
  cudaGraph_t graph = core_->capture_step([&] { record_bucket(bucket); });
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  MEGAOPS_CUDA_CHECK(err);
  graphs_[bucket] = exec;
  return exec;
}

std::unique_ptr<ModelRunner> make_paged_runner(
    const ModelConfig& cfg, const WeightFiller& weights, PagedRunnerOptions opt,
    const std::function<void(size_t, size_t)>& progress) {
  return std::make_unique<PagedRunner>(cfg, weights, std::move(opt), progress);
}

}  // namespace megaops
