// The text side of a Hugging Face checkpoint directory: tokenizer.json (the Tokenizer),
// tokenizer_config.json (special-token names and the chat template, or chat_template.jinja beside
// it as newer transformers saves it) and generation_config.json (EOS ids and sampling defaults).
// Each file is validated on load; a malformed one is one InputError naming file, field, expected
// and found.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "io/chat_template.h"
#include "io/tokenizer.h"

namespace megaops {

struct TokenizerConfig {
  // Special-token contents (HF writes each as a string or as an AddedToken object).
  std::optional<std::string> bos_token, eos_token, pad_token, unk_token;
  std::string chat_template;         // empty: the checkpoint has none
  std::string chat_template_origin;  // where chat_template came from, for error messages
};

// Parses tokenizer_config.json text; `origin` names the file in errors.
TokenizerConfig parse_tokenizer_config(const std::string& json_text, const std::string& origin);

struct GenerationConfig {
  std::vector<int> eos_token_ids;
  std::optional<int> bos_token_id;
  std::optional<bool> do_sample;
  std::optional<float> temperature, top_p;
  std::optional<int> top_k, max_new_tokens;
};

// Parses generation_config.json text; `origin` names the file in errors.
GenerationConfig parse_generation_config(const std::string& json_text, const std::string& origin);

// Everything a checkpoint directory says about text, loaded together.
class CheckpointText {
 public:
  // Reads DIR/tokenizer.json (required), DIR/tokenizer_config.json, DIR/chat_template.jinja and
  // DIR/generation_config.json (each optional). Throws InputError on a missing tokenizer.json
  // or any malformed file.
  static CheckpointText open(const std::string& dir);

  const Tokenizer& tokenizer() const { return tokenizer_; }
  const TokenizerConfig& config() const { return config_; }
  const GenerationConfig& generation() const { return generation_; }
  bool has_chat_template() const { return chat_template_ != nullptr; }
  // Replaces the checkpoint's chat template (vLLM's --chat-template): `source` is parsed now, and
  // `origin` names it in errors. Throws InputError when it does not parse.
  void set_chat_template(const std::string& source, const std::string& origin);

  // The prompt text of a conversation, rendered as transformers' apply_chat_template renders it:
  // the template sees messages, add_generation_prompt, the special tokens by name and `extra`
  // (e.g. enable_thinking, tools). Throws InputError when the checkpoint has no chat template.
  std::string render_chat(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                          const nlohmann::ordered_json& extra = nullptr) const;

  // The ids that end generation: generation_config's eos_token_id, else tokenizer_config's
  // eos_token, else none.
  std::vector<int> eos_token_ids() const;

 private:
  CheckpointText(Tokenizer tokenizer) : tokenizer_(std::move(tokenizer)) {}
  Tokenizer tokenizer_;
  TokenizerConfig config_;
  GenerationConfig generation_;
  std::shared_ptr<const ChatTemplate> chat_template_;
};

}  // namespace megaops
