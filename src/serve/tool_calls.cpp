// See tool_calls.h.
#include "serve/tool_calls.h"

#include <nlohmann/json.hpp>
#include <optional>

#include "core/error.h"
#include "serve/reply_text.h"

namespace megaops::serve {

using json = nlohmann::ordered_json;

namespace {

constexpr const char* HERMES_OPEN = "<tool_call>";
constexpr const char* HERMES_CLOSE = "</tool_call>";
constexpr const char* PYTHON_TAG = "<|python_tag|>";

// One call from a parsed object: a non-empty string "name" and its arguments (an object, or a
// string holding JSON) under "arguments" or "parameters"; nullopt for anything else.
std::optional<ToolCall> call_of(const json& j, const std::function<std::string()>& make_id) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() ||
      j["name"].get<std::string>().empty())
    return std::nullopt;
  const char* key = j.contains("arguments") ? "arguments" : "parameters";
  std::string arguments = "{}";
  if (j.contains(key)) {
    const json& a = j[key];
    if (a.is_object()) {
      arguments = a.dump(-1, ' ', false, json::error_handler_t::replace);
    } else if (a.is_string()) {
      const json parsed = json::parse(a.get<std::string>(), nullptr, false);
      if (!parsed.is_object()) return std::nullopt;
      arguments = a.get<std::string>();
    } else if (!a.is_null()) {
      return std::nullopt;
    }
  }
  return ToolCall{make_id(), j["name"].get<std::string>(), std::move(arguments)};
}

std::optional<ToolCall> call_of_text(const std::string& text,
                                     const std::function<std::string()>& make_id) {
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  return call_of(j, make_id);
}

// Where the JSON object opening at s[start] ('{') ends (one past its '}'), or npos.
size_t object_end(const std::string& s, size_t start) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = start; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{') {
      ++depth;
    } else if (c == '}' && --depth == 0) {
      return i + 1;
    }
  }
  return std::string::npos;
}

ParsedReply extract_hermes(const std::string& text, const std::function<std::string()>& make_id) {
  ParsedReply out;
  const size_t open_len = std::char_traits<char>::length(HERMES_OPEN);
  const size_t close_len = std::char_traits<char>::length(HERMES_CLOSE);
  size_t pos = 0;
  for (size_t start = text.find(HERMES_OPEN); start != std::string::npos;
       start = text.find(HERMES_OPEN, pos)) {
    out.content += text.substr(pos, start - pos);
    const size_t body = start + open_len;
    const size_t close = text.find(HERMES_CLOSE, body);
    const size_t end = close == std::string::npos ? text.size() : close + close_len;
    std::optional<ToolCall> call = call_of_text(
        text.substr(body, (close == std::string::npos ? text.size() : close) - body), make_id);
    if (call)
      out.calls.push_back(std::move(*call));
    else
      out.content += text.substr(start, end - start);  // not a call: the client gets the text
    pos = end;
  }
  out.content += text.substr(pos);
  return out;
}

ParsedReply extract_llama3_json(const std::string& text,
                                const std::function<std::string()>& make_id) {
  size_t i = skip_space(text);
  if (text.compare(i, std::char_traits<char>::length(PYTHON_TAG), PYTHON_TAG) == 0)
    i += std::char_traits<char>::length(PYTHON_TAG);
  std::vector<ToolCall> calls;
  while (true) {
    i = skip_space(text, i);
    if (i >= text.size() || text[i] != '{') break;
    const size_t end = object_end(text, i);
    if (end == std::string::npos) return {text, {}};
    std::optional<ToolCall> call = call_of_text(text.substr(i, end - i), make_id);
    if (!call) return {text, {}};
    calls.push_back(std::move(*call));
    i = skip_space(text, end);
    if (i < text.size() && text[i] == ';') ++i;
  }
  // All or nothing: a reply that is not wholly calls is content (vLLM's llama3_json parser).
  if (calls.empty() || i < text.size()) return {text, {}};
  return {"", std::move(calls)};
}

}  // namespace

const char* tool_call_format_name(ToolCallFormat f) {
  switch (f) {
    case ToolCallFormat::Hermes:
      return "hermes";
    case ToolCallFormat::Llama3Json:
      return "llama3_json";
    default:
      return "none";
  }
}

ToolCallFormat parse_tool_call_format(const std::string& name, const std::string& field) {
  for (ToolCallFormat f :
       {ToolCallFormat::None, ToolCallFormat::Hermes, ToolCallFormat::Llama3Json})
    if (name == tool_call_format_name(f)) return f;
  throw InputError(field + ": expected auto, hermes, llama3_json or none, found '" + name + "'");
}

ToolCallFormat detect_tool_call_format(const std::string& t) {
  if (t.find(HERMES_OPEN) != std::string::npos) return ToolCallFormat::Hermes;
  if (t.find("\"parameters\"") != std::string::npos && t.find("ipython") != std::string::npos)
    return ToolCallFormat::Llama3Json;
  return ToolCallFormat::None;
}

ParsedReply extract_tool_calls(ToolCallFormat f, const std::string& text,
                               const std::function<std::string()>& make_id) {
  switch (f) {
    case ToolCallFormat::Hermes:
      return extract_hermes(text, make_id);
    case ToolCallFormat::Llama3Json:
      return extract_llama3_json(text, make_id);
    default:
      return {text, {}};
  }
}

ToolCallStream::ToolCallStream(ToolCallFormat f, std::function<std::string()> make_id)
    : format_(f), make_id_(std::move(make_id)) {}

std::string ToolCallStream::feed(const std::string& delta) {
  if (format_ == ToolCallFormat::None) return delta;
  if (in_call_) {
    held_ += delta;
    return "";
  }
  if (format_ == ToolCallFormat::Llama3Json) {
    if (decided_) return delta;
    held_ += delta;
    const size_t i = skip_space(held_);
    if (i == held_.size()) return "";
    const std::string tag = PYTHON_TAG;
    const std::string rest = held_.substr(i, tag.size());
    if (rest.size() < tag.size() && tag.compare(0, rest.size(), rest) == 0) return "";
    decided_ = true;
    in_call_ = held_[i] == '{' || rest == tag;
    if (in_call_) return "";
    std::string out = std::move(held_);
    held_.clear();
    return out;
  }
  std::string text = held_ + delta;
  const size_t open = text.find(HERMES_OPEN);
  if (open != std::string::npos) {
    in_call_ = true;
    held_ = text.substr(open);
    return text.substr(0, open);
  }
  const size_t keep = marker_tail(text, HERMES_OPEN);
  held_ = text.substr(text.size() - keep);
  return text.substr(0, text.size() - keep);
}

ParsedReply ToolCallStream::finish() {
  std::string rest = std::move(held_);
  held_.clear();
  if (format_ == ToolCallFormat::None || (!in_call_ && format_ == ToolCallFormat::Hermes))
    return {std::move(rest), {}};
  return extract_tool_calls(format_, rest, make_id_);
}

}  // namespace megaops::serve
