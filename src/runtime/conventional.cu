// See conventional.h. Per decode step, with B sequences:
//   embedding → per layer [add+rmsnorm → QKV matmul → q/k norm + RoPE + cache write → attention →
//   O matmul → add+rmsnorm → gate|up matmul → SiLU·mul → down matmul] → add+final norm → LM head →
//   sample → advance positions.
// The residual add of each block is fused into the next norm, so the layer is 9 kernels.
#include <algorithm>
#include <cstring>
#include <map>

#include "core/cuda_check.h"
#include "core/error.h"
#include "core/parallel.h"
#include "kernels/attention.cuh"
#include "kernels/embedding.cuh"
#include "kernels/matmul.cuh"
#include "kernels/qkv_rope.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/sampling.cuh"
#include "kernels/silu_mul.cuh"
#include "models/checkpoint.h"
#include "runtime/conventional.h"
#include "runtime/device_memory.h"
#include "runtime/step_state.cuh"

namespace megaops {

WeightFiller checkpoint_filler(const Checkpoint& ckpt) {
  return [&ckpt](const WeightSpec& spec, size_t, float* out) {
    const TensorView& t = ckpt.weight(spec.name);
    to_float(t.dtype, t.data, out, t.numel());
  };
}

WeightFiller random_filler(uint64_t seed) {
  return [seed](const WeightSpec& spec, size_t index, float* out) {
    size_t numel = 1;
    for (int64_t d : spec.shape) numel *= static_cast<size_t>(d);
    parallel_for(numel, 1 << 20, [&](size_t b, size_t e) {
      random_weight_values(spec, static_cast<uint32_t>(index), seed, b, e - b, out + b);
    });
  };
}

namespace {

struct LayerWeights {
  bf16* ln1 = nullptr;
  bf16* wqkv = nullptr;  // [q + 2 kv, h]: q rows, then k, then v
  bf16* q_norm = nullptr;
  bf16* k_norm = nullptr;
  bf16* wo = nullptr;
  bf16* ln2 = nullptr;
  bf16* wgu = nullptr;  // [2 i, h]: gate rows, then up
  bf16* wdown = nullptr;
  bf16* k_cache = nullptr;
  bf16* v_cache = nullptr;
};

}  // namespace

struct OpTimeKey {
  std::string op;
  int layer;
};

struct ConventionalExecutor::Impl {
  ModelConfig cfg;
  ExecutorOptions opt;
  DeviceMemory mem;
  cudaStream_t stream = nullptr;
  std::unique_ptr<MatmulContext> mm;

  bf16* embed = nullptr;
  bf16* final_norm = nullptr;
  bf16* lm_head = nullptr;
  std::vector<LayerWeights> layers;
  float* inv_freq = nullptr;
  size_t weight_bytes = 0;

  // Activations, sized for max(prefill_chunk, max_batch) tokens.
  int max_tokens = 0;
  float* residual = nullptr;
  bf16* normed = nullptr;
  float* qkv = nullptr;  // matmul outputs stay fp32: one bf16 rounding fewer per projection
  bf16* q = nullptr;
  bf16* attn = nullptr;
  float* delta = nullptr;  // O and down projections' output, added by the next norm
  float* gu = nullptr;
  bf16* act = nullptr;
  bf16* lm_in = nullptr;  // [max_batch, h]: the rows the LM head reads
  float* logits = nullptr;
  float* attn_ws = nullptr;
  int32_t* tok_ids = nullptr;  // prefill inputs [max_tokens]
  int32_t* tok_pos = nullptr;
  int32_t* tok_slot = nullptr;

  // Decode state (device), see step_state.cuh.
  int32_t* dec_tokens = nullptr;
  int32_t* dec_pos = nullptr;
  int32_t* dec_ctx = nullptr;
  int32_t* dec_slots = nullptr;
  uint32_t* step = nullptr;
  int32_t* host_tokens = nullptr;  // pinned

