// See tokenizer.h. The pipeline follows HF tokenizers' TokenizerImpl::encode: split on added
// tokens, normalize what is left, pre-tokenize, run the model on each piece, post-process.
// Everything works on raw bytes: the byte-level alphabet (GPT-2's bytes_to_unicode) only exists in
// the file's vocabulary and merges, which are translated back to bytes once at load.
#include "io/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "io/json_describe.h"
#include "io/text_file.h"

namespace megaops {

namespace {

using json = nlohmann::json;

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes map
// to U+0100.. in byte order.
std::array<uint32_t, 256> byte_to_codepoint() {
  std::array<uint32_t, 256> out{};
  std::array<bool, 256> direct{};
  for (int b = '!'; b <= '~'; ++b) direct[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) direct[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) direct[b] = true;
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) out[b] = direct[b] ? static_cast<uint32_t>(b) : next++;
  return out;
}

void append_utf8(uint32_t cp, std::string* out) {
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
size_t utf8_sequence_length(std::string_view s, size_t i, uint32_t* cp) {
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
bool is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

// Rust's char::is_alphanumeric plus '_': what HF's single_word treats as part of a word.
bool is_word_char(uint32_t c) {
  if (c == '_') return true;
  const utf8proc_category_t cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}

// The code point ending just before byte i (text is valid UTF-8).
uint32_t codepoint_before(std::string_view s, size_t i, size_t* start) {
  size_t j = i - 1;
  while (j > 0 && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) --j;
  uint32_t cp = 0;
  utf8_sequence_length(s, j, &cp);
  *start = j;
  return cp;
}

std::string nfc(std::string_view s) {
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

Pcre2Code compile_regex(const std::string& pattern, bool literal, const std::string& origin,
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

const json& member(const json& obj, const char* key, const std::string& origin,
                   const std::string& field) {
  if (!obj.is_object())
    throw_input_error(origin, field, "expected an object, found " + describe_json(obj));
  auto it = obj.find(key);
  if (it == obj.end()) throw_input_error(origin, field + "." + key, "missing");
  return *it;
}

std::string string_member(const json& obj, const char* key, const std::string& origin,
                          const std::string& field) {
  const json& v = member(obj, key, origin, field);
  if (!v.is_string())
    throw_input_error(origin, field + "." + key, "expected a string, found " + describe_json(v));
  return v.get<std::string>();
}

bool bool_member(const json& obj, const char* key, bool fallback, const std::string& origin,
                 const std::string& field) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean())
    throw_input_error(origin, field + "." + key,
                      "expected true or false, found " + describe_json(*it));
  return it->get<bool>();
}

int id_value(const json& v, const std::string& origin, const std::string& field) {
  if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX - 1)
    throw_input_error(origin, field,
                      "expected a token id (a non-negative integer), found " + describe_json(v));
  return static_cast<int>(v.get<int64_t>());
}

const std::string& type_of(const json& v, const std::string& origin, const std::string& field) {
  if (!v.is_object())
    throw_input_error(origin, field, "expected an object, found " + describe_json(v));
  auto it = v.find("type");
  if (it == v.end() || !it->is_string())
    throw_input_error(origin, field + ".type", "missing or not a string");
  return it->get_ref<const std::string&>();
}

}  // namespace

struct Tokenizer::Impl {
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

void Tokenizer::Impl::parse_model(const json& model, const std::array<uint32_t, 256>& b2c) {
  if (!model.is_object())
    throw_input_error(origin, "model", "expected an object, found " + describe_json(model));
  auto t = model.find("type");
  if (t != model.end() && !(t->is_string() && *t == "BPE"))
    throw_input_error(origin, "model.type",
                      "expected \"BPE\" (byte-level BPE), found " + describe_json(*t));
  if (bool_member(model, "byte_fallback", false, origin, "model"))
    throw_input_error(origin, "model.byte_fallback",
                      "expected false (byte-level BPE), found true (SentencePiece-style BPE is not "
                      "supported)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    auto it = model.find(key);
    if (it != model.end() && !it->is_null() &&
        !(it->is_string() && it->get_ref<const std::string&>().empty()))
      throw_input_error(origin, std::string("model.") + key,
                        "expected null or \"\", found " + describe_json(*it));
  }
  if (auto d = model.find("dropout");
      d != model.end() && !d->is_null() && !(d->is_number() && d->get<double>() == 0.0))
    throw_input_error(origin, "model.dropout",
                      "expected null (no BPE dropout at inference), found " + describe_json(*d));
  ignore_merges = bool_member(model, "ignore_merges", false, origin, "model");

  // Vocabulary strings are in the byte-level alphabet; a character outside it stands for its own
  // UTF-8 bytes (what HF's ByteLevel decoder does with it).
  std::unordered_map<uint32_t, uint8_t> c2b;
  for (int b = 0; b < 256; ++b) c2b[b2c[b]] = static_cast<uint8_t>(b);
  const auto to_bytes = [&](const std::string& s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
      uint32_t cp = 0;
      const size_t n = utf8_sequence_length(s, i, &cp);
      if (n == 0) throw_input_error(origin, "model.vocab", "a token is not valid UTF-8");
      auto it = c2b.find(cp);
      if (it != c2b.end()) {
        out.push_back(static_cast<char>(it->second));
      } else {
        out.append(s, i, n);
      }
      i += n;
    }
    return out;
  };

