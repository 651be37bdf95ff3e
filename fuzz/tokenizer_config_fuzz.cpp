// libFuzzer target for tokenizer_config.json and generation_config.json: any text must parse (as
// both) or raise InputError; a chat template the config carries must parse and render a fixed
// conversation or raise InputError. Seed corpus: fuzz/corpus/tokenizer_config/.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "io/chat_template.h"
#include "io/tokenizer_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    megaops::parse_generation_config(text, "fuzz");
  } catch (const megaops::InputError&) {
  }
  try {
    const megaops::TokenizerConfig cfg = megaops::parse_tokenizer_config(text, "fuzz");
    if (!cfg.chat_template.empty()) {
      const megaops::ChatTemplate tmpl = megaops::ChatTemplate::parse(cfg.chat_template, "fuzz");
      const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
          R"([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}])");
      nlohmann::ordered_json vars = {{"add_generation_prompt", true}};
      if (cfg.bos_token) vars["bos_token"] = *cfg.bos_token;
      if (cfg.eos_token) vars["eos_token"] = *cfg.eos_token;
      tmpl.render(messages, vars);
    }
  } catch (const megaops::InputError&) {
  }
  return 0;
}