  int batch = 0;
  std::vector<int> host_pos;  // mirror of dec_pos, for limit checks
  std::map<std::pair<int, bool>, cudaGraphExec_t> graphs;
  bool capturing = false;

  // Profiling (see profile_decode_steps): an event recorded after every op.
  bool profiling = false;
  int current_layer = -1;
  std::vector<cudaEvent_t> prof_events;
  std::vector<OpTimeKey> prof_ops;

  void check(cudaError_t err, const char* op) {
    if (err != cudaSuccess) throw DeviceError(std::string(op) + ": " + cudaGetErrorString(err));
    if (profiling) {
      const size_t i = prof_ops.size();
      if (i + 1 >= prof_events.size()) throw Error("internal: profiling event pool exhausted");
      // External: inside capture a plain record is only a dependency marker, not a timing node.
      MEGAOPS_CUDA_CHECK(
          cudaEventRecordWithFlags(prof_events[i + 1], stream, cudaEventRecordExternal));
      prof_ops.push_back({op, current_layer});
    }
    if (opt.debug_sync && !capturing) {
      const cudaError_t s = cudaStreamSynchronize(stream);
      if (s != cudaSuccess)
        throw DeviceError(std::string(op) + " (debug sync): " + cudaGetErrorString(s));
    }
  }

  LaunchOptions launch(bool pdl) const { return LaunchOptions{stream, pdl}; }

  void matmul(const bf16* x, const bf16* w, void* y, DType y_dtype, int m, int n, int k, bool pdl,
              const char* op) {
    MatmulParams p;
    p.x = x;
    p.ldx = k;
    p.w = w;
    p.y = y;
    p.ldy = n;
    p.y_dtype = y_dtype;
    p.m = m;
    p.n = n;
    p.k = k;
    p.launch = launch(pdl);
    check(mm->run(p), op);
  }

  void add_rmsnorm(const float* delta_in, const bf16* w, bf16* out, int rows, bool pdl,
                   const char* op) {
    AddRmsNormParams p;
    p.residual = residual;
    p.delta_f32 = delta_in;
    p.weight = w;
    p.out = out;
    p.rows = rows;
    p.n = cfg.hidden_size;
    p.eps = cfg.rms_norm_eps;
    p.launch = launch(pdl);
    check(launch_add_rmsnorm(p), op);
  }

