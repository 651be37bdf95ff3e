// The OpenAI-compatible API's requests and responses, as JSON (no HTTP here): /v1/completions and
// /v1/chat/completions bodies parsed into engine requests with every field checked (an ApiError
// naming the field, as OpenAI's and vLLM's servers answer), and the response objects and SSE
// chunks built from what the engine produced. Chat takes tools (tool_choice "auto" or "none";
// "required" and named functions would need guided decoding and are refused) and returns the
// calls the model wrote as message.tool_calls (serve/tool_calls.h). Parameters follow OpenAI's API;
// vLLM's extensions top_k, ignore_eos, stop_token_ids, chat_template_kwargs are accepted too.
// logprobs: completions' integer 0..MAX_COMPLETION_LOGPROBS, chat's boolean with top_logprobs
// 0..MAX_LOGPROBS.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "megaops/engine.h"
#include "serve/reasoning.h"
#include "serve/tool_calls.h"

namespace megaops {
class CheckpointText;
}

namespace megaops::serve {

// An error for the client: the HTTP status, OpenAI's error type and the parameter it names.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string param, const std::string& message,
           std::string type = "invalid_request_error")
      : std::runtime_error(message),
        status(status),
        param(std::move(param)),
        type(std::move(type)) {}
  int status;
  std::string param, type;
};

// {"error": {"message", "type", "param", "code"}}, OpenAI's error body.
std::string error_body(int status, const std::string& message, const std::string& param = "",
                       const std::string& type = "invalid_request_error");
std::string error_body(const ApiError& e);

// What the server serves: the name clients put in "model", the text side of the checkpoint
// (null: ids only, no chat, no stop strings) and the limits a request is checked against.
struct ServedModel {
  std::string name;
  std::vector<std::string> aliases;  // also accepted in "model" (the directory as given)
  const CheckpointText* text = nullptr;
  int max_context = 0;   // positions per request
  int kv_positions = 0;  // positions the whole KV cache holds (blocks x block size)
  int vocab_size = 0;
  // How tool calls in a chat reply are recognised (serve's --tool-call-parser; by default what
  // the chat template teaches). None: a request with tools and tool_choice "auto" is refused.
  ToolCallFormat tool_call_format = ToolCallFormat::None;
  // Whether chat replies' <think> blocks go to reasoning_content (serve's --reasoning-parser; by
  // default when the chat template writes <think>).
  ReasoningFormat reasoning_format = ReasoningFormat::None;
};

struct ApiRequest {
  bool chat = false, stream = false, include_usage = false;
  std::string model;
  std::vector<std::vector<int>> prompts;  // one for chat; a batch for completions
  int n = 1;                              // choices per prompt
  bool seed_given = false;
  // Shared by every choice; choice i of a prompt samples with seed + i (seed_given) or a seed of
  // its own.
  RequestParams params;
  // Chat with tools and tool_choice "auto": the reply's tool calls become message.tool_calls
  // (None: the reply is all content).
  ToolCallFormat tool_calls = ToolCallFormat::None;
  bool parallel_tool_calls = true;                    // false: only a reply's first call is kept
  ReasoningFormat reasoning = ReasoningFormat::None;  // chat: the served model's
  // Completions' echo: each choice's text starts with its prompt's (a string prompt as given,
  // ids decoded); prompt_texts holds one a prompt.
  bool echo = false;
  std::vector<std::string> prompt_texts;
};

// Most choices (n) and prompts in one request.
constexpr int MAX_CHOICES = 64;
// Most alternatives /v1/completions' logprobs may ask for (OpenAI's limit; chat's top_logprobs
// goes to MAX_LOGPROBS, 20).
constexpr int MAX_COMPLETION_LOGPROBS = 5;

// Parses a request body. Throws ApiError: 400 naming the field on malformed JSON, wrong types,
// values out of range, a prompt or prompt + max_tokens beyond the context; 404 for another model.
ApiRequest parse_request(const std::string& body, bool chat, const ServedModel& m);

