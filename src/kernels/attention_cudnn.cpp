// See attention_cudnn.h. One cuDNN graph per shape: q, k, v and out described with the strides
// of the caller's buffers (no copies), the SDPA node with causal masking aligned to the bottom
// right (the queries are the last t_q of t_kv positions), softmax statistics not written
// (inference). Built graphs are cached by shape; the workspace grows to the largest a graph asks.
#include "kernels/attention_cudnn.h"

#ifdef MEGAOPS_HAVE_CUDNN
#include <cudnn_frontend.h>
#endif

#include <chrono>
#include <cstring>
#include <exception>
#include <list>
#include <map>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "kernels/cudnn_library.h"

namespace megaops {

namespace {

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Why p cannot run (empty when it can): the shape and alignment rules of run().
std::string check_params(const CudnnAttentionParams& p) {
  if (p.t_q < 0 || p.t_kv < p.t_q)
    return "t_q " + std::to_string(p.t_q) + ", t_kv " + std::to_string(p.t_kv) +
           ": expected 0 <= t_q <= t_kv";
  if (p.num_heads < 1 || p.num_kv_heads < 1 || p.num_heads % p.num_kv_heads != 0)
    return "num_heads " + std::to_string(p.num_heads) + ", num_kv_heads " +
           std::to_string(p.num_kv_heads) + ": expected kv heads dividing the heads";
  if (p.head_dim < 8 || p.head_dim > 256 || p.head_dim % 8 != 0)
    return "head_dim " + std::to_string(p.head_dim) + ": expected a multiple of 8 in [8, 256]";
  const int64_t packed = int64_t{p.num_kv_heads} * p.head_dim;
  if (p.kv_row_stride != 0 && (p.kv_row_stride < packed || p.kv_row_stride % 8 != 0))
    return "kv_row_stride " + std::to_string(p.kv_row_stride) + ": expected 0 or a multiple of 8 " +
           ">= num_kv_heads * head_dim (" + std::to_string(packed) + ")";
  if (p.t_q == 0) return "";
  if (!p.q || !p.k || !p.v || !p.out) return "q, k, v and out must be set";
  if (!aligned16(p.q) || !aligned16(p.k) || !aligned16(p.v) || !aligned16(p.out))
    return "q, k, v and out must be 16-byte aligned";
  return "";
}

}  // namespace

#ifdef MEGAOPS_HAVE_CUDNN

namespace fe = cudnn_frontend;

namespace {

constexpr int64_t Q_UID = 1, K_UID = 2, V_UID = 3, O_UID = 4;
constexpr size_t MAX_CACHED_GRAPHS = 64;

struct GraphKey {
  int t_q, t_kv, heads, kv_heads, head_dim;
  int64_t kv_row_stride;
  uint32_t scale_bits;
  auto tie() const {
    return std::tie(t_q, t_kv, heads, kv_heads, head_dim, kv_row_stride, scale_bits);
  }
  bool operator<(const GraphKey& o) const { return tie() < o.tie(); }
};

struct BuiltGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace_bytes = 0;
  std::list<GraphKey>::iterator lru;  // its place in Impl::lru
};

std::shared_ptr<fe::graph::Tensor_attributes> bhsd_tensor(fe::graph::Graph& g, const char* name,
                                                          int64_t uid, int64_t heads, int64_t s,
                                                          int64_t d, int64_t row_stride) {
  // Logical [batch 1, heads, positions, head_dim] over rows of heads * head_dim (or row_stride).
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({1, heads, s, d})
                      .set_stride({s * row_stride, d, row_stride, 1}));
}

}  // namespace

struct CudnnAttention::Impl {
  CudnnLibrary lib;
  cudnnHandle_t handle = nullptr;
  int sm_version = 0;
  std::string unavailable, last_error;
  std::map<GraphKey, BuiltGraph> graphs;
  std::list<GraphKey> lru;  // most recently used first
  // Shapes cuDNN had no plan for, with why: not tried again (every layer asks for the same shape).
  std::map<GraphKey, std::string> unsupported;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  int built = 0;
  double build_ms = 0;

  // Builds k's graph into `out`; the frontend's message on failure (empty on success).
  std::string build(const GraphKey& k, float scale, BuiltGraph& out);
  // The cached graph of k (built now if new), or null with last_error set.
  BuiltGraph* graph_for(const GraphKey& k, float scale);
  cudaError_t ensure_workspace(int64_t bytes);
};