  // Everything from the embedding to the last layer's down projection, for `t` tokens whose ids,
  // positions and slots are at ids/pos/slots. `decode` selects the attention kernel.
  void run_layers(int t, const int32_t* ids, const int32_t* pos, const int32_t* slots,
                  const int32_t* ctx, bool decode, bool pdl) {
    const int h = cfg.hidden_size, qd = cfg.q_dim(), kvd = cfg.kv_dim(),
              inter = cfg.intermediate_size;
    EmbeddingParams ep;
    ep.ids = ids;
    ep.table = embed;
    ep.out = residual;
    ep.n = t;
    ep.hidden = h;
    ep.vocab = cfg.vocab_size;
    ep.launch = launch(pdl);
    check(launch_embedding(ep), "embedding");
    for (int l = 0; l < cfg.num_layers; ++l) {
      current_layer = l;
      const LayerWeights& L = layers[l];
      add_rmsnorm(l == 0 ? nullptr : delta, L.ln1, normed, t, pdl, "input_layernorm");
      matmul(normed, L.wqkv, qkv, DType::F32, t, qd + 2 * kvd, h, pdl, "qkv_proj");
      QkvRopeParams rp;
      rp.qkv_f32 = qkv;
      rp.positions = pos;
      rp.slots = slots;
      rp.q_norm = L.q_norm;
      rp.k_norm = L.k_norm;
      rp.inv_freq = inv_freq;
      rp.q_out = q;
      rp.k_cache = L.k_cache;
      rp.v_cache = L.v_cache;
      rp.t = t;
      rp.num_heads = cfg.num_heads;
      rp.num_kv_heads = cfg.num_kv_heads;
      rp.head_dim = cfg.head_dim;
      rp.max_seq = opt.max_seq;
      rp.eps = cfg.rms_norm_eps;
      rp.launch = launch(pdl);
      check(launch_qkv_rope(rp), "qkv_rope");
      const float scale = 1.0f / std::sqrt(static_cast<float>(cfg.head_dim));
      if (decode) {
        DecodeAttentionParams ap;
        ap.q = q;
        ap.k_cache = L.k_cache;
        ap.v_cache = L.v_cache;
        ap.slots = slots;
        ap.ctx_lens = ctx;
        ap.out = attn;
        ap.workspace = attn_ws;
        ap.b = t;
        ap.num_heads = cfg.num_heads;
        ap.num_kv_heads = cfg.num_kv_heads;
        ap.head_dim = cfg.head_dim;
        ap.max_seq = opt.max_seq;
        ap.scale = scale;
        ap.launch = launch(pdl);
        check(launch_decode_attention(ap), "decode_attention");
      } else {
        PrefillAttentionParams ap;
        ap.q = q;
        ap.k_cache = L.k_cache;
        ap.v_cache = L.v_cache;
        ap.slots = slots;
        ap.positions = pos;
        ap.out = attn;
        ap.t = t;
        ap.num_heads = cfg.num_heads;
        ap.num_kv_heads = cfg.num_kv_heads;
        ap.head_dim = cfg.head_dim;
        ap.max_seq = opt.max_seq;
        ap.scale = scale;
        ap.launch = launch(pdl);
        check(launch_prefill_attention(ap), "prefill_attention");
      }
      matmul(attn, L.wo, delta, DType::F32, t, h, qd, pdl, "o_proj");
      add_rmsnorm(delta, L.ln2, normed, t, pdl, "post_attention_layernorm");
      matmul(normed, L.wgu, gu, DType::F32, t, 2 * inter, h, pdl, "gate_up_proj");
      SiluMulParams sp;
      sp.gate_up_f32 = gu;
      sp.out = act;
      sp.m = t;
      sp.inter = inter;
      sp.launch = launch(pdl);
      check(launch_silu_mul(sp), "silu_mul");
      matmul(act, L.wdown, delta, DType::F32, t, h, inter, pdl, "down_proj");
    }
    current_layer = -1;
  }

  void lm_head_and_sample(const bf16* rows, int b, bool pdl) {
    matmul(rows, lm_head, logits, DType::F32, b, cfg.vocab_size, cfg.hidden_size, pdl, "lm_head");
    SampleParams sp;
    sp.logits = logits;
    sp.ld = cfg.vocab_size;
    sp.b = b;
    sp.vocab = cfg.vocab_size;
    sp.temperature = opt.sampling.temperature;
    sp.top_k = opt.sampling.top_k;
    sp.top_p = opt.sampling.top_p;
    sp.seed = opt.sampling.seed;
    sp.step = step;
    sp.tokens = dec_tokens;
    sp.launch = launch(pdl);
    check(launch_sample(sp), "sample");
  }

  void record_decode_step(int b, bool pdl) {
    run_layers(b, dec_tokens, dec_pos, dec_slots, dec_ctx, /*decode=*/true, pdl);
    add_rmsnorm(delta, final_norm, normed, b, pdl, "final_norm");
    lm_head_and_sample(normed, b, pdl);
    StepAdvanceParams ap;
    ap.positions = dec_pos;
    ap.ctx_lens = dec_ctx;
    ap.step = step;
    ap.b = b;
    ap.launch = launch(pdl);
    check(launch_step_advance(ap), "step_advance");
  }

  cudaGraphExec_t graph_for(int b, bool pdl) {
    auto it = graphs.find({b, pdl});
    if (it != graphs.end()) return it->second;
    cudaGraph_t graph = nullptr;
    MEGAOPS_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    capturing = true;
    try {
      record_decode_step(b, pdl);
    } catch (...) {
      capturing = false;
      cudaStreamEndCapture(stream, &graph);
      if (graph) cudaGraphDestroy(graph);
      throw;
    }
    capturing = false;
    MEGAOPS_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);
    MEGAOPS_CUDA_CHECK(err);
    graphs[{b, pdl}] = exec;
    return exec;
  }
};

