// <think> blocks taken out of chat replies: the split of whole replies (closed, unclosed, absent,
// after white space) and the streamed split equal to it at every cut.
#include "serve/reasoning.h"

#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "io/tokenizer_builder.h"

namespace megaops::serve {
namespace {

ReasoningSplit streamed(const std::string& text, const std::vector<size_t>& cuts) {
  ReasoningStream s(ReasoningFormat::Think);
  ReasoningSplit all;
  size_t at = 0;
  const auto add = [&](const ReasoningSplit& p) {
    all.reasoning += p.reasoning;
    all.content += p.content;
  };
  for (size_t c : cuts) {
    add(s.feed(text.substr(at, c - at)));
    at = c;
  }
  add(s.feed(text.substr(at)));
  add(s.finish());
  return all;
}

TEST(Reasoning, WholeReplies) {
  const auto split = [](const std::string& t) {
    const ReasoningSplit s = split_reasoning(ReasoningFormat::Think, t);
    return std::make_pair(s.reasoning, s.content);
  };
  using P = std::pair<std::string, std::string>;
  EXPECT_EQ(split("<think>\nLet me see.\n</think>\n\nIt is 4."), P("\nLet me see.\n", "It is 4."));
  EXPECT_EQ(split("\n <think>a</think>b"), P("a", "b"));
  EXPECT_EQ(split("<think>cut off at max_tok"), P("cut off at max_tok", ""));
  EXPECT_EQ(split("<think></think>\n\n"), P("", ""));
  EXPECT_EQ(split("No block. <think>x</think>"), P("", "No block. <think>x</think>"));
  EXPECT_EQ(split("  plain"), P("", "  plain"));
  EXPECT_EQ(split(""), P("", ""));
  EXPECT_EQ(split_reasoning(ReasoningFormat::None, "<think>a</think>b").content,
            "<think>a</think>b");
}

TEST(Reasoning, StreamedEqualsWholeAtEveryCut) {
  std::mt19937 rng(3);
  for (const std::string reply :
       {"<think>\nplan </thin k> more\n</think>\n\nAnswer </think> <think>", "  \n<think>x",
        "<thin", "<think", "<think>a</think>", "<think>a</think>  \n ", " <th ink>no",
        "Answer only", "", "\n\n", "<think></think></think>"}) {
    const ReasoningSplit whole = split_reasoning(ReasoningFormat::Think, reply);
    for (size_t c = 0; c <= reply.size(); ++c) {
      const ReasoningSplit s = streamed(reply, {c});
      EXPECT_EQ(s.reasoning, whole.reasoning) << reply << " cut at " << c;
      EXPECT_EQ(s.content, whole.content) << reply << " cut at " << c;
    }
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<size_t> cuts;
      for (size_t c = 1; c < reply.size(); ++c)
        if (rng() % 2) cuts.push_back(c);
      const ReasoningSplit s = streamed(reply, cuts);
      EXPECT_EQ(s.reasoning, whole.reasoning) << reply;
      EXPECT_EQ(s.content, whole.content) << reply;
    }
  }
  // Nothing of a marker goes out early.
  ReasoningStream s(ReasoningFormat::Think);
  EXPECT_EQ(s.feed(" <thi").content, "");
  ReasoningSplit p = s.feed("nk>step one </th");
  EXPECT_EQ(p.reasoning, "step one ");
  p = s.feed("ink>\n");
  EXPECT_EQ(p.reasoning, "");
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(s.feed("\nDone").content, "Done");
}

TEST(Reasoning, FormatsByNameAndFromTemplates) {
  EXPECT_EQ(parse_reasoning_format("qwen3", "f"), ReasoningFormat::Think);
  EXPECT_EQ(parse_reasoning_format("deepseek_r1", "f"), ReasoningFormat::Think);
  EXPECT_EQ(parse_reasoning_format("none", "f"), ReasoningFormat::None);
  EXPECT_THROW(parse_reasoning_format("o1", "--reasoning-parser"), InputError);
  EXPECT_EQ(detect_reasoning_format(family_chat_template(TokenizerFamily::Qwen3)),
            ReasoningFormat::Think);
  EXPECT_EQ(detect_reasoning_format(family_chat_template(TokenizerFamily::Llama3)),
            ReasoningFormat::None);
}

}  // namespace
}  // namespace megaops::serve
