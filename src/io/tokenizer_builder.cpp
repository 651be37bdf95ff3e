// See tokenizer_builder.h.
#include "io/tokenizer_builder.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "io/tokenizer.h"

namespace megaops {

namespace {

// What the merges are learned from: plain English, so a random model's output reads as words.
constexpr const char* CORPUS =
    "The model reads a prompt and writes one token at a time. Each token is a piece of a word, "
    "a whole word, a number or a mark of punctuation. When the weights are random, the words come "
    "out in a random order and mean nothing, but the path from text to tokens and back is the same "
    "one a real checkpoint takes. A tokenizer splits the text into words with a regular "
    "expression, "
    "turns every byte into a symbol and then merges the most frequent pairs of symbols, again and "
    "again, until the vocabulary is full. The first merges join letters that often stand together: "
    "t and h, e and r, i and n. Later merges join those pieces into common words such as the, and, "
    "that, with, from, this, which, there, their, other, about, would, could, should, these, "
    "those. "
    "People write about the weather, the city, the river, the mountain and the sea; about time, "
    "work, family, music, history, science, language, water, light, energy, memory and stories. "
    "Numbers like 1, 12, 123, 2024 and 3.14 appear too, as do questions? and answers! and lists: "
    "first, second, third. A good runtime streams the reply as it is generated, stops at the end "
    "of a turn, and tells the user how long the first token took and how fast the rest arrived. "
    "Inference engines keep the attention keys and values of earlier tokens in a cache, so each "
    "new "
    "token only computes its own row. The planner decides where kernels overlap, the executor "
    "runs the plan, and the tokenizer turns the numbers back into text that people can read.";

constexpr const char* LLAMA3_PATTERN =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* QWEN_PATTERN =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Special {
  std::string content;
  int id;
  bool special;
};

// Words of the corpus with a leading space where the text had one, as both families'
// pre-tokenizers split plain prose.
std::map<std::string, int> corpus_words() {
  std::map<std::string, int> words;
  const std::string text = CORPUS;
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i + (text[i] == ' ' ? 1 : 0);
    const auto alnum = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; };
    if (j < text.size() && alnum(text[j])) {
      while (j < text.size() && alnum(text[j])) ++j;
    } else {
      ++j;
    }
    ++words[text.substr(i, j - i)];
    i = j;
  }
  return words;
}

// The special tokens of `family`: the real model's layout where the vocabulary and BOS are the
// real model's, else the ones the chat template needs at BOS, EOS and the lowest free ids; then one
// for every other EOS id. Their ids go into `taken`; *regular_end: regular tokens take the free ids
// below it.
std::vector<Special> family_specials(TokenizerFamily family, int vocab_size, int bos_token_id,
                                     const std::vector<int>& eos_token_ids, std::set<int>& taken,
                                     int* regular_end) {
  const bool llama = family == TokenizerFamily::Llama3;
  std::vector<Special> specials;
  const auto add = [&](const std::string& content, int id, bool special) {
    if (id < 0 || id >= vocab_size || !taken.insert(id).second)
      throw_input_error("init-random", "tokenizer",
                        "special token " + content + " cannot take id " + std::to_string(id));
    specials.push_back({content, id, special});
  };
  const auto lowest_free = [&] {
    int id = 0;
    while (taken.count(id)) ++id;
    return id;
  };
  const int eos = eos_token_ids.empty() ? -1 : eos_token_ids[0];
  if (llama && bos_token_id == 128000 && vocab_size == 128256) {
    // Llama 3.1's layout: 256 special tokens from 128000, the named ones where Meta put them.
    const std::map<int, std::string> named = {
        {0, "<|begin_of_text|>"},   {1, "<|end_of_text|>"},   {4, "<|finetune_right_pad_id|>"},
        {6, "<|start_header_id|>"}, {7, "<|end_header_id|>"}, {8, "<|eom_id|>"},
        {9, "<|eot_id|>"},          {10, "<|python_tag|>"}};
    int reserved = 0;
    for (int k = 0; k < 256; ++k) {
      auto it = named.find(k);
      add(it != named.end() ? it->second
                            : "<|reserved_special_token_" + std::to_string(reserved++) + "|>",
          128000 + k, true);
    }
    *regular_end = 128000;
  } else if (!llama && bos_token_id == 151643 && vocab_size >= 151669) {
    // Qwen 3's layout; the ids after 151668 are padding of the embedding, as in the real models.
    const char* names[] = {"<|endoftext|>",
                           "<|im_start|>",
                           "<|im_end|>",
                           "<|object_ref_start|>",
                           "<|object_ref_end|>",
                           "<|box_start|>",
                           "<|box_end|>",
                           "<|quad_start|>",
                           "<|quad_end|>",
                           "<|vision_start|>",
                           "<|vision_end|>",
                           "<|vision_pad|>",
                           "<|image_pad|>",
                           "<|video_pad|>",
                           "<tool_call>",
                           "</tool_call>",
                           "<|fim_prefix|>",
                           "<|fim_middle|>",
                           "<|fim_suffix|>",
                           "<|fim_pad|>",
                           "<|repo_name|>",
                           "<|file_sep|>",
                           "<tool_response>",
                           "</tool_response>",
                           "<think>",
                           "</think>"};
    for (int k = 0; k < 26; ++k) {
      const std::string n = names[k];
      const bool special = n.rfind("<|", 0) == 0;  // Qwen 3's tags without bars are not special
      add(n, 151643 + k, special);
    }
    for (int id = 151669; id < vocab_size; ++id) taken.insert(id);
    *regular_end = 151643;
  } else if (llama) {
    add("<|begin_of_text|>", bos_token_id, true);
    add("<|eot_id|>", eos, true);
    for (const char* n :
         {"<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>"})
      add(n, lowest_free(), true);
  } else {
    add("<|endoftext|>", bos_token_id, true);
    add("<|im_end|>", eos, true);
    add("<|im_start|>", lowest_free(), true);
    add("<think>", lowest_free(), false);
    add("</think>", lowest_free(), false);
  }
  for (int id : eos_token_ids)
    if (!taken.count(id)) add("<|reserved_eos_" + std::to_string(id) + "|>", id, true);
  return specials;
}

