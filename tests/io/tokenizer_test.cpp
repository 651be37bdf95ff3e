// The tokenizer, its config files, the chat template and the init-random tokenizer builder on the
// committed fixtures (byte-level BPE files of the Llama 3 and Qwen 3 formats built with HF
// tokenizers by scripts/make_tokenizer_fixtures.py). The ids below are what HF tokenizers gives
// for the same files; tests/tools/test_tokenizer_exact.py compares 10,000 strings more.
#include "io/tokenizer.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/chat_template.h"
#include "io/text_file.h"
#include "io/tokenizer_builder.h"
#include "io/tokenizer_files.h"
#include "test_util.h"

namespace megaops {
namespace {

using megaops::testing::expect_input_error;

std::string fixture(const std::string& family) {
  return std::string(MEGAOPS_SOURCE_DIR) + "/tests/fixtures/tokenizers/" + family;
}

const std::string TEXT = "Hello world! Ça va? 你好 <|eot_id|><|im_start|> 12345 <think>";

TEST(Tokenizer, EncodesAsHfTokenizers) {
  const Tokenizer llama = Tokenizer::from_file(fixture("llama3") + "/tokenizer.json");
  EXPECT_EQ(
      llama.encode(TEXT),
      (std::vector<int>{3000, 524, 75,   345, 319, 280, 530,  0,    487,  229, 64,  862,  64,
                        30,   220, 1991, 254, 161, 98,  121,  220,  3009, 27,  91,  2394, 62,
                        277,  393, 91,   29,  220, 16,  1059, 1705, 826,  541, 264, 74,   29}));
  const Tokenizer qwen = Tokenizer::from_file(fixture("qwen3") + "/tokenizer.json");
  EXPECT_EQ(qwen.encode(TEXT),
            (std::vector<int>{524, 75,  345,  319, 280, 530, 0,   487, 229, 64,  855, 64,
                              30,  220, 1932, 254, 161, 98,  121, 820, 91,  68,  339, 2871,
                              91,  29,  3001, 220, 16,  17,  18,  19,  20,  220, 3024}));
  // Llama 3's post-processor adds BOS; Qwen 3's adds nothing.
  EXPECT_EQ(llama.encode("", true), std::vector<int>{3000});
  EXPECT_TRUE(llama.encode("", false).empty());
  EXPECT_TRUE(qwen.encode("", true).empty());
}

TEST(Tokenizer, DecodeRoundTripsAndSkipsSpecials) {
  const Tokenizer llama = Tokenizer::from_file(fixture("llama3") + "/tokenizer.json");
  const std::vector<int> ids = llama.encode(TEXT, false);
  EXPECT_EQ(llama.decode(ids), TEXT);
  EXPECT_EQ(llama.decode(ids, true), "Hello world! Ça va? 你好 <|im_start|> 12345 <think>");
  EXPECT_EQ(llama.decode({-1, 1 << 30}), "");  // unknown ids decode to nothing, as in HF
  EXPECT_TRUE(llama.is_special(*llama.token_id("<|eot_id|>")));
  EXPECT_FALSE(llama.is_special(*llama.token_id("Hello")));
}

TEST(Tokenizer, QwenNormalizesToNfc) {
  const Tokenizer qwen = Tokenizer::from_file(fixture("qwen3") + "/tokenizer.json");
  // "é" decomposed (e + U+0301) encodes as the composed character.
  EXPECT_EQ(qwen.encode("caf\x65\xcc\x81"), qwen.encode("caf\xc3\xa9"));
}

TEST(Tokenizer, RejectsInvalidUtf8Text) {
  const Tokenizer llama = Tokenizer::from_file(fixture("llama3") + "/tokenizer.json");
  expect_input_error([&] { llama.encode("ab\xff"); }, {"invalid UTF-8 at byte 2"});
}

TEST(StreamDecoder, PiecesConcatenateToDecodeOnRandomIds) {
  const Tokenizer qwen = Tokenizer::from_file(fixture("qwen3") + "/tokenizer.json");
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<int> ids(1 + rng() % 40);
    // Byte tokens (ids < 256 here) split UTF-8 characters and make invalid sequences.
    for (int& id : ids) id = static_cast<int>(rng() % (trial % 2 ? 256 : qwen.vocab_size()));
    StreamDecoder stream(qwen);
    std::string streamed;
    for (int id : ids) {
      const std::string piece = stream.push(id);
      // Every piece is whole UTF-8: a terminal can print it as it comes.
      std::string check;
      append_utf8_lossy(piece, false, &check);
      EXPECT_EQ(check, piece);
      streamed += piece;
    }
    streamed += stream.finish();
    EXPECT_EQ(streamed, qwen.decode(ids));
  }
}

TEST(Utf8Lossy, ReplacesMaximalSubparts) {
  std::string out;
  // As Rust's from_utf8_lossy: a truncated 3-byte sequence is one U+FFFD, a stray byte one each.
  EXPECT_EQ(append_utf8_lossy("a\xe2\x82"
                              "b\xff\xfe",
                              false, &out),
            0u);
  EXPECT_EQ(out,
            "a\xef\xbf\xbd"
            "b\xef\xbf\xbd\xef\xbf\xbd");
  out.clear();
  EXPECT_EQ(append_utf8_lossy("a\xf0\x9f\xa6", true, &out), 3u);  // held: may still complete
  EXPECT_EQ(out, "a");
}

TEST(Tokenizer, MalformedFilesAreOneLineErrors) {
  const std::string good = read_text_file(fixture("llama3") + "/tokenizer.json");
  expect_input_error([] { Tokenizer::parse("{", "t.json"); }, {"t.json", "not valid JSON"});
  expect_input_error([] { Tokenizer::parse("[]", "t.json"); },
                     {"t.json", "expected a JSON object"});
  expect_input_error([] { Tokenizer::from_file("/nonexistent/tokenizer.json"); },
                     {"/nonexistent/tokenizer.json", "cannot open"});
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  expect_input_error(
      [&] { Tokenizer::parse(with("\"type\":\"BPE\"", "\"type\":\"WordPiece\""), "t.json"); },
      {"t.json: model.type: expected \"BPE\"", "WordPiece"});
  expect_input_error(
      [&] {
        Tokenizer::parse(with("\"behavior\":\"Isolated\"", "\"behavior\":\"Sideways\""), "t.json");
      },
      {"t.json: pre_tokenizer.pretokenizers[0].behavior: expected Isolated", "Sideways"});
  expect_input_error(
      [&] { Tokenizer::parse(with("\"Regex\":\"", "\"Regex\":\"(?<"), "t.json"); },
      {"t.json: pre_tokenizer.pretokenizers[0].pattern.Regex: regex does not compile"});
  expect_input_error(
      [&] {
        Tokenizer::parse(
            with("\"decoder\":{\"type\":\"ByteLevel\"", "\"decoder\":{\"type\":\"WordPiece\""),
            "t.json");
      },
      {"t.json: decoder.type: expected ByteLevel"});
  expect_input_error(
      [&] { Tokenizer::parse(with("\"merges\":[", "\"merges\":[\"Ġ zzzq\","), "t.json"); },
      {"t.json: model.merges[0]: token", "is not in model.vocab"});
  expect_input_error(
      [&] {
        Tokenizer::parse(with("\"byte_fallback\":false", "\"byte_fallback\":true"), "t.json");
      },
      {"t.json: model.byte_fallback: expected false"});
}

TEST(TokenizerFiles, ReadsConfigsAndEos) {
  const CheckpointText llama = CheckpointText::open(fixture("llama3"));
  EXPECT_EQ(*llama.config().bos_token, "<|begin_of_text|>");
  EXPECT_EQ(llama.eos_token_ids().size(), 3u);  // generation_config.json's list
  EXPECT_TRUE(llama.has_chat_template());
  expect_input_error([] { parse_generation_config(R"({"eos_token_id": [1, "x"]})", "g.json"); },
                     {"g.json: eos_token_id: expected a token id"});
  expect_input_error([] { parse_tokenizer_config(R"({"chat_template": 5})", "c.json"); },
                     {"c.json: chat_template: expected a string or a list"});
  expect_input_error([] { CheckpointText::open("/nonexistent"); },
                     {"/nonexistent/tokenizer.json: missing"});
}

TEST(ChatTemplate, RendersLoopControlsNamespaceFiltersAndRaises) {
  const ChatTemplate t = ChatTemplate::parse(
      "{%- set ns = namespace(n=0) -%}{%- for m in messages -%}{%- if loop.index > 2 %}"
      "{% break %}{% endif -%}{%- set ns.n = ns.n + 1 -%}[{{ m.role | upper }}:{{ m.content | "
      "trim }}]{%- endfor -%}{{ ns.n }}{{ messages[0] | tojson }}"
      "{%- if add_generation_prompt %}>{% endif %}",
      "t");
  const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(
      R"([{"role": "user", "content": " a "}, {"role": "assistant", "content": "b"},
          {"role": "user", "content": "c"}])");
  EXPECT_EQ(t.render(messages, {{"add_generation_prompt", true}}),
            "[USER:a][ASSISTANT:b]2{\"role\": \"user\", \"content\": \" a \"}>");
  const ChatTemplate raises = ChatTemplate::parse("{{ raise_exception('no system role') }}", "r");
  expect_input_error([&] { raises.render(messages, nullptr); },
                     {"r: template failed to render", "no system role"});
  expect_input_error([] { ChatTemplate::parse("{% for %}", "bad.jinja"); },
                     {"bad.jinja: template does not parse"});
  // What would overflow the engine's stack is refused up front (found by chat_template_fuzz).
  expect_input_error([] { ChatTemplate::parse("{{ " + std::string(5000, '(') + " }}", "deep"); },
                     {"deep: template nests brackets 5002 deep; expected at most 256"});
}

