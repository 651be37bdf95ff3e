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
  expect_error(R"({"prompt": "x", "echo": true, "logprobs": 1})", 400, "echo", false,
               "prompt's logprobs");
  expect_error(R"({"prompt": "x", "echo": 1})", 400, "echo");
  expect_error(R"({"messages": [{"role": "user", "content": "x"}], "echo": true})", 400, "echo",
               true, "only /v1/completions");
  expect_error(R"({"prompt": "x", "suffix": "y"})", 400, "suffix", false, "not supported");
  expect_error(R"({"prompt": "x", "best_of": 2})", 400, "best_of");
  expect_error(R"({"prompt": "x", "presence_penalty": 2.5})", 400, "presence_penalty", false,
               "-2..2");
  expect_error(R"({"prompt": "x", "frequency_penalty": "1"})", 400, "frequency_penalty");
  expect_error(R"({"prompt": "x", "repetition_penalty": 0})", 400, "repetition_penalty");
  expect_error(R"({"prompt": "x", "logit_bias": [1]})", 400, "logit_bias");
  expect_error(R"({"prompt": "x", "logit_bias": {"512": 1}})", 400, "logit_bias.512", false,
               "[0, 512)");
  expect_error(R"({"prompt": "x", "logit_bias": {"a7": 1}})", 400, "logit_bias.a7");
  expect_error(R"({"prompt": "x", "logit_bias": {"7": 101}})", 400, "logit_bias.7", false,
               "-100..100");
  expect_error(R"({"prompt": "x", "min_tokens": -1})", 400, "min_tokens");
  expect_error(R"({"prompt": "x", "max_tokens": 4, "min_tokens": 5})", 400, "min_tokens", false,
               "at most max_tokens (4)");
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

TEST(OpenAiApi, PenaltiesAndBiasesReachTheRequest) {
  const ApiRequest r = parse({{"prompt", "x"},
                              {"presence_penalty", 0.5},
                              {"frequency_penalty", -1},
                              {"repetition_penalty", 1.2},
                              {"logit_bias", {{"7", -100}, {"511", 2.5}}},
                              {"min_tokens", 3}});
  EXPECT_EQ(r.params.presence_penalty, 0.5f);
  EXPECT_EQ(r.params.frequency_penalty, -1.0f);
  EXPECT_EQ(r.params.repetition_penalty, 1.2f);
  EXPECT_EQ(r.params.logit_bias, (std::map<int, float>{{7, -100.0f}, {511, 2.5f}}));
  EXPECT_EQ(r.params.min_tokens, 3);
  const ApiRequest none = parse({{"prompt", "x"}});
  EXPECT_EQ(none.params.repetition_penalty, 1.0f);
  EXPECT_TRUE(none.params.logit_bias.empty());
}