ConventionalExecutor::ConventionalExecutor(const ModelConfig& cfg, const WeightFiller& weights,
                                           ExecutorOptions opt,
                                           const std::function<void(size_t, size_t)>& progress)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.cfg = cfg;
  s.opt = opt;
  if (opt.max_batch < 1 || opt.max_batch > MATMUL_SMALL_M_MAX)
    throw_input_error("executor", "max_batch",
                      "expected 1.." + std::to_string(MATMUL_SMALL_M_MAX) + ", found " +
                          std::to_string(opt.max_batch));
  if (opt.max_seq < 1 || opt.max_seq > cfg.max_position_embeddings)
    throw_input_error("executor", "max_seq",
                      "expected 1.." + std::to_string(cfg.max_position_embeddings) +
                          " (max_position_embeddings), found " + std::to_string(opt.max_seq));
  if (opt.prefill_chunk < 1) throw_input_error("executor", "prefill_chunk", "expected >= 1");
  // A prefill never holds more than max_batch * max_seq tokens, so no chunk needs to be larger:
  // short-context executors do not pay for 2048-token activation buffers.
  s.opt.prefill_chunk = static_cast<int>(
      std::min<int64_t>(opt.prefill_chunk, static_cast<int64_t>(opt.max_batch) * opt.max_seq));

  MEGAOPS_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  s.mm = std::make_unique<MatmulContext>();

  const int h = cfg.hidden_size, qd = cfg.q_dim(), kvd = cfg.kv_dim(),
            inter = cfg.intermediate_size;
  auto alloc_bf16 = [&](const std::string& what, size_t n) {
    return s.mem.alloc_array<bf16>(what, n);
  };
  s.embed = alloc_bf16("embed_tokens", static_cast<size_t>(cfg.vocab_size) * h);
  s.final_norm = alloc_bf16("model.norm", h);
  s.lm_head = cfg.tie_word_embeddings
                  ? s.embed
                  : alloc_bf16("lm_head", static_cast<size_t>(cfg.vocab_size) * h);
  s.layers.resize(cfg.num_layers);
  const size_t kv_elems = static_cast<size_t>(opt.max_batch) * opt.max_seq * kvd;
  for (int l = 0; l < cfg.num_layers; ++l) {
    LayerWeights& L = s.layers[l];
    const std::string p = "layer " + std::to_string(l) + " ";
    L.ln1 = alloc_bf16(p + "input_layernorm", h);
    L.wqkv = alloc_bf16(p + "qkv_proj", static_cast<size_t>(qd + 2 * kvd) * h);
    if (cfg.has_qk_norm()) {
      L.q_norm = alloc_bf16(p + "q_norm", cfg.head_dim);
      L.k_norm = alloc_bf16(p + "k_norm", cfg.head_dim);
    }
    L.wo = alloc_bf16(p + "o_proj", static_cast<size_t>(h) * qd);
    L.ln2 = alloc_bf16(p + "post_attention_layernorm", h);
    L.wgu = alloc_bf16(p + "gate_up_proj", static_cast<size_t>(2 * inter) * h);
    L.wdown = alloc_bf16(p + "down_proj", static_cast<size_t>(h) * inter);
    L.k_cache = alloc_bf16(p + "k_cache", kv_elems);
    L.v_cache = alloc_bf16(p + "v_cache", kv_elems);
  }

  // Upload: each HF tensor goes to its place (q/k/v and gate/up are concatenated row blocks).
  const std::vector<WeightSpec> specs = expected_weights(cfg);
  size_t total = 0;
  for (const auto& spec : specs) {
    size_t n = 1;
    for (int64_t d : spec.shape) n *= static_cast<size_t>(d);
    total += n * 2;
  }
  // A decode step reads one embedding row, so an untied embedding table is not streamed.
  s.weight_bytes =
      total - (cfg.tie_word_embeddings ? 0 : static_cast<size_t>(cfg.vocab_size) * h * 2);
  std::vector<float> f32;
  std::vector<uint16_t> b16;
  size_t done = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& spec = specs[i];
    size_t n = 1;
    for (int64_t d : spec.shape) n *= static_cast<size_t>(d);
    f32.resize(n);
    b16.resize(n);
    weights(spec, i, f32.data());
    parallel_for(n, 1 << 20, [&](size_t b, size_t e) {
      from_float(DType::BF16, f32.data() + b, b16.data() + b, e - b);
    });
    bf16* dst = nullptr;
    const std::string& name = spec.name;
    if (name == "model.embed_tokens.weight") {
      dst = s.embed;
    } else if (name == "model.norm.weight") {
      dst = s.final_norm;
    } else if (name == "lm_head.weight") {
      dst = s.lm_head;
    } else {
      const size_t dot = name.find('.', 13);  // "model.layers.N."
      const int l = std::stoi(name.substr(13, dot - 13));
      const std::string suffix = name.substr(dot + 1);
      LayerWeights& L = s.layers[l];
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
    MEGAOPS_CUDA_CHECK(cudaMemcpy(dst, b16.data(), n * 2, cudaMemcpyHostToDevice));
    done += n * 2;
    if (progress) progress(done, total);
  }

  const std::vector<float> inv = rope_inv_freq(cfg);
  s.inv_freq = s.mem.alloc_array<float>("rope inv_freq", inv.size());
  MEGAOPS_CUDA_CHECK(
      cudaMemcpy(s.inv_freq, inv.data(), inv.size() * sizeof(float), cudaMemcpyHostToDevice));

  const int T = std::max(s.opt.prefill_chunk, opt.max_batch);
  s.max_tokens = T;
  s.residual = s.mem.alloc_array<float>("residual", static_cast<size_t>(T) * h);
  s.normed = alloc_bf16("normed", static_cast<size_t>(T) * h);
  s.qkv = s.mem.alloc_array<float>("qkv", static_cast<size_t>(T) * (qd + 2 * kvd));
  s.q = alloc_bf16("q", static_cast<size_t>(T) * qd);
  s.attn = alloc_bf16("attention output", static_cast<size_t>(T) * qd);
  s.delta = s.mem.alloc_array<float>("projection output", static_cast<size_t>(T) * h);
  s.gu = s.mem.alloc_array<float>("gate_up", static_cast<size_t>(T) * 2 * inter);
  s.act = alloc_bf16("silu_mul", static_cast<size_t>(T) * inter);
  s.lm_in = alloc_bf16("lm_head input", static_cast<size_t>(opt.max_batch) * h);
  s.logits =
      s.mem.alloc_array<float>("logits", static_cast<size_t>(opt.max_batch) * cfg.vocab_size);
  s.attn_ws = s.mem.alloc_array<float>(
      "attention workspace",
      decode_attention_workspace_floats(opt.max_batch, cfg.num_heads, cfg.head_dim, opt.max_seq));
  s.tok_ids = s.mem.alloc_array<int32_t>("prefill ids", T);
  s.tok_pos = s.mem.alloc_array<int32_t>("prefill positions", T);
  s.tok_slot = s.mem.alloc_array<int32_t>("prefill slots", T);
  s.dec_tokens = s.mem.alloc_array<int32_t>("decode tokens", opt.max_batch);
  s.dec_pos = s.mem.alloc_array<int32_t>("decode positions", opt.max_batch);
  s.dec_ctx = s.mem.alloc_array<int32_t>("decode context lengths", opt.max_batch);
  s.dec_slots = s.mem.alloc_array<int32_t>("decode slots", opt.max_batch);
  s.step = s.mem.alloc_array<uint32_t>("step counter", 1);
  MEGAOPS_CUDA_CHECK(cudaMallocHost(&s.host_tokens, opt.max_batch * sizeof(int32_t)));
}