// A render's work is bounded in the engine (scripts/patches/llama-cpp-jinja-work-bounds.patch):
// a recursive macro that ends renders as in HF's Jinja; one that does not, or whose work grows
// without bound, is an error instead of a hang (chat_template_fuzz timed out on
// `{% macro f(nendmacro) %}{{ f(n) }}...`, which a text check had let through).
TEST(ChatTemplate, RenderWorkIsBounded) {
  const nlohmann::ordered_json none = nlohmann::ordered_json::array();
  const auto render = [&](const std::string& source) {
    return ChatTemplate::parse(source, "t").render(none, nullptr);
  };
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ n }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                   "{{ f(5) }}"),
            "54321");
  EXPECT_EQ(render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{% else %}ok{% endif %}"
                   "{% endmacro %}{{ f(150) }}"),
            "ok");
  // The budget leaves room for far longer conversations than a context window holds.
  EXPECT_EQ(ChatTemplate::render_step_limit(), 8000000u);
  nlohmann::ordered_json long_chat = nlohmann::ordered_json::array();
  for (int i = 0; i < 26000; ++i)
    long_chat.push_back({{"role", i % 2 ? "assistant" : "user"}, {"content", "message"}});
  for (TokenizerFamily family : {TokenizerFamily::Llama3, TokenizerFamily::Qwen3})
    EXPECT_GT(ChatTemplate::parse(family_chat_template(family), "family")
                  .render(long_chat, {{"add_generation_prompt", true}})
                  .size(),
              26000u * 7);
  EXPECT_EQ(render("{{ 'ab' * 3 }}|{{ range(2, 9, 3) | join(',') }}|"
                   "{{ range(9223372036854775806, 9223372036854775807, 5) | list | length }}"),
            "ababab|2,5,8|1");
  for (const std::string source :
       {"{{ ('x' * 100000) * 1000 }}", "{{ 'a\nb' | indent(4000000000000) }}"})
    expect_input_error([&] { render(source); },
                       {"t: template failed to render", "bytes exceeds 67108864"}, source);
  // Runaway templates, under a lower limit (the same accounting) to keep the test fast.
  ChatTemplate::set_render_step_limit(200000);
  for (const auto& [source, error] : std::vector<std::pair<std::string, std::string>>{
           {"{% macro f(nendmacro) %}{{ f(n) }}{% endmacro %}{{ f(1) }}",
            "maximum recursion depth exceeded"},
           {"{% macro a() %}{{ b() }}{% endmacro %}{% macro b() %}{{ a() }}{% endmacro %}{{ a() }}",
            "maximum recursion depth exceeded"},
           {"{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
            "{{ f(60) }}",
            "steps of work"},
           {"{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            "steps of work"},
           {"{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
            "{% endfor %}{{ ns.s | length }}",
            "exceeds 200000 steps of work"},
           {"{{ range(9000000000000000000) | length }}", "steps of work"},
           {"{{ 'x' * 9000000000000000000 }}", "steps of work"}})
    expect_input_error([&] { render(source); }, {"t: template failed to render", error}, source);
  ChatTemplate::set_render_step_limit(8000000);
}

