// See conv1d_cudnn.cuh. The graph API's steps: tensor descriptors (x, w, y with unique ids), a
// convolution descriptor, one convolution operation (forward, or backward data for the transposed
// conv), an operation graph, engine heuristics, and the first engine config whose execution plan
// finalizes. Executing binds the device pointers to the ids in a variant pack.
#include <cstdint>
#include <vector>

#include "core/cudnn_check.h"
#include "kernels/conv1d_cudnn.cuh"

namespace megaops {

namespace {

constexpr int64_t UID_X = 1, UID_W = 2, UID_Y = 3;

// A backend descriptor destroyed with its scope.
struct Desc {
  cudnnBackendDescriptor_t d = nullptr;
  explicit Desc(cudnnBackendDescriptorType_t type) {
    MEGAOPS_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d));
  }
  ~Desc() {
    if (d) cudnnBackendDestroyDescriptor(d);
  }
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc(Desc&& o) noexcept : d(o.d) { o.d = nullptr; }
  cudnnBackendDescriptor_t release() {
    cudnnBackendDescriptor_t out = d;
    d = nullptr;
    return out;
  }
};

void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
         cudnnBackendAttributeType_t type, int64_t count, const void* value) {
  MEGAOPS_CUDNN_CHECK(cudnnBackendSetAttribute(d, name, type, count, value));
}

