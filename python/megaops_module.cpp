// The `megaops` Python module (nanobind): load a checkpoint directory, tokenize, render chat
// templates, generate text or ids (streaming through a callback), run whole model steps (logits
// out) and single ops on tensors passed by DLPack (PyTorch, NumPy, JAX...; float32, C-contiguous,
// on the CPU: the ops are the fp32 oracle's). Generation is a client of the engine
// (include/megaops/engine.h) as the CLI is, so the same seed gives the same tokens; megaops.LLM
// (engine_bindings.h) is the engine itself, batching requests. On the GPU: megaops.Executor
// (the CLI's step executor: prefill, decode steps, logits as a CUDA DLPack tensor) and
// megaops.cuda_ops (the executor's kernels on CUDA DLPack tensors, cuda_ops.h); on a build without
// CUDA or a machine without a GPU they raise one RuntimeError saying so.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <mutex>

#include "core/error.h"
#include "engine/gpu_runner.h"
#include "engine_bindings.h"
#include "graph/plan.h"
#include "io/text_file.h"
#include "io/tokenizer_files.h"
#include "megaops/engine.h"
#include "models/checkpoint.h"
#include "reference/model.h"
#include "reference/ops.h"

#ifdef MEGAOPS_HAVE_CUDA
#include <cuda_runtime.h>

#include <filesystem>

#include "cuda_ops.h"
#include "models/model_config.h"
#include "models/step_graph.h"
#include "runtime/conventional.h"
#include "runtime/plan_options.h"
#endif

namespace nb = nanobind;

