// See reasoning.h.
#include "serve/reasoning.h"

#include "core/error.h"
#include "serve/reply_text.h"

namespace megaops::serve {

namespace {

const std::string OPEN = "<think>";
const std::string CLOSE = "</think>";

}  // namespace

ReasoningFormat parse_reasoning_format(const std::string& name, const std::string& field) {
  if (name == "none") return ReasoningFormat::None;
  if (name == "qwen3" || name == "deepseek_r1") return ReasoningFormat::Think;
  throw InputError(field + ": expected auto, qwen3, deepseek_r1 or none, found '" + name + "'");
}

const char* reasoning_format_name(ReasoningFormat f) {
  return f == ReasoningFormat::Think ? "qwen3" : "none";
}

ReasoningFormat detect_reasoning_format(const std::string& t) {
  return t.find(OPEN) != std::string::npos ? ReasoningFormat::Think : ReasoningFormat::None;
}

ReasoningSplit split_reasoning(ReasoningFormat f, const std::string& text) {
  const size_t i = skip_space(text);
  if (f == ReasoningFormat::None || text.compare(i, OPEN.size(), OPEN) != 0) return {"", text};
  const size_t body = i + OPEN.size();
  const size_t close = text.find(CLOSE, body);
  if (close == std::string::npos) return {text.substr(body), ""};
  return {text.substr(body, close - body), text.substr(skip_space(text, close + CLOSE.size()))};
}

ReasoningSplit ReasoningStream::feed(const std::string& delta) {
  ReasoningSplit out;
  if (format_ == ReasoningFormat::None || state_ == State::Content) {
    out.content = delta;
    return out;
  }
  std::string buf = std::move(held_);
  held_.clear();
  buf += delta;
  if (state_ == State::Opening) {
    const size_t i = skip_space(buf);
    const std::string t = buf.substr(i, OPEN.size());
    if (t.size() < OPEN.size() && OPEN.compare(0, t.size(), t) == 0) {
      held_ = std::move(buf);  // white space, or the start of <think>: not decided yet
      return out;
    }
    if (t != OPEN) {
      state_ = State::Content;
      out.content = std::move(buf);
      return out;
    }
    state_ = State::Reasoning;
    buf = buf.substr(i + OPEN.size());
  }
  if (state_ == State::Reasoning) {
    const size_t close = buf.find(CLOSE);
    if (close == std::string::npos) {
      const size_t keep = marker_tail(buf, CLOSE);
      out.reasoning = buf.substr(0, buf.size() - keep);
      held_ = buf.substr(buf.size() - keep);
      return out;
    }
    out.reasoning = buf.substr(0, close);
    buf = buf.substr(close + CLOSE.size());
    state_ = State::Closing;
  }
  // Closing: the white space between </think> and the answer is dropped.
  const size_t i = skip_space(buf);
  if (i < buf.size()) {
    state_ = State::Content;
    out.content = buf.substr(i);
  }
  return out;
}

ReasoningSplit ReasoningStream::finish() {
  ReasoningSplit out;
  if (state_ == State::Opening) out.content = std::move(held_);
  if (state_ == State::Reasoning) out.reasoning = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace megaops::serve
