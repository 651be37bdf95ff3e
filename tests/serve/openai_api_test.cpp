// The OpenAI API's request parsing: every field checked with an error naming it (400; 404 for
// another model), defaults as OpenAI's and vLLM's servers take them, chat through the checkpoint's
// template, and the response objects' shape.
#include "serve/openai_api.h"

#include <gtest/gtest.h>

#include <cmath>

#include "engine/engine_test_util.h"

namespace megaops::serve {
namespace {

using json = nlohmann::ordered_json;

ServedModel tiny_model() {
  ServedModel m;
  m.name = "tiny";
  m.aliases = {"/models/tiny"};
  m.text = &testing::tiny_text();
  m.max_context = 256;
  m.kv_positions = 1024;
  m.vocab_size = 512;
  return m;
}

ApiRequest parse(const json& body, bool chat = false) {
  return parse_request(body.dump(), chat, tiny_model());
}

// Expects an ApiError of `status` naming `param` for `body`.
void expect_error(const std::string& body, int status, const std::string& param, bool chat = false,
                  const std::string& fragment = "") {
  try {
    parse_request(body, chat, tiny_model());
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, status) << body << ": " << e.what();
    EXPECT_EQ(e.param, param) << body << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    const json err = json::parse(error_body(e));
    EXPECT_EQ(err["error"]["message"], e.what());
    return;
  }
  ADD_FAILURE() << "no error for " << body;
}

TEST(OpenAiApi, CompletionDefaultsAndFields) {
  const ApiRequest r = parse({{"model", "tiny"}, {"prompt", "Hello"}});
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0], testing::tiny_text().tokenizer().encode("Hello", true));
  EXPECT_EQ(r.params.max_tokens, 16);
  EXPECT_EQ(r.params.sampling.temperature, 1.0f);  // OpenAI's default
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.seed_given);
  const ApiRequest s = parse({{"model", "/models/tiny"},
                              {"prompt", json::array({1, 2, 3})},
                              {"max_tokens", 5},
                              {"temperature", 0},
                              {"top_p", 0.5},
                              {"top_k", -1},
                              {"seed", -7},
                              {"n", 3},
                              {"stop", "\n"},
                              {"stream", true},
                              {"stream_options", {{"include_usage", true}}},
                              {"ignore_eos", true},
                              {"stop_token_ids", json::array({7})}});
  EXPECT_EQ(s.prompts[0], (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(s.params.max_tokens, 5);
  EXPECT_EQ(s.params.sampling.temperature, 0.0f);
  EXPECT_EQ(s.params.sampling.top_p, 0.5f);
  EXPECT_EQ(s.params.sampling.top_k, 0);
  EXPECT_TRUE(s.seed_given);
  EXPECT_EQ(s.params.sampling.seed, static_cast<uint64_t>(-7));
  EXPECT_EQ(s.n, 3);
  EXPECT_EQ(s.params.stop, std::vector<std::string>{"\n"});
  EXPECT_TRUE(s.stream && s.include_usage && s.params.ignore_eos);
  EXPECT_EQ(s.params.stop_token_ids, std::vector<int>{7});
  // A batch of prompts.
  EXPECT_EQ(parse({{"prompt", json::array({"a", json::array({5, 6})})}}).prompts.size(), 2u);
}

TEST(OpenAiApi, BadFieldsAreNamed) {
  expect_error("{\"prompt\": ", 400, "", false, "not valid JSON");
  expect_error("[1]", 400, "", false, "JSON object");
  expect_error(R"({"model": "gpt-4", "prompt": "x"})", 404, "model", false, "gpt-4");
  expect_error(R"({"model": 3, "prompt": "x"})", 400, "model");
  expect_error(R"({"prompt": "x", "max_tokens": "5"})", 400, "max_tokens", false, "an integer");
  expect_error(R"({"prompt": "x", "max_tokens": 2.5})", 400, "max_tokens");
  expect_error(R"({"prompt": "x", "max_tokens": 0})", 400, "max_tokens");
  expect_error(R"({"prompt": "x", "max_tokens": 18446744073709551615})", 400, "max_tokens");
  expect_error(R"({"prompt": "x", "max_tokens": 255})", 400, "max_tokens", false,
               "maximum context length is 256");
  std::string long_prompt = "[";
  for (int i = 0; i < 300; ++i) long_prompt += (i ? ",5" : "5");
  expect_error(R"({"prompt": )" + long_prompt + "]}", 400, "prompt", false, "context length");
  expect_error(R"({"prompt": "x", "temperature": "hot"})", 400, "temperature");
  expect_error(R"({"prompt": "x", "temperature": -0.1})", 400, "temperature");
  expect_error(R"({"prompt": "x", "top_p": 0})", 400, "top_p");
  expect_error(R"({"prompt": "x", "top_k": -2})", 400, "top_k");
  expect_error(R"({"prompt": "x", "n": 0})", 400, "n");
  expect_error(R"({"prompt": "x", "n": 65})", 400, "n");
  expect_error(R"({"prompt": "x", "stream": 1})", 400, "stream");
  expect_error(R"({"prompt": "x", "stream_options": {"include_usage": true}})", 400,
               "stream_options");
  expect_error(R"({"prompt": "x", "stop": [""]})", 400, "stop");
  expect_error(R"({"prompt": "x", "stop": ["a", 3]})", 400, "stop[1]");
  expect_error(R"({"prompt": "x", "seed": "1"})", 400, "seed");
  expect_error(R"({"prompt": "x", "echo": true})", 400, "echo", false, "not supported");
  expect_error(R"({"prompt": "x", "best_of": 2})", 400, "best_of");
  expect_error(R"({"prompt": "x", "presence_penalty": 0.5})", 400, "presence_penalty");
  expect_error(R"({"prompt": [1, 512]})", 400, "prompt[1]");
  expect_error(R"({"prompt": []})", 400, "prompt");
  expect_error(R"({"prompt": null})", 400, "prompt");
  expect_error(R"({"prompt": {"a": 1}})", 400, "prompt");
  expect_error(R"({"prompt": "x", "stop_token_ids": [-1]})", 400, "stop_token_ids[0]");
  // No-op values of unsupported fields are accepted, as OpenAI's clients send them.
  EXPECT_NO_THROW(parse({{"prompt", "x"},
                         {"logprobs", nullptr},
                         {"echo", false},
                         {"presence_penalty", 0},
                         {"best_of", 1},
                         {"user", "me"}}));
}

// Completions: logprobs 0..5; chat: logprobs a boolean, top_logprobs 0..20 only with it.
TEST(OpenAiApi, LogprobsAreCheckedNamingTheField) {
  EXPECT_EQ(parse({{"prompt", "x"}}).params.logprobs, -1);
  EXPECT_EQ(parse({{"prompt", "x"}, {"logprobs", 3}}).params.logprobs, 3);
  EXPECT_EQ(parse({{"prompt", "x"}, {"logprobs", 0}}).params.logprobs, 0);
  expect_error(R"({"prompt": "x", "logprobs": 6})", 400, "logprobs");
  expect_error(R"({"prompt": "x", "logprobs": -1})", 400, "logprobs");
  expect_error(R"({"prompt": "x", "logprobs": true})", 400, "logprobs");
  const json msgs = json::array({{{"role", "user"}, {"content", "x"}}});
  EXPECT_EQ(parse({{"messages", msgs}}, true).params.logprobs, -1);
  EXPECT_EQ(parse({{"messages", msgs}, {"logprobs", false}}, true).params.logprobs, -1);
  EXPECT_EQ(parse({{"messages", msgs}, {"logprobs", true}}, true).params.logprobs, 0);
  EXPECT_EQ(
      parse({{"messages", msgs}, {"logprobs", true}, {"top_logprobs", 20}}, true).params.logprobs,
      20);
  const std::string m = R"({"messages": [{"role": "user", "content": "x"}], )";
  expect_error(m + R"("logprobs": 1})", 400, "logprobs", true);
  expect_error(m + R"("top_logprobs": 2})", 400, "top_logprobs", true, "logprobs: true");
  expect_error(m + R"("logprobs": false, "top_logprobs": 2})", 400, "top_logprobs", true);
  expect_error(m + R"("logprobs": true, "top_logprobs": 21})", 400, "top_logprobs", true);
  expect_error(m + R"("logprobs": true, "top_logprobs": "2"})", 400, "top_logprobs", true);
}

TEST(OpenAiApi, LogprobsHaveOpenAisShape) {
  const CheckpointText& text = testing::tiny_text();
  const std::vector<SampledLogprobs> lps = {{{65, -0.5f}, {{65, -0.5f}, {66, -1.5f}}},
                                            {{66, -INFINITY}, {{65, -0.25f}, {67, -1.0f}}}};
  int offset = 0;
  const json c = logprobs_json(parse({{"prompt", "x"}, {"logprobs", 2}}), lps, &text, &offset);
  const std::string a = text.tokenizer().decode({65}), b = text.tokenizer().decode({66});
  EXPECT_EQ(c["tokens"], json::array({a, b}));
  EXPECT_EQ(c["token_logprobs"], json::array({-0.5, -9999.0}));
  EXPECT_EQ(c["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(c["top_logprobs"][0][b], -1.5);
  EXPECT_EQ(c["top_logprobs"][1].size(), 3u);  // the sampled token joins the top-N
  EXPECT_EQ(c["top_logprobs"][1][b], -9999.0);
  EXPECT_EQ(c["text_offset"], json::array({0, static_cast<int>(a.size())}));
  EXPECT_EQ(offset, static_cast<int>(a.size() + b.size()));
  const json msgs = json::array({{{"role", "user"}, {"content", "x"}}});
  const json h =
      logprobs_json(parse({{"messages", msgs}, {"logprobs", true}}, true), lps, &text, &offset);
  ASSERT_EQ(h["content"].size(), 2u);
  EXPECT_EQ(h["content"][0]["token"], a);
  EXPECT_EQ(h["content"][0]["logprob"], -0.5);
  EXPECT_EQ(h["content"][0]["bytes"].size(), text.tokenizer().token_bytes(65).size());
  EXPECT_EQ(h["content"][1]["top_logprobs"][0]["logprob"], -0.25);
  EXPECT_EQ(h["content"][1]["top_logprobs"][1]["token"], text.tokenizer().decode({67}));
}

TEST(OpenAiApi, ChatRendersTheTemplate) {
  const json messages = json::array(
      {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}});
  const ApiRequest r = parse({{"messages", messages}}, true);
  const CheckpointText& text = testing::tiny_text();
  EXPECT_EQ(r.prompts[0], text.tokenizer().encode(text.render_chat(messages, true), false));
  // Chat's default max_tokens: what the context leaves.
  EXPECT_EQ(r.params.max_tokens, 256 - static_cast<int>(r.prompts[0].size()));
  const ApiRequest parts = parse(
      {{"messages", json::array({{{"role", "system"}, {"content", "Be brief."}},
                                 {{"role", "user"},
                                  {"content", json::array({{{"type", "text"}, {"text", "H"}},
                                                           {{"type", "text"}, {"text", "i"}}})}}})},
       {"max_completion_tokens", 7}},
      true);
  EXPECT_EQ(parts.prompts[0], r.prompts[0]);
  EXPECT_EQ(parts.params.max_tokens, 7);
  expect_error(R"({"messages": "hi"})", 400, "messages", true);
  expect_error(R"({"messages": []})", 400, "messages", true);
  expect_error(R"({"messages": [1]})", 400, "messages[0]", true);
  expect_error(R"({"messages": [{"role": "bot", "content": "x"}]})", 400, "messages[0].role", true);
  expect_error(R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})", 400,
               "messages[0].content[0]", true);
  expect_error(R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs": 1})",
               400, "chat_template_kwargs", true);
}

