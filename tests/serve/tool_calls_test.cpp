// Tool calls in chat replies: the two formats' calls, text beside them kept as content, what does
// not parse left as content, and the streamed split equal to the whole one at every cut.
#include "serve/tool_calls.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "io/tokenizer_builder.h"

namespace megaops::serve {
namespace {

std::function<std::string()> ids() {
  auto n = std::make_shared<int>(0);
  return [n] { return "call_" + std::to_string((*n)++); };
}

// The reply fed in pieces cut at `cuts` (sorted offsets), then finished.
ParsedReply streamed(ToolCallFormat f, const std::string& text, const std::vector<size_t>& cuts) {
  ToolCallStream s(f, ids());
  std::string content;
  size_t at = 0;
  for (size_t c : cuts) {
    content += s.feed(text.substr(at, c - at));
    at = c;
  }
  content += s.feed(text.substr(at));
  ParsedReply end = s.finish();
  end.content = content + end.content;
  return end;
}

void expect_same(const ParsedReply& a, const ParsedReply& b, const std::string& what) {
  EXPECT_EQ(a.content, b.content) << what;
  ASSERT_EQ(a.calls.size(), b.calls.size()) << what;
  for (size_t i = 0; i < a.calls.size(); ++i) {
    EXPECT_EQ(a.calls[i].name, b.calls[i].name) << what;
    EXPECT_EQ(a.calls[i].arguments, b.calls[i].arguments) << what;
    EXPECT_EQ(a.calls[i].id, b.calls[i].id) << what;
  }
}

TEST(ToolCalls, HermesCallsAndTheTextBesideThem) {
  const std::string reply =
      "<think>\n\n</think>\n\nLet me check.<tool_call>\n{\"name\": \"get_weather\", "
      "\"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>\n<tool_call>\n"
      "{\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": \\\"CET\\\"}\"}\n</tool_call>";
  const ParsedReply p = extract_tool_calls(ToolCallFormat::Hermes, reply, ids());
  EXPECT_EQ(p.content, "<think>\n\n</think>\n\nLet me check.\n");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].id, "call_0");
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, "{\"city\":\"Paris\",\"unit\":\"c\"}");
  EXPECT_EQ(p.calls[1].name, "get_time");
  EXPECT_EQ(p.calls[1].arguments, "{\"tz\": \"CET\"}");  // a string is passed as written
  // No arguments: {}; an unclosed last call still counts when its JSON is whole.
  const ParsedReply bare =
      extract_tool_calls(ToolCallFormat::Hermes, "<tool_call>{\"name\": \"now\"}", ids());
  ASSERT_EQ(bare.calls.size(), 1u);
  EXPECT_EQ(bare.calls[0].arguments, "{}");
  EXPECT_EQ(bare.content, "");
}

TEST(ToolCalls, WhatDoesNotParseStaysContent) {
  for (const std::string reply :
       {"plain text", "<tool_call>not json</tool_call> after",
        "<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"name\": \"\"}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": 3}</tool_call>",
        "<tool_call>{\"name\": \"f\", \"arguments\": \"[1]\"}</tool_call>", "<tool_call>{\"na"})
    EXPECT_EQ(extract_tool_calls(ToolCallFormat::Hermes, reply, ids()).content, reply) << reply;
  for (const std::string reply :
       {"Sure: {\"name\": \"f\", \"parameters\": {}}", "{\"name\": \"f\", \"parameters\": {}} and",
        "{\"name\": \"f\", \"parameters\": {}}; {\"oops\": 1}", "{\"name\": \"f\", \"param",
        "<|python_tag|>brave_search.call(query=\"x\")", "  \n", ""}) {
    const ParsedReply p = extract_tool_calls(ToolCallFormat::Llama3Json, reply, ids());
    EXPECT_EQ(p.content, reply) << reply;
    EXPECT_TRUE(p.calls.empty()) << reply;
  }
  const ParsedReply none =
      extract_tool_calls(ToolCallFormat::None, "<tool_call>{\"name\": \"f\"}</tool_call>", ids());
  EXPECT_TRUE(none.calls.empty());
}

TEST(ToolCalls, Llama3JsonWholeReplies) {
  const ParsedReply one = extract_tool_calls(
      ToolCallFormat::Llama3Json,
      " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"S\\\"{ao\"}}", ids());
  EXPECT_EQ(one.content, "");
  ASSERT_EQ(one.calls.size(), 1u);
  EXPECT_EQ(one.calls[0].name, "get_weather");
  EXPECT_EQ(one.calls[0].arguments, "{\"city\":\"S\\\"{ao\"}");
  const ParsedReply two = extract_tool_calls(
      ToolCallFormat::Llama3Json,
      "<|python_tag|>{\"name\": \"a\", \"parameters\": {}}; {\"name\": \"b\", \"arguments\": "
      "{\"x\": [1, {\"y\": 2}]}}\n",
      ids());
  ASSERT_EQ(two.calls.size(), 2u);
  EXPECT_EQ(two.calls[1].name, "b");
  EXPECT_EQ(two.calls[1].arguments, "{\"x\":[1,{\"y\":2}]}");
}

