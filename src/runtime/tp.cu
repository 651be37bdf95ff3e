// Tensor parallelism (ExecutorOptions::tp, issue 6, graph/tensor_parallel.h): this executor is
// rank tp_rank of tp and computes with its shard of the weights; the O and down projections'
// partial outputs are added over the ranks (an NCCL all-reduce, or TpReduce::Peer: one kernel
// reading the other ranks' partials through CUDA IPC) and the LM head's rows gathered, so every
// rank samples the same tokens.
#include <cstring>

#include "graph/tensor_parallel.h"
#include "kernels/tp_reduce.cuh"
#include "runtime/executor_core.h"
#include "runtime/tp.h"
#include "runtime/tp_comm.h"

namespace megaops {

// Validates the tensor-parallel options, then takes this rank's configuration: `cfg` becomes the
// rank's (its heads, kv heads and intermediate features), full_cfg stays the model's.
void ExecutorCore::setup_tp(const ModelConfig& model) {
  if (opt.tp > 1 && opt.tp_comm == nullptr)
    throw_input_error(
        "executor", "tp_comm",
        "tp = " + std::to_string(opt.tp) + " needs a communicator (runtime/tp_comm.h)");
  const TpShape tp_part = tp_shape(model, opt.tp, opt.tp_rank);
  if (opt.tp_comm != nullptr) {
    if (opt.backend == DecodeBackend::Overlap)
      throw_input_error("executor", "backend",
                        "the overlap backend does not run with tensor parallelism yet");
    if (opt.prefill_path == PrefillPath::DecodeGraph)
      throw_input_error("executor", "prefill_path",
                        "the decode-graph prefill does not run with tensor parallelism yet");
    comm = static_cast<ncclComm_t>(opt.tp_comm);
    cfg = tp_rank_config(model, tp_part);
    vocab0 = tp_part.vocab0;
    vocab_part = tp_part.vocab;
    vocab_pad = (model.vocab_size + opt.tp - 1) / opt.tp;
  }
}

// What this rank streams: its shards, the replicated norms, its LM head rows.
size_t ExecutorCore::tp_weight_bytes(const ModelConfig& model,
                                     const std::vector<WeightSpec>& specs) const {
  const TpShape tp_part = tp_shape(model, opt.tp, opt.tp_rank);
  size_t mine = 0;
  for (const auto& spec : specs) {
    const int64_t rows = spec.shape[0], cols = spec.shape.size() > 1 ? spec.shape[1] : 1;
    const TpSlice sl = tp_slice(model, tp_part, spec.name);
    if (spec.name == "model.embed_tokens.weight") continue;  // one row per step
    mine += static_cast<size_t>(sl.split == TpSplit::Replicated ? rows * cols
                                : sl.split == TpSplit::Rows     ? (sl.end - sl.begin) * cols
                                                                : rows * (sl.end - sl.begin)) *
            2;
  }
  if (model.tie_word_embeddings) mine += static_cast<size_t>(vocab_part) * cfg.hidden_size * 2;
  return mine;
}

// Tensor parallelism: the row-parallel projections' partial sums, added over the ranks in place.
void ExecutorCore::all_reduce_delta(int t, const char* op) {
  if (comm == nullptr) return;
  nccl_check(nccl_api().all_reduce(delta, delta, static_cast<size_t>(t) * cfg.hidden_size,
                                   ncclFloat32, ncclSum, comm, stream),
             op);
  check(cudaGetLastError(), op);
}

// TpReduce::Peer: rank r's partial slot `site` (2 x layer, + 1 for down_proj) and counter, as
// mapped in this process.
float* ExecutorCore::peer_slot(int r, int site) const {
  return reinterpret_cast<float*>(peer->rank_base[r]) +
         static_cast<size_t>(site) * peer->slot_floats;
}
uint32_t* ExecutorCore::peer_counter(int r, int site) const {
  return reinterpret_cast<uint32_t*>(peer->rank_base[r] + peer->counters_offset) + site;
}
void ExecutorCore::peer_reduce_delta(int site, int t, bool pdl) {
  PeerReduceParams p;
  for (int r = 0; r < opt.tp; ++r) {
    p.parts[r] = peer_slot(r, site);
    p.counters[r] = peer_counter(r, site);
  }
  p.own_counter = peer_counter(opt.tp_rank, site);
  p.step = peer->step;
  p.out = delta;
  p.ranks = opt.tp;
  p.count = static_cast<int64_t>(t) * cfg.hidden_size;
  p.watchdog = peer->watchdog->params();
  p.site = static_cast<uint32_t>(site);
  p.launch = launch(pdl);
  check(launch_tp_peer_reduce(p), site % 2 == 0 ? "o_proj peer reduce" : "down_proj peer reduce");
}

void ExecutorCore::tp_lm_head_logits(const bf16* rows, int b, bool pdl) {
  matmul(rows, lm_head, logits_part, DType::F32, b, vocab_part, cfg.hidden_size, pdl, "lm_head",
         vocab_pad);
  const size_t block = static_cast<size_t>(b) * vocab_pad;
  nccl_check(nccl_api().all_gather(logits_part, logits_all, block, ncclFloat32, comm, stream),
             "lm_head all-gather");
  for (int r = 0; r < opt.tp; ++r) {
    const TpShape sh = tp_shape(full_cfg, opt.tp, r);
    if (sh.vocab == 0) continue;
    MEGAOPS_CUDA_CHECK(cudaMemcpy2DAsync(
        logits + sh.vocab0, static_cast<size_t>(cfg.vocab_size) * sizeof(float),
        logits_all + r * block, static_cast<size_t>(vocab_pad) * sizeof(float),
        static_cast<size_t>(sh.vocab) * sizeof(float), b, cudaMemcpyDeviceToDevice, stream));
  }
  check(cudaGetLastError(), "lm_head gather");
}

// TpReduce::Peer: this rank's slots and counters in one cudaMalloc (an IPC handle covers a whole
// allocation), the handles exchanged over the communicator (an NCCL all-gather of 64 bytes per
// rank), the peers' allocations mapped here. IPC maps memory of GPUs of this host only.
void ExecutorCore::setup_peer_reduce() {
  if (comm == nullptr)
    throw_input_error("executor", "tp_reduce", "peer needs a communicator (tp_comm)");
  if (opt.tp > TP_PEER_MAX)
    throw_input_error("executor", "tp_reduce",
                      "peer reduces over at most " + std::to_string(TP_PEER_MAX) +
                          " ranks of one host, found tp = " + std::to_string(opt.tp));
  auto p = std::make_unique<PeerReduce>();
  const size_t sites = 2 * static_cast<size_t>(cfg.num_layers);
  p->slot_floats = static_cast<size_t>(opt.max_batch) * cfg.hidden_size;
  p->counters_offset = (sites * p->slot_floats * sizeof(float) + 255) / 256 * 256;
  const size_t bytes = p->counters_offset + sites * sizeof(uint32_t);
  if (const cudaError_t err = cudaMalloc(&p->base, bytes); err != cudaSuccess)
    throw DeviceError("tensor parallel peer reduce: cannot allocate " + std::to_string(bytes) +
                      " bytes of partial slots: " + cudaGetErrorString(err));
  peer = std::move(p);  // freed by ~ExecutorCore from here on, also if the rest throws
  MEGAOPS_CUDA_CHECK(cudaMemset(peer->base, 0, bytes));
  peer->step = mem.alloc_array<uint32_t>("tp decode step", 1);
  MEGAOPS_CUDA_CHECK(cudaMemset(peer->step, 0, sizeof(uint32_t)));
  // ExecutorOptions::tp_peer_watchdog_ms: 30 s by default, since ranks reach a step at
  // host-dependent times (graph capture, printing); a lost signal is still an error, not a hang.
  peer->watchdog = std::make_unique<WatchdogRecord>(static_cast<uint64_t>(opt.tp_peer_watchdog_ms),
                                                    opt.wait_sleep_max_ns);
  for (int l = 0; l < cfg.num_layers; ++l)
    for (const char* op : {"o_proj", "down_proj"})
      peer->site_names.push_back("layer " + std::to_string(l) + " " + op + " peer reduce");
  peer->rank_base.assign(opt.tp, nullptr);
  peer->rank_base[opt.tp_rank] = static_cast<char*>(peer->base);
  if (opt.tp > 1) {
    cudaIpcMemHandle_t own;
    MEGAOPS_CUDA_CHECK(cudaIpcGetMemHandle(&own, peer->base));
    const size_t hb = sizeof(cudaIpcMemHandle_t);
    char* dev = nullptr;
    MEGAOPS_CUDA_CHECK(cudaMalloc(&dev, hb * (opt.tp + 1)));
    std::vector<char> all(hb * opt.tp);
    const cudaError_t up = cudaMemcpy(dev + hb * opt.tp, &own, hb, cudaMemcpyHostToDevice);
    const ncclResult_t nr = up == cudaSuccess ? nccl_api().all_gather(dev + hb * opt.tp, dev, hb,
                                                                      ncclUint8, comm, stream)
                                              : ncclSuccess;
    const cudaError_t sync = up == cudaSuccess ? cudaStreamSynchronize(stream) : up;
    const cudaError_t down = sync == cudaSuccess
                                 ? cudaMemcpy(all.data(), dev, all.size(), cudaMemcpyDeviceToHost)
                                 : sync;
    cudaFree(dev);
    nccl_check(nr, "peer reduce: exchanging IPC handles");
    MEGAOPS_CUDA_CHECK(down);
    for (int r = 0; r < opt.tp; ++r) {
      if (r == opt.tp_rank) continue;
      cudaIpcMemHandle_t h;
      std::memcpy(&h, all.data() + hb * r, hb);
      void* mapped = nullptr;
      const cudaError_t err = cudaIpcOpenMemHandle(&mapped, h, cudaIpcMemLazyEnablePeerAccess);
      if (err != cudaSuccess)
        throw DeviceError("tensor parallel peer reduce: cannot map rank " + std::to_string(r) +
                          "'s memory (all ranks must be GPUs of one host with peer access; use "
                          "the NCCL reduce otherwise): " +
                          cudaGetErrorString(err));
      peer->rank_base[r] = static_cast<char*>(mapped);
    }
  }
  MEGAOPS_CUDA_CHECK(preload_tp_reduce_kernels());
  peer->ready = true;
}

// The peers may read this rank's slots until they finish their decode steps: waits for them,
// then unmaps their memory and frees its own. Errors are ignored (a destructor's, after a failed
// set-up or a trap).
void ExecutorCore::teardown_peer_reduce() {
  // The peers may still read this rank's slots in their last reduce: an all-reduce of one float
  // completes here only once every rank has reached it, i.e. finished its decode steps.
  if (stream) cudaStreamSynchronize(stream);
  // (Not after a failed set-up: the other ranks may never reach the barrier.)
  if (peer->ready && comm != nullptr && opt.tp > 1 && delta != nullptr) {
    nccl_api().all_reduce(delta, delta, 1, ncclFloat32, ncclSum, comm, stream);
    cudaStreamSynchronize(stream);
  }
  for (int r = 0; r < static_cast<int>(peer->rank_base.size()); ++r)
    if (r != opt.tp_rank && peer->rank_base[r] != nullptr)
      cudaIpcCloseMemHandle(peer->rank_base[r]);
  cudaFree(peer->base);
}

}  // namespace megaops