  const json& vocab = member(model, "vocab", origin, "model");
  if (!vocab.is_object())
    throw_input_error(origin, "model.vocab",
                      "expected an object of token -> id, found " + describe_json(vocab));
  std::unordered_map<std::string, int> by_text;
  by_text.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int id = id_value(it.value(), origin, "model.vocab[" + describe_json(it.key()) + "]");
    if (static_cast<size_t>(id) < id_known.size() && id_known[id])
      throw_input_error(origin, "model.vocab[" + describe_json(it.key()) + "]",
                        "id " + std::to_string(id) + " is given to two tokens");
    std::string bytes = to_bytes(it.key());
    vocab_by_bytes.emplace(bytes, id);
    set_id(id, std::move(bytes), false);
    by_text.emplace(it.key(), id);
    token_by_text.emplace(it.key(), id);
  }
  byte_id.fill(-1);
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    append_utf8(b2c[b], &ch);
    auto it = by_text.find(ch);
    if (it != by_text.end()) byte_id[b] = it->second;
  }
  if (auto u = model.find("unk_token"); u != model.end() && !u->is_null()) {
    if (!u->is_string())
      throw_input_error(origin, "model.unk_token", "expected a string, found " + describe_json(*u));
    auto it = by_text.find(u->get<std::string>());
    if (it == by_text.end())
      throw_input_error(origin, "model.unk_token",
                        "token " + describe_json(*u) + " is not in model.vocab");
    unk_id = it->second;
  }

  const json& merge_list = member(model, "merges", origin, "model");
  if (!merge_list.is_array())
    throw_input_error(origin, "model.merges",
                      "expected an array, found " + describe_json(merge_list));
  merges.reserve(merge_list.size());
  for (size_t rank = 0; rank < merge_list.size(); ++rank) {
    const json& m = merge_list[rank];
    const std::string field = "model.merges[" + std::to_string(rank) + "]";
    std::string left, right;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ', 1);
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        throw_input_error(
            origin, field,
            "expected \"LEFT RIGHT\" (two tokens, one space), found " + describe_json(m));
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      throw_input_error(origin, field,
                        "expected \"LEFT RIGHT\" or [LEFT, RIGHT], found " + describe_json(m));
    }
    auto l = by_text.find(left), r = by_text.find(right), lr = by_text.find(left + right);
    if (l == by_text.end() || r == by_text.end() || lr == by_text.end())
      throw_input_error(origin, field,
                        "token " +
                            describe_json(l == by_text.end()   ? left
                                          : r == by_text.end() ? right
                                                               : left + right) +
                            " is not in model.vocab");
    const uint64_t key =
        (static_cast<uint64_t>(l->second) << 32) | static_cast<uint32_t>(r->second);
    // HF keeps the first rank of a pair listed twice.
    merges.emplace(key, std::make_pair(static_cast<int>(rank), lr->second));
  }
}

