// Tokenizer files for a random-weight checkpoint (`megaops init-random`): a byte-level BPE
// tokenizer.json in the exact format of the family's real checkpoints (Llama 3: its pre-tokenizer
// regex, ignore_merges, BOS post-processor; Qwen 3: its regex, NFC), with the family's special
// tokens at the model's ids, merges learned from a built-in English text and then extended with
// synthetic merges until the vocabulary is full (so every id a random model samples is a word
// piece), plus tokenizer_config.json carrying the family's real chat template and
// generation_config.json with the EOS ids.
#pragma once

#include <string>
#include <vector>

namespace megaops {

enum class TokenizerFamily { Llama3, Qwen3 };

struct TokenizerFiles {
  std::string tokenizer_json, tokenizer_config_json, generation_config_json;
};

// Throws InputError when the vocabulary is too small for the byte alphabet and special tokens or
// the special-token ids collide.
TokenizerFiles build_tokenizer_files(TokenizerFamily family, int vocab_size, int bos_token_id,
                                     const std::vector<int>& eos_token_ids);

// The real chat template of each family's instruct checkpoints (Llama 3.1, Qwen 3), as llama.cpp
// ships them; compiled in from the fetched copies (scripts/fetch_text_deps.sh).
const std::string& family_chat_template(TokenizerFamily family);

}  // namespace megaops