std::string CudnnAttention::Impl::build(const GraphKey& k, float scale, BuiltGraph& out) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  // The device's SM version given here, so the frontend asks no CUDA runtime of its own.
  g->set_sm_version(sm_version);
  const int64_t h = k.heads, kvh = k.kv_heads, d = k.head_dim;
  auto q = bhsd_tensor(*g, "q", Q_UID, h, k.t_q, d, h * d);
  auto kt = bhsd_tensor(*g, "k", K_UID, kvh, k.t_kv, d, k.kv_row_stride);
  auto vt = bhsd_tensor(*g, "v", V_UID, kvh, k.t_kv, d, k.kv_row_stride);
  // Causal: query i sees keys up to i + (t_kv - t_q). Top-left where the two coincide, which
  // every cuDNN 9 supports; bottom-right (chunked prefill, a cached prefix) needs 9.6+ for
  // lengths that are not multiples of 64.
  auto opts = fe::graph::SDPA_attributes()
                  .set_name("prefill_attention")
                  .set_generate_stats(false)
                  .set_attn_scale(scale)
                  .set_diagonal_alignment(k.t_q == k.t_kv ? fe::DiagonalAlignment_t::TOP_LEFT
                                                          : fe::DiagonalAlignment_t::BOTTOM_RIGHT)
                  .set_diagonal_band_right_bound(0);
  auto outs = g->sdpa(q, kt, vt, opts);
  outs[0]
      ->set_output(true)
      .set_uid(O_UID)
      .set_dim({1, h, k.t_q, d})
      .set_stride({k.t_q * h * d, d, h * d, 1});
  fe::error_t e = g->build(handle, {fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
  if (e.is_bad()) return e.get_message();
  int64_t ws = 0;
  e = g->get_workspace_size(ws);
  if (e.is_bad()) return e.get_message();
  out.graph = std::move(g);
  out.workspace_bytes = ws;
  return "";
}

BuiltGraph* CudnnAttention::Impl::graph_for(const GraphKey& k, float scale) {
  auto it = graphs.find(k);
  if (it != graphs.end()) {
    lru.splice(lru.begin(), lru, it->second.lru);
    return &it->second;
  }
  if (const auto bad = unsupported.find(k); bad != unsupported.end()) {
    last_error = bad->second;
    return nullptr;
  }
  BuiltGraph b;
  const auto t0 = std::chrono::steady_clock::now();
  std::string err;
  try {
    err = build(k, scale, b);
  } catch (const std::exception& ex) {  // the frontend throws where a library call is missing
    err = ex.what();
  }
  build_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (!err.empty()) {
    last_error = "cuDNN has no SDPA plan for t_q " + std::to_string(k.t_q) + ", t_kv " +
                 std::to_string(k.t_kv) + ", heads " + std::to_string(k.heads) + "/" +
                 std::to_string(k.kv_heads) + ", head_dim " + std::to_string(k.head_dim) + ": " +
                 err;
    unsupported.emplace(k, last_error);
    return nullptr;
  }
  ++built;
  if (graphs.size() >= MAX_CACHED_GRAPHS) {
    // The least recently used plan goes; work it queued must not outlive it (rare: a sync).
    if (cudaDeviceSynchronize() != cudaSuccess) {
      last_error = "cuDNN SDPA: the device failed before a cached plan could be released";
      return nullptr;
    }
    graphs.erase(lru.back());
    lru.pop_back();
  }
  lru.push_front(k);
  b.lru = lru.begin();
  return &graphs.emplace(k, std::move(b)).first->second;
}

cudaError_t CudnnAttention::Impl::ensure_workspace(int64_t bytes) {
  if (static_cast<size_t>(bytes) <= workspace_bytes) return cudaSuccess;
  // Growing frees the old buffer: work queued on it must finish first.
  cudaError_t err = cudaDeviceSynchronize();
  if (err != cudaSuccess) return err;
  cudaFree(workspace);
  workspace = nullptr;
  workspace_bytes = 0;
  err = cudaMalloc(&workspace, static_cast<size_t>(bytes));
  if (err != cudaSuccess) {
    last_error =
        "cuDNN SDPA workspace of " + std::to_string(bytes) + " bytes: " + cudaGetErrorString(err);
    return err;
  }
  workspace_bytes = static_cast<size_t>(bytes);
  return cudaSuccess;
}

CudnnAttention::CudnnAttention(const std::string& lib) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.lib = load_cudnn(lib);
  if (!s.lib.loaded) {
    s.unavailable = s.lib.error;
    return;
  }
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    s.unavailable = "cuDNN: no CUDA device";
    return;
  }
  s.sm_version = major * 10 + minor;
  const cudnnStatus_t st = cudnnCreate(&s.handle);
  if (st != CUDNN_STATUS_SUCCESS) {
    s.handle = nullptr;
    s.unavailable = "cuDNN " + cudnn_version_text(s.lib.version) + " (" + s.lib.path +
                    "): cudnnCreate failed: " + cudnnGetErrorString(st);
  }
}

