// A checkpoint's chat template (tokenizer_config.json's chat_template, HF's Jinja dialect) rendered
// by llama.cpp's Jinja engine, the maintained C++ engine built to render real HF chat templates
// (loop controls, namespace(), raise_exception, tojson, string methods). The template is parsed
// once; rendering takes the conversation as JSON in the shape HF's apply_chat_template takes it.
// Syntax and render errors (including the template's own raise_exception) are one-line
// InputErrors naming the origin. A template is untrusted input: a render that would run away
// (more than render_step_limit() steps of work, macros nested 200 deep, a repeated or indented
// string over 64 MiB) is such an error too.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace megaops {

class ChatTemplate {
 public:
  // Parses `source`; `origin` names it in errors (e.g. "DIR/tokenizer_config.json: chat_template").
  static ChatTemplate parse(const std::string& source, const std::string& origin);

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // The prompt text for `messages` (an array of {"role", "content", ...}). `variables` holds the
  // rest of the template's context (bos_token, eos_token, add_generation_prompt, tools,
  // enable_thinking, ...); messages is set from the first argument.
  std::string render(const nlohmann::ordered_json& messages,
                     const nlohmann::ordered_json& variables) const;

  const std::string& source() const;

  // Steps of work one render may spend (statements, variables copied into new scopes, loop items,
  // range and repetition elements, string parts and bytes made or copied): 8,000,000 by default,
  // room for 26,000-message conversations through either family's template (tested).
  // Process-wide; a harness lowers it to keep each input fast.
  static uint64_t render_step_limit();
  static void set_render_step_limit(uint64_t steps);

 private:
  struct Impl;
  explicit ChatTemplate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace megaops
