// Internal to the tokenizer (tokenizer.cpp encodes and decodes, tokenizer_load.cpp reads
// tokenizer.json): the byte-level and UTF-8 helpers, the PCRE2 handles, the JSON field readers and
// the tokenizer's state. Not part of the public interface (io/tokenizer.h).
#pragma once

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <array>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "io/json_describe.h"
#include "io/tokenizer.h"

namespace megaops {
namespace tokenizer_detail {

using json = nlohmann::json;

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes map
// to U+0100.. in byte order.
inline std::array<uint32_t, 256> byte_to_codepoint() {
  std::array<uint32_t, 256> out{};
  std::array<bool, 256> direct{};
  for (int b = '!'; b <= '~'; ++b) direct[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) out[b] = direct[b] ? static_cast<uint32_t>(b) : next++;
  return out;
}

inline void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Length of the valid UTF-8 sequence at s[i] (1-4), or 0 when it is invalid or truncated.
inline size_t utf8_sequence_length(std::string_view s, size_t i, uint32_t* cp) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) {
    *cp = b0;
    return 1;
  }
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  uint32_t c = b0 & (0x7F >> n);
  for (size_t k = 1; k < n; ++k) {
    const unsigned char b = byte(i + k);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return 0;
    c = (c << 6) | (b & 0x3F);
  }
  *cp = c;
  return n;
}

// Rust's char::is_whitespace (the Unicode White_Space property), which HF uses for lstrip/rstrip.
inline bool is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Rust's char::is_alphanumeric plus '_': what HF's single_word treats as part of a word.
inline bool is_word_char(uint32_t c) {
  if (c == '_') return true;
  const utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

// The code point ending just before byte i (text is valid UTF-8).
inline uint32_t codepoint_before(std::string_view s, size_t i, size_t* start) {
  size_t j = i - 1;
  while (j > 0 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
  uint32_t cp = 0;
  utf8_sequence_length(s, j, &cp);
  *start = j;
  return cp;
}

inline std::string nfc(std::string_view s) {
  const std::string copy(s);
  utf8proc_uint8_t* out = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(copy.c_str()));
  if (!out) throw InputError("text: NFC normalization failed");
  std::string result(reinterpret_cast<char*>(out));
  std::free(out);
  return result;
}

struct Pcre2CodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct Pcre2MatchDataDeleter {
  void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
using Pcre2Code = std::unique_ptr<pcre2_code, Pcre2CodeDeleter>;
using Pcre2MatchData = std::unique_ptr<pcre2_match_data, Pcre2MatchDataDeleter>;

enum class SplitBehavior { Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous };

// One pre-tokenizer step: a regex split, or ByteLevel's optional prefix space and GPT-2 split.
struct PreTokenizeStep {
  Pcre2Code regex;  // null: no split
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool add_prefix_space = false;
};

// GPT-2's pattern, which ByteLevel applies itself when use_regex is set.
constexpr const char* GPT2_PATTERN =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

inline Pcre2Code compile_regex(const std::string& pattern, bool literal, const std::string& origin,
                               const std::string& field) {
  int err = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t flags = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   flags, &err, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    throw_input_error(origin, field,
                      "regex does not compile at offset " + std::to_string(offset) + ": " +
                          reinterpret_cast<char*>(msg));
  }
  // JIT is an optimisation only: where it is unavailable the interpreter gives the same matches.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  return Pcre2Code(code);
}

inline const json& member(const json& obj, const char* key, const std::string& origin,
                          const std::string& field) {
  if (!obj.is_object())
    throw_input_error(origin, field, "expected an object, found " + describe_json(obj));
  auto it = obj.find(key);
  if (it == obj.end()) throw_input_error(origin, field + "." + key, "missing");
  return *it;
}

inline std::string string_member(const json& obj, const char* key, const std::string& origin,
                                 const std::string& field) {
  const json& v = member(obj, key, origin, field);
  if (!v.is_string())
    throw_input_error(origin, field + "." + key, "expected a string, found " + describe_json(v));
  return v.get<std::string>();
}

inline bool bool_member(const json& obj, const char* key, bool fallback, const std::string& origin,
                        const std::string& field) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    throw_input_error(origin, field + "." + key,
                      "expected true or false, found " + describe_json(*it));
  return it->get<bool>();
}

inline int id_value(const json& v, const std::string& origin, const std::string& field) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX - 1)
    throw_input_error(origin, field,
                      "expected a token id (a non-negative integer), found " + describe_json(v));
  return static_cast<int>(v.get<int64_t>());
}

inline const std::string& type_of(const json& v, const std::string& origin,
                                  const std::string& field) {
  if (!v.is_object())
    throw_input_error(origin, field, "expected an object, found " + describe_json(v));
  auto it = v.find("type");
  if (it == v.end() || !it->is_string())
    throw_input_error(origin, field + ".type", "missing or not a string");
  return it->get_ref<const std::string&>();
}

}  // namespace tokenizer_detail

struct Tokenizer::Impl {
  using json = tokenizer_detail::json;
  using PreTokenizeStep = tokenizer_detail::PreTokenizeStep;
  std::string origin;
  // Model vocabulary and added tokens, by id: raw bytes, and whether the id is special.
  std::vector<std::string> id_bytes;
  std::vector<uint8_t> id_known, id_special;
  std::unordered_map<std::string, int> vocab_by_bytes;  // model vocabulary only
  std::unordered_map<std::string, int> token_by_text;   // as written in the file
  std::array<int, 256> byte_id{};
  // (left id, right id) -> (rank, merged id).
  std::unordered_map<uint64_t, std::pair<int, int>> merges;
  bool ignore_merges = false;
  int unk_id = -1;

  bool normalize_nfc = false;
  std::vector<PreTokenizeStep> pre_steps;
  std::vector<int> prefix_ids, suffix_ids;  // post-processor's single-sequence template

  std::vector<AddedToken> added;
  // Added tokens matched on the raw text / on normalized text, bucketed by first byte, longest
  // first (leftmost-longest matching, as HF's Aho-Corasick automaton is built).
  std::array<std::vector<int>, 256> raw_buckets, normalized_buckets;
  bool has_normalized_added = false;

  mutable std::mutex cache_mutex;
  mutable std::unordered_map<std::string, std::vector<int>> cache;

  void set_id(int id, std::string bytes, bool special) {
    if (static_cast<size_t>(id) >= id_bytes.size()) {
      id_bytes.resize(id + 1);
      id_known.resize(id + 1, 0);
      id_special.resize(id + 1, 0);
    }
    id_bytes[id] = std::move(bytes);
    id_known[id] = 1;
    id_special[id] = special ? 1 : 0;
  }

  void parse_model(const json& model, const std::array<uint32_t, 256>& b2c);
  void parse_normalizer(const json& n, const std::string& field);
  void parse_pre_tokenizer(const json& p, const std::string& field);
  void parse_post_processor(const json& p, const std::string& field);
  void parse_decoder(const json& d, const std::string& field);

  void split_added(std::string_view text, const std::array<std::vector<int>, 256>& buckets,
                   std::vector<std::pair<std::string_view, int>>* out) const;
  void encode_normalized(std::string_view text, std::vector<int>* out) const;
  void bpe(std::string_view piece, std::vector<int>* out) const;
};

}  // namespace megaops
