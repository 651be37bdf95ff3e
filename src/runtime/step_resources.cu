// The step resources every backend shares (runtime/executor_core.h): the options checked, the
// weights allocated and uploaded as bf16 (tensor-parallel shards where the rank holds one), the KV
// cache, the activation buffers, the decode state, and their release.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "core/parallel.h"
#include "graph/tensor_parallel.h"
#include "kernels/attention_cudnn.h"
#include "runtime/executor_core.h"
#include "runtime/overlap.h"
#include "runtime/tp.h"

namespace megaops {

ExecutorCore::ExecutorCore() = default;

void ExecutorCore::setup(const ModelConfig& model, const WeightFiller& weights,
                         const ExecutorOptions& options,
                         const std::function<void(size_t, size_t)>& progress) {
  full_cfg = model;
  cfg = model;
  opt = options;
  int device = 0;
  MEGAOPS_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  MEGAOPS_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  device_name = prop.name;
  // Tensor parallelism: validate, then compute with this rank's configuration.
  setup_tp(model);
  validate_options(model);
  build_step_graphs();
  MEGAOPS_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  mm = std::make_unique<MatmulContext>(opt.matmul);
  allocate_weights(model);
  upload_weights(model, weights, progress);
  allocate_activations(model);
  allocate_decode_state();
  allocate_kv_cache(model);
  // The overlap backend's state (streams, counters, watchdog, buffers, preloaded kernels) exists
  // from construction when it is the configured backend, so the first step cannot hit a lazy
  // module load (DESIGN rule 1); a conventional executor sets it up only if switched later.
  if (opt.backend == DecodeBackend::Overlap) setup_overlap();
  if (opt.tp_reduce == TpReduce::Peer) setup_peer_reduce();
}

// The decode and prefill graphs of this rank's configuration, checked to hold only ops the
// executor runs.
void ExecutorCore::build_step_graphs() {
  if (opt.step_graph == nullptr)
    throw_input_error("executor", "step_graph",
                      "expected the model's step graph builder (models/step_graph.h: "
                      "build_step_graph), found none");
  StepRequest d;
  d.step = StepKind::Decode;
  d.rows = opt.max_batch;
  d.sequences = opt.max_batch;
  d.tensor_parallel = comm != nullptr;
  decode_graph = opt.step_graph(cfg, d);
  StepRequest p = d;
  p.step = StepKind::Prefill;
  p.rows = opt.prefill_chunk;
  p.sequences = 1;
  prefill_graph = opt.step_graph(cfg, p);
  check_op_codes(decode_graph, conventional_op_codes(), "executor");
  check_op_codes(prefill_graph, conventional_op_codes(), "executor");
}

void ExecutorCore::validate_options(const ModelConfig& model) {
  if (opt.max_batch < 1 || opt.max_batch > MATMUL_SMALL_M_MAX)
    throw_input_error("executor", "max_batch",
                      "expected 1.." + std::to_string(MATMUL_SMALL_M_MAX) + ", found " +
                          std::to_string(opt.max_batch));
  if (opt.max_seq < 1 || opt.max_seq > model.max_position_embeddings)
    throw_input_error("executor", "max_seq",
                      "expected 1.." + std::to_string(model.max_position_embeddings) +
                          " (max_position_embeddings), found " + std::to_string(opt.max_seq));
  if (opt.prefill_chunk < 1)
    throw_input_error("executor", "prefill_chunk",
                      "expected >= 1, found " + std::to_string(opt.prefill_chunk));
  // A prefill never holds more than max_batch * max_seq tokens, so no chunk needs to be larger:
  // short-context executors do not pay for 2048-token activation buffers.
  opt.prefill_chunk = static_cast<int>(
      std::min<int64_t>(opt.prefill_chunk, static_cast<int64_t>(opt.max_batch) * opt.max_seq));

  if (opt.overlap_streams < 1 || opt.overlap_streams > 8)
    throw_input_error("executor", "overlap_streams",
                      "expected 1..8, found " + std::to_string(opt.overlap_streams));
  if (opt.overlap_pdl_chain && opt.overlap_streams != 1)
    throw_input_error("executor", "overlap_pdl_chain",
                      "needs overlap_streams 1 (one stream carries the chain), found " +
                          std::to_string(opt.overlap_streams));
  if (opt.overlap_vendor_chunks < 1 || opt.overlap_vendor_chunks > 64)
    throw_input_error("executor", "overlap_vendor_chunks",
                      "expected 1..64, found " + std::to_string(opt.overlap_vendor_chunks));
  if (opt.tp_peer_watchdog_ms < 0)
    throw_input_error("executor", "tp_peer_watchdog_ms",
                      "expected >= 0, found " + std::to_string(opt.tp_peer_watchdog_ms));
  if (opt.wait_sleep_max_ns > MAX_WAIT_SLEEP_MAX_NS)
    throw_input_error("executor", "wait_sleep_max_ns",
                      "expected 0.." + std::to_string(MAX_WAIT_SLEEP_MAX_NS) + ", found " +
                          std::to_string(opt.wait_sleep_max_ns));
  validate_kv_options();
}

// The paged cache's and the decode attention's fixed choices (ExecutorOptions).
void ExecutorCore::validate_kv_options() {
  if (opt.decode_attention_splits < 0 ||
      opt.decode_attention_splits > decode_attention_max_splits())
    throw_input_error("executor", "decode_attention_splits",
                      "expected 0 (by batch) or 1.." +
                          std::to_string(decode_attention_max_splits()) + ", found " +
                          std::to_string(opt.decode_attention_splits));
  if (opt.decode_attention_per_head < -1 || opt.decode_attention_per_head > 1)
    throw_input_error(
        "executor", "decode_attention_per_head",
        "expected -1 (by grid), 0 or 1, found " + std::to_string(opt.decode_attention_per_head));
  if (opt.kv_block_size == 0) return;
  if (!kv_block_size_ok(opt.kv_block_size))
    throw_input_error(
        "executor", "kv_block_size",
        "expected a power of two (16, 32, ...), found " + std::to_string(opt.kv_block_size));
  if (opt.kv_num_blocks < 0)
    throw_input_error("executor", "kv_num_blocks",
                      "expected >= 1, or 0 (what fits in kv_memory_utilization), found " +
                          std::to_string(opt.kv_num_blocks));
  if (opt.kv_num_blocks == 0 && !(opt.kv_memory_utilization > 0 && opt.kv_memory_utilization <= 1))
    throw_input_error(
        "executor", "kv_memory_utilization",
        "expected a fraction in (0, 1], found " + std::to_string(opt.kv_memory_utilization));
  if (opt.kv_max_blocks < 0)
    throw_input_error("executor", "kv_max_blocks",
                      "expected >= 0 (0: no cap), found " + std::to_string(opt.kv_max_blocks));
  if (opt.kv_table_rows < opt.max_batch)
    throw_input_error("executor", "kv_table_rows",
                      "expected >= max_batch (" + std::to_string(opt.max_batch) + "), found " +
                          std::to_string(opt.kv_table_rows));
  if (comm != nullptr)
    throw_input_error("executor", "kv_block_size",
                      "the paged cache does not run with tensor parallelism yet");
  // The decode kernels address a paged layer's K or V with 32-bit byte offsets
  // (kernels/kv_pages.cuh).
  if (opt.kv_num_blocks > kv_blocks_addressable())
    throw_input_error("executor", "kv_num_blocks",
                      "a layer's paged K (or V) cache must be below 4 GiB: at most " +
                          std::to_string(kv_blocks_addressable()) + " blocks of " +
                          std::to_string(opt.kv_block_size) + ", found " +
                          std::to_string(opt.kv_num_blocks));
}

// The most blocks whose layer K (or V), scratch block included, stays below 4 GiB.
int ExecutorCore::kv_blocks_addressable() const {
  const double block_bytes =
      static_cast<double>(opt.kv_block_size) * cfg.kv_dim() * static_cast<double>(sizeof(bf16));
  const double most = std::floor((4294967296.0 - 1) / block_bytes) - 1;
  return static_cast<int>(std::min(most, 2147483647.0));
}

void ExecutorCore::allocate_weights(const ModelConfig& model) {
  // cfg: this rank's shapes (the model's without tensor parallelism).
  const int h = cfg.hidden_size, qd = cfg.q_dim(), kvd = cfg.kv_dim(),
            inter = cfg.intermediate_size;
  auto alloc_bf16 = [&](const std::string& what, size_t n) {
    return mem.alloc_array<bf16>(what, n);
  };
  embed = alloc_bf16("embed_tokens", static_cast<size_t>(model.vocab_size) * h);
  final_norm = alloc_bf16("model.norm", h);
  // Under tensor parallelism the LM head is this rank's rows, also when the embedding is tied.
  lm_head =
      model.tie_word_embeddings && comm == nullptr
          ? embed
          : alloc_bf16("lm_head", static_cast<size_t>(comm ? vocab_part : model.vocab_size) * h);
  layers.resize(model.num_layers);
  for (int l = 0; l < model.num_layers; ++l) {
    LayerWeights& L = layers[l];
    const std::string p = "layer " + std::to_string(l) + " ";
    L.ln1 = alloc_bf16(p + "input_layernorm", h);
    L.wqkv = alloc_bf16(p + "qkv_proj", static_cast<size_t>(qd + 2 * kvd) * h);
    if (model.has_qk_norm()) {
      L.q_norm = alloc_bf16(p + "q_norm", model.head_dim);
      L.k_norm = alloc_bf16(p + "k_norm", model.head_dim);
    }
    L.wo = alloc_bf16(p + "o_proj", static_cast<size_t>(h) * qd);
    L.ln2 = alloc_bf16(p + "post_attention_layernorm", h);
    L.wgu = alloc_bf16(p + "gate_up_proj", static_cast<size_t>(2 * inter) * h);
    L.wdown = alloc_bf16(p + "down_proj", static_cast<size_t>(h) * inter);
  }
}

void ExecutorCore::allocate_kv_cache(const ModelConfig& model) {
  const size_t kvd = static_cast<size_t>(cfg.kv_dim());
  if (opt.kv_block_size > 0 && opt.kv_num_blocks == 0) {
    // Everything else is allocated: the cache takes what is left of the fraction.
    size_t free = 0, total = 0;
    MEGAOPS_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    const double budget =
        opt.kv_memory_utilization * static_cast<double>(total) - static_cast<double>(total - free);
    const double block_bytes = 2.0 * model.num_layers * opt.kv_block_size * kvd * sizeof(bf16);
    // One block of the budget is the scratch block's.
    double blocks = std::floor(budget / block_bytes) - 1;
    if (opt.kv_max_blocks > 0) blocks = std::min(blocks, static_cast<double>(opt.kv_max_blocks));
    blocks = std::min(blocks, static_cast<double>(kv_blocks_addressable()));
    if (blocks < 1) {
      char what[256];
      std::snprintf(what, sizeof(what),
                    "%.2f of the device's %.2f GiB leaves no room for a KV block (%.2f GiB in use "
                    "after the weights and buffers, a block of %d positions takes %.1f KiB)",
                    opt.kv_memory_utilization, total / 1073741824.0, (total - free) / 1073741824.0,
                    opt.kv_block_size, block_bytes / 1024.0);
      throw_input_error("executor", "kv_memory_utilization", what);
    }
    opt.kv_num_blocks = static_cast<int>(blocks);
  }
  // Contiguous [max_batch, max_seq] positions, or paged: the blocks and one scratch block.
  const size_t kv_positions =
      opt.kv_block_size > 0
          ? (static_cast<size_t>(opt.kv_num_blocks) + 1) * static_cast<size_t>(opt.kv_block_size)
          : static_cast<size_t>(opt.max_batch) * opt.max_seq;
  const size_t kv_elems = kv_positions * kvd;
  for (int l = 0; l < model.num_layers; ++l) {
    LayerWeights& L = layers[l];
    const std::string p = "layer " + std::to_string(l) + " ";
    L.k_cache = mem.alloc_array<bf16>(p + "k_cache", kv_elems);
    L.v_cache = mem.alloc_array<bf16>(p + "v_cache", kv_elems);
  }
}

// Each HF tensor to its place (q/k/v and gate/up are concatenated row blocks), converted to bf16;
// then the RoPE frequencies.
void ExecutorCore::upload_weights(const ModelConfig& model, const WeightFiller& weights,
                                  const std::function<void(size_t, size_t)>& progress) {
  const int h = cfg.hidden_size, qd = cfg.q_dim(), kvd = cfg.kv_dim(),
            inter = cfg.intermediate_size;
  const TpShape tp_part = tp_shape(model, opt.tp, opt.tp_rank);
  // Upload: each HF tensor goes to its place (q/k/v and gate/up are concatenated row blocks).
  const std::vector<WeightSpec> specs = expected_weights(model);
  size_t total = 0;
  for (const auto& spec : specs) {
    size_t n = 1;
    for (int64_t d : spec.shape) n *= static_cast<size_t>(d);
    total += n * 2;
  }
  // A decode step reads one embedding row, so an untied embedding table is not streamed.
  weight_bytes =
      total - (model.tie_word_embeddings ? 0 : static_cast<size_t>(model.vocab_size) * h * 2);
  if (comm != nullptr) weight_bytes = tp_weight_bytes(model, specs);
  std::vector<float> f32;
  std::vector<uint16_t> b16;
  size_t done = 0;
  // Converts `src` to bf16 and copies it to `to`.
  auto upload = [&](const std::vector<float>& src, bf16* to) {
    b16.resize(src.size());
    parallel_for(src.size(), 1 << 20, [&](size_t b, size_t e) {
      from_float(DType::BF16, src.data() + b, b16.data() + b, e - b);
    });
    MEGAOPS_CUDA_CHECK(cudaMemcpy(to, b16.data(), src.size() * 2, cudaMemcpyHostToDevice));
  };
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& spec = specs[i];
    size_t n = 1;
    for (int64_t d : spec.shape) n *= static_cast<size_t>(d);
    f32.resize(n);
    weights(spec, i, f32.data());
    const std::string& name = spec.name;
    const int64_t rows = spec.shape[0], cols = spec.shape.size() > 1 ? spec.shape[1] : 1;
    if (comm != nullptr) {
      // This rank's shard (graph/tensor_parallel.h); a tied table also gives the LM head rows.
      if (name == "model.embed_tokens.weight" && model.tie_word_embeddings)
        upload(tp_cut(f32, rows, cols, tp_slice(model, tp_part, name, /*as_lm_head=*/true)),
               lm_head);
      f32 = tp_cut(f32, rows, cols, tp_slice(model, tp_part, name));
      n = f32.size();
    }
    bf16* dst = nullptr;
    if (name == "model.embed_tokens.weight") {
      dst = embed;
    } else if (name == "model.norm.weight") {
      dst = final_norm;
    } else if (name == "lm_head.weight") {
      dst = lm_head;
    } else {
      const size_t dot = name.find('.', 13);  // "model.layers.N."
      const int l = std::stoi(name.substr(13, dot - 13));
      const std::string suffix = name.substr(dot + 1);
      LayerWeights& L = layers[l];
      if (suffix == "input_layernorm.weight") dst = L.ln1;
      if (suffix == "post_attention_layernorm.weight") dst = L.ln2;
      if (suffix == "self_attn.q_proj.weight") dst = L.wqkv;
      if (suffix == "self_attn.k_proj.weight") dst = L.wqkv + static_cast<size_t>(qd) * h;
      if (suffix == "self_attn.v_proj.weight") dst = L.wqkv + static_cast<size_t>(qd + kvd) * h;
      if (suffix == "self_attn.q_norm.weight") dst = L.q_norm;
      if (suffix == "self_attn.k_norm.weight") dst = L.k_norm;
      if (suffix == "self_attn.o_proj.weight") dst = L.wo;
      if (suffix == "mlp.gate_proj.weight") dst = L.wgu;
      if (suffix == "mlp.up_proj.weight") dst = L.wgu + static_cast<size_t>(inter) * h;
      if (suffix == "mlp.down_proj.weight") dst = L.wdown;
    }
    if (!dst) throw Error("internal: no device placement for weight " + name);
    upload(f32, dst);
    done += n * 2;
    if (progress) progress(done, total);
  }