CudnnAttention::~CudnnAttention() {
  Impl& s = *impl_;
  s.graphs.clear();  // the plans before the handle they were built on
  if (s.handle) cudnnDestroy(s.handle);
  cudaFree(s.workspace);
}

bool CudnnAttention::available() const {
  return impl_->handle != nullptr;
}
const std::string& CudnnAttention::unavailable_reason() const {
  return impl_->unavailable;
}
int CudnnAttention::version() const {
  return impl_->lib.loaded ? impl_->lib.version : 0;
}
std::string CudnnAttention::library_path() const {
  return impl_->lib.path;
}
const std::string& CudnnAttention::last_error() const {
  return impl_->last_error;
}
int CudnnAttention::graphs_built() const {
  return impl_->built;
}
double CudnnAttention::build_ms() const {
  return impl_->build_ms;
}

cudaError_t CudnnAttention::run(const CudnnAttentionParams& p) {
  Impl& s = *impl_;
  s.last_error = check_params(p);
  if (!s.last_error.empty()) {
    s.last_error = "cuDNN attention: " + s.last_error;
    return cudaErrorInvalidValue;
  }
  if (p.t_q == 0) return cudaSuccess;
  if (s.handle == nullptr) {
    s.last_error = s.unavailable;
    return cudaErrorNotSupported;
  }
  GraphKey key{p.t_q,
               p.t_kv,
               p.num_heads,
               p.num_kv_heads,
               p.head_dim,
               p.kv_row_stride ? p.kv_row_stride : int64_t{p.num_kv_heads} * p.head_dim,
               0};
  std::memcpy(&key.scale_bits, &p.scale, sizeof(float));
  BuiltGraph* g = s.graph_for(key, p.scale);
  if (g == nullptr) return cudaErrorNotSupported;
  cudaError_t err = s.ensure_workspace(g->workspace_bytes);
  if (err != cudaSuccess) return err;
  cudnnStatus_t st = cudnnSetStream(s.handle, p.stream);
  if (st != CUDNN_STATUS_SUCCESS) {
    s.last_error = std::string("cudnnSetStream: ") + cudnnGetErrorString(st);
    return cudaErrorUnknown;
  }
  std::unordered_map<int64_t, void*> pack = {{Q_UID, const_cast<__nv_bfloat16*>(p.q)},
                                             {K_UID, const_cast<__nv_bfloat16*>(p.k)},
                                             {V_UID, const_cast<__nv_bfloat16*>(p.v)},
                                             {O_UID, p.out}};
  fe::error_t e;
  try {
    e = g->graph->execute(s.handle, pack, s.workspace);
  } catch (const std::exception& ex) {
    s.last_error = std::string("cuDNN SDPA execute: ") + ex.what();
    return cudaErrorUnknown;
  }
  if (e.is_bad()) {
    s.last_error = "cuDNN SDPA execute: " + e.get_message();
    return cudaErrorUnknown;
  }
  return cudaSuccess;
}

#else  // !MEGAOPS_HAVE_CUDNN

// A build without cuDNN's headers: the same interface, never available.
struct CudnnAttention::Impl {
  std::string unavailable =
      "cuDNN: this build has no cuDNN SDPA path (configured with MEGAOPS_CUDNN OFF)";
  std::string last_error;
};

CudnnAttention::CudnnAttention(const std::string&) : impl_(std::make_unique<Impl>()) {}
CudnnAttention::~CudnnAttention() = default;
bool CudnnAttention::available() const {
  return false;
}
const std::string& CudnnAttention::unavailable_reason() const {
  return impl_->unavailable;
}
int CudnnAttention::version() const {
  return 0;
}
std::string CudnnAttention::library_path() const {
  return "";
}
const std::string& CudnnAttention::last_error() const {
  return impl_->last_error;
}
int CudnnAttention::graphs_built() const {
  return 0;
}
double CudnnAttention::build_ms() const {
  return 0;
}

cudaError_t CudnnAttention::run(const CudnnAttentionParams& p) {
  impl_->last_error = check_params(p);
  if (!impl_->last_error.empty()) {
    impl_->last_error = "cuDNN attention: " + impl_->last_error;
    return cudaErrorInvalidValue;
  }
  if (p.t_q == 0) return cudaSuccess;
  impl_->last_error = impl_->unavailable;
  return cudaErrorNotSupported;
}

#endif  // MEGAOPS_HAVE_CUDNN

}  // namespace megaops
