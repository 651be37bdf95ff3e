// The tokenizer of a Hugging Face checkpoint, read from its tokenizer.json: byte-level BPE as Llama
// 3 and Qwen 3 use it (added and special tokens split out first, an optional NFC normalizer, the
// pre-tokenizer's Split regex run by PCRE2 exactly as the file spells it, then the byte-level
// alphabet and the BPE merges), the post-processor's special tokens (Llama 3's BOS), and byte-level
// decoding, whole or incremental for streaming. Encodings match the HF `tokenizers` library
// (tests/tools/test_tokenizer_exact.py compares them). Anything the file asks for that is not
// implemented here is an InputError naming the file and field, never a silent approximation.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace megaops {

// One entry of tokenizer.json's added_tokens.
struct AddedToken {
  int id = -1;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
};

class Tokenizer {
 public:
  // Parses tokenizer.json text; `origin` names the file in error messages.
  static Tokenizer parse(const std::string& json_text, const std::string& origin);
  // Reads and parses PATH (a tokenizer.json). Throws InputError on a missing or malformed file.
  static Tokenizer from_file(const std::string& path);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text` (UTF-8; invalid UTF-8 is an InputError). Added tokens written in the text
  // are recognised, as HF does by default; `add_special_tokens` applies the post-processor (Llama
  // 3: BOS first).
  std::vector<int> encode(std::string_view text, bool add_special_tokens = true) const;
  // The text of `ids`: their bytes concatenated, invalid UTF-8 replaced by U+FFFD as HF does; ids
  // outside the vocabulary decode to nothing (as in HF), special tokens too when asked.
  std::string decode(const std::vector<int>& ids, bool skip_special_tokens = false) const;
  // The raw bytes of one token (empty for an unknown id). Byte-level tokens may hold part of a
  // UTF-8 character.
  std::string token_bytes(int id) const;
  // The id of a token written as it appears in tokenizer.json (added tokens by content), if any.
  std::optional<int> token_id(std::string_view token) const;
  bool is_special(int id) const;
  // Largest id + 1 over the model vocabulary and the added tokens.
  int vocab_size() const;
  const std::vector<AddedToken>& added_tokens() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class StreamDecoder;
};

// Turns generated ids into text as they arrive: each push returns the text that is now complete
// (a UTF-8 character split across tokens is held until its last byte arrives), and the pieces of
// all pushes plus finish() concatenate to exactly decode(all ids).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::string push(int id);
  // What is still held (an incomplete character becomes U+FFFD), and resets.
  std::string finish();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes not yet returned: at most an incomplete UTF-8 sequence
};

// `bytes` spelled in the byte-level alphabet of tokenizer.json vocabularies (GPT-2's
// bytes_to_unicode: printable bytes stand for themselves, the others map to U+0100..).
std::string byte_level_spelling(std::string_view bytes);

// Appends `bytes` to `out` as UTF-8 with each maximal invalid subpart replaced by U+FFFD (the
// Unicode "substitution of maximal subparts" practice, which Rust's from_utf8_lossy follows). When
// `hold_incomplete_tail` is set, a trailing sequence that could still be completed is not decoded
// and its length is returned; otherwise everything is consumed and 0 returned.
size_t append_utf8_lossy(std::string_view bytes, bool hold_incomplete_tail, std::string* out);

}  // namespace megaops