  const std::vector<float> inv = rope_inv_freq(model);
  inv_freq = mem.alloc_array<float>("rope inv_freq", inv.size());
  MEGAOPS_CUDA_CHECK(
      cudaMemcpy(inv_freq, inv.data(), inv.size() * sizeof(float), cudaMemcpyHostToDevice));
}

void ExecutorCore::allocate_activations(const ModelConfig& model) {
  const int h = cfg.hidden_size, qd = cfg.q_dim(), kvd = cfg.kv_dim(),
            inter = cfg.intermediate_size;
  auto alloc_bf16 = [&](const std::string& what, size_t n) {
    return mem.alloc_array<bf16>(what, n);
  };
  const int T = std::max(opt.prefill_chunk, opt.max_batch);
  max_tokens = T;
  residual = mem.alloc_array<float>("residual", static_cast<size_t>(T) * h);
  normed = alloc_bf16("normed", static_cast<size_t>(T) * h);
  qkv = mem.alloc_array<float>("qkv", static_cast<size_t>(T) * (qd + 2 * kvd));
  q = alloc_bf16("q", static_cast<size_t>(T) * qd);
  attn = alloc_bf16("attention output", static_cast<size_t>(T) * qd);
  delta = mem.alloc_array<float>("projection output", static_cast<size_t>(T) * h);
  gu = mem.alloc_array<float>("gate_up", static_cast<size_t>(T) * 2 * inter);
  act = alloc_bf16("silu_mul", static_cast<size_t>(T) * inter);
  lm_in = alloc_bf16("lm_head input", static_cast<size_t>(opt.max_batch) * h);
  logits = mem.alloc_array<float>("logits", static_cast<size_t>(opt.max_batch) * model.vocab_size);
  if (comm != nullptr) {
    const size_t block = static_cast<size_t>(opt.max_batch) * vocab_pad;
    logits_part = mem.alloc_array<float>("logits, this rank's rows", block);
    logits_all = mem.alloc_array<float>("logits, every rank's rows", block * opt.tp);
  }
  attn_ws = mem.alloc_array<float>(
      "attention workspace",
      decode_attention_workspace_floats(opt.max_batch, model.num_heads, model.head_dim, opt.max_seq,
                                        opt.decode_attention_splits));
  const size_t n_done = static_cast<size_t>(opt.max_batch) * model.num_kv_heads;
  attn_done = mem.alloc_array<uint32_t>("attention merge counters", n_done);
  MEGAOPS_CUDA_CHECK(cudaMemset(attn_done, 0, n_done * sizeof(uint32_t)));
  MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());  // the executor's stream does not wait for memsets
}

