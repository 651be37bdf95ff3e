// `megaops tokenize`: the checkpoint's tokenizer and chat template on their own, as llama.cpp's
// llama-tokenize offers them: text -> ids, ids -> text, a conversation -> its prompt, and a batch
// mode (one JSON string per line in, one JSON array of ids per line out) that the exactness test
// and the encode-speed measurement drive.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "io/text_file.h"
#include "io/tokenizer_files.h"

namespace megaops::cli {

namespace {

struct TokenizeOpts {
  std::string model, text, jsonl, decode, chat, bench;
  bool no_special = false, skip_special = false, render = false, no_generation_prompt = false;
  int repeat = 5;
};

std::string join_ids(const std::vector<int>& ids) {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
  return out;
}

}  // namespace

Runner add_tokenize(CLI::App& app) {
  auto o = std::make_shared<TokenizeOpts>();
  app.add_option("--model", o->model,
                 "checkpoint directory (tokenizer.json, tokenizer_config.json)")
      ->required();
  app.add_option("--text", o->text, "print the ids of TEXT, comma-separated");
  app.add_option("--decode", o->decode, "print the text of ids, e.g. 1,2,3");
  app.add_option("--chat", o->chat,
                 "a JSON file of messages ([{\"role\": ..., \"content\": ...}]): print the ids of "
                 "the prompt the chat template renders (--render: the text)");
  app.add_option("--jsonl", o->jsonl,
                 "a file of JSON values, one per line: a string prints its ids (a JSON array), an "
                 "array of ids prints its text (a JSON string)");
  app.add_option("--bench", o->bench, "time encoding the file's text (MB/s, single thread)");
  app.add_option("--repeat", o->repeat, "--bench: rounds (the median is reported)");
  app.add_flag("--no-special", o->no_special,
               "do not add the post-processor's special tokens (Llama 3's BOS)");
  app.add_flag("--skip-special", o->skip_special, "--decode: leave special tokens out");
  app.add_flag("--render", o->render, "--chat: print the rendered text instead of ids");
  app.add_flag("--no-generation-prompt", o->no_generation_prompt,
               "--chat: render without the assistant header that starts a reply");
  return [o]() {
    const int modes = !o->text.empty() + !o->decode.empty() + !o->chat.empty() + !o->jsonl.empty() +
                      !o->bench.empty();
    if (modes != 1)
      throw_input_error("tokenize", "",
                        "expected exactly one of --text, --decode, --chat, --jsonl, --bench");
    const CheckpointText text = CheckpointText::open(o->model);
    const Tokenizer& tok = text.tokenizer();
    if (!o->text.empty()) {
      std::printf("%s\n", join_ids(tok.encode(o->text, !o->no_special)).c_str());
    } else if (!o->decode.empty()) {
      std::printf("%s\n",
                  tok.decode(parse_int_list(o->decode, "--decode"), o->skip_special).c_str());
    } else if (!o->chat.empty()) {
      nlohmann::ordered_json messages;
      try {
        messages = nlohmann::ordered_json::parse(read_text_file(o->chat));
      } catch (const nlohmann::json::exception& e) {
        throw_input_error(o->chat, "", std::string("not valid JSON: ") + e.what());
      }
      // Either a list of messages, or {"messages": [...], <template variables>...}.
      nlohmann::ordered_json extra = nullptr;
      if (messages.is_object() && messages.contains("messages")) {
        extra = messages;
        extra.erase("messages");
        messages = nlohmann::ordered_json(extra.is_object() ? messages["messages"] : messages);
      }
      if (!messages.is_array()) throw_input_error(o->chat, "", "expected a JSON array of messages");
      const std::string prompt = text.render_chat(messages, !o->no_generation_prompt, extra);
      if (o->render) {
        std::fwrite(prompt.data(), 1, prompt.size(), stdout);
      } else {
        // The template writes the special tokens itself (transformers tokenizes it the same way).
        std::printf("%s\n", join_ids(tok.encode(prompt, false)).c_str());
      }
    } else if (!o->jsonl.empty()) {
      std::ifstream in(o->jsonl, std::ios::binary);
      if (!in) throw_input_error(o->jsonl, "", "cannot open (missing or unreadable)");
      std::string line;
      size_t n = 0;
      while (std::getline(in, line)) {
        ++n;
        nlohmann::json s;
        try {
          s = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
          throw_input_error(o->jsonl, "line " + std::to_string(n), "not valid JSON");
        }
        if (s.is_array()) {  // ids: print their text as a JSON string
          std::vector<int> ids;
          for (const auto& v : s) {
            if (!v.is_number_integer())
              throw_input_error(o->jsonl, "line " + std::to_string(n), "expected integer ids");
            ids.push_back(v.get<int>());
          }
          std::printf("%s\n", nlohmann::json(tok.decode(ids, o->skip_special)).dump().c_str());
          continue;
        }
        if (!s.is_string())
          throw_input_error(o->jsonl, "line " + std::to_string(n),
                            "expected a JSON string (text) or array (ids)");
        std::printf(
            "%s\n",
            nlohmann::json(tok.encode(s.get<std::string>(), !o->no_special)).dump().c_str());
      }
    } else {
      const std::string data = read_text_file(o->bench);
      if (o->repeat < 1) throw_input_error("--repeat", "", "expected >= 1");
      std::vector<double> secs;
      size_t ids = 0;
      // Encoded in lines, as a server sees prompts; the first round also warms the piece cache,
      // as HF's does.
      std::vector<std::string_view> lines;
      for (size_t i = 0; i < data.size();) {
        size_t j = data.find('\n', i);
        j = j == std::string::npos ? data.size() : j + 1;
        lines.emplace_back(data.data() + i, j - i);
        i = j;
      }
      for (int r = 0; r <= o->repeat; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        ids = 0;
        for (std::string_view l : lines) ids += tok.encode(l, false).size();
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) secs.push_back(s);
      }
      std::sort(secs.begin(), secs.end());
      const double med = secs[secs.size() / 2];
      std::printf(
          "{\"bytes\": %zu, \"lines\": %zu, \"ids\": %zu, \"median_s\": %.6f, \"mb_per_s\": "
          "%.3f}\n",
          data.size(), lines.size(), ids, med, data.size() / med / 1e6);
    }
    return 0;
  };
}

}  // namespace megaops::cli