void Tokenizer::Impl::parse_normalizer(const json& n, const std::string& field) {
  if (n.is_null()) return;
  const std::string& type = type_of(n, origin, field);
  if (type == "NFC") {
    normalize_nfc = true;
  } else if (type == "Sequence") {
    const json& list = member(n, "normalizers", origin, field);
    if (!list.is_array()) throw_input_error(origin, field + ".normalizers", "expected an array");
    for (size_t i = 0; i < list.size(); ++i)
      parse_normalizer(list[i], field + ".normalizers[" + std::to_string(i) + "]");
  } else {
    throw_input_error(origin, field + ".type",
                      "expected NFC or Sequence (the normalizers of byte-level BPE checkpoints), "
                      "found \"" +
                          type + "\"");
  }
}

void Tokenizer::Impl::parse_pre_tokenizer(const json& p, const std::string& field) {
  if (p.is_null()) return;
  const std::string& type = type_of(p, origin, field);
  if (type == "Sequence") {
    const json& list = member(p, "pretokenizers", origin, field);
    if (!list.is_array()) throw_input_error(origin, field + ".pretokenizers", "expected an array");
    for (size_t i = 0; i < list.size(); ++i)
      parse_pre_tokenizer(list[i], field + ".pretokenizers[" + std::to_string(i) + "]");
  } else if (type == "Split") {
    const json& pattern = member(p, "pattern", origin, field);
    PreTokenizeStep step;
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      step.regex = compile_regex(pattern["Regex"], false, origin, field + ".pattern.Regex");
    } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
      step.regex = compile_regex(pattern["String"], true, origin, field + ".pattern.String");
    } else {
      throw_input_error(
          origin, field + ".pattern",
          "expected {\"Regex\": ...} or {\"String\": ...}, found " + describe_json(pattern));
    }
    const std::string behavior = string_member(p, "behavior", origin, field);
    if (behavior == "Isolated") {
      step.behavior = SplitBehavior::Isolated;
    } else if (behavior == "Removed") {
      step.behavior = SplitBehavior::Removed;
    } else if (behavior == "MergedWithPrevious") {
      step.behavior = SplitBehavior::MergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      step.behavior = SplitBehavior::MergedWithNext;
    } else if (behavior == "Contiguous") {
      step.behavior = SplitBehavior::Contiguous;
    } else {
      throw_input_error(origin, field + ".behavior",
                        "expected Isolated, Removed, MergedWithPrevious, MergedWithNext or "
                        "Contiguous, found \"" +
                            behavior + "\"");
    }
    if (bool_member(p, "invert", false, origin, field))
      throw_input_error(origin, field + ".invert", "expected false, found true (not supported)");
    pre_steps.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    PreTokenizeStep step;
    step.add_prefix_space = bool_member(p, "add_prefix_space", true, origin, field);
    if (bool_member(p, "use_regex", true, origin, field))
      step.regex = compile_regex(GPT2_PATTERN, false, origin, field);
    pre_steps.push_back(std::move(step));
  } else {
    throw_input_error(
        origin, field + ".type",
        "expected Sequence, Split or ByteLevel (byte-level BPE), found \"" + type + "\"");
  }
}