void ExecutorCore::allocate_decode_state() {
  const int T = max_tokens;
  tok_ids = mem.alloc_array<int32_t>("prefill ids", T);
  tok_pos = mem.alloc_array<int32_t>("prefill positions", T);
  tok_slot = mem.alloc_array<int32_t>("prefill slots", T);
  if (opt.kv_block_size > 0) {
    allocate_paged_step_inputs();
  } else {
    dec_tokens = mem.alloc_array<int32_t>("decode tokens", opt.max_batch);
    dec_pos = mem.alloc_array<int32_t>("decode positions", opt.max_batch);
    dec_ctx = mem.alloc_array<int32_t>("decode context lengths", opt.max_batch);
    dec_slots = mem.alloc_array<int32_t>("decode slots", opt.max_batch);
  }
  // The step counter and the greedy argmax packs (zeroed) in one allocation, 64 bytes apart.
  constexpr size_t PACKS_AT = 64;
  uint8_t* step_state = static_cast<uint8_t*>(
      mem.alloc("step counter and greedy argmax packs",
                PACKS_AT + static_cast<size_t>(opt.max_batch) * sizeof(unsigned long long)));
  step = reinterpret_cast<uint32_t*>(step_state);
  greedy_argmax = reinterpret_cast<unsigned long long*>(step_state + PACKS_AT);
  MEGAOPS_CUDA_CHECK(cudaMemset(greedy_argmax, 0,
                                static_cast<size_t>(opt.max_batch) * sizeof(unsigned long long)));
  MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());  // the executor's stream does not wait for memsets
  // Mapped: step_advance writes each step's tokens straight into it (the toolkit's unified
  // addressing makes the host pointer the device's).
  MEGAOPS_CUDA_CHECK(
      cudaHostAlloc(&host_tokens, 3 * opt.max_batch * sizeof(int32_t), cudaHostAllocMapped));
}