// The response objects (usage's prompt_tokens_details.cached_tokens: the prompt tokens the prefix
// cache held, OpenAI's field; -1 leaves it out). `choices` hold, per choice (prompt-major), its
// text and finish reason.
struct ChoiceResult {
  std::string text;
  std::string finish_reason;  // "stop", "length" or "tool_calls"
  int completion_tokens = 0;
  std::vector<ToolCall> tool_calls;       // chat: the calls taken out of `text`
  std::string reasoning;                  // chat: the <think> block taken out of `text`
  std::vector<SampledLogprobs> logprobs;  // one a generated token, when asked for
  int text_offset = 0;                    // completions' text_offset of the next token
};
// With logprobs (ApiRequest::params.logprobs >= 0) each choice's "logprobs" is filled from
// ChoiceResult::logprobs, token texts from `text`'s tokenizer ("token_id:<id>" without one).
nlohmann::ordered_json completion_response(const ApiRequest& r, const std::string& id,
                                           int64_t created, const std::string& model,
                                           const std::vector<ChoiceResult>& choices,
                                           int prompt_tokens, const CheckpointText* text = nullptr,
                                           int cached_tokens = -1);
// A choice's "logprobs" object for `tokens`: chat's {"content": [{token, logprob, bytes,
// top_logprobs}]}, completions' {tokens, token_logprobs, top_logprobs, text_offset} with offsets
// (in characters of the tokens' texts) from *text_offset, which it advances. A logprob of -inf is
// written as -9999.0 (JSON has no infinity; vLLM's value).
nlohmann::ordered_json logprobs_json(const ApiRequest& r,
                                     const std::vector<SampledLogprobs>& tokens,
                                     const CheckpointText* text, int* text_offset);
// One SSE chunk: a text delta of choice `index` (chat: the first one of a choice carries the
// assistant role), or its finish reason (non-empty) with an empty delta; `logprobs` (null: none)
// is the chunk's tokens' logprobs_json.
nlohmann::ordered_json stream_chunk(const ApiRequest& r, const std::string& id, int64_t created,
                                    const std::string& model, int index, const std::string& text,
                                    const std::string& finish_reason, bool first,
                                    const nlohmann::ordered_json& logprobs = nullptr);
// A chat chunk with a piece of choice `index`'s reasoning (delta.reasoning_content).
nlohmann::ordered_json reasoning_chunk(const ApiRequest& r, const std::string& id, int64_t created,
                                       const std::string& model, int index,
                                       const std::string& reasoning, bool first,
                                       const nlohmann::ordered_json& logprobs = nullptr);
// A chat chunk with choice `index`'s tool calls (whole: name and all of the arguments in one
// delta each, indexed 0.. in the reply).
nlohmann::ordered_json tool_calls_chunk(const ApiRequest& r, const std::string& id, int64_t created,
                                        const std::string& model, int index,
                                        const std::vector<ToolCall>& calls, bool first);
// A parsed reply's calls as the choice's ChoiceResult takes them: parallel_tool_calls false keeps
// the first; a reply with calls finishes with "tool_calls" (vLLM's rule).
void apply_tool_calls(const ApiRequest& r, ParsedReply reply, ChoiceResult* c);
// A whole chat reply (c->text) through the request's readers: the reasoning out first, then the
// calls out of the content. `make_id` names the calls.
void split_reply(const ApiRequest& r, ChoiceResult* c, const std::function<std::string()>& make_id);
// The last chunk when stream_options.include_usage: no choices, the usage.
nlohmann::ordered_json usage_chunk(const ApiRequest& r, const std::string& id, int64_t created,
                                   const std::string& model, int prompt_tokens,
                                   int completion_tokens, int cached_tokens = -1);
// POST /tokenize (vLLM's): {"prompt": text, "add_special_tokens": true} or {"messages": [...],
// "add_generation_prompt": true, "tools", "chat_template_kwargs"} -> {count, max_model_len,
// tokens}; POST /detokenize: {"tokens": [ids]} -> {"prompt": text}. ApiError as parse_request's.
nlohmann::ordered_json tokenize_response(const std::string& body, const ServedModel& m);
nlohmann::ordered_json detokenize_response(const std::string& body, const ServedModel& m);
// GET /v1/models.
nlohmann::ordered_json models_response(const ServedModel& m, int64_t created);

}  // namespace megaops::serve