void Tokenizer::Impl::parse_post_processor(const json& p, const std::string& field) {
  if (p.is_null()) return;
  const std::string& type = type_of(p, origin, field);
  if (type == "ByteLevel") return;  // only adjusts offsets, never ids
  if (type == "Sequence") {
    const json& list = member(p, "processors", origin, field);
    if (!list.is_array()) throw_input_error(origin, field + ".processors", "expected an array");
    for (size_t i = 0; i < list.size(); ++i)
      parse_post_processor(list[i], field + ".processors[" + std::to_string(i) + "]");
    return;
  }
  if (type != "TemplateProcessing")
    throw_input_error(origin, field + ".type",
                      "expected TemplateProcessing, ByteLevel or Sequence, found \"" + type + "\"");
  const json& single = member(p, "single", origin, field);
  const json& specials = member(p, "special_tokens", origin, field);
  if (!single.is_array()) throw_input_error(origin, field + ".single", "expected an array");
  if (!specials.is_object())
    throw_input_error(origin, field + ".special_tokens", "expected an object");
  prefix_ids.clear();
  suffix_ids.clear();
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const std::string f = field + ".single[" + std::to_string(i) + "]";
    const json& piece = single[i];
    if (piece.is_object() && piece.contains("Sequence")) {
      if (seen_sequence) throw_input_error(origin, f, "a second Sequence in a single template");
      seen_sequence = true;
    } else if (piece.is_object() && piece.contains("SpecialToken")) {
      const std::string name =
          string_member(piece["SpecialToken"], "id", origin, f + ".SpecialToken");
      auto it = specials.find(name);
      if (it == specials.end())
        throw_input_error(origin, f, "special token \"" + name + "\" is not in special_tokens");
      const json& ids = member(*it, "ids", origin, field + ".special_tokens." + name);
      if (!ids.is_array())
        throw_input_error(origin, field + ".special_tokens." + name + ".ids", "expected an array");
      for (const json& id : ids)
        (seen_sequence ? suffix_ids : prefix_ids)
            .push_back(id_value(id, origin, field + ".special_tokens." + name + ".ids"));
    } else {
      throw_input_error(
          origin, f,
          "expected {\"SpecialToken\": ...} or {\"Sequence\": ...}, found " + describe_json(piece));
    }
  }
  if (!seen_sequence) throw_input_error(origin, field + ".single", "no Sequence");
}

void Tokenizer::Impl::parse_decoder(const json& d, const std::string& field) {
  if (d.is_null()) throw_input_error(origin, field, "expected a ByteLevel decoder, found null");
  const std::string& type = type_of(d, origin, field);
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    const json& list = member(d, "decoders", origin, field);
    if (!list.is_array() || list.empty())
      throw_input_error(origin, field + ".decoders", "expected a non-empty array");
    for (size_t i = 0; i < list.size(); ++i)
      parse_decoder(list[i], field + ".decoders[" + std::to_string(i) + "]");
    return;
  }
  throw_input_error(origin, field + ".type",
                    "expected ByteLevel (byte-level BPE), found \"" + type + "\"");
}

Tokenizer Tokenizer::parse(const std::string& json_text, const std::string& origin) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    throw_input_error(origin, "", std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object())
    throw_input_error(origin, "", "expected a JSON object, found " + describe_json(root));
  auto impl = std::make_unique<Impl>();
  impl->origin = origin;
  const std::array<uint32_t, 256> b2c = byte_to_codepoint();
  impl->parse_model(member(root, "model", origin, ""), b2c);

  if (auto a = root.find("added_tokens"); a != root.end() && !a->is_null()) {
    if (!a->is_array())
      throw_input_error(origin, "added_tokens", "expected an array, found " + describe_json(*a));
    for (size_t i = 0; i < a->size(); ++i) {
      const std::string f = "added_tokens[" + std::to_string(i) + "]";
      const json& t = (*a)[i];
      AddedToken tok;
      tok.id = id_value(member(t, "id", origin, f), origin, f + ".id");
      tok.content = string_member(t, "content", origin, f);
      if (tok.content.empty()) throw_input_error(origin, f + ".content", "empty");
      uint32_t cp = 0;
      for (size_t k = 0; k < tok.content.size(); k += utf8_sequence_length(tok.content, k, &cp))
        if (utf8_sequence_length(tok.content, k, &cp) == 0)
          throw_input_error(origin, f + ".content", "not valid UTF-8");
      tok.special = bool_member(t, "special", false, origin, f);
      tok.lstrip = bool_member(t, "lstrip", false, origin, f);
      tok.rstrip = bool_member(t, "rstrip", false, origin, f);
      tok.single_word = bool_member(t, "single_word", false, origin, f);
      tok.normalized = bool_member(t, "normalized", !tok.special, origin, f);
      impl->set_id(tok.id, tok.content, tok.special);
      impl->token_by_text[tok.content] = tok.id;
      impl->added.push_back(tok);
    }
  }
  std::vector<int> order(impl->added.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return impl->added[a].content.size() > impl->added[b].content.size();
  });
  for (int i : order) {
    const AddedToken& t = impl->added[i];
    const bool normalized = t.normalized && !t.special;
    auto& buckets = normalized ? impl->normalized_buckets : impl->raw_buckets;
    buckets[static_cast<unsigned char>(t.content[0])].push_back(i);
    impl->has_normalized_added |= normalized;
  }

  const auto optional = [&](const char* key) -> const json& {
    static const json null_value;
    auto it = root.find(key);
    return it == root.end() ? null_value : *it;
  };
  impl->parse_normalizer(optional("normalizer"), "normalizer");
  impl->parse_pre_tokenizer(optional("pre_tokenizer"), "pre_tokenizer");
  impl->parse_post_processor(optional("post_processor"), "post_processor");
  impl->parse_decoder(optional("decoder"), "decoder");
  for (int id : impl->prefix_ids)
    if (static_cast<size_t>(id) >= impl->id_known.size() || !impl->id_known[id])
      throw_input_error(origin, "post_processor",
                        "special token id " + std::to_string(id) + " is not in the vocabulary");
  return Tokenizer(std::move(impl));
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  return parse(read_text_file(path), path);
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

