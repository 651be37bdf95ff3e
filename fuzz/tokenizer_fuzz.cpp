// libFuzzer target for tokenizer.json and for encoding text. The first byte picks the mode:
// even: the rest is a tokenizer.json; it must parse or raise InputError, and a tokenizer it yields
// must encode and decode a few texts (some with its own added tokens) without any other error.
// odd: the rest is text, encoded by a small byte-level tokenizer with added tokens; valid UTF-8
// must round-trip (decode(encode(text)) == text, streamed or whole), anything else must be
// rejected with InputError. Seed corpus: fuzz/corpus/tokenizer/.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "io/tokenizer.h"

namespace {

// 256 byte tokens, a few merges, Llama 3's pre-tokenizer regex and post-processor, and added
// tokens (special and not) that overlap each other's prefixes.
std::string small_tokenizer_json() {
  const auto byte_char = [](int b) {
    // GPT-2's bytes_to_unicode, written out for the seed vocabulary.
    const bool direct = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
    int cp = b;
    if (!direct) {
      int n = 0;
      for (int k = 0; k < b; ++k)
        if (!((k >= '!' && k <= '~') || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE))) ++n;
      cp = 256 + n;
    }
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    return s;
  };
  std::string vocab;
  for (int b = 0; b < 256; ++b) {
    std::string c = byte_char(b);
    if (c == "\"" || c == "\\") c = "\\" + c;
    vocab += "\"" + c + "\": " + std::to_string(b) + ", ";
  }
  vocab += R"("he": 256, "ll": 257, "hell": 258, "hello": 259, "Ġt": 260, "Ġth": 261, "Ġthe": 262)";
  return R"({"added_tokens": [
    {"id": 300, "content": "<|bos|>", "special": true, "normalized": false},
    {"id": 301, "content": "<|eot|>", "special": true, "normalized": false},
    {"id": 302, "content": "<|eot", "special": false, "normalized": false},
    {"id": 303, "content": "<think>", "special": false, "normalized": false}],
  "normalizer": null,
  "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
    {"type": "Split", "pattern": {"Regex": "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"},
     "behavior": "Isolated", "invert": false},
    {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<|bos|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "special_tokens": {"<|bos|>": {"id": "<|bos|>", "ids": [300], "tokens": ["<|bos|>"]}}},
  "decoder": {"type": "ByteLevel"},
  "model": {"type": "BPE", "ignore_merges": true, "vocab": {)" +
         vocab + R"(}, "merges": ["h e", "l l", "he ll", "hell o", "Ġ t", "Ġt h", "Ġth e"]}})";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if ((data[0] & 1) == 0) {
    try {
      const megaops::Tokenizer tok = megaops::Tokenizer::parse(rest, "fuzz");
      std::string with_added = "hello <x> 123 ";
      for (const megaops::AddedToken& t : tok.added_tokens()) with_added += t.content + "a ";
      for (const std::string& text : {std::string("hello world"), with_added}) {
        const std::vector<int> ids = tok.encode(text);
        tok.decode(ids);
        megaops::StreamDecoder stream(tok);
        for (int id : ids) stream.push(id);
        stream.finish();
      }
    } catch (const megaops::InputError&) {
    }
    return 0;
  }
  static const megaops::Tokenizer tok = megaops::Tokenizer::parse(small_tokenizer_json(), "seed");
  std::vector<int> ids;
  try {
    ids = tok.encode(rest, false);
  } catch (const megaops::InputError&) {
    return 0;  // invalid UTF-8
  }
  if (tok.decode(ids) != rest) __builtin_trap();
  megaops::StreamDecoder stream(tok);
  std::string streamed;
  for (int id : ids) streamed += stream.push(id);
  streamed += stream.finish();
  if (streamed != rest) __builtin_trap();
  return 0;
}