namespace {

using namespace megaops;
using CpuTensor = nb::ndarray<float, nb::c_contig, nb::device::cpu>;
using NumpyOut = nb::ndarray<nb::numpy, float>;

// A float32 array owning `values`, shaped `shape` (returned to Python; consumers take it by
// DLPack, e.g. torch.from_dlpack).
NumpyOut to_array(std::vector<float> values, std::vector<size_t> shape) {
  auto* owner = new std::vector<float>(std::move(values));
  nb::capsule free_owner(owner,
                         [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  return NumpyOut(owner->data(), shape.size(), shape.data(), free_owner);
}

nlohmann::ordered_json to_json(nb::handle obj) {
  // Python's json module is the faithful bridge for arbitrary message dicts (tool calls included).
  nb::module_ json = nb::module_::import_("json");
  return nlohmann::ordered_json::parse(nb::cast<std::string>(json.attr("dumps")(obj)));
}

class Model {
 public:
  Model(const std::string& path, const std::string& device, int max_context,
        const std::string& plan_file)
      : text_(CheckpointText::open(path)),
        ckpt_(Checkpoint::open(path)),
        // One request at a time (max_batch 1): the GPU's cache holds one context.
        runner_config_(py::runner_config(device, max_context, 1, 0, 16, 0, plan_file, ckpt_)) {
    max_context_ = runner_config_.max_context;
  }

  std::vector<int> encode(const std::string& s, bool add_special_tokens) const {
    return text_.tokenizer().encode(s, add_special_tokens);
  }
  std::string decode(const std::vector<int>& ids, bool skip_special_tokens) const {
    return text_.tokenizer().decode(ids, skip_special_tokens);
  }
  std::string apply_chat_template(nb::handle messages, bool add_generation_prompt,
                                  nb::handle extra) const {
    return text_.render_chat(to_json(messages), add_generation_prompt,
                             extra.is_none() ? nlohmann::ordered_json(nullptr) : to_json(extra));
  }

  nb::dict generate(nb::handle prompt, int max_new_tokens, float temperature, int top_k,
                    float top_p, uint64_t seed, const std::vector<std::string>& stop,
                    bool ignore_eos, std::optional<std::function<void(std::string)>> on_text) {
    const std::vector<int> ids = py::prompt_ids(text_, prompt);
    if (ids.empty()) throw InputError("prompt: empty");
    const RequestParams params = py::request_params(text_, max_new_tokens, temperature, top_k,
                                                    top_p, seed, stop, {}, ignore_eos);
    if (static_cast<int>(ids.size()) + max_new_tokens > max_context_)
      throw InputError("prompt + max_new_tokens exceeds max_context " +
                       std::to_string(max_context_));
    std::vector<int> tokens;
    std::string text, stop_reason;
    double ttft = 0, total = 0;
    {
      // The GIL first, then the engine: a callback holding the engine takes the GIL back.
      nb::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(engine_mutex_);
      // The runner (weights on the GPU, or the oracle's) is built once and kept: the paged GPU
      // runner and the CPU oracle sample each request with its own parameters. The executor
      // adapter (engine/gpu_runner.h) samples on the device only with the parameters it was
      // built with, so it is rebuilt when they change.
      if (!engine_ || (adapter_ && !same_sampling(gpu_sampling_, params.sampling))) {
        engine_.reset();
        EngineOptions eo;
        eo.eos_token_ids = text_.eos_token_ids();
        std::unique_ptr<ModelRunner> runner =
            py::make_runner(ckpt_, runner_config_, params.sampling, &backend_);
        adapter_ = is_executor_adapter(*runner);
        gpu_sampling_ = params.sampling;
        engine_ = std::make_unique<Engine>(std::move(runner), &text_, eo);
      }
      const auto t0 = std::chrono::steady_clock::now();
      const uint64_t id = engine_->add_request(ids, params);
      // A callback that raises ends the request here, so the kept engine holds nothing of it.
      struct AbortUnlessDone {
        Engine& e;
        uint64_t id;
        bool done = false;
        ~AbortUnlessDone() {
          try {
            if (!done && e.abort(id)) e.step();
          } catch (...) {  // the first exception is the one that propagates
          }
        }
      } guard{*engine_, id};
      for (bool done = false; !done;)
        for (const RequestOutput& o : engine_->step()) {
          if (o.id != id) continue;
          tokens.insert(tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
          text += o.text;
          if (o.ttft_s >= 0) ttft = o.ttft_s;
          if (on_text && !o.text.empty()) {
            nb::gil_scoped_acquire acquire;
            (*on_text)(o.text);
          }
          if (!o.finished) continue;
          done = guard.done = true;
          if (o.finish_reason == FinishReason::Error) throw Error("generate: " + o.stop_reason);
          stop_reason = o.stop_reason;
        }
      total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    nb::dict out;
    out["text"] = text;
    out["tokens"] = tokens;
    out["prompt_tokens"] = ids;
    out["stop_reason"] = stop_reason;
    out["ttft_s"] = ttft;
    out["total_s"] = total;
    out["backend"] = backend_;
    return out;
  }

  // One model step on the fp32 oracle: runs `ids` after what the session already holds (its KV
  // cache grows) and returns their logits [len(ids), vocab].
  NumpyOut forward(const std::vector<int>& ids) {
    if (!oracle_) {
      if (!weights_) weights_ = std::make_unique<ref::Weights>(ref::load_weights(ckpt_));
      oracle_ = std::make_unique<ref::Model>(*weights_, max_context_);
    }
    std::vector<float> logits;
    {
      nb::gil_scoped_release release;
      logits = oracle_->forward(ids);
    }
    return to_array(std::move(logits),
                    {ids.size(), static_cast<size_t>(ckpt_.config().vocab_size)});
  }
  void reset() {
    if (oracle_) oracle_->reset();
  }
  int position() const { return oracle_ ? oracle_->pos() : 0; }

  // A weight of the checkpoint as float32 (fp32 oracle copy), e.g. to feed the single ops.
  NumpyOut weight(const std::string& name) {
    if (!weights_) weights_ = std::make_unique<ref::Weights>(ref::load_weights(ckpt_));
    const std::vector<float>& w = weights_->get(name);
    for (const WeightSpec& spec : expected_weights(ckpt_.config()))
      if (spec.name == name) {
        std::vector<size_t> shape(spec.shape.begin(), spec.shape.end());
        return to_array(w, shape);
      }
    return to_array(w, {w.size()});
  }

  nb::dict config() const {
    const ModelConfig& c = ckpt_.config();
    nb::dict d;
    d["vocab_size"] = c.vocab_size;
    d["hidden_size"] = c.hidden_size;
    d["num_layers"] = c.num_layers;
    d["num_heads"] = c.num_heads;
    d["num_kv_heads"] = c.num_kv_heads;
    d["head_dim"] = c.head_dim;
    d["rms_norm_eps"] = c.rms_norm_eps;
    d["eos_token_ids"] = text_.eos_token_ids();
    return d;
  }

 private:
  static bool same_sampling(const SamplingParams& a, const SamplingParams& b) {
    // Greedy draws nothing: any two greedy settings sample alike.
    if (a.temperature <= 0 && b.temperature <= 0) return true;
    return a.temperature == b.temperature && a.top_k == b.top_k && a.top_p == b.top_p &&
           a.seed == b.seed;
  }
  CheckpointText text_;
  Checkpoint ckpt_;
  py::RunnerConfig runner_config_;  // device, context and the plan the GPU runs
  int max_context_ = 4096;
  std::mutex engine_mutex_;  // one generation at a time on the kept engine
  std::unique_ptr<Engine> engine_;
  std::string backend_;
  bool adapter_ = false;  // the GPU's executor adapter: rebuilt for other sampling parameters
  SamplingParams gpu_sampling_;
  std::unique_ptr<ref::Weights> weights_;
  std::unique_ptr<ref::Model> oracle_;
};

void check_2d(const CpuTensor& t, const char* name) {
  if (t.ndim() != 2)
    throw InputError(std::string(name) + ": expected a 2-D float32 tensor, found " +
                     std::to_string(t.ndim()) + " dimensions");
}

// ---- GPU side: megaops.Executor and megaops.cuda_ops ----

// The one error every GPU entry point raises where it cannot run.
void require_gpu(const char* what) {
#ifdef MEGAOPS_HAVE_CUDA
  if (gpu_runner_available()) return;
  throw Error(std::string(what) + ": no CUDA device is visible to this process");
#else
  throw Error(std::string(what) + ": this megaops module was built without CUDA");
#endif
}

#ifdef MEGAOPS_HAVE_CUDA
using AnyArray = nb::ndarray<nb::ro>;

std::string dtype_name(nb::dlpack::dtype d) {
  const char* code = "?";
  switch (static_cast<nb::dlpack::dtype_code>(d.code)) {
    case nb::dlpack::dtype_code::Int:
      code = "int";
      break;
    case nb::dlpack::dtype_code::UInt:
      code = "uint";
      break;
    case nb::dlpack::dtype_code::Float:
      code = "float";
      break;
    case nb::dlpack::dtype_code::Bfloat:
      code = "bfloat";
      break;
    case nb::dlpack::dtype_code::Bool:
      return "bool";
    default:
      break;
  }
  return code + std::to_string(d.bits) + (d.lanes != 1 ? "x" + std::to_string(d.lanes) : "");
}

std::string device_name(const AnyArray& a) {
  if (a.device_type() == nb::device::cpu::value) return "cpu";
  if (a.device_type() == nb::device::cuda::value) return "cuda:" + std::to_string(a.device_id());
  return "device type " + std::to_string(a.device_type());
}

bool c_contiguous(const AnyArray& a) {
  int64_t expected = 1;
  for (size_t i = a.ndim(); i-- > 0;) {
    if (a.shape(i) != 1 && a.stride(i) != expected) return false;
    expected *= static_cast<int64_t>(a.shape(i));
  }
  return true;
}

// Checks that `a` is a C-contiguous CUDA tensor of `ndim` dimensions and dtype `dt`, on
// `device` (-1: any); InputError "name: expected ..., found ..." otherwise.
void check_cuda_tensor(const AnyArray& a, const char* name, nb::dlpack::dtype dt, size_t ndim,
                       int device = -1) {
  const std::string want = std::to_string(ndim) + "-D " + dtype_name(dt) + " C-contiguous " +
                           (device < 0 ? std::string("CUDA") : "cuda:" + std::to_string(device)) +
                           " tensor";
  const bool ok = a.device_type() == nb::device::cuda::value &&
                  (device < 0 || a.device_id() == device) && a.dtype() == dt && a.ndim() == ndim &&
                  c_contiguous(a);
  if (ok) {
    for (size_t i = 0; i < ndim; ++i)
      if (a.shape(i) == 0)
        throw InputError(std::string(name) + ": expected a non-empty " + want +
                         ", found dimension " + std::to_string(i) + " of size 0");
    // The kernels load 16 bytes at a time.
    if (reinterpret_cast<uintptr_t>(a.data()) % 16 != 0)
      throw InputError(std::string(name) + ": expected a 16-byte aligned " + want +
                       ", found one at an unaligned offset");
    return;
  }
  throw InputError(std::string(name) + ": expected a " + want + ", found a " +
                   std::to_string(a.ndim()) + "-D " + dtype_name(a.dtype()) + " " +
                   (c_contiguous(a) ? "" : "non-contiguous ") + "tensor on " + device_name(a));
}

void check_dim(const AnyArray& a, const char* name, size_t i, size_t expected, const char* why) {
  if (a.shape(i) != expected)
    throw InputError(std::string(name) + ": dimension " + std::to_string(i) + ": expected " +
                     std::to_string(expected) + " (" + why + "), found " +
                     std::to_string(a.shape(i)));
}

void check_multiple_of_8(const char* name, size_t value, const char* what) {
  if (value % 8 != 0 || value == 0)
    throw InputError(std::string(name) + ": " + what + ": expected a positive multiple of 8 (the " +
                     "kernels load 8 elements at a time), found " + std::to_string(value));
}

constexpr nb::dlpack::dtype F32{static_cast<uint8_t>(nb::dlpack::dtype_code::Float), 32, 1};
constexpr nb::dlpack::dtype BF16{static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat), 16, 1};
constexpr nb::dlpack::dtype I32{static_cast<uint8_t>(nb::dlpack::dtype_code::Int), 32, 1};

using CudaOut = nb::ndarray<>;

// A CUDA array of `shape` and dtype `dt` on `device` whose memory (cudaMalloc) it owns: the
// capsule frees it when the last consumer (a torch tensor made by torch.from_dlpack, say) lets go.
CudaOut cuda_array(std::vector<size_t> shape, nb::dlpack::dtype dt, int device) {
  size_t n = 1;
  for (size_t d : shape) n *= d;
  void* p = py::cuda_alloc(n * dt.bits / 8, device);
  nb::capsule free_buffer(p, [](void* q) noexcept { py::cuda_free(q); });
  return CudaOut(p, shape.size(), shape.data(), free_buffer, nullptr, dt, nb::device::cuda::value,
                 device);
}

// The step executor (runtime/conventional.h) as the CLI's `generate` builds it: the plan file's
// options or the default plan for the batch, greedy unless told otherwise.
class PyExecutor {
 public:
  PyExecutor(const std::string& model, int max_batch, int max_seq, const std::string& plan_file,
             uint64_t seed, float temperature, int top_k, float top_p) {
    require_gpu("megaops.Executor");
    if (max_batch < 1 || max_batch > 64)
      throw InputError("max_batch: expected 1..64, found " + std::to_string(max_batch));
    if (max_seq < 1) throw InputError("max_seq: expected >= 1, found " + std::to_string(max_seq));
    WeightFiller weights;
    if (std::filesystem::is_directory(model)) {
      ckpt_ = std::make_unique<Checkpoint>(Checkpoint::open(model));
      cfg_ = ckpt_->config();
      weights = checkpoint_filler(*ckpt_);
    } else {
      try {
        cfg_ = preset_config(model);
      } catch (const InputError& e) {
        throw InputError("model: '" + model + "' is neither a checkpoint directory nor a preset (" +
                         e.what() + ")");
      }
      weights = random_filler(seed);
    }
    if (max_seq > cfg_.max_position_embeddings)
      throw InputError("max_seq: expected <= max_position_embeddings " +
                       std::to_string(cfg_.max_position_embeddings) + ", found " +
                       std::to_string(max_seq));
    std::string label;
    if (plan_file.empty()) {
      plan_ = default_plan(max_batch);
      label = plan_.source;
    } else {
      plan_ = parse_plan(read_text_file(plan_file), plan_file);
      check_plan_runnable(plan_, plan_file);
      label = plan_file;
    }
    plan_line_ = label + " (" + describe(plan_) + ")";
    ExecutorOptions eo;
    eo.step_graph = build_step_graph;
    eo.max_batch = max_batch;
    eo.max_seq = max_seq;
    apply_plan(plan_, eo);
    eo.sampling = {temperature, top_k, top_p, seed};
    {
      nb::gil_scoped_release release;
      ex_ = std::make_unique<ConventionalExecutor>(cfg_, weights, eo);
    }
    set_plan_regions(plan_, label, *ex_);
    // A plan made for another GPU runs, with one warning saying so.
    if (const std::string w = plan_gpu_warning(plan_, label, ex_->device_name()); !w.empty())
      if (PyErr_WarnEx(PyExc_UserWarning, w.c_str(), 1) != 0) throw nb::python_error();
    cudaGetDevice(&device_);
  }

  std::vector<int> prefill(const std::vector<std::vector<int>>& prompts) {
    nb::gil_scoped_release release;
    return ex_->prefill(prompts);
  }

  // `forced`: None, a list of ints or a 1-D int32 tensor (CPU or CUDA) with one id a sequence.
  std::vector<int> decode_step(nb::handle forced) {
    std::vector<int> ids;
    const bool given = !forced.is_none();
    if (given) {
      if (nb::ndarray_check(forced)) {
        AnyArray a = nb::cast<AnyArray>(forced);
        if (a.dtype() != I32 || a.ndim() != 1 || !c_contiguous(a) ||
            (a.device_type() != nb::device::cpu::value &&
             a.device_type() != nb::device::cuda::value))
          throw InputError(
              "forced: expected a list of ints or a 1-D int32 C-contiguous tensor "
              "(CPU or CUDA), found a " +
              std::to_string(a.ndim()) + "-D " + dtype_name(a.dtype()) + " tensor on " +
              device_name(a));
        ids.resize(a.shape(0));
        if (a.device_type() == nb::device::cuda::value)
          py::cuda_copy_to_host(ids.data(), a.data(), ids.size() * sizeof(int), a.device_id());
        else
          std::memcpy(ids.data(), a.data(), ids.size() * sizeof(int));
      } else {
        ids = nb::cast<std::vector<int>>(forced);
      }
    }
    nb::gil_scoped_release release;
    return ex_->decode_step(given ? &ids : nullptr);
  }

  // The last step's logits [batch, vocab] as a CUDA float32 array that owns its memory: a
  // device-to-device copy on the executor's stream (no host round trip), so later steps do not
  // change it.
  CudaOut logits() {
    const ConventionalExecutor::DeviceLogits src = ex_->device_logits();
    const size_t vocab = static_cast<size_t>(cfg_.vocab_size);
    const size_t rows = static_cast<size_t>(src.rows);
    if (rows == 0) throw InputError("logits: no prefill has run yet");
    CudaOut out = cuda_array({rows, vocab}, F32, device_);
    {
      nb::gil_scoped_release release;
      py::cuda_copy_on_stream(out.data(), src.data, rows * vocab * sizeof(float), device_,
                              reinterpret_cast<uintptr_t>(ex_->stream()));
    }
    return out;
  }

  const std::string& plan() const { return plan_line_; }
  int vocab_size() const { return cfg_.vocab_size; }
  int max_batch() const { return ex_->options().max_batch; }
  int max_seq() const { return ex_->options().max_seq; }

 private:
  std::unique_ptr<Checkpoint> ckpt_;  // null for a preset
  ModelConfig cfg_;
  Plan plan_;
  std::string plan_line_;
  std::unique_ptr<ConventionalExecutor> ex_;
  int device_ = 0;
};

uintptr_t stream_arg(nb::handle stream) {
  return stream.is_none() ? 0 : static_cast<uintptr_t>(nb::cast<uint64_t>(stream));
}

CudaOut cuda_rmsnorm(const AnyArray& x, const AnyArray& w, float eps, nb::handle stream) {
  require_gpu("megaops.cuda_ops.rmsnorm");
  check_cuda_tensor(x, "x", F32, 2);
  check_cuda_tensor(w, "w", BF16, 1, x.device_id());
  check_dim(w, "w", 0, x.shape(1), "x's row length");
  check_multiple_of_8("x", x.shape(1), "row length");
  CudaOut y = cuda_array({x.shape(0), x.shape(1)}, BF16, x.device_id());
  py::cuda_rmsnorm(static_cast<const float*>(x.data()), w.data(), y.data(),
                   static_cast<int>(x.shape(0)), static_cast<int>(x.shape(1)), eps, x.device_id(),
                   stream_arg(stream));
  return y;
}

CudaOut cuda_matmul(const AnyArray& x, const AnyArray& w, nb::handle stream) {
  require_gpu("megaops.cuda_ops.matmul");
  check_cuda_tensor(x, "x", BF16, 2);
  check_cuda_tensor(w, "w", BF16, 2, x.device_id());
  check_dim(w, "w", 1, x.shape(1), "x's k: w is [n, k], HF Linear layout");
  check_multiple_of_8("x", x.shape(1), "k");
  CudaOut y = cuda_array({x.shape(0), w.shape(0)}, F32, x.device_id());
  py::cuda_matmul(x.data(), w.data(), static_cast<float*>(y.data()), static_cast<int>(x.shape(0)),
                  static_cast<int>(w.shape(0)), static_cast<int>(x.shape(1)), x.device_id(),
                  stream_arg(stream));
  return y;
}

CudaOut cuda_silu_mul(const AnyArray& gate_up, nb::handle stream) {
  require_gpu("megaops.cuda_ops.silu_mul");
  check_cuda_tensor(gate_up, "gate_up", F32, 2);
  if (gate_up.shape(1) % 2 != 0)
    throw InputError("gate_up: dimension 1: expected 2 * inter (gate then up), found " +
                     std::to_string(gate_up.shape(1)));
  const size_t inter = gate_up.shape(1) / 2;
  check_multiple_of_8("gate_up", inter, "inter (half of dimension 1)");
  CudaOut out = cuda_array({gate_up.shape(0), inter}, BF16, gate_up.device_id());
  py::cuda_silu_mul(static_cast<const float*>(gate_up.data()), out.data(),
                    static_cast<int>(gate_up.shape(0)), static_cast<int>(inter),
                    gate_up.device_id(), stream_arg(stream));
  return out;
}
#else
// Without CUDA the names exist and raise require_gpu's error.
class PyExecutor {
 public:
  PyExecutor(const std::string&, int, int, const std::string&, uint64_t, float, int, float) {
    require_gpu("megaops.Executor");
  }
};
#endif

}  // namespace

NB_MODULE(_megaops, m) {
  m.doc() = "megaops: dense decoder LLM inference (Llama 3, Qwen 3)";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const InputError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const megaops::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
  nb::class_<Model>(m, "Model")
      .def(nb::init<const std::string&, const std::string&, int, const std::string&>(),
           nb::arg("path"), nb::arg("device") = "auto", nb::arg("max_context") = 4096,
           nb::arg("plan") = "",
           "Loads a Hugging Face checkpoint directory (weights, tokenizer, chat template). "
           "generate() runs `plan` on the GPU (a megaops-plan JSON file; default: the fastest "
           "measured plan for one sequence, as the CLI picks).")
      .def("encode", &Model::encode, nb::arg("text"), nb::arg("add_special_tokens") = true)
      .def("decode", &Model::decode, nb::arg("ids"), nb::arg("skip_special_tokens") = false)
      .def("apply_chat_template", &Model::apply_chat_template, nb::arg("messages"),
           nb::arg("add_generation_prompt") = true, nb::arg("extra") = nb::none())
      .def("generate", &Model::generate, nb::arg("prompt"), nb::arg("max_new_tokens") = 64,
           nb::arg("temperature") = -1.0f, nb::arg("top_k") = -1, nb::arg("top_p") = -1.0f,
           nb::arg("seed") = 0, nb::arg("stop") = std::vector<std::string>{},
           nb::arg("ignore_eos") = false, nb::arg("on_text") = nb::none(),
           "Generates from a text prompt (tokenized with the post-processor's special tokens) "
           "or a list of ids. Sampling options left negative take generation_config.json's "
           "values when it samples, else greedy. on_text(piece) streams the text.")
      .def("forward", &Model::forward, nb::arg("ids"),
           "One step on the fp32 oracle: logits [len(ids), vocab] of ids run after the context "
           "already held")
      .def("reset", &Model::reset)
      .def_prop_ro("position", &Model::position)
      .def("weight", &Model::weight, nb::arg("name"))
      .def_prop_ro("config", &Model::config);

  nb::module_ ops = m.def_submodule("ops", "single fp32 ops of the oracle on DLPack tensors");
  ops.def(
      "rmsnorm",
      [](CpuTensor x, CpuTensor w, float eps) {
        check_2d(x, "x");
        if (w.ndim() != 1 || w.shape(0) != x.shape(1))
          throw InputError("w: expected shape [" + std::to_string(x.shape(1)) + "]");
        std::vector<float> out(x.size());
        ref::rmsnorm(x.data(), w.data(), out.data(), static_cast<int>(x.shape(0)),
                     static_cast<int>(x.shape(1)), eps);
        return to_array(std::move(out), {x.shape(0), x.shape(1)});
      },
      nb::arg("x"), nb::arg("w"), nb::arg("eps"));
  ops.def(
      "matmul",
      [](CpuTensor x, CpuTensor w) {
        check_2d(x, "x");
        check_2d(w, "w");
        if (w.shape(1) != x.shape(1))
          throw InputError("w: expected [n_out, " + std::to_string(x.shape(1)) + "] (HF Linear)");
        std::vector<float> out(x.shape(0) * w.shape(0));
        ref::matmul(x.data(), w.data(), out.data(), static_cast<int>(x.shape(0)),
                    static_cast<int>(x.shape(1)), static_cast<int>(w.shape(0)));
        return to_array(std::move(out), {x.shape(0), w.shape(0)});
      },
      nb::arg("x"), nb::arg("w"));
  ops.def(
      "silu_mul",
      [](CpuTensor gate, CpuTensor up) {
        if (gate.size() != up.size()) throw InputError("up: expected the shape of gate");
        std::vector<float> out(gate.size());
        ref::silu_mul(gate.data(), up.data(), out.data(), gate.size());
        std::vector<size_t> shape(gate.ndim());
        for (size_t i = 0; i < gate.ndim(); ++i) shape[i] = gate.shape(i);
        return to_array(std::move(out), shape);
      },
      nb::arg("gate"), nb::arg("up"));
  py::bind_llm(m);
  m.def("gpu_available", &gpu_runner_available,
        "whether this module was built with CUDA and sees a CUDA device");
  constexpr const char* EXECUTOR_DOC =
      "The GPU step executor (the CLI's): loads `model` (a checkpoint directory, or a preset name "
      "such as tiny-llama3 for deterministic random weights of `seed`) for up to max_batch "
      "sequences of max_seq positions, running `plan` (a megaops-plan JSON file; default: the "
      "fastest measured plan for max_batch, as the CLI picks). Greedy unless temperature > 0. "
      "RuntimeError without CUDA or a GPU.";
#ifdef MEGAOPS_HAVE_CUDA
  nb::class_<PyExecutor>(m, "Executor", EXECUTOR_DOC)
      .def(
          nb::init<const std::string&, int, int, const std::string&, uint64_t, float, int, float>(),
          nb::arg("model"), nb::arg("max_batch") = 1, nb::arg("max_seq") = 2048,
          nb::arg("plan") = "", nb::arg("seed") = 0, nb::arg("temperature") = 0.0f,
          nb::arg("top_k") = 0, nb::arg("top_p") = 1.0f)
      .def("prefill", &PyExecutor::prefill, nb::arg("prompts"),
           "Starts a batch: runs the prompts (lists of ids, one per sequence) and returns the "
           "first generated token of each.")
      .def("decode_step", &PyExecutor::decode_step, nb::arg("forced") = nb::none(),
           "One decode step of every sequence: feeds the last tokens (or `forced`: a list of ids "
           "or a 1-D int32 tensor, CPU or CUDA) and returns the next token of each.")
      .def("logits", &PyExecutor::logits,
           "Logits [batch, vocab] float32 of the last prefill (last position) or decode step: a "
           "CUDA DLPack array owning a copy (torch.from_dlpack).")
      .def_prop_ro("plan", &PyExecutor::plan, "the plan it runs: 'source (description)'")
      .def_prop_ro("vocab_size", &PyExecutor::vocab_size)
      .def_prop_ro("max_batch", &PyExecutor::max_batch)
      .def_prop_ro("max_seq", &PyExecutor::max_seq);
  m.attr("has_cuda") = true;
#else
  nb::class_<PyExecutor>(m, "Executor", EXECUTOR_DOC)
      .def(
          nb::init<const std::string&, int, int, const std::string&, uint64_t, float, int, float>(),
          nb::arg("model"), nb::arg("max_batch") = 1, nb::arg("max_seq") = 2048,
          nb::arg("plan") = "", nb::arg("seed") = 0, nb::arg("temperature") = 0.0f,
          nb::arg("top_k") = 0, nb::arg("top_p") = 1.0f);
  m.attr("has_cuda") = false;
#endif

  nb::module_ cuda_ops = m.def_submodule(
      "cuda_ops",
      "the executor's kernels on CUDA tensors passed by DLPack (C-contiguous, 16-byte aligned); "
      "results are CUDA DLPack arrays owning their memory. stream: a cudaStream_t as an int "
      "(torch.cuda.current_stream().cuda_stream); None: the legacy default stream, waited for");
#ifdef MEGAOPS_HAVE_CUDA
  cuda_ops.def("rmsnorm", &cuda_rmsnorm, nb::arg("x"), nb::arg("w"), nb::arg("eps"),
               nb::arg("stream") = nb::none(),
               "y [rows, n] bfloat16 = x [rows, n] float32 normalised, times w [n] bfloat16");
  cuda_ops.def("matmul", &cuda_matmul, nb::arg("x"), nb::arg("w"), nb::arg("stream") = nb::none(),
               "y [m, n] float32 = x [m, k] bfloat16 . w [n, k]^T bfloat16 (HF Linear layout)");
  cuda_ops.def("silu_mul", &cuda_silu_mul, nb::arg("gate_up"), nb::arg("stream") = nb::none(),
               "act [m, inter] bfloat16 = silu(gate_up[:, :inter]) * gate_up[:, inter:], gate_up "
               "[m, 2 * inter] float32");
#else
  for (const char* name : {"rmsnorm", "matmul", "silu_mul"}) {
    const std::string what = std::string("megaops.cuda_ops.") + name;
    cuda_ops.def(name, [what](nb::args, nb::kwargs) { require_gpu(what.c_str()); });
  }
#endif
}
