// The OpenAI-compatible API's requests and responses, as JSON (no HTTP here): /v1/completions and
// /v1/chat/completions bodies parsed into engine requests with every field checked (an ApiError
// naming the field, as OpenAI's and vLLM's servers answer), and the response objects and SSE
// chunks built from what the engine produced. Parameters follow OpenAI's API; vLLM's extensions
// top_k, ignore_eos, stop_token_ids, chat_template_kwargs are accepted too. logprobs: completions'
// integer 0..MAX_COMPLETION_LOGPROBS, chat's boolean with top_logprobs 0..MAX_LOGPROBS.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "megaops/engine.h"

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
};

// Most choices (n) and prompts in one request.
constexpr int MAX_CHOICES = 64;
// Most alternatives /v1/completions' logprobs may ask for (OpenAI's limit; chat's top_logprobs
// goes to MAX_LOGPROBS, 20).
constexpr int MAX_COMPLETION_LOGPROBS = 5;

// Parses a request body. Throws ApiError: 400 naming the field on malformed JSON, wrong types,
// values out of range, a prompt or prompt + max_tokens beyond the context; 404 for another model.
ApiRequest parse_request(const std::string& body, bool chat, const ServedModel& m);

// The response objects. `choices` hold, per choice (prompt-major), its text and finish reason.
struct ChoiceResult {
  std::string text;
  std::string finish_reason;  // "stop" or "length"
  int completion_tokens = 0;
  std::vector<SampledLogprobs> logprobs;  // one a generated token, when asked for
  int text_offset = 0;                    // completions' text_offset of the next token
};
// With logprobs (ApiRequest::params.logprobs >= 0) each choice's "logprobs" is filled from
// ChoiceResult::logprobs, token texts from `text`'s tokenizer ("token_id:<id>" without one).
nlohmann::ordered_json completion_response(const ApiRequest& r, const std::string& id,
                                           int64_t created, const std::string& model,
                                           const std::vector<ChoiceResult>& choices,
                                           int prompt_tokens, const CheckpointText* text = nullptr);
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
// The last chunk when stream_options.include_usage: no choices, the usage.
nlohmann::ordered_json usage_chunk(const ApiRequest& r, const std::string& id, int64_t created,
                                   const std::string& model, int prompt_tokens,
                                   int completion_tokens);
// GET /v1/models.
nlohmann::ordered_json models_response(const ServedModel& m, int64_t created);

}  // namespace megaops::serve