// A template is untrusted input: the engine's arithmetic gives HF Jinja's results (Python's
// floored %) or HF's errors (ZeroDivisionError), never undefined behaviour (the template fuzzer
// found `{{10%0}}` converting fmod's NaN to an integer); what Python's unbounded integers would
// hold but int64 cannot is an error too. scripts/patches/llama-cpp-jinja-checked-arithmetic.patch.
TEST(ChatTemplate, ArithmeticIsCheckedAsInHfJinja) {
  const nlohmann::ordered_json none = nlohmann::ordered_json::array();
  const auto render = [&](const std::string& source) {
    return ChatTemplate::parse(source, "t").render(none, nullptr);
  };
  EXPECT_EQ(render("{{ 7 % 3 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ -7 % -3 }}"), "1 2 -2 -1");
  EXPECT_EQ(render("{{ 7.5 % 2 }} {{ -7.5 % 2 }} {{ 6 / 4 }} {{ 2 * 3 - 10 }}"), "1.5 0.5 1.5 -4");
  EXPECT_EQ(render("{{ 9223372036854775807 - 1 }} {{ 10 is divisibleby 5 }}"),
            "9223372036854775806 True");
  for (const auto& [source, error] : std::vector<std::pair<std::string, std::string>>{
           {"{{10%0}}", "integer modulo by zero"},
           {"{{ 10 % (3 - 3) }}", "integer modulo by zero"},
           {"{{ 10 / 0 }}", "division by zero"},
           {"{{ 1.5 % 0 }}", "float modulo"},
           {"{{ 10 is divisibleby 0 }}", "integer modulo by zero"},
           {"{{ 9223372036854775807 + 1 }}", "integer overflow"},
           {"{{ 4611686018427387904 * 2 }}", "integer overflow"},
           {"{{ -(0 - 9223372036854775807 - 1) }}", "integer overflow"}})
    expect_input_error([&] { render(source); }, {"t: template failed to render", error}, source);
}

