// A thinking model's reasoning, taken out of a chat reply into reasoning_content (vLLM's
// --reasoning-parser, llama.cpp's --reasoning-format): Qwen 3 and DeepSeek R1 write
// `<think>...</think>` before their answer. A reply that opens (after white space) with <think>
// has the text up to </think> as its reasoning (all the rest of it when the reply ends first,
// e.g. at max_tokens) and what follows, its leading white space dropped, as its content; any other
// reply is all content (Qwen 3 with enable_thinking false: the template closes the block in the
// prompt).
#pragma once

#include <string>

namespace megaops::serve {

enum class ReasoningFormat { None, Think };

// "none", "qwen3" / "deepseek_r1" (both the <think> block); throws InputError naming `field`.
ReasoningFormat parse_reasoning_format(const std::string& name, const std::string& field);
const char* reasoning_format_name(ReasoningFormat f);  // "none" or "qwen3"
// Think when the chat template writes <think> (it teaches the block), else None.
ReasoningFormat detect_reasoning_format(const std::string& chat_template);

struct ReasoningSplit {
  std::string reasoning, content;
};

ReasoningSplit split_reasoning(ReasoningFormat f, const std::string& text);

// The same split for a reply in pieces: feed() returns what can go out now of each part (never a
// piece of a marker), finish() the rest; the parts' concatenations equal split_reasoning's.
class ReasoningStream {
 public:
  explicit ReasoningStream(ReasoningFormat f) : format_(f) {}
  ReasoningSplit feed(const std::string& delta);
  ReasoningSplit finish();

 private:
  enum class State { Opening, Reasoning, Closing, Content };
  ReasoningFormat format_;
  State state_ = State::Opening;
  std::string held_;
};

}  // namespace megaops::serve