ConventionalExecutor::~ConventionalExecutor() {
  if (!impl_) return;
  for (cudaEvent_t e : impl_->prof_events) cudaEventDestroy(e);
  for (auto& [key, exec] : impl_->graphs) cudaGraphExecDestroy(exec);
  if (impl_->stream) {
    cudaStreamSynchronize(impl_->stream);
    cudaStreamDestroy(impl_->stream);
  }
  if (impl_->host_tokens) cudaFreeHost(impl_->host_tokens);
}

const ModelConfig& ConventionalExecutor::config() const {
  return impl_->cfg;
}
const ExecutorOptions& ConventionalExecutor::options() const {
  return impl_->opt;
}
cudaStream_t ConventionalExecutor::stream() const {
  return impl_->stream;
}
size_t ConventionalExecutor::weight_bytes() const {
  return impl_->weight_bytes;
}
void ConventionalExecutor::set_pdl(bool pdl) {
  impl_->opt.pdl = pdl;
}

size_t ConventionalExecutor::kv_bytes_read() const {
  const Impl& s = *impl_;
  size_t positions = 0;
  for (int b = 0; b < s.batch; ++b) positions += static_cast<size_t>(s.host_pos[b]) + 1;
  return positions * s.cfg.kv_dim() * 2 /*k and v*/ * 2 /*bytes*/ * s.cfg.num_layers;
}