// Splits `text` into runs of plain text (id -1) and added tokens (their id), leftmost-longest,
// with HF's single_word, lstrip and rstrip rules.
void Tokenizer::Impl::split_added(std::string_view text,
                                  const std::array<std::vector<int>, 256>& buckets,
                                  std::vector<std::pair<std::string_view, int>>* out) const {
  size_t plain_start = 0, i = 0;
  while (i < text.size()) {
    const auto& bucket = buckets[static_cast<unsigned char>(text[i])];
    int found = -1;
    size_t match_start = i, match_end = i;
    for (int k : bucket) {
      const AddedToken& t = added[k];
      if (text.compare(i, t.content.size(), t.content) != 0) continue;
      size_t end = i + t.content.size();
      if (t.single_word) {
        size_t before_start = 0;
        uint32_t after = 0;
        if (i > 0 && is_word_char(codepoint_before(text, i, &before_start))) continue;
        if (end < text.size() && utf8_sequence_length(text, end, &after) && is_word_char(after))
          continue;
      }
      size_t start = i;
      if (t.lstrip) {
        while (start > plain_start) {
          size_t prev = 0;
          if (!is_white_space(codepoint_before(text, start, &prev))) break;
          start = prev;
        }
      }
      if (t.rstrip) {
        uint32_t cp = 0;
        size_t n = 0;
        while (end < text.size() && (n = utf8_sequence_length(text, end, &cp)) &&
               is_white_space(cp))
          end += n;
      }
      found = added[k].id;
      match_start = start;
      match_end = end;
      break;
    }
    if (found < 0) {
      ++i;
      continue;
    }
    if (match_start > plain_start)
      out->emplace_back(text.substr(plain_start, match_start - plain_start), -1);
    out->emplace_back(text.substr(match_start, match_end - match_start), found);
    plain_start = i = match_end;
  }
  if (plain_start < text.size()) out->emplace_back(text.substr(plain_start), -1);
}

void Tokenizer::Impl::bpe(std::string_view piece, std::vector<int>* out) const {
  if (ignore_merges) {
    auto it = vocab_by_bytes.find(std::string(piece));
    if (it != vocab_by_bytes.end()) {
      out->push_back(it->second);
      return;
    }
  }
  // One symbol per byte; a byte missing from the vocabulary becomes unk, or is dropped (as HF does
  // without an unk token).
  struct Symbol {
    int id, prev, next;
    bool alive;
  };
  std::vector<Symbol> sym;
  sym.reserve(piece.size());
  for (unsigned char b : piece) {
    const int id = byte_id[b] >= 0 ? byte_id[b] : unk_id;
    if (id < 0) continue;
    const int n = static_cast<int>(sym.size());
    sym.push_back({id, n - 1, -1, true});
    if (n > 0) sym[n - 1].next = n;
  }
  if (sym.empty()) return;
  struct Merge {
    int rank, pos, new_id;
    bool operator>(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Merge, std::vector<Merge>, std::greater<Merge>> queue;
  const auto lookup = [&](int a, int b) -> const std::pair<int, int>* {
    auto it = merges.find((static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b));
    return it == merges.end() ? nullptr : &it->second;
  };
  for (size_t i = 0; i + 1 < sym.size(); ++i)
    if (const auto* m = lookup(sym[i].id, sym[i + 1].id))
      queue.push({m->first, static_cast<int>(i), m->second});
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = sym[left.next];
    const auto* m = lookup(left.id, right.id);
    if (!m || m->second != top.new_id) continue;
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) sym[left.next].prev = top.pos;
    if (left.prev >= 0)
      if (const auto* p = lookup(sym[left.prev].id, left.id))
        queue.push({p->first, left.prev, p->second});
    if (left.next >= 0)
      if (const auto* n = lookup(left.id, sym[left.next].id))
        queue.push({n->first, top.pos, n->second});
  }
  for (int i = 0; i >= 0; i = sym[i].next) out->push_back(sym[i].id);
}

