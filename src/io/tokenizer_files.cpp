// See tokenizer_files.h.
#include "io/tokenizer_files.h"

#include <filesystem>

#include "core/error.h"
#include "io/json_describe.h"
#include "io/text_file.h"

namespace megaops {

namespace {

using json = nlohmann::json;

json parse_object(const std::string& text, const std::string& origin) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {
    throw_input_error(origin, "", std::string("not valid JSON: ") + e.what());
  }
  if (!root.is_object())
    throw_input_error(origin, "", "expected a JSON object, found " + describe_json(root));
  return root;
}

// HF writes a special token as "content" or as {"content": ..., "lstrip": ..., ...}.
std::optional<std::string> token_name(const json& root, const char* key,
                                      const std::string& origin) {
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto c = it->find("content");
    if (c != it->end() && c->is_string()) return c->get<std::string>();
  }
  throw_input_error(origin, key,
                    "expected a string or {\"content\": ...}, found " + describe_json(*it));
}

template <typename T>
std::optional<T> number(const json& root, const char* key, const std::string& origin,
                        const char* expected) {
  auto it = root.find(key);
  if (it == root.end() || it->is_null()) return std::nullopt;
  if constexpr (std::is_same_v<T, int>) {
    if (it->is_number_integer() && it->get<int64_t>() >= 0 && it->get<int64_t>() <= INT32_MAX)
      return static_cast<int>(it->get<int64_t>());
  } else {
    if (it->is_number()) return static_cast<T>(it->get<double>());
  }
  throw_input_error(origin, key,
                    std::string("expected ") + expected + ", found " + describe_json(*it));
}

}  // namespace

TokenizerConfig parse_tokenizer_config(const std::string& json_text, const std::string& origin) {
  const json root = parse_object(json_text, origin);
  TokenizerConfig c;
  c.bos_token = token_name(root, "bos_token", origin);
  c.eos_token = token_name(root, "eos_token", origin);
  c.pad_token = token_name(root, "pad_token", origin);
  c.unk_token = token_name(root, "unk_token", origin);
  if (auto t = root.find("chat_template"); t != root.end() && !t->is_null()) {
    if (t->is_string()) {
      c.chat_template = t->get<std::string>();
    } else if (t->is_array()) {
      // Several named templates: transformers uses the one named "default".
      for (size_t i = 0; i < t->size(); ++i) {
        const json& e = (*t)[i];
        if (!e.is_object() || !e.contains("name") || !e.contains("template") ||
            !e["name"].is_string() || !e["template"].is_string())
          throw_input_error(
              origin, "chat_template[" + std::to_string(i) + "]",
              "expected {\"name\": ..., \"template\": ...}, found " + describe_json(e));
        if (e["name"] == "default") c.chat_template = e["template"].get<std::string>();
      }
      if (c.chat_template.empty())
        throw_input_error(origin, "chat_template", "no template named \"default\"");
    } else {
      throw_input_error(
          origin, "chat_template",
          "expected a string or a list of named templates, found " + describe_json(*t));
    }
    c.chat_template_origin = origin + ": chat_template";
  }
  return c;
}

GenerationConfig parse_generation_config(const std::string& json_text, const std::string& origin) {
  const json root = parse_object(json_text, origin);
  GenerationConfig g;
  if (auto e = root.find("eos_token_id"); e != root.end() && !e->is_null()) {
    const auto one = [&](const json& v) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
        throw_input_error(origin, "eos_token_id",
                          "expected a token id or a list of them, found " + describe_json(*e));
      g.eos_token_ids.push_back(static_cast<int>(v.get<int64_t>()));
    };
    if (e->is_array()) {
      for (const json& v : *e) one(v);
    } else {
      one(*e);
    }
  }
  g.bos_token_id = number<int>(root, "bos_token_id", origin, "a token id");
  if (auto d = root.find("do_sample"); d != root.end() && !d->is_null()) {
    if (!d->is_boolean())
      throw_input_error(origin, "do_sample", "expected true or false, found " + describe_json(*d));
    g.do_sample = d->get<bool>();
  }
  g.temperature = number<float>(root, "temperature", origin, "a number");
  g.top_p = number<float>(root, "top_p", origin, "a number");
  g.top_k = number<int>(root, "top_k", origin, "a non-negative integer");
  g.max_new_tokens = number<int>(root, "max_new_tokens", origin, "a non-negative integer");
  return g;
}