static void check_ids(const std::vector<int>& ids, int vocab, const char* what) {
  for (int id : ids)
    if (id < 0 || id >= vocab)
      throw_input_error(what, "",
                        "token id " + std::to_string(id) + " outside the vocabulary [0, " +
                            std::to_string(vocab) + ")");
}

std::vector<int> ConventionalExecutor::prefill(const std::vector<std::vector<int>>& prompts) {
  Impl& s = *impl_;
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
  const int h = s.cfg.hidden_size;
  // Flatten all prompts and run them in chunks; a sequence's last token row is copied to lm_in[b].
  std::vector<int32_t> ids, pos, slot;
  for (int b = 0; b < B; ++b)
    for (size_t i = 0; i < prompts[b].size(); ++i) {
      ids.push_back(prompts[b][i]);
      pos.push_back(static_cast<int32_t>(i));
      slot.push_back(b);
    }
  const int total = static_cast<int>(ids.size());
  for (int c0 = 0; c0 < total; c0 += s.opt.prefill_chunk) {
    const int t = std::min(s.opt.prefill_chunk, total - c0);
    MEGAOPS_CUDA_CHECK(
        cudaMemcpyAsync(s.tok_ids, ids.data() + c0, t * 4, cudaMemcpyHostToDevice, s.stream));
    MEGAOPS_CUDA_CHECK(
        cudaMemcpyAsync(s.tok_pos, pos.data() + c0, t * 4, cudaMemcpyHostToDevice, s.stream));
    MEGAOPS_CUDA_CHECK(
        cudaMemcpyAsync(s.tok_slot, slot.data() + c0, t * 4, cudaMemcpyHostToDevice, s.stream));
    s.run_layers(t, s.tok_ids, s.tok_pos, s.tok_slot, nullptr, /*decode=*/false, false);
    s.add_rmsnorm(s.delta, s.final_norm, s.normed, t, false, "final_norm");
    for (int i = c0; i < c0 + t; ++i) {
      const bool last = i + 1 == total || slot[i + 1] != slot[i];
      if (!last) continue;
      MEGAOPS_CUDA_CHECK(cudaMemcpyAsync(s.lm_in + static_cast<size_t>(slot[i]) * h,
                                         s.normed + static_cast<size_t>(i - c0) * h, h * 2,
                                         cudaMemcpyDeviceToDevice, s.stream));
    }
    // Host vectors must outlive the async copies above.
    MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  }
  std::vector<int32_t> dpos(B), dctx(B), dslot(B);
  for (int b = 0; b < B; ++b) {
    dpos[b] = static_cast<int32_t>(prompts[b].size());
    dctx[b] = dpos[b] + 1;
    dslot[b] = b;
  }
  const uint32_t step0 = 0, step1 = 1;
  MEGAOPS_CUDA_CHECK(
      cudaMemcpyAsync(s.step, &step0, sizeof(step0), cudaMemcpyHostToDevice, s.stream));
  s.lm_head_and_sample(s.lm_in, B, false);
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
  return std::vector<int>(s.host_tokens, s.host_tokens + B);
}