// The paged cache's step inputs as one region (ExecutorCore::step_inputs): the decode rows'
// tokens, positions, context lengths, table rows and sampling, each section 256-byte aligned, then
// the block table. Zeroed: a table entry is a valid block (0) before anyone writes it.
void ExecutorCore::allocate_paged_step_inputs() {
  const size_t B = static_cast<size_t>(opt.max_batch);
  auto section = [](size_t bytes) { return (bytes + 255) / 256 * 256; };
  const size_t ints = section(B * sizeof(int32_t));
  step_inputs_head = 4 * ints + section(B * sizeof(SampleRow));
  const int stride = (opt.max_seq + opt.kv_block_size - 1) / opt.kv_block_size;
  const size_t table_bytes = static_cast<size_t>(opt.kv_table_rows) * stride * sizeof(int32_t);
  step_inputs = static_cast<uint8_t*>(
      mem.alloc("paged step inputs and block table", step_inputs_head + table_bytes));
  dec_tokens = reinterpret_cast<int32_t*>(step_inputs);
  dec_pos = reinterpret_cast<int32_t*>(step_inputs + ints);
  dec_ctx = reinterpret_cast<int32_t*>(step_inputs + 2 * ints);
  dec_slots = reinterpret_cast<int32_t*>(step_inputs + 3 * ints);
  dec_sample = reinterpret_cast<SampleRow*>(step_inputs + 4 * ints);
  kv_table = reinterpret_cast<int32_t*>(step_inputs + step_inputs_head);
  kv = kv_pages(kv_table, opt.kv_block_size, stride);
  MEGAOPS_CUDA_CHECK(cudaMemset(step_inputs, 0, step_inputs_head + table_bytes));
  MEGAOPS_CUDA_CHECK(cudaDeviceSynchronize());  // the executor's stream does not wait for memsets
}

// Releases what the executor created. In ExecutorCore, not in ~ConventionalExecutor: when setup()
// throws part-way (an out-of-memory buffer, a bad weight), impl_ is already a complete member and
// is destroyed, so the stream, events, graphs and the pinned token buffer made so far are freed
// too (device buffers are freed by `mem` afterwards).
ExecutorCore::~ExecutorCore() {
  if (peer) teardown_peer_reduce();
  for (cudaEvent_t e : prof_events) cudaEventDestroy(e);
  for (cudaEvent_t e : ring_done)
    if (e) cudaEventDestroy(e);
  for (auto& [key, exec] : graphs) cudaGraphExecDestroy(exec);
  if (stream) {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
  if (OverlapState* o = ovl.get()) {
    for (cudaStream_t x : o->streams) {
      cudaStreamSynchronize(x);
      cudaStreamDestroy(x);
    }
    if (o->fork) cudaEventDestroy(o->fork);
    for (cudaEvent_t e : o->joins) cudaEventDestroy(e);
  }
  if (host_tokens) cudaFreeHost(host_tokens);
}

}  // namespace megaops