// A packed fp32 tensor [n, c, 1, w] whose data is 16-byte aligned (run() checks it): engines
// with vector loads take it.
Desc tensor(int64_t uid, int64_t n, int64_t c, int64_t w) {
  Desc t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const cudnnDataType_t dtype = CUDNN_DATA_FLOAT;
  const int64_t dims[4] = {n, c, 1, w};
  const int64_t strides[4] = {c * w, w, w, 1};
  const int64_t alignment = 16;
  set(t.d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype);
  set(t.d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
  set(t.d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides);
  set(t.d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  set(t.d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  MEGAOPS_CUDNN_CHECK(cudnnBackendFinalize(t.d));
  return t;
}

Desc convolution(const Conv1dShape& s) {
  Desc c(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const int64_t dims = 2;
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const int64_t pad_w = s.transposed ? 0 : int64_t{s.kernel - 1} * s.dilation;
  const int64_t pad[2] = {0, pad_w};
  const int64_t stride[2] = {1, s.transposed ? s.stride : 1};
  const int64_t dilation[2] = {1, s.transposed ? 1 : s.dilation};
  set(c.d, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims);
  set(c.d, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  set(c.d, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
  set(c.d, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  set(c.d, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad);
  set(c.d, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride);
  set(c.d, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dilation);
  MEGAOPS_CUDNN_CHECK(cudnnBackendFinalize(c.d));
  return c;
}

// The operation: forward (x -> y) or backward data (dy = x -> dx = y), alpha 1, beta 0.
Desc operation(const Conv1dShape& s, const Desc& x, const Desc& w, const Desc& y,
               const Desc& conv) {
  const float alpha = 1.0f, beta = 0.0f;
  if (!s.transposed) {
    Desc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
    set(op.d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.d);
    set(op.d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w.d);
    set(op.d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.d);
    set(op.d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
        &conv.d);
    set(op.d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
    set(op.d, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
    MEGAOPS_CUDNN_CHECK(cudnnBackendFinalize(op.d));
    return op;
  }
  Desc op(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
  set(op.d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x.d);
  set(op.d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w.d);
  set(op.d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y.d);
  set(op.d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
      &conv.d);
  set(op.d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha);
  set(op.d, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta);
  MEGAOPS_CUDNN_CHECK(cudnnBackendFinalize(op.d));
  return op;
}

// The numerical notes of an engine config's engine, as a bit set (bit n: note n); every bit when
// they cannot be read (such an engine counts as a fast one).
uint32_t numerical_notes(cudnnBackendDescriptor_t cfg) {
  Desc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  int64_t n = 0;
  if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                               &n, &engine.d) != CUDNN_STATUS_SUCCESS)
    return ~0u;
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  if (cudnnBackendGetAttribute(engine.d, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
                               CUDNN_TYPE_NUMERICAL_NOTE, CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &n,
                               notes) != CUDNN_STATUS_SUCCESS)
    return ~0u;
  uint32_t bits = 0;
  for (int64_t i = 0; i < n; ++i) bits |= 1u << static_cast<int>(notes[i]);
  return bits;
}

// Notes of engines that trade fp32 accuracy for speed: TF32 tensor cores, down-converted inputs or
// reductions, FFT and Winograd transforms.
constexpr uint32_t FAST_NOTES =
    1u << CUDNN_NUMERICAL_NOTE_TENSOR_CORE | 1u << CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS |
    1u << CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION | 1u << CUDNN_NUMERICAL_NOTE_FFT |
    1u << CUDNN_NUMERICAL_NOTE_WINOGRAD | 1u << CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_4x4 |
    1u << CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_6x6 | 1u << CUDNN_NUMERICAL_NOTE_WINOGRAD_TILE_13x13;

// The engine configs heuristics mode `mode` proposes for `graph`, best first.
std::vector<Desc> engine_configs(cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode) {
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  set(heur.d, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
  set(heur.d, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  std::vector<Desc> out;
  if (cudnnBackendFinalize(heur.d) != CUDNN_STATUS_SUCCESS) return out;
  int64_t count = 0;
  MEGAOPS_CUDNN_CHECK(cudnnBackendGetAttribute(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    out.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(out.back().d);
  }
  int64_t got = 0;
  MEGAOPS_CUDNN_CHECK(cudnnBackendGetAttribute(heur.d, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                               raw.data()));
  while (out.size() > static_cast<size_t>(got)) out.pop_back();
  return out;
}

std::string describe(const Conv1dShape& s) {
  return std::string(s.transposed ? "conv_transpose1d" : "conv1d") + " batch " +
         std::to_string(s.batch) + ", " + std::to_string(s.in_channels) + " -> " +
         std::to_string(s.out_channels) + " channels, t " + std::to_string(s.t_in) + ", kernel " +
         std::to_string(s.kernel) + ", stride " + std::to_string(s.stride) + ", dilation " +
         std::to_string(s.dilation);
}

}  // namespace

double Conv1dShape::flops() const {
  return 2.0 * batch * static_cast<double>(t_in) * in_channels * out_channels * kernel;
}

CudnnConv1d::CudnnConv1d(cudnnHandle_t handle, const Conv1dShape& s, bool fast_engines)
    : handle_(handle), shape_(s) {
  if (s.batch < 1 || s.in_channels < 1 || s.out_channels < 1 || s.t_in < 1 || s.kernel < 1 ||
      s.stride < 1 || s.dilation < 1 || (s.transposed && s.kernel < s.stride))
    throw DeviceError("cudnn conv: invalid shape: " + describe(s));
  const Desc x = tensor(UID_X, s.batch, s.in_channels, s.t_in);
  const Desc y = tensor(UID_Y, s.batch, s.out_channels, s.out_len());
  // The filter: [out, in, 1, k] for conv1d; for the transposed conv, the forward conv's filter of
  // a conv from y's channels to x's: [in, out, 1, k] (PyTorch's ConvTranspose1d layout).
  const Desc w = s.transposed ? tensor(UID_W, s.in_channels, s.out_channels, s.kernel)
                              : tensor(UID_W, s.out_channels, s.in_channels, s.kernel);
  const Desc conv = convolution(s);
  const Desc op = operation(s, x, w, y, conv);
  Desc graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  set(graph.d, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op.d);
  set(graph.d, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_);
  MEGAOPS_CUDNN_CHECK(cudnnBackendFinalize(graph.d));
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (Desc& cfg : engine_configs(graph.d, mode)) {
      const bool fast = (numerical_notes(cfg.d) & FAST_NOTES) != 0;
      if (fast && !fast_engines) continue;
      Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      set(plan.d, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle_);
      set(plan.d, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          &cfg.d);
      if (cudnnBackendFinalize(plan.d) != CUDNN_STATUS_SUCCESS) continue;
      int64_t n = 0, ws = 0;
      MEGAOPS_CUDNN_CHECK(cudnnBackendGetAttribute(plan.d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                                   CUDNN_TYPE_INT64, 1, &n, &ws));
      workspace_ = static_cast<size_t>(ws);
      fast_ = fast;
      plan_ = plan.release();
      return;
    }
  }
  throw DeviceError("cudnn conv: no engine runs " + describe(s) +
                    (fast_engines ? "" : " in exact fp32"));
}

CudnnConv1d::~CudnnConv1d() {
  if (plan_) cudnnBackendDestroyDescriptor(plan_);
}

void CudnnConv1d::run(const float* x, const float* w, float* y, void* workspace,
                      cudaStream_t stream) const {
  for (const void* ptr :
       {static_cast<const void*>(x), static_cast<const void*>(w), static_cast<const void*>(y)})
    if ((reinterpret_cast<uintptr_t>(ptr) & 15u) != 0)
      throw DeviceError("cudnn conv: tensors must be 16-byte aligned (" + describe(shape_) + ")");
  MEGAOPS_CUDNN_CHECK(cudnnSetStream(handle_, stream));
  void* ptrs[3] = {const_cast<float*>(x), const_cast<float*>(w), y};
  const int64_t uids[3] = {UID_X, UID_W, UID_Y};
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  set(pack.d, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs);
  set(pack.d, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids);
  set(pack.d, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  MEGAOPS_CUDNN_CHECK(cudnnBackendFinalize(pack.d));
  MEGAOPS_CUDNN_CHECK(cudnnBackendExecute(handle_, plan_, pack.d));
}

}  // namespace megaops