void CheckpointText::set_chat_template(const std::string& source, const std::string& origin) {
  chat_template_ = std::make_shared<const ChatTemplate>(ChatTemplate::parse(source, origin));
  config_.chat_template = source;
  config_.chat_template_origin = origin;
}

CheckpointText CheckpointText::open(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string tok_path = (fs::path(dir) / "tokenizer.json").string();
  if (!fs::exists(tok_path))
    throw_input_error(tok_path, "",
                      "missing (text in and out needs the checkpoint's tokenizer; --prompt-ids "
                      "works without it)");
  CheckpointText t(Tokenizer::from_file(tok_path));
  const std::string cfg_path = (fs::path(dir) / "tokenizer_config.json").string();
  if (fs::exists(cfg_path)) t.config_ = parse_tokenizer_config(read_text_file(cfg_path), cfg_path);
  const std::string jinja_path = (fs::path(dir) / "chat_template.jinja").string();
  if (fs::exists(jinja_path)) {
    t.config_.chat_template = read_text_file(jinja_path);
    t.config_.chat_template_origin = jinja_path;
  }
  const std::string gen_path = (fs::path(dir) / "generation_config.json").string();
  if (fs::exists(gen_path))
    t.generation_ = parse_generation_config(read_text_file(gen_path), gen_path);
  if (!t.config_.chat_template.empty())
    t.chat_template_ = std::make_shared<const ChatTemplate>(
        ChatTemplate::parse(t.config_.chat_template, t.config_.chat_template_origin));
  // Special-token names must name tokens, or the template would print text the model never saw.
  for (const auto* name : {&t.config_.bos_token, &t.config_.eos_token})
    if (*name && !t.tokenizer_.token_id(**name))
      throw_input_error(cfg_path, name == &t.config_.bos_token ? "bos_token" : "eos_token",
                        "token \"" + **name + "\" is not in " + tok_path);
  const int vocab = t.tokenizer_.vocab_size();
  for (int id : t.generation_.eos_token_ids)
    if (id >= vocab)
      throw_input_error(gen_path, "eos_token_id",
                        "id " + std::to_string(id) + " is outside the tokenizer's vocabulary [0, " +
                            std::to_string(vocab) + ")");
  return t;
}

std::string CheckpointText::render_chat(const nlohmann::ordered_json& messages,
                                        bool add_generation_prompt,
                                        const nlohmann::ordered_json& extra) const {
  if (!chat_template_)
    throw InputError("the checkpoint has no chat template (tokenizer_config.json: chat_template)");
  nlohmann::ordered_json vars = nlohmann::ordered_json::object();
  // What transformers puts beside the messages: the special tokens by name, then the flag.
  for (const auto& [key, value] :
       {std::pair{"bos_token", config_.bos_token}, std::pair{"eos_token", config_.eos_token},
        std::pair{"unk_token", config_.unk_token}, std::pair{"pad_token", config_.pad_token}})
    if (value) vars[key] = *value;
  vars["add_generation_prompt"] = add_generation_prompt;
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it) vars[it.key()] = it.value();
  return chat_template_->render(messages, vars);
}

std::vector<int> CheckpointText::eos_token_ids() const {
  if (!generation_.eos_token_ids.empty()) return generation_.eos_token_ids;
  if (config_.eos_token)
    if (auto id = tokenizer_.token_id(*config_.eos_token)) return {*id};
  return {};
}

}  // namespace megaops