std::vector<int> ConventionalExecutor::decode_step(const std::vector<int>* forced) {
  Impl& s = *impl_;
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
  if (s.opt.debug_sync) {
    s.record_decode_step(s.batch, s.opt.pdl);  // eager, checked op by op
  } else {
    MEGAOPS_CUDA_CHECK(cudaGraphLaunch(s.graph_for(s.batch, s.opt.pdl), s.stream));
  }
  MEGAOPS_CUDA_CHECK(
      cudaMemcpyAsync(s.host_tokens, s.dec_tokens, s.batch * 4, cudaMemcpyDeviceToHost, s.stream));
  MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  for (int b = 0; b < s.batch; ++b) ++s.host_pos[b];
  return std::vector<int>(s.host_tokens, s.host_tokens + s.batch);
}

std::vector<ConventionalExecutor::OpTime> ConventionalExecutor::profile_decode_steps(int steps) {
  Impl& s = *impl_;
  if (s.batch == 0) throw_input_error("profile", "", "profile_decode_steps before prefill");
  for (int b = 0; b < s.batch; ++b)
    if (s.host_pos[b] + steps > s.opt.max_seq)
      throw_input_error(
          "profile", "steps",
          "sequence " + std::to_string(b) + " would pass max_seq " + std::to_string(s.opt.max_seq));
  const size_t max_ops = static_cast<size_t>(s.cfg.num_layers) * 16 + 16;
  while (s.prof_events.size() < max_ops + 1) {
    cudaEvent_t e;
    MEGAOPS_CUDA_CHECK(cudaEventCreate(&e));
    s.prof_events.push_back(e);
  }
  s.prof_ops.clear();
  cudaGraph_t graph = nullptr;
  MEGAOPS_CUDA_CHECK(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal));
  s.capturing = s.profiling = true;
  try {
    MEGAOPS_CUDA_CHECK(
        cudaEventRecordWithFlags(s.prof_events[0], s.stream, cudaEventRecordExternal));
    s.record_decode_step(s.batch, /*pdl=*/false);
  } catch (...) {
    s.capturing = s.profiling = false;
    cudaStreamEndCapture(s.stream, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  s.capturing = s.profiling = false;
  MEGAOPS_CUDA_CHECK(cudaStreamEndCapture(s.stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  MEGAOPS_CUDA_CHECK(err);
  std::vector<OpTime> out(s.prof_ops.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = {s.prof_ops[i].op, s.prof_ops[i].layer, 0.0};
  try {
    for (int r = 0; r < steps; ++r) {
      MEGAOPS_CUDA_CHECK(cudaGraphLaunch(exec, s.stream));
      MEGAOPS_CUDA_CHECK(cudaStreamSynchronize(s.stream));
      for (size_t i = 0; i < out.size(); ++i) {
        float ms = 0;
        MEGAOPS_CUDA_CHECK(cudaEventElapsedTime(&ms, s.prof_events[i], s.prof_events[i + 1]));
        out[i].us += 1e3 * ms / steps;
      }
      for (int b = 0; b < s.batch; ++b) ++s.host_pos[b];
    }
  } catch (...) {
    cudaGraphExecDestroy(exec);
    throw;
  }
  cudaGraphExecDestroy(exec);
  return out;
}

std::vector<float> ConventionalExecutor::last_logits() const {
  const Impl& s = *impl_;
  std::vector<float> out(static_cast<size_t>(s.batch) * s.cfg.vocab_size);
  MEGAOPS_CUDA_CHECK(
      cudaMemcpy(out.data(), s.logits, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace megaops
