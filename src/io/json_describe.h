// A short, single-line rendering of an untrusted JSON value for the "found ..." part of error
// messages. nlohmann's dump() recurses once per nesting level, so dumping a hostile value like
// 100k nested arrays overflows the stack; this walks at most a few levels and a few elements.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace megaops {

namespace json_describe_detail {

inline void append(const nlohmann::json& v, int depth, std::string* out) {
  constexpr size_t MAX_CHARS = 60;
  constexpr int MAX_DEPTH = 3;
  constexpr size_t MAX_ITEMS = 6;
  if (out->size() > MAX_CHARS) return;
  if (!v.is_structured()) {
    *out += v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    return;
  }
  const bool object = v.is_object();
  *out += object ? '{' : '[';
  if (depth >= MAX_DEPTH && !v.empty()) {
    *out += "...";
  } else {
    size_t n = 0;
    for (auto it = v.begin(); it != v.end(); ++it, ++n) {
      if (n == MAX_ITEMS || out->size() > MAX_CHARS) {
        *out += ",...";
        break;
      }
      if (n) *out += ',';
      if (object)
        *out += nlohmann::json(it.key()).dump(-1, ' ', false,
                                              nlohmann::json::error_handler_t::replace) +
                ':';
      append(it.value(), depth + 1, out);
    }
  }
  *out += object ? '}' : ']';
}

}  // namespace json_describe_detail

inline std::string describe_json(const nlohmann::json& v) {
  std::string out;
  json_describe_detail::append(v, 0, &out);
  constexpr size_t MAX_CHARS = 80;
  if (out.size() > MAX_CHARS) out = out.substr(0, MAX_CHARS) + "...";
  return out;
}

}  // namespace megaops
