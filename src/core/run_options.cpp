// See run_options.h.
#include "core/run_options.h"

#include <cstddef>
#include <utility>

#include "core/error.h"

namespace megaops {

namespace {

// The value named `text` among `choices`, or an InputError naming `where` and `field`, every
// accepted name and what was found.
template <typename E, size_t N>
E parse_choice(const std::string& text, const std::string& where, const std::string& field,
               const std::pair<const char*, E> (&choices)[N]) {
  std::string names;
  for (const auto& [name, value] : choices) {
    if (text == name) return value;
    names += (names.empty() ? "" : " or ") + std::string(name);
  }
  throw_input_error(where, field, "expected " + names + ", found '" + text + "'");
}

}  // namespace

const char* backend_name(DecodeBackend b) {
  return b == DecodeBackend::Overlap ? "overlap" : "conventional";
}

DecodeBackend parse_backend(const std::string& text, const std::string& where,
                            const std::string& field) {
  return parse_choice<DecodeBackend>(
      text, where, field,
      {{"conventional", DecodeBackend::Conventional}, {"overlap", DecodeBackend::Overlap}});
}

const char* prefill_path_name(PrefillPath p) {
  return p == PrefillPath::DecodeGraph ? "graph" : "layers";
}

PrefillPath parse_prefill_path(const std::string& text, const std::string& where,
                               const std::string& field) {
  return parse_choice<PrefillPath>(
      text, where, field, {{"layers", PrefillPath::Layers}, {"graph", PrefillPath::DecodeGraph}});
}

const char* prefill_attention_name(PrefillAttention a) {
  return a == PrefillAttention::Cudnn ? "cudnn" : "flash";
}

PrefillAttention parse_prefill_attention(const std::string& text, const std::string& where,
                                         const std::string& field) {
  return parse_choice<PrefillAttention>(
      text, where, field, {{"flash", PrefillAttention::Flash}, {"cudnn", PrefillAttention::Cudnn}});
}

}  // namespace megaops
