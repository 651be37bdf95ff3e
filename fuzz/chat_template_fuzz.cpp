// libFuzzer target for chat templates: any template text must parse and render a fixed
// conversation (system, user, assistant with a tool call, user) or raise InputError; nothing else
// may escape. Seed corpus: fuzz/corpus/chat_template/ (the real Llama 3.1 and Qwen 3 templates and
// small ones using loop controls, namespace, filters and raise_exception).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "io/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hi <|eot_id|> \u00e9\ud83e\udd99"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "f", "arguments": {"x": 1, "y": [true, null, 2.5]}}}]},
    {"role": "tool", "content": "{\"ok\": true}"},
    {"role": "user", "content": "again"}])");
  static const nlohmann::ordered_json vars = {{"bos_token", "<s>"},
                                              {"eos_token", "</s>"},
                                              {"add_generation_prompt", true},
                                              {"enable_thinking", false}};
  // The default bound (8,000,000 steps) takes seconds under the fuzzer's instrumentation; the
  // bounding is what is exercised, so a lower one keeps each input well inside -timeout.
  static const bool limited = (megaops::ChatTemplate::set_render_step_limit(100000), true);
  (void)limited;
  try {
    const megaops::ChatTemplate tmpl = megaops::ChatTemplate::parse(text, "fuzz");
    tmpl.render(messages, vars);
  } catch (const megaops::InputError&) {
  }
  return 0;
}