// vLLM's /tokenize and /detokenize: a prompt (special tokens as asked) or a conversation through
// the template, and ids back to text; fields checked as the generation endpoints check them.
TEST(OpenAiApi, TokenizeAndDetokenize) {
  const CheckpointText& text = testing::tiny_text();
  const json hello = tokenize_response(R"({"model": "tiny", "prompt": "Hello"})", tiny_model());
  EXPECT_EQ(hello["tokens"].get<std::vector<int>>(), text.tokenizer().encode("Hello", true));
  EXPECT_EQ(hello["count"], hello["tokens"].size());
  EXPECT_EQ(hello["max_model_len"], 256);
  EXPECT_EQ(tokenize_response(R"({"prompt": "Hello", "add_special_tokens": false})",
                              tiny_model())["tokens"]
                .get<std::vector<int>>(),
            text.tokenizer().encode("Hello", false));
  const json messages = json::array({{{"role", "user"}, {"content", "Hi"}}});
  for (const bool gen : {true, false})
    EXPECT_EQ(tokenize_response(json{{"messages", messages}, {"add_generation_prompt", gen}}.dump(),
                                tiny_model())["tokens"]
                  .get<std::vector<int>>(),
              text.tokenizer().encode(text.render_chat(messages, gen), false));
  EXPECT_EQ(detokenize_response(json{{"tokens", hello["tokens"]}}.dump(), tiny_model())["prompt"],
            text.tokenizer().decode(hello["tokens"].get<std::vector<int>>()));
  EXPECT_EQ(detokenize_response(R"({"tokens": []})", tiny_model())["prompt"], "");
  const auto err = [](bool detokenize, const std::string& body, int status,
                      const std::string& param) {
    try {
      detokenize ? detokenize_response(body, tiny_model()) : tokenize_response(body, tiny_model());
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, status) << body;
      EXPECT_EQ(e.param, param) << body << ": " << e.what();
      return;
    }
    ADD_FAILURE() << "no error for " << body;
  };
  err(false, R"({"model": "x", "prompt": "a"})", 404, "model");
  err(false, R"({})", 400, "prompt");
  err(false, R"({"prompt": "a", "messages": []})", 400, "messages");
  err(false, R"({"prompt": 5})", 400, "prompt");
  err(false, R"({"prompt": "a", "add_special_tokens": 1})", 400, "add_special_tokens");
  err(false, R"({"messages": "hi"})", 400, "messages");
  err(true, R"({"tokens": "1 2"})", 400, "tokens");
  err(true, R"({"tokens": [1, 512]})", 400, "tokens[1]");
  err(true, R"([1])", 400, "");
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
  EXPECT_FALSE(out["usage"].contains("prompt_tokens_details"));
  EXPECT_EQ(completion_response(r, "cmpl-1", 7, "tiny", {choice("ab", "stop", 2)}, 40, nullptr,
                                32)["usage"]["prompt_tokens_details"]["cached_tokens"],
            32);
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
  // echo: each choice starts with its prompt (a string as given, ids decoded).
  const ApiRequest e =
      parse({{"prompt", json::array({"Hi there", json::array({5, 6})})}, {"echo", true}, {"n", 2}});
  ASSERT_EQ(e.prompt_texts.size(), 2u);
  EXPECT_EQ(e.prompt_texts[0], "Hi there");
  EXPECT_EQ(e.prompt_texts[1], testing::tiny_text().tokenizer().decode({5, 6}));
  const json echoed = completion_response(e, "c", 7, "tiny",
                                          {choice("!", "stop", 1), choice("?", "stop", 1),
                                           choice("a", "stop", 1), choice("b", "stop", 1)},
                                          4);
  EXPECT_EQ(echoed["choices"][1]["text"], "Hi there?");
  EXPECT_EQ(echoed["choices"][2]["text"], e.prompt_texts[1] + "a");
}