void Tokenizer::Impl::encode_normalized(std::string_view text, std::vector<int>* out) const {
  std::vector<std::string> pieces{std::string(text)};
  std::vector<std::string> next;
  Pcre2MatchData md;
  for (const PreTokenizeStep& step : pre_steps) {
    next.clear();
    for (std::string& piece : pieces) {
      if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) piece.insert(0, " ");
      if (!step.regex) {
        next.push_back(std::move(piece));
        continue;
      }
      if (!md) md.reset(pcre2_match_data_create_from_pattern(step.regex.get(), nullptr));
      // Matches and the gaps between them, then grouped per the split behavior.
      std::vector<std::pair<std::string_view, bool>> parts;
      const std::string_view s = piece;
      size_t offset = 0, gap_start = 0;
      while (offset < s.size()) {
        const int rc = pcre2_match(step.regex.get(), reinterpret_cast<PCRE2_SPTR>(s.data()),
                                   s.size(), offset, PCRE2_NO_UTF_CHECK, md.get(), nullptr);
        if (rc < 0) break;
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        const size_t start = ov[0], end = ov[1];
        if (end == start) {  // an empty match splits nothing; step over one character
          uint32_t cp = 0;
          offset = start + std::max<size_t>(1, utf8_sequence_length(s, start, &cp));
          continue;
        }
        if (start > gap_start) parts.emplace_back(s.substr(gap_start, start - gap_start), false);
        parts.emplace_back(s.substr(start, end - start), true);
        gap_start = offset = end;
      }
      if (gap_start < s.size()) parts.emplace_back(s.substr(gap_start), false);
      std::string pending;
      bool pending_is_match = false, have_pending = false;
      for (const auto& [text_part, is_match] : parts) {
        switch (step.behavior) {
          case SplitBehavior::Isolated:
            next.emplace_back(text_part);
            break;
          case SplitBehavior::Removed:
            if (!is_match) next.emplace_back(text_part);
            break;
          case SplitBehavior::MergedWithPrevious:
            if (is_match && !next.empty() && have_pending) {
              next.back() += text_part;
            } else {
              next.emplace_back(text_part);
            }
            have_pending = true;
            break;
          case SplitBehavior::MergedWithNext:
            if (is_match) {
              pending += text_part;
            } else {
              next.push_back(pending + std::string(text_part));
              pending.clear();
            }
            break;
          case SplitBehavior::Contiguous:
            if (is_match && have_pending && pending_is_match) {
              next.back() += text_part;
            } else {
              next.emplace_back(text_part);
            }
            have_pending = true;
            pending_is_match = is_match;
            break;
        }
      }
      if (!pending.empty()) next.push_back(std::move(pending));
    }
    pieces.swap(next);
  }
  for (const std::string& piece : pieces) {
    if (piece.empty()) continue;
    constexpr size_t CACHE_MAX_PIECE = 64, CACHE_MAX_ENTRIES = 100000;
    if (piece.size() <= CACHE_MAX_PIECE) {
      std::lock_guard<std::mutex> lock(cache_mutex);
      auto it = cache.find(piece);
      if (it != cache.end()) {
        out->insert(out->end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    const size_t before = out->size();
    bpe(piece, out);
    if (piece.size() <= CACHE_MAX_PIECE) {
      std::lock_guard<std::mutex> lock(cache_mutex);
      if (cache.size() < CACHE_MAX_ENTRIES)
        cache.emplace(piece, std::vector<int>(out->begin() + before, out->end()));
    }
  }
}

std::vector<int> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  for (size_t i = 0; i < text.size();) {
    uint32_t cp = 0;
    const size_t n = utf8_sequence_length(text, i, &cp);
    if (n == 0) throw InputError("text: invalid UTF-8 at byte " + std::to_string(i));
    i += n;
  }
  const Impl& m = *impl_;
  std::vector<int> out;
  if (add_special_tokens) out = m.prefix_ids;
  std::vector<std::pair<std::string_view, int>> segments;
  m.split_added(text, m.raw_buckets, &segments);
  for (const auto& [segment, id] : segments) {
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    const std::string normalized = m.normalize_nfc ? nfc(segment) : std::string(segment);
    if (!m.has_normalized_added) {
      m.encode_normalized(normalized, &out);
      continue;
    }
    std::vector<std::pair<std::string_view, int>> inner;
    m.split_added(normalized, m.normalized_buckets, &inner);
    for (const auto& [part, part_id] : inner) {
      if (part_id >= 0) {
        out.push_back(part_id);
      } else {
        m.encode_normalized(part, &out);
      }
    }
  }
  if (add_special_tokens) out.insert(out.end(), m.suffix_ids.begin(), m.suffix_ids.end());
  return out;
}

std::string byte_level_spelling(std::string_view bytes) {
  static const std::array<uint32_t, 256> b2c = byte_to_codepoint();
  std::string out;
  for (unsigned char b : bytes) append_utf8(b2c[b], &out);
  return out;
}

size_t append_utf8_lossy(std::string_view bytes, bool hold_incomplete_tail, std::string* out) {
  static const char REPLACEMENT[] = "\xEF\xBF\xBD";
  size_t i = 0;
  while (i < bytes.size()) {
    uint32_t cp = 0;
    const size_t n = utf8_sequence_length(bytes, i, &cp);
    if (n) {
      out->append(bytes.substr(i, n));
      i += n;
      continue;
    }
    // The maximal subpart: the lead byte and the continuation bytes that are still valid for it.
    const unsigned char b0 = static_cast<unsigned char>(bytes[i]);
    size_t need = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      need = 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      need = 3;
      if (b0 == 0xE0) lo = 0xA0;
      if (b0 == 0xED) hi = 0x9F;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      need = 4;
      if (b0 == 0xF0) lo = 0x90;
      if (b0 == 0xF4) hi = 0x8F;
    }
    size_t k = 1;
    while (need && k < need && i + k < bytes.size()) {
      const unsigned char b = static_cast<unsigned char>(bytes[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) break;
      ++k;
    }
    if (need && k < need && i + k == bytes.size() && hold_incomplete_tail) return bytes.size() - i;
    out->append(REPLACEMENT);
    i += k;
  }
  return 0;
}

std::string Tokenizer::decode(const std::vector<int>& ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    bytes += token_bytes(id);
  }
  std::string out;
  append_utf8_lossy(bytes, false, &out);
  return out;
}

std::string Tokenizer::token_bytes(int id) const {
  if (id < 0 || static_cast<size_t>(id) >= impl_->id_bytes.size()) return {};
  return impl_->id_bytes[id];
}

std::optional<int> Tokenizer::token_id(std::string_view token) const {
  auto it = impl_->token_by_text.find(std::string(token));
  if (it == impl_->token_by_text.end()) return std::nullopt;
  return it->second;
}

bool Tokenizer::is_special(int id) const {
  return id >= 0 && static_cast<size_t>(id) < impl_->id_special.size() && impl_->id_special[id];
}

int Tokenizer::vocab_size() const {
  return static_cast<int>(impl_->id_bytes.size());
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const {
  return impl_->added;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::push(int id) {
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  pending_ += tokenizer_->token_bytes(id);
  std::string out;
  const size_t held = append_utf8_lossy(pending_, true, &out);
  pending_.erase(0, pending_.size() - held);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  append_utf8_lossy(pending_, false, &out);
  pending_.clear();
  return out;
}

}  // namespace megaops