// Tokens as byte strings, in id order: the 256 bytes, then learned merges, then synthetic ones,
// `count` in all (fewer when the synthetic ones run out), with the merges that make them.
void build_bpe_tokens(size_t count, std::vector<std::string>& tokens,
                      std::vector<std::pair<std::string, std::string>>& merges) {
  std::unordered_set<std::string> known;
  for (int b = 0; b < 256; ++b) {
    tokens.emplace_back(1, static_cast<char>(b));
    known.insert(tokens.back());
  }
  // Classic BPE training over the corpus words: merge the most frequent adjacent pair (ties to the
  // smallest pair, so the result is deterministic) while it occurs at least twice.
  std::vector<std::pair<std::vector<std::string>, int>> words;
  for (const auto& [w, n] : corpus_words()) {
    std::vector<std::string> symbols;
    for (char c : w) symbols.emplace_back(1, c);
    words.emplace_back(std::move(symbols), n);
  }
  while (tokens.size() < count) {
    std::map<std::pair<std::string, std::string>, int> counts;
    for (const auto& [symbols, n] : words)
      for (size_t i = 0; i + 1 < symbols.size(); ++i) counts[{symbols[i], symbols[i + 1]}] += n;
    auto best = counts.end();
    for (auto it = counts.begin(); it != counts.end(); ++it)
      if (it->second >= 2 && !known.count(it->first.first + it->first.second) &&
          (best == counts.end() || it->second > best->second))
        best = it;
    if (best == counts.end()) break;
    const auto [a, b] = best->first;
    merges.emplace_back(a, b);
    tokens.push_back(a + b);
    known.insert(a + b);
    for (auto& [symbols, n] : words) {
      std::vector<std::string> merged;
      for (size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == a && symbols[i + 1] == b) {
          merged.push_back(a + b);
          ++i;
        } else {
          merged.push_back(symbols[i]);
        }
      }
      symbols.swap(merged);
    }
  }
  // Synthetic merges fill the rest: a piece followed by a learned piece that does not start a new
  // word, or a lowercase letter, giving word-like tokens (" the" + "ing"); pieces made here extend
  // further, so any vocabulary size fills.
  std::vector<size_t> suffixes;
  for (size_t j = 256; j < tokens.size(); ++j)
    if (tokens[j][0] != ' ') suffixes.push_back(j);
  for (int c = 'a'; c <= 'z'; ++c) suffixes.push_back(static_cast<size_t>(c));
  for (size_t i = 256; i < tokens.size() && tokens.size() < count; ++i)
    for (size_t j : suffixes) {
      if (tokens.size() >= count) break;
      std::string t = tokens[i] + tokens[j];
      if (known.insert(t).second) {
        merges.emplace_back(tokens[i], tokens[j]);
        tokens.push_back(std::move(t));
      }
    }
}

}  // namespace

