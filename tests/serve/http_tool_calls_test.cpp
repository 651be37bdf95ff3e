// Tool calls through the real HTTP server: a runner that writes a set reply (the tiny tokenizer's
// ids of a tool call) stands in for a model that calls a tool, so the whole path runs: the
// request's tools, the engine, the reply's calls taken out as message.tool_calls, and streamed as
// content up to the call, then the call, then finish_reason "tool_calls".
#include <gtest/gtest.h>
#include <httplib.h>

#include "engine/async_engine.h"
#include "engine/engine_test_util.h"
#include "serve/http_server.h"

namespace megaops::serve {
namespace {

using json = nlohmann::ordered_json;

// Every request's reply is `script` (ids), then end of sequence.
class ScriptedRunner final : public ModelRunner {
 public:
  explicit ScriptedRunner(std::vector<int> script)
      : cfg_(preset_config("tiny-llama3")), script_(std::move(script)) {}
  const ModelConfig& config() const override { return cfg_; }
  KvCacheGeometry kv_geometry() const override { return {16, 1024}; }
  int max_decode_rows() const override { return 8; }
  int max_step_tokens() const override { return 4096; }
  int max_context() const override { return 4096; }
  std::vector<int> run(const std::vector<RunnerSeq>& seqs) override {
    std::vector<int> out;
    for (const RunnerSeq& s : seqs)
      out.push_back(!s.sample                                           ? -1
                    : s.sample_index < static_cast<int>(script_.size()) ? script_[s.sample_index]
                                                                        : cfg_.eos_token_ids.at(0));
    return out;
  }
  std::vector<float> last_logits() const override { return {}; }
  const char* backend() const override { return "script"; }