TEST(TokenizerBuilder, WritesFilesTheTokenizerReadsForBothLayouts) {
  struct Case {
    TokenizerFamily family;
    int vocab, bos;
    std::vector<int> eos;
    const char* eos_name;
  };
  for (const Case& c :
       {Case{TokenizerFamily::Llama3, 512, 1, {2}, "<|eot_id|>"},
        Case{TokenizerFamily::Qwen3, 512, 1, {2}, "<|im_end|>"},
        Case{TokenizerFamily::Llama3, 128256, 128000, {128001, 128008, 128009}, "<|end_of_text|>"},
        Case{TokenizerFamily::Qwen3, 151936, 151643, {151645}, "<|im_end|>"}}) {
    const TokenizerFiles f = build_tokenizer_files(c.family, c.vocab, c.bos, c.eos);
    const Tokenizer tok = Tokenizer::parse(f.tokenizer_json, "built");
    EXPECT_LE(tok.vocab_size(), c.vocab);
    EXPECT_EQ(*tok.token_id(c.eos_name), c.eos[0]);
    const std::string text = "The model writes words, 123 and more!\n";
    EXPECT_EQ(tok.decode(tok.encode(text, false)), text);
    EXPECT_LT(tok.encode(text, false).size(), text.size() * 2 / 3);  // merges were learned
    // Every id a random model can sample below the special tokens is a piece of text.
    int empty = 0;
    for (int id = 0; id < std::min(c.bos, 5000); ++id) empty += tok.token_bytes(id).empty();
    EXPECT_LE(empty, 10);
    const TokenizerConfig cfg = parse_tokenizer_config(f.tokenizer_config_json, "cfg");
    ChatTemplate::parse(cfg.chat_template, "cfg");
    EXPECT_EQ(parse_generation_config(f.generation_config_json, "gen").eos_token_ids, c.eos);
  }
}

}  // namespace
}  // namespace megaops