TokenizerFiles build_tokenizer_files(TokenizerFamily family, int vocab_size, int bos_token_id,
                                     const std::vector<int>& eos_token_ids) {
  const bool llama = family == TokenizerFamily::Llama3;
  std::set<int> taken;
  int regular_end = vocab_size;  // regular tokens take the free ids below this
  std::vector<Special> specials =
      family_specials(family, vocab_size, bos_token_id, eos_token_ids, taken, &regular_end);
  const int eos = eos_token_ids.empty() ? -1 : eos_token_ids[0];

  std::vector<int> free_ids;
  for (int id = 0; id < regular_end; ++id)
    if (!taken.count(id)) free_ids.push_back(id);
  if (free_ids.size() < 256)
    throw_input_error("init-random", "tokenizer",
                      "vocabulary of " + std::to_string(vocab_size) +
                          " leaves fewer than the 256 ids byte-level BPE needs");

  std::vector<std::string> tokens;
  std::vector<std::pair<std::string, std::string>> merges;
  build_bpe_tokens(free_ids.size(), tokens, merges);

  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (size_t k = 0; k < tokens.size(); ++k) vocab[byte_level_spelling(tokens[k])] = free_ids[k];
  // The special tokens are in the model vocabulary too: HF tokenizers numbers an added token that
  // is not from len(vocab) up, whatever id the file gives it, and the tiny presets put BOS and EOS
  // among the first ids.
  for (const Special& sp : specials) vocab[sp.content] = sp.id;
  nlohmann::ordered_json merge_list = nlohmann::ordered_json::array();
  for (const auto& [a, b] : merges)
    merge_list.push_back(byte_level_spelling(a) + " " + byte_level_spelling(b));
  std::sort(specials.begin(), specials.end(),
            [](const Special& x, const Special& y) { return x.id < y.id; });
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  for (const Special& s : specials)
    added.push_back({{"id", s.id},
                     {"content", s.content},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", s.special}});
  const nlohmann::ordered_json byte_level = {{"type", "ByteLevel"},
                                             {"add_prefix_space", false},
                                             {"trim_offsets", llama},
                                             {"use_regex", false}};
  nlohmann::ordered_json tok = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer",
       llama ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json{{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern", {{"Regex", llama ? LLAMA3_PATTERN : QWEN_PATTERN}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          byte_level}}}},
      {"post_processor",
       {{"type", "ByteLevel"},
        {"add_prefix_space", false},
        {"trim_offsets", false},
        {"use_regex", false}}},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr},
        {"end_of_word_suffix", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", llama},
        {"vocab", vocab},
        {"merges", merge_list}}}};
  const auto name_of = [&](int id) {
    for (const Special& s : specials)
      if (s.id == id) return s.content;
    return std::string();
  };
  if (llama) {
    using oj = nlohmann::ordered_json;
    const std::string bos = name_of(bos_token_id);
    const auto special = [&](int type_id) {
      oj t = oj::object();
      t["SpecialToken"] = {{"id", bos}, {"type_id", type_id}};
      return t;
    };
    const auto sequence = [](const char* id, int type_id) {
      oj t = oj::object();
      t["Sequence"] = {{"id", id}, {"type_id", type_id}};
      return t;
    };
    oj bos_entry = oj::object();
    bos_entry["id"] = bos;
    bos_entry["ids"] = oj::array({bos_token_id});
    bos_entry["tokens"] = oj::array({bos});
    oj templ = oj::object();
    templ["type"] = "TemplateProcessing";
    templ["single"] = oj::array({special(0), sequence("A", 0)});
    templ["pair"] = oj::array({special(0), sequence("A", 0), special(1), sequence("B", 1)});
    templ["special_tokens"] = oj::object();
    templ["special_tokens"][bos] = bos_entry;
    oj seq = oj::object();
    seq["type"] = "Sequence";
    seq["processors"] = oj::array({tok["post_processor"], templ});
    tok["post_processor"] = seq;
  }
  TokenizerFiles out;
  out.tokenizer_json = tok.dump();
  nlohmann::ordered_json cfg = {
      {"bos_token", llama ? nlohmann::ordered_json(name_of(bos_token_id)) : nullptr},
      {"eos_token", name_of(eos)},
      {"clean_up_tokenization_spaces", llama},
      {"model_max_length", 131072},
      {"tokenizer_class", llama ? "PreTrainedTokenizerFast" : "Qwen2Tokenizer"},
      {"chat_template", family_chat_template(family)}};
  if (!llama) cfg["pad_token"] = name_of(bos_token_id);
  out.tokenizer_config_json = cfg.dump(2) + "\n";
  nlohmann::ordered_json gen = {
      {"bos_token_id", bos_token_id}, {"eos_token_id", eos_token_ids}, {"do_sample", false}};
  out.generation_config_json = gen.dump(2) + "\n";
  return out;
}

}  // namespace megaops