 private:
  ModelConfig cfg_;
  std::vector<int> script_;
};

struct Served {
  std::unique_ptr<AsyncEngine> engine;
  std::unique_ptr<HttpServer> server;
  Served(const std::string& reply, ToolCallFormat format,
         ReasoningFormat reasoning = ReasoningFormat::None) {
    const CheckpointText& text = testing::tiny_text();
    const std::vector<int> ids = text.tokenizer().encode(reply, false);
    EXPECT_EQ(text.tokenizer().decode(ids), reply);
    EngineOptions eo;
    eo.eos_token_ids = preset_config("tiny-llama3").eos_token_ids;
    engine = std::make_unique<AsyncEngine>(
        std::make_unique<Engine>(std::make_unique<ScriptedRunner>(ids), &text, eo));
    ServedModel m;
    m.name = "tiny";
    m.text = &text;
    m.max_context = 4096;
    m.kv_positions = 16 * 1024;
    m.vocab_size = 512;
    m.tool_call_format = format;
    m.reasoning_format = reasoning;
    ServerOptions so;
    so.port = 0;
    so.http_threads = 4;
    server = std::make_unique<HttpServer>(*engine, m, so);
    server->start();
  }
  ~Served() { server->stop(); }
  json post(const json& body) {
    httplib::Client cli("127.0.0.1", server->port());
    cli.set_read_timeout(60);
    auto res = cli.Post("/v1/chat/completions", body.dump(), "application/json");
    EXPECT_TRUE(res);
    if (!res) return nullptr;
    EXPECT_EQ(res->status, 200) << res->body;
    if (!body.value("stream", false)) return json::parse(res->body);
    json chunks = json::array();  // the SSE events' JSON, [DONE] left out
    size_t at = 0;
    while ((at = res->body.find("data: ", at)) != std::string::npos) {
      const size_t end = res->body.find("\n\n", at);
      const std::string data = res->body.substr(at + 6, end - at - 6);
      if (data != "[DONE]") chunks.push_back(json::parse(data));
      at = end;
    }
    return chunks;
  }
};

const json TOOLS = json::array(
    {{{"type", "function"},
      {"function",
       {{"name", "get_weather"},
        {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}});

json chat(bool stream, const std::string& tool_choice = "auto") {
  return {{"messages", json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})},
          {"tools", TOOLS},
          {"tool_choice", tool_choice},
          {"stream", stream},
          {"max_tokens", 200}};
}

TEST(HttpToolCalls, Llama3JsonReplyBecomesACall) {
  Served s(R"({"name": "get_weather", "parameters": {"city": "Paris"}})",
           ToolCallFormat::Llama3Json);
  const json out = s.post(chat(false));
  const json& choice = out["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(call["function"]["arguments"].get<std::string>()),
            json({{"city", "Paris"}}));
  EXPECT_EQ(call["id"].get<std::string>().rfind("chatcmpl-tool-", 0), 0u);
  // tool_choice "none": the same reply is content.
  const json plain = s.post(chat(false, "none"));
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(plain["choices"][0]["message"]["content"],
            R"({"name": "get_weather", "parameters": {"city": "Paris"}})");
  EXPECT_FALSE(plain["choices"][0]["message"].contains("tool_calls"));
}

TEST(HttpToolCalls, HermesStreamsContentThenTheCall) {
  const std::string reply =
      "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>";
  Served s(reply, ToolCallFormat::Hermes);
  const json chunks = s.post(chat(true));
  std::string content;
  json calls = json::array();
  std::string finish;
  bool call_seen = false;
  for (const json& c : chunks) {
    ASSERT_EQ(c["choices"].size(), 1u);
    const json& d = c["choices"][0]["delta"];
    if (d.contains("content")) {
      EXPECT_FALSE(call_seen) << "content after the call";
      content += d["content"].get<std::string>();
    }
    if (d.contains("tool_calls")) {
      call_seen = true;
      for (const json& t : d["tool_calls"]) calls.push_back(t);
    }
    if (!c["choices"][0]["finish_reason"].is_null()) {
      EXPECT_TRUE(finish.empty());
      finish = c["choices"][0]["finish_reason"];
    }
  }
  EXPECT_EQ(chunks[0]["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(content, "Let me look.\n");
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["index"], 0);
  EXPECT_EQ(calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(calls[0]["function"]["arguments"].get<std::string>()),
            json({{"city", "Paris"}}));
  // Not streamed: the same split.
  const json out = s.post(chat(false));
  EXPECT_EQ(out["choices"][0]["message"]["content"], "Let me look.\n");
  EXPECT_EQ(out["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");
}

TEST(HttpToolCalls, AReplyWithoutACallStreamsAsText) {
  const std::string reply = "It is <b>sunny</b> and 18 C; <tool_ is not a call.";
  Served s(reply, ToolCallFormat::Hermes);
  std::string content, finish;
  for (const json& c : s.post(chat(true))) {
    const json& d = c["choices"][0]["delta"];
    EXPECT_FALSE(d.contains("tool_calls"));
    if (d.contains("content")) content += d["content"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish = c["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(content, reply);
  EXPECT_EQ(finish, "stop");
}

// A thinking model's reply: the <think> block as reasoning_content, then the content and the call,
// streamed (reasoning deltas first, nothing of a marker in any delta) and not.
TEST(HttpToolCalls, ReasoningThenContentThenTheCall) {
  const std::string reply =
      "<think>\nThe user wants the weather.\n</think>\n\nChecking.<tool_call>\n{\"name\": "
      "\"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  Served s(reply, ToolCallFormat::Hermes, ReasoningFormat::Think);
  const json out = s.post(chat(false));
  const json& message = out["choices"][0]["message"];
  EXPECT_EQ(message["reasoning_content"], "\nThe user wants the weather.\n");
  EXPECT_EQ(message["content"], "Checking.");
  EXPECT_EQ(message["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(out["choices"][0]["finish_reason"], "tool_calls");
  std::string reasoning, content;
  bool content_seen = false;
  for (const json& c : s.post(chat(true))) {
    const json& d = c["choices"][0]["delta"];
    if (d.contains("reasoning_content")) {
      EXPECT_FALSE(content_seen) << "reasoning after content";
      reasoning += d["reasoning_content"].get<std::string>();
    }
    if (d.contains("content")) {
      content_seen = content_seen || !d["content"].get<std::string>().empty();
      content += d["content"].get<std::string>();
    }
  }
  EXPECT_EQ(reasoning, message["reasoning_content"]);
  EXPECT_EQ(content, "Checking.");
  // Without tools the reasoning reader still runs; a reply with no block has null reasoning.
  Served plain("Just an answer.", ToolCallFormat::Hermes, ReasoningFormat::Think);
  json body = chat(false, "none");
  body.erase("tools");
  body.erase("tool_choice");
  const json p = plain.post(body)["choices"][0]["message"];
  EXPECT_TRUE(p["reasoning_content"].is_null());
  EXPECT_EQ(p["content"], "Just an answer.");
}

}  // namespace
}  // namespace megaops::serve
