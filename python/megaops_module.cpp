// The `megaops` Python module (nanobind): load a checkpoint directory, tokenize, render chat
// templates, generate text or ids (streaming through a callback), run whole model steps (logits
// out) and single ops on tensors passed by DLPack (PyTorch, NumPy, JAX...; float32, C-contiguous,
// on the CPU: the ops are the fp32 oracle's). Generation goes through the same TokenGenerator and
// stream loop as the CLI, so the same seed gives the same tokens.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <atomic>
#include <memory>

#include "core/error.h"
#include "io/tokenizer_files.h"
#include "models/checkpoint.h"
#include "reference/model.h"
#include "reference/ops.h"
#include "text_session.h"

#ifdef MEGAOPS_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace nb = nanobind;

// What tools/text_session.cpp takes from the CLI's main.cpp.
namespace megaops::cli {
std::atomic<bool> g_interrupted{false};
bool gpu_available() {
#ifdef MEGAOPS_HAVE_CUDA
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
#else
  return false;
#endif
}
void print_progress(const std::string&, size_t, size_t) {}
}  // namespace megaops::cli

namespace {

using namespace megaops;
using Tensor = nb::ndarray<float, nb::c_contig, nb::device::cpu>;
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
  Model(const std::string& path, const std::string& device, int max_context)
      : text_(CheckpointText::open(path)), ckpt_(Checkpoint::open(path)) {
    if (device != "auto" && device != "cpu" && device != "cuda")
      throw InputError("device: expected auto, cpu or cuda, found '" + device + "'");
    if (device == "cuda" && !cli::gpu_available())
      throw InputError("device: cuda asked for, but this build or machine has no CUDA device");
    cpu_ = device == "cpu";
    max_context_ = std::min(max_context, ckpt_.config().max_position_embeddings);
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
    std::vector<int> ids;
    if (nb::isinstance<nb::str>(prompt)) {
      ids = text_.tokenizer().encode(nb::cast<std::string>(prompt), true);
    } else {
      ids = nb::cast<std::vector<int>>(prompt);
    }
    if (ids.empty()) throw InputError("prompt: empty");
    const cli::SamplingOptions s =
        cli::resolve_sampling(text_.generation(), temperature, top_k, top_p, seed);
    auto gen = cli::make_token_generator(ckpt_, cpu_, s, max_context_);
    cli::StreamLimits limits;
    limits.max_new_tokens = max_new_tokens;
    limits.stop = stop;
    if (!ignore_eos) limits.eos_ids = text_.eos_token_ids();
    if (static_cast<int>(ids.size()) + max_new_tokens > max_context_)
      throw InputError("prompt + max_new_tokens exceeds max_context " +
                       std::to_string(max_context_));
    cli::StreamResult r;
    {
      nb::gil_scoped_release release;
      r = cli::stream_text(*gen, text_, ids, limits, [&](const std::string& piece) {
        if (on_text) {
          nb::gil_scoped_acquire acquire;
          (*on_text)(piece);
        }
      });
    }
    nb::dict out;
    out["text"] = r.text;
    out["tokens"] = r.tokens;
    out["prompt_tokens"] = ids;
    out["stop_reason"] = r.stop_reason;
    out["ttft_s"] = r.ttft_s;
    out["total_s"] = r.total_s;
    out["backend"] = std::string(gen->backend());
    return out;
  }

  // One model step on the fp32 oracle: runs `ids` after what the session already holds (its KV
  // cache grows) and returns their logits [len(ids), vocab].
  NumpyOut forward(const std::vector<int>& ids) {
    if (!oracle_) {
      weights_ = std::make_unique<ref::Weights>(ref::load_weights(ckpt_));
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
  CheckpointText text_;
  Checkpoint ckpt_;
  bool cpu_ = false;
  int max_context_ = 4096;
  std::unique_ptr<ref::Weights> weights_;
  std::unique_ptr<ref::Model> oracle_;
};

void check_2d(const Tensor& t, const char* name) {
  if (t.ndim() != 2)
    throw InputError(std::string(name) + ": expected a 2-D float32 tensor, found " +
                     std::to_string(t.ndim()) + " dimensions");
}

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
      .def(nb::init<const std::string&, const std::string&, int>(), nb::arg("path"),
           nb::arg("device") = "auto", nb::arg("max_context") = 4096,
           "Loads a Hugging Face checkpoint directory (weights, tokenizer, chat template).")
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
      [](Tensor x, Tensor w, float eps) {
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
      [](Tensor x, Tensor w) {
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
      [](Tensor gate, Tensor up) {
        if (gate.size() != up.size()) throw InputError("up: expected the shape of gate");
        std::vector<float> out(gate.size());
        ref::silu_mul(gate.data(), up.data(), out.data(), gate.size());
        std::vector<size_t> shape(gate.ndim());
        for (size_t i = 0; i < gate.ndim(); ++i) shape[i] = gate.shape(i);
        return to_array(std::move(out), shape);
      },
      nb::arg("gate"), nb::arg("up"));
}
