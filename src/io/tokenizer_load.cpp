// Reading tokenizer.json (and the file's added tokens, normalizer, pre-tokenizer, post-processor
// and decoder) into Tokenizer::Impl; see tokenizer.h. Whatever the file asks for that is not
// implemented is an InputError naming the file and field.
#include <algorithm>
#include <array>
#include <cstdlib>

#include "io/text_file.h"
#include "io/tokenizer_impl.h"

namespace megaops {

using namespace tokenizer_detail;

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

}  // namespace megaops