TEST(ToolCalls, StreamedEqualsWholeAtEveryCut) {
  const std::vector<std::pair<ToolCallFormat, std::string>> replies = {
      {ToolCallFormat::Hermes,
       "Checking <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": 1}}\n</tool_call> done"},
      {ToolCallFormat::Hermes, "a < b <tool_ and <tool_call>{bad}</tool_call><tool_call>"},
      {ToolCallFormat::Hermes, "no calls at all, but a trailing <tool_ca"},
      {ToolCallFormat::Llama3Json, "\n {\"name\": \"f\", \"parameters\": {\"q\": \"}\"}}"},
      {ToolCallFormat::Llama3Json, "<|python_tag|>{\"name\": \"f\", \"parameters\": {}}"},
      {ToolCallFormat::Llama3Json, "<|python_ta is text"},
      {ToolCallFormat::Llama3Json, "  The answer is {\"name\": 1}"},
      {ToolCallFormat::Llama3Json, "{\"name\": \"f\", \"parameters\": {}} trailing"},
  };
  std::mt19937 rng(5);
  for (const auto& [format, reply] : replies) {
    const ParsedReply whole = extract_tool_calls(format, reply, ids());
    for (size_t c = 0; c <= reply.size(); ++c)
      expect_same(streamed(format, reply, {c}), whole, reply + " cut at " + std::to_string(c));
    expect_same(streamed(format, reply,
                         [&] {
                           std::vector<size_t> every;
                           for (size_t c = 1; c < reply.size(); ++c) every.push_back(c);
                           return every;
                         }()),
                whole, reply + " a byte at a time");
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<size_t> cuts;
      for (size_t c = 1; c < reply.size(); ++c)
        if (rng() % 3 == 0) cuts.push_back(c);
      expect_same(streamed(format, reply, cuts), whole, reply + " random cuts");
    }
  }
}

TEST(ToolCalls, NothingOfACallIsSentBeforeTheEnd) {
  ToolCallStream s(ToolCallFormat::Hermes, ids());
  EXPECT_EQ(s.feed("Hi <tool"), "Hi ");
  EXPECT_EQ(s.feed("_call>{\"name\": "), "");
  EXPECT_EQ(s.feed("\"f\"}</tool_call> tail"), "");
  const ParsedReply end = s.finish();
  EXPECT_EQ(end.content, " tail");
  ASSERT_EQ(end.calls.size(), 1u);
  ToolCallStream plain(ToolCallFormat::Llama3Json, ids());
  EXPECT_EQ(plain.feed("  "), "");
  EXPECT_EQ(plain.feed("Hello"), "  Hello");
  EXPECT_EQ(plain.feed(" {\"name\""), " {\"name\"");
  EXPECT_TRUE(plain.finish().calls.empty());
}

TEST(ToolCalls, FormatsByNameAndFromTemplates) {
  EXPECT_EQ(parse_tool_call_format("hermes", "--tool-call-parser"), ToolCallFormat::Hermes);
  EXPECT_EQ(parse_tool_call_format("llama3_json", "f"), ToolCallFormat::Llama3Json);
  EXPECT_EQ(parse_tool_call_format("none", "f"), ToolCallFormat::None);
  try {
    parse_tool_call_format("mistral", "--tool-call-parser");
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(),
                 "--tool-call-parser: expected auto, hermes, llama3_json or none, found 'mistral'");
  }
  EXPECT_EQ(detect_tool_call_format("{{ '<tool_call>\\n' }}"), ToolCallFormat::Hermes);
  EXPECT_EQ(detect_tool_call_format("Environment: ipython ... \"parameters\": dictionary"),
            ToolCallFormat::Llama3Json);
  EXPECT_EQ(detect_tool_call_format("{{ messages[0].content }}"), ToolCallFormat::None);
  // The real templates of both families.
  EXPECT_EQ(detect_tool_call_format(family_chat_template(TokenizerFamily::Llama3)),
            ToolCallFormat::Llama3Json);
  EXPECT_EQ(detect_tool_call_format(family_chat_template(TokenizerFamily::Qwen3)),
            ToolCallFormat::Hermes);
}

}  // namespace
}  // namespace megaops::serve