// Tools: checked as OpenAI describes them and rendered by the template; tool_choice "auto"
// (the default with tools) reads the reply's calls in the model's format, "none" leaves the reply
// as content; what needs guided decoding is refused naming tool_choice.
TEST(OpenAiApi, ToolsAreCheckedAndCallsReturned) {
  const json tools =
      json::array({{{"type", "function"},
                    {"function",
                     {{"name", "get_weather"},
                      {"parameters",
                       {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}});
  const json messages = json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}});
  ServedModel m = tiny_model();
  m.tool_call_format = ToolCallFormat::Llama3Json;  // the tiny model's template is Llama 3.1's
  m.max_context = 4096;  // Llama 3.1's template writes the tools out at length
  m.kv_positions = 8192;
  const auto chat = [&](json body) {
    body["messages"] = messages;
    return parse_request(body.dump(), true, m);
  };
  const ApiRequest r = chat({{"tools", tools}});
  EXPECT_EQ(r.tool_calls, ToolCallFormat::Llama3Json);
  EXPECT_TRUE(r.parallel_tool_calls);
  // The template saw the tools: the prompt differs from the one without them.
  EXPECT_NE(r.prompts[0], chat(json::object()).prompts[0]);
  EXPECT_EQ(chat({{"tools", tools}, {"tool_choice", "auto"}}).tool_calls,
            ToolCallFormat::Llama3Json);
  EXPECT_EQ(chat({{"tools", tools}, {"tool_choice", "none"}}).tool_calls, ToolCallFormat::None);
  EXPECT_EQ(chat(json::object()).tool_calls, ToolCallFormat::None);
  EXPECT_FALSE(chat({{"tools", tools}, {"parallel_tool_calls", false}}).parallel_tool_calls);
  // An earlier call's arguments as JSON text (OpenAI's form) render as the template expects.
  const json history = json::array(
      {{{"role", "user"}, {"content", "Weather in Paris?"}},
       {{"role", "assistant"},
        {"content", nullptr},
        {"tool_calls",
         json::array(
             {{{"id", "call_1"},
               {"type", "function"},
               {"function", {{"name", "get_weather"}, {"arguments", "{\"city\": \"Paris\"}"}}}}})}},
       {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "18 C"}}});
  const ApiRequest followup =
      parse_request(json{{"messages", history}, {"tools", tools}}.dump(), true, m);
  json as_object = history;
  as_object[1]["tool_calls"][0]["function"]["arguments"] = {{"city", "Paris"}};
  const CheckpointText& text = testing::tiny_text();
  EXPECT_EQ(followup.prompts[0],
            text.tokenizer().encode(text.render_chat(as_object, true, {{"tools", tools}}), false));

  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  const auto err = [&](const std::string& rest, const std::string& param,
                       const std::string& fragment) {
    const std::string body = "{" + msgs + ", " + rest + "}";
    try {
      parse_request(body, true, m);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << body;
      EXPECT_EQ(e.param, param) << body << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      return;
    }
    ADD_FAILURE() << "no error for " << body;
  };
  const std::string ok_tools = R"("tools": [{"type": "function", "function": {"name": "f"}}])";
  err(R"("tools": {})", "tools", "expected an array");
  err(R"("tools": [1])", "tools[0]", "expected an object");
  err(R"("tools": [{"type": "retrieval"}])", "tools[0].type", "expected \"function\"");
  err(R"("tools": [{"type": "function"}])", "tools[0].function", "expected an object");
  err(R"("tools": [{"type": "function", "function": {"name": ""}}])", "tools[0].function.name",
      "non-empty string");
  err(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": []}}])",
      "tools[0].function.parameters", "JSON Schema");
  err(ok_tools + R"(, "tool_choice": "required")", "tool_choice", "guided decoding");
  err(ok_tools + R"(, "tool_choice": {"type": "function", "function": {"name": "f"}})",
      "tool_choice", "guided decoding");
  err(ok_tools + R"(, "tool_choice": "sometimes")", "tool_choice", "expected \"auto\" or");
  err(ok_tools + R"(, "tool_choice": 1)", "tool_choice", "found an integer");
  err(R"("tool_choice": "auto")", "tool_choice", "only allowed with tools");
  err(ok_tools + R"(, "parallel_tool_calls": "yes")", "parallel_tool_calls", "boolean");
  err(R"("messages": [{"role": "assistant", "tool_calls": {}}])", "messages[0].tool_calls",
      "expected an array");
  // A model whose template teaches no format megaops reads: "auto" is refused, "none" is fine.
  m.tool_call_format = ToolCallFormat::None;
  err(ok_tools, "tool_choice", "--tool-call-parser");
  EXPECT_EQ(parse_request("{" + msgs + ", " + ok_tools + R"(, "tool_choice": "none"})", true, m)
                .tool_calls,
            ToolCallFormat::None);
  expect_error(R"({"prompt": "x", "tool_choice": "auto"})", 400, "tool_choice", false,
               "only chat completions");

  // The response: calls under message.tool_calls, content null when only white space is left,
  // finish_reason "tool_calls"; parallel_tool_calls false keeps the first call.
  ChoiceResult c = choice("", "stop", 9);
  apply_tool_calls(
      r, {"\n", {{"call_a", "get_weather", R"({"city":"Paris"})"}, {"call_b", "g", "{}"}}}, &c);
  EXPECT_EQ(c.finish_reason, "tool_calls");
  const json out = completion_response(r, "chatcmpl-1", 7, "tiny", {c}, 4);
  const json& message = out["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null());
  ASSERT_EQ(message["tool_calls"].size(), 2u);
  EXPECT_EQ(message["tool_calls"][0],
            json({{"id", "call_a"},
                  {"type", "function"},
                  {"function", {{"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}}}));
  EXPECT_EQ(out["choices"][0]["finish_reason"], "tool_calls");
  ApiRequest single = r;
  single.parallel_tool_calls = false;
  ChoiceResult first = choice("", "stop", 9);
  apply_tool_calls(single, {"Sure.", {{"call_a", "a", "{}"}, {"call_b", "b", "{}"}}}, &first);
  ASSERT_EQ(first.tool_calls.size(), 1u);
  EXPECT_EQ(
      completion_response(single, "c", 7, "tiny", {first}, 4)["choices"][0]["message"]["content"],
      "Sure.");
  ChoiceResult none = choice("", "length", 9);
  apply_tool_calls(r, {"no calls", {}}, &none);
  EXPECT_EQ(none.finish_reason, "length");
  EXPECT_FALSE(completion_response(r, "c", 7, "tiny", {none}, 4)["choices"][0]["message"].contains(
      "tool_calls"));
  ApiRequest streamed = r;
  streamed.stream = true;
  const json chunk = tool_calls_chunk(streamed, "c", 7, "tiny", 0, c.tool_calls, true);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chunk["choices"][0]["delta"]["tool_calls"][1]["index"], 1);
  EXPECT_EQ(chunk["choices"][0]["delta"]["tool_calls"][1]["function"]["name"], "g");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
}

}  // namespace
}  // namespace megaops::serve