ChoiceResult choice(const std::string& text, const std::string& reason, int tokens) {
  ChoiceResult c;
  c.text = text;
  c.finish_reason = reason;
  c.completion_tokens = tokens;
  return c;
}

TEST(OpenAiApi, ResponsesHaveOpenAisShape) {
  const ApiRequest r = parse({{"prompt", "x"}, {"n", 2}});
  const json out = completion_response(r, "cmpl-1", 7, "tiny",
                                       {choice("ab", "stop", 2), choice("c", "length", 3)}, 4);
  EXPECT_EQ(out["object"], "text_completion");
  EXPECT_EQ(out["choices"][1]["index"], 1);
  EXPECT_EQ(out["choices"][1]["text"], "c");
  EXPECT_EQ(out["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(out["usage"]["total_tokens"], 9);
  const ApiRequest c = parse(
      {{"messages", json::array({{{"role", "user"}, {"content", "x"}}})}, {"stream", true}}, true);
  const json first = stream_chunk(c, "chatcmpl-1", 7, "tiny", 0, "he", "", true);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "he");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  const json last = stream_chunk(c, "chatcmpl-1", 7, "tiny", 0, "", "length", false);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_FALSE(last["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(models_response(tiny_model(), 7)["data"][0]["id"], "tiny");
}

}  // namespace
}  // namespace megaops::serve
