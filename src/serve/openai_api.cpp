// See openai_api.h.
#include "serve/openai_api.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "core/error.h"
#include "io/tokenizer.h"
#include "io/tokenizer_files.h"

namespace megaops::serve {

using json = nlohmann::ordered_json;

std::string error_body(int status, const std::string& message, const std::string& param,
                       const std::string& type) {
  json e = {{"message", message},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", status}};
  return json{{"error", e}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string error_body(const ApiError& e) {
  return error_body(e.status, e.what(), e.param, e.type);
}

namespace {

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::number_float:
      return "a number";
    default:
      return "an integer";
  }
}

[[noreturn]] void bad(const std::string& field, const std::string& message) {
  throw ApiError(400, field, field + ": " + message);
}

[[noreturn]] void wrong_type(const std::string& field, const char* expected, const json& v) {
  bad(field, std::string("expected ") + expected + ", found " + type_name(v));
}

// The field's value, or null when absent.
const json& field_of(const json& body, const char* name) {
  static const json null_value;
  auto it = body.find(name);
  return it == body.end() ? null_value : *it;
}

int64_t int_field(const json& v, const std::string& name, int64_t lo, int64_t hi) {
  if (!v.is_number_integer()) wrong_type(name, "an integer", v);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
    bad(name, "expected " + std::to_string(lo) + ".." + std::to_string(hi) + ", found " + v.dump());
  const int64_t x =
      v.is_number_unsigned() ? static_cast<int64_t>(v.get<uint64_t>()) : v.get<int64_t>();
  if (x < lo || x > hi)
    bad(name, "expected " + std::to_string(lo) + ".." + std::to_string(hi) + ", found " +
                  std::to_string(x));
  return x;
}

double number_field(const json& v, const std::string& name) {
  if (!v.is_number()) wrong_type(name, "a number", v);
  const double x = v.get<double>();
  if (!std::isfinite(x)) bad(name, "expected a finite number");
  return x;
}

bool bool_field(const json& v, const std::string& name) {
  if (!v.is_boolean()) wrong_type(name, "a boolean", v);
  return v.get<bool>();
}

std::vector<int> token_array(const json& v, const std::string& name, int vocab) {
  std::vector<int> ids;
  for (size_t i = 0; i < v.size(); ++i)
    ids.push_back(static_cast<int>(
        int_field(v[i], name + "[" + std::to_string(i) + "]", 0, std::max(vocab - 1, 0))));
  return ids;
}

bool is_token_array(const json& v) {
  return v.is_array() && !v.empty() && v[0].is_number_integer();
}

std::vector<std::vector<int>> parse_prompts(const json& v, const ServedModel& m) {
  const auto encode = [&](const json& s, const std::string& name) {
    if (!m.text) bad(name, "text prompts need the checkpoint's tokenizer; send token ids");
    try {
      return m.text->tokenizer().encode(s.get<std::string>(), true);
    } catch (const InputError& e) {
      bad(name, e.what());
    }
  };
  std::vector<std::vector<int>> prompts;
  if (v.is_null()) bad("prompt", "required");
  if (v.is_string()) {
    prompts.push_back(encode(v, "prompt"));
  } else if (is_token_array(v)) {
    prompts.push_back(token_array(v, "prompt", m.vocab_size));
  } else if (v.is_array() && !v.empty()) {
    if (v.size() > static_cast<size_t>(MAX_CHOICES))
      bad("prompt", "expected at most " + std::to_string(MAX_CHOICES) + " prompts, found " +
                        std::to_string(v.size()));
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string name = "prompt[" + std::to_string(i) + "]";
      if (v[i].is_string())
        prompts.push_back(encode(v[i], name));
      else if (is_token_array(v[i]))
        prompts.push_back(token_array(v[i], name, m.vocab_size));
      else
        wrong_type(name, "a string or an array of token ids", v[i]);
    }
  } else {
    wrong_type("prompt", "a string, an array of strings or an array of token ids", v);
  }
  for (size_t i = 0; i < prompts.size(); ++i)
    if (prompts[i].empty()) bad("prompt", "tokenizes to no tokens");
  return prompts;
}

// Chat messages as the template takes them: content parts of type "text" joined into one string.
json normalised_messages(const json& v) {
  if (!v.is_array()) wrong_type("messages", "an array", v);
  if (v.empty()) bad("messages", "expected at least one message");
  json out = json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!v[i].is_object()) wrong_type(at, "an object", v[i]);
    json msg = v[i];
    const json& role = field_of(msg, "role");
    if (!role.is_string()) wrong_type(at + ".role", "a string", role);
    static const char* roles[] = {"system", "developer", "user", "assistant", "tool"};
    if (std::none_of(std::begin(roles), std::end(roles),
                     [&](const char* r) { return role.get<std::string>() == r; }))
      bad(at + ".role", "expected system, developer, user, assistant or tool, found '" +
                            role.get<std::string>() + "'");
    // An assistant turn's earlier calls: OpenAI sends "arguments" as JSON text; the templates
    // iterate them as objects (HF's transformers takes dicts), so text that parses is given as
    // its object (what vLLM does).
    json& calls = msg["tool_calls"];
    if (calls.is_null()) {
      msg.erase("tool_calls");
    } else if (!calls.is_array()) {
      wrong_type(at + ".tool_calls", "an array", calls);
    } else {
      for (size_t j = 0; j < calls.size(); ++j) {
        const std::string call = at + ".tool_calls[" + std::to_string(j) + "]";
        if (!calls[j].is_object() || !field_of(calls[j], "function").is_object())
          bad(call, "expected {\"type\": \"function\", \"function\": {\"name\", \"arguments\"}}");
        json& args = calls[j]["function"]["arguments"];
        if (args.is_string()) {
          json parsed = json::parse(args.get<std::string>(), nullptr, false);
          if (parsed.is_object()) args = std::move(parsed);
        }
      }
    }
    json& content = msg["content"];
    if (content.is_array()) {
      std::string text;
      for (size_t j = 0; j < content.size(); ++j) {
        const std::string part = at + ".content[" + std::to_string(j) + "]";
        const json& p = content[j];
        if (!p.is_object() || field_of(p, "type") != "text" || !field_of(p, "text").is_string())
          bad(part, "expected {\"type\": \"text\", \"text\": ...} (only text is supported)");
        text += p["text"].get<std::string>();
      }
      content = text;
    } else if (!content.is_string() && !content.is_null()) {
      wrong_type(at + ".content", "a string, an array of text parts or null", content);
    }
    out.push_back(std::move(msg));
  }
  return out;
}

std::vector<int> chat_prompt(const json& body, const ServedModel& m,
                             bool add_generation_prompt = true) {
  if (!m.text || !m.text->has_chat_template())
    throw ApiError(400, "messages",
                   "messages: this model has no chat template; use /v1/completions");
  const json messages = normalised_messages(field_of(body, "messages"));
  json extra = json::object();
  const json& kwargs = field_of(body, "chat_template_kwargs");
  if (!kwargs.is_null()) {
    if (!kwargs.is_object()) wrong_type("chat_template_kwargs", "an object", kwargs);
    extra = kwargs;
  }
  for (const char* name : {"tools", "documents"}) {
    const json& v = field_of(body, name);
    if (!v.is_null()) extra[name] = v;
  }
  try {
    const std::string text = m.text->render_chat(messages, add_generation_prompt, extra);
    std::vector<int> ids = m.text->tokenizer().encode(text, false);
    if (ids.empty()) bad("messages", "the chat template renders no tokens");
    return ids;
  } catch (const InputError& e) {
    bad("messages", e.what());
  }
}

// Parameters megaops does not implement: refused when set to anything but their no-op value.
void refuse_unsupported(const json& body, bool chat) {
  const auto set = [&](const char* name) {
    const json& v = field_of(body, name);
    return !(v.is_null() || (v.is_boolean() && !v.get<bool>()) ||
             (v.is_number() && v.get<double>() == 0) || (v.is_object() && v.empty()) ||
             (v.is_string() && v.get<std::string>().empty()));
  };
  if (set("suffix")) bad("suffix", "not supported by this server");
  if (chat && set("echo")) bad("echo", "only /v1/completions takes echo");
  if (!chat && set("tool_choice")) bad("tool_choice", "only chat completions take tools");
  const json& best_of = field_of(body, "best_of");
  if (!best_of.is_null() && !(best_of.is_number_integer() && best_of.get<int64_t>() == 1))
    bad("best_of", "not supported by this server (only 1)");
  const json& format = field_of(body, "response_format");
  if (!format.is_null() && !(format.is_object() && field_of(format, "type") == "text"))
    bad("response_format", "only {\"type\": \"text\"} is supported");
}

// Chat's tools, tool_choice and parallel_tool_calls: the tools are checked as OpenAI's API
// describes them (the template renders them); "auto" (the default with tools) parses the reply's
// calls in the model's format.
void parse_tools(const json& body, const ServedModel& m, ApiRequest& r) {
  const json& tools = field_of(body, "tools");
  if (!tools.is_null()) {
    if (!tools.is_array()) wrong_type("tools", "an array", tools);
    for (size_t i = 0; i < tools.size(); ++i) {
      const std::string at = "tools[" + std::to_string(i) + "]";
      const json& t = tools[i];
      if (!t.is_object()) wrong_type(at, "an object", t);
      if (field_of(t, "type") != "function")
        bad(at + ".type", "expected \"function\", found " + field_of(t, "type").dump());
      const json& f = field_of(t, "function");
      if (!f.is_object()) wrong_type(at + ".function", "an object", f);
      const json& name = field_of(f, "name");
      if (!name.is_string() || name.get<std::string>().empty())
        bad(at + ".function.name", "expected a non-empty string, found " + name.dump());
      const json& params = field_of(f, "parameters");
      if (!params.is_null() && !params.is_object())
        wrong_type(at + ".function.parameters", "an object (a JSON Schema)", params);
    }
  }
  const bool have_tools = tools.is_array() && !tools.empty();
  const json& choice = field_of(body, "tool_choice");
  bool parse = have_tools;
  if (!choice.is_null()) {
    if (choice.is_object() || choice == "required")
      bad("tool_choice",
          "\"required\" and named functions need guided decoding, which this server does not "
          "do; use \"auto\" or \"none\"");
    if (!choice.is_string()) wrong_type("tool_choice", "\"auto\" or \"none\"", choice);
    if (choice != "auto" && choice != "none")
      bad("tool_choice", "expected \"auto\" or \"none\", found " + choice.dump());
    if (!have_tools && choice == "auto") bad("tool_choice", "only allowed with tools");
    parse = have_tools && choice == "auto";
  }
  if (parse && m.tool_call_format == ToolCallFormat::None)
    bad("tool_choice",
        "\"auto\" needs a tool-call parser and this model's chat template teaches no format "
        "megaops recognises: start the server with --tool-call-parser hermes or llama3_json, or "
        "send tool_choice \"none\"");
  if (parse) r.tool_calls = m.tool_call_format;
  r.reasoning = m.reasoning_format;
  const json& parallel = field_of(body, "parallel_tool_calls");
  if (!parallel.is_null()) r.parallel_tool_calls = bool_field(parallel, "parallel_tool_calls");
}

void parse_sampling(const json& body, const ServedModel& m, ApiRequest& r) {
  // Not given: generation_config.json's value when it has one, else OpenAI's default (vLLM's
  // rule); checked as the engine checks it.
  const GenerationConfig* g = m.text ? &m.text->generation() : nullptr;
  SamplingParams& s = r.params.sampling;
  const json& t = field_of(body, "temperature");
  s.temperature = t.is_null() ? (g ? g->temperature.value_or(1.0f) : 1.0f)
                              : static_cast<float>(number_field(t, "temperature"));
  if (s.temperature < 0) bad("temperature", "expected >= 0, found " + t.dump());
  const json& p = field_of(body, "top_p");
  s.top_p = p.is_null() ? (g ? g->top_p.value_or(1.0f) : 1.0f)
                        : static_cast<float>(number_field(p, "top_p"));
  if (!(s.top_p > 0 && s.top_p <= 1)) bad("top_p", "expected a value in (0, 1], found " + p.dump());
  const json& k = field_of(body, "top_k");
  s.top_k = k.is_null() ? (g ? g->top_k.value_or(0) : 0)
                        : static_cast<int>(int_field(k, "top_k", -1, m.vocab_size));
  if (s.top_k < 0) s.top_k = 0;  // vLLM's -1: off
  // Penalties and biases: OpenAI's presence_penalty, frequency_penalty (-2..2) and logit_bias
  // ({"token id": -100..100}), vLLM's repetition_penalty (> 0) and min_tokens.
  RequestParams& q = r.params;
  for (const auto& [name, value] :
       {std::pair<const char*, float*>{"presence_penalty", &q.presence_penalty},
        {"frequency_penalty", &q.frequency_penalty}}) {
    const json& v = field_of(body, name);
    if (v.is_null()) continue;
    *value = static_cast<float>(number_field(v, name));
    if (!(*value >= -2 && *value <= 2)) bad(name, "expected -2..2, found " + v.dump());
  }
  const json& rep = field_of(body, "repetition_penalty");
  if (!rep.is_null()) {
    q.repetition_penalty = static_cast<float>(number_field(rep, "repetition_penalty"));
    if (!(q.repetition_penalty > 0 && std::isfinite(q.repetition_penalty)))
      bad("repetition_penalty", "expected a number > 0 (1: off), found " + rep.dump());
  }
  const json& bias = field_of(body, "logit_bias");
  if (!bias.is_null()) {
    if (!bias.is_object()) wrong_type("logit_bias", "an object of token id: bias", bias);
    for (const auto& [key, v] : bias.items()) {
      const std::string at = "logit_bias." + key;
      char* end = nullptr;
      errno = 0;
      const long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || errno != 0 || id < 0 || id >= m.vocab_size)
        bad(at, "expected a token id in [0, " + std::to_string(m.vocab_size) + ") as the key");
      const double b = number_field(v, at);
      if (!(b >= -100 && b <= 100)) bad(at, "expected -100..100, found " + v.dump());
      q.logit_bias[static_cast<int>(id)] = static_cast<float>(b);
    }
  }
  const json& min_p = field_of(body, "min_p");
  if (!min_p.is_null()) {
    q.min_p = static_cast<float>(number_field(min_p, "min_p"));
    if (!(q.min_p >= 0 && q.min_p <= 1))
      bad("min_p", "expected 0..1 (0: off), found " + min_p.dump());
  }
  const json& min_tokens = field_of(body, "min_tokens");
  if (!min_tokens.is_null())
    q.min_tokens =
        static_cast<int>(int_field(min_tokens, "min_tokens", 0, std::numeric_limits<int>::max()));
  const json& seed = field_of(body, "seed");
  if (!seed.is_null()) {
    r.seed_given = true;
    s.seed = static_cast<uint64_t>(int_field(seed, "seed", std::numeric_limits<int64_t>::min(),
                                             std::numeric_limits<int64_t>::max()));
  }
}

// Completions: logprobs, an integer 0..5 (null: off). Chat: logprobs, a boolean, and
// top_logprobs 0..20, which needs logprobs true.
void parse_logprobs(const json& body, ApiRequest& r) {
  const json& lp = field_of(body, "logprobs");
  if (!r.chat) {
    if (!lp.is_null())
      r.params.logprobs = static_cast<int>(int_field(lp, "logprobs", 0, MAX_COMPLETION_LOGPROBS));
    return;
  }
  const bool on = !lp.is_null() && bool_field(lp, "logprobs");
  const json& top = field_of(body, "top_logprobs");
  if (top.is_null()) {
    if (on) r.params.logprobs = 0;
    return;
  }
  const int n = static_cast<int>(int_field(top, "top_logprobs", 0, MAX_LOGPROBS));
  if (!on) bad("top_logprobs", "only allowed with logprobs: true");
  r.params.logprobs = n;
}

void parse_stops(const json& body, const ServedModel& m, ApiRequest& r) {
  const json& stop = field_of(body, "stop");
  if (stop.is_string()) {
    r.params.stop.push_back(stop.get<std::string>());
  } else if (stop.is_array()) {
    for (size_t i = 0; i < stop.size(); ++i) {
      if (!stop[i].is_string()) wrong_type("stop[" + std::to_string(i) + "]", "a string", stop[i]);
      r.params.stop.push_back(stop[i].get<std::string>());
    }
  } else if (!stop.is_null()) {
    wrong_type("stop", "a string or an array of strings", stop);
  }
  for (const std::string& s : r.params.stop)
    if (s.empty()) bad("stop", "expected non-empty strings");
  if (!r.params.stop.empty() && !m.text)
    bad("stop", "stop strings need the checkpoint's tokenizer");
  const json& ids = field_of(body, "stop_token_ids");
  if (!ids.is_null()) {
    if (!ids.is_array()) wrong_type("stop_token_ids", "an array of token ids", ids);
    r.params.stop_token_ids = token_array(ids, "stop_token_ids", m.vocab_size);
  }
  const json& ignore = field_of(body, "ignore_eos");
  if (!ignore.is_null()) r.params.ignore_eos = bool_field(ignore, "ignore_eos");
}

// max_tokens against the context and the KV cache: vLLM's message, naming the field at fault.
void check_lengths(const json& given, const std::string& name, const ServedModel& m,
                   ApiRequest& r) {
  size_t longest = 0;
  for (const auto& p : r.prompts) longest = std::max(longest, p.size());
  const int cap = std::min(m.max_context, m.kv_positions);
  const std::string prompt_field = r.chat ? "messages" : "prompt";
  if (static_cast<int64_t>(longest) >= cap)
    bad(prompt_field, "this model's maximum context length is " + std::to_string(cap) +
                          " tokens, but the prompt has " + std::to_string(longest) +
                          " (at least one must be left to generate)");
  if (given.is_null()) {
    // Completions: OpenAI's 16; chat: what the context leaves, as vLLM does.
    r.params.max_tokens = r.chat ? cap - static_cast<int>(longest) : 16;
    r.params.max_tokens = std::min(r.params.max_tokens, cap - static_cast<int>(longest));
    return;
  }
  r.params.max_tokens =
      static_cast<int>(int_field(given, name, 1, std::numeric_limits<int>::max()));
  const int64_t total = static_cast<int64_t>(longest) + r.params.max_tokens;
  if (total > cap)
    bad(name, "this model's maximum context length is " + std::to_string(cap) + " tokens, but " +
                  std::to_string(total) + " were asked for (" + std::to_string(longest) +
                  " in the " + prompt_field + ", " + std::to_string(r.params.max_tokens) +
                  " in the completion)");
}

}  // namespace

namespace {

// The body as a JSON object, its "model" (when given) checked against the served one.
json parse_body(const std::string& text, const ServedModel& m, std::string* model_out) {
  json body;
  try {
    body = json::parse(text);
  } catch (const json::exception& e) {
    throw ApiError(400, "", std::string("the body is not valid JSON: ") + e.what());
  }
  if (!body.is_object()) throw ApiError(400, "", "expected a JSON object as the body");
  const json& model = field_of(body, "model");
  if (!model.is_null()) {
    if (!model.is_string()) wrong_type("model", "a string", model);
    const std::string name = model.get<std::string>();
    if (name != m.name && std::find(m.aliases.begin(), m.aliases.end(), name) == m.aliases.end())
      throw ApiError(404, "model",
                     "The model '" + name + "' does not exist; this server serves '" + m.name + "'",
                     "NotFoundError");
    if (model_out) *model_out = name;
  }
  return body;
}

}  // namespace

ApiRequest parse_request(const std::string& text, bool chat, const ServedModel& m) {
  ApiRequest r;
  r.chat = chat;
  const json body = parse_body(text, m, &r.model);
  refuse_unsupported(body, chat);
  if (chat) {
    parse_tools(body, m, r);
    r.prompts.push_back(chat_prompt(body, m));
  } else {
    r.prompts = parse_prompts(field_of(body, "prompt"), m);
    const json& echo = field_of(body, "echo");
    if (!echo.is_null()) r.echo = bool_field(echo, "echo");
    if (r.echo) {
      if (!m.text) bad("echo", "echoing a prompt needs the checkpoint's tokenizer");
      const json& p = field_of(body, "prompt");
      for (size_t i = 0; i < r.prompts.size(); ++i) {
        const json& one = p.is_string() || is_token_array(p) ? p : p[i];
        r.prompt_texts.push_back(one.is_string() ? one.get<std::string>()
                                                 : m.text->tokenizer().decode(r.prompts[i]));
      }
    }
  }
  const json& n = field_of(body, "n");
  if (!n.is_null()) r.n = static_cast<int>(int_field(n, "n", 1, MAX_CHOICES));
  if (r.n * r.prompts.size() > static_cast<size_t>(MAX_CHOICES))
    bad("n", "expected at most " + std::to_string(MAX_CHOICES) + " choices in all, found " +
                 std::to_string(r.n * r.prompts.size()));
  const json& stream = field_of(body, "stream");
  if (!stream.is_null()) r.stream = bool_field(stream, "stream");
  const json& options = field_of(body, "stream_options");
  if (!options.is_null()) {
    if (!r.stream) bad("stream_options", "only allowed with stream: true");
    if (!options.is_object()) wrong_type("stream_options", "an object", options);
    const json& usage = field_of(options, "include_usage");
    if (!usage.is_null()) r.include_usage = bool_field(usage, "stream_options.include_usage");
  }
  parse_sampling(body, m, r);
  parse_stops(body, m, r);
  parse_logprobs(body, r);
  if (r.echo && r.params.logprobs >= 0)
    bad("echo", "with logprobs it needs the prompt's logprobs, which this server does not compute");
  const bool completion_tokens = chat && !field_of(body, "max_completion_tokens").is_null();
  const char* name = completion_tokens ? "max_completion_tokens" : "max_tokens";
  check_lengths(field_of(body, name), name, m, r);
  if (r.params.min_tokens > r.params.max_tokens)
    bad("min_tokens", "expected at most " + std::string(name) + " (" +
                          std::to_string(r.params.max_tokens) + "), found " +
                          std::to_string(r.params.min_tokens));
  return r;
}

namespace {

json usage(int prompt_tokens, int completion_tokens, int cached_tokens) {
  json u = {{"prompt_tokens", prompt_tokens},
            {"completion_tokens", completion_tokens},
            {"total_tokens", prompt_tokens + completion_tokens}};
  if (cached_tokens >= 0) u["prompt_tokens_details"] = {{"cached_tokens", cached_tokens}};
  return u;
}

json head(const ApiRequest& r, const std::string& id, int64_t created, const std::string& model,
          bool chunk) {
  const char* object =
      r.chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion";
  return {{"id", id}, {"object", object}, {"created", created}, {"model", model}};
}

}  // namespace

namespace {

// A token's text: its bytes as UTF-8 (an incomplete or invalid sequence becomes U+FFFD, so a
// byte-level token holding part of a character shows as U+FFFD; chat's "bytes" carry the truth).
std::string token_text(int id, const CheckpointText* text) {
  if (!text) return "token_id:" + std::to_string(id);
  std::string out;
  append_utf8_lossy(text->tokenizer().token_bytes(id), false, &out);
  return out;
}

json token_bytes(int id, const CheckpointText* text) {
  json out = json::array();
  const std::string b = text ? text->tokenizer().token_bytes(id) : token_text(id, nullptr);
  for (unsigned char c : b) out.push_back(static_cast<int>(c));
  return out;
}

double logprob_value(float x) {
  return std::isfinite(x) ? static_cast<double>(x) : -9999.0;
}

int characters(const std::string& s) {
  int n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

json logprobs_json(const ApiRequest& r, const std::vector<SampledLogprobs>& tokens,
                   const CheckpointText* text, int* text_offset) {
  if (r.chat) {
    json content = json::array();
    for (const SampledLogprobs& t : tokens) {
      json top = json::array();
      for (const TokenLogprob& a : t.top)
        top.push_back({{"token", token_text(a.token, text)},
                       {"logprob", logprob_value(a.logprob)},
                       {"bytes", token_bytes(a.token, text)}});
      content.push_back({{"token", token_text(t.sampled.token, text)},
                         {"logprob", logprob_value(t.sampled.logprob)},
                         {"bytes", token_bytes(t.sampled.token, text)},
                         {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
  }
  json pieces = json::array(), values = json::array(), tops = json::array(),
       offsets = json::array();
  for (const SampledLogprobs& t : tokens) {
    const std::string piece = token_text(t.sampled.token, text);
    pieces.push_back(piece);
    values.push_back(logprob_value(t.sampled.logprob));
    // The top-N and, as vLLM does, the sampled token (so up to logprobs + 1 entries).
    json top = json::object();
    for (const TokenLogprob& a : t.top) {
      const std::string key = token_text(a.token, text);
      if (!top.contains(key)) top[key] = logprob_value(a.logprob);
    }
    if (!top.contains(piece)) top[piece] = logprob_value(t.sampled.logprob);
    tops.push_back(std::move(top));
    offsets.push_back(*text_offset);
    *text_offset += characters(piece);
  }
  return {{"tokens", std::move(pieces)},
          {"token_logprobs", std::move(values)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

namespace {

json tool_calls_json(const std::vector<ToolCall>& calls, bool indexed) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json call = json::object();
    if (indexed) call["index"] = i;
    call["id"] = calls[i].id;
    call["type"] = "function";
    call["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    out.push_back(std::move(call));
  }
  return out;
}

}  // namespace

void apply_tool_calls(const ApiRequest& r, ParsedReply reply, ChoiceResult* c) {
  if (!r.parallel_tool_calls && reply.calls.size() > 1) reply.calls.resize(1);
  c->text = std::move(reply.content);
  c->tool_calls = std::move(reply.calls);
  if (!c->tool_calls.empty()) c->finish_reason = "tool_calls";
}

void split_reply(const ApiRequest& r, ChoiceResult* c,
                 const std::function<std::string()>& make_id) {
  if (r.reasoning != ReasoningFormat::None) {
    ReasoningSplit s = split_reasoning(r.reasoning, c->text);
    c->reasoning = std::move(s.reasoning);
    c->text = std::move(s.content);
  }
  if (r.tool_calls != ToolCallFormat::None)
    apply_tool_calls(r, extract_tool_calls(r.tool_calls, c->text, make_id), c);
}

namespace {

// A chat chunk whose delta holds one field (and the role in a choice's first chunk).
json delta_chunk(const ApiRequest& r, const std::string& id, int64_t created,
                 const std::string& model, int index, const char* field, json value, bool first,
                 const json& logprobs) {
  json out = head(r, id, created, model, true);
  json delta = json::object();
  if (first) delta["role"] = "assistant";
  delta[field] = std::move(value);
  out["choices"] = json::array({{{"index", index},
                                 {"delta", std::move(delta)},
                                 {"logprobs", logprobs},
                                 {"finish_reason", nullptr}}});
  if (r.include_usage) out["usage"] = nullptr;
  return out;
}

}  // namespace

json reasoning_chunk(const ApiRequest& r, const std::string& id, int64_t created,
                     const std::string& model, int index, const std::string& reasoning, bool first,
                     const json& logprobs) {
  return delta_chunk(r, id, created, model, index, "reasoning_content", reasoning, first, logprobs);
}

json tool_calls_chunk(const ApiRequest& r, const std::string& id, int64_t created,
                      const std::string& model, int index, const std::vector<ToolCall>& calls,
                      bool first) {
  return delta_chunk(r, id, created, model, index, "tool_calls", tool_calls_json(calls, true),
                     first, nullptr);
}

json completion_response(const ApiRequest& r, const std::string& id, int64_t created,
                         const std::string& model, const std::vector<ChoiceResult>& choices,
                         int prompt_tokens, const CheckpointText* text, int cached_tokens) {
  json out = head(r, id, created, model, false);
  json list = json::array();
  int completion_tokens = 0;
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    completion_tokens += c.completion_tokens;
    json choice = {{"index", i}};
    if (r.chat) {
      // With calls, content is null unless the model wrote more than white space beside them.
      const bool blank = c.text.find_first_not_of(" \t\r\n") == std::string::npos;
      choice["message"] = {
          {"role", "assistant"},
          {"content", !c.tool_calls.empty() && blank ? json(nullptr) : json(c.text)}};
      if (!c.tool_calls.empty())
        choice["message"]["tool_calls"] = tool_calls_json(c.tool_calls, false);
      // With a reasoning reader: the block's text, null when the reply had none (vLLM's shape).
      if (r.reasoning != ReasoningFormat::None)
        choice["message"]["reasoning_content"] =
            c.reasoning.empty() ? json(nullptr) : json(c.reasoning);
    } else {
      choice["text"] = r.echo ? r.prompt_texts.at(i / static_cast<size_t>(r.n)) + c.text : c.text;
    }
    int offset = 0;
    choice["logprobs"] =
        r.params.logprobs >= 0 ? logprobs_json(r, c.logprobs, text, &offset) : json(nullptr);
    choice["finish_reason"] = c.finish_reason;
    list.push_back(std::move(choice));
  }
  out["choices"] = std::move(list);
  out["usage"] = usage(prompt_tokens, completion_tokens, cached_tokens);
  return out;
}

json stream_chunk(const ApiRequest& r, const std::string& id, int64_t created,
                  const std::string& model, int index, const std::string& text,
                  const std::string& finish_reason, bool first, const json& logprobs) {
  json out = head(r, id, created, model, true);
  json choice = {{"index", index}};
  if (r.chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || finish_reason.empty()) delta["content"] = text;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = logprobs;
  choice["finish_reason"] = finish_reason.empty() ? json(nullptr) : json(finish_reason);
  out["choices"] = json::array({std::move(choice)});
  if (r.include_usage) out["usage"] = nullptr;
  return out;
}

json usage_chunk(const ApiRequest& r, const std::string& id, int64_t created,
                 const std::string& model, int prompt_tokens, int completion_tokens,
                 int cached_tokens) {
  json out = head(r, id, created, model, true);
  out["choices"] = json::array();
  out["usage"] = usage(prompt_tokens, completion_tokens, cached_tokens);
  return out;
}

json tokenize_response(const std::string& text, const ServedModel& m) {
  const json body = parse_body(text, m, nullptr);
  if (!m.text) bad("prompt", "tokenizing needs the checkpoint's tokenizer");
  const json& prompt = field_of(body, "prompt");
  const json& messages = field_of(body, "messages");
  if (prompt.is_null() == messages.is_null())
    bad(prompt.is_null() ? "prompt" : "messages", "expected one of prompt and messages");
  std::vector<int> ids;
  if (!prompt.is_null()) {
    if (!prompt.is_string()) wrong_type("prompt", "a string", prompt);
    const json& special = field_of(body, "add_special_tokens");
    const bool add = special.is_null() || bool_field(special, "add_special_tokens");
    try {
      ids = m.text->tokenizer().encode(prompt.get<std::string>(), add);
    } catch (const InputError& e) {
      bad("prompt", e.what());
    }
  } else {
    const json& gen = field_of(body, "add_generation_prompt");
    ids = chat_prompt(body, m, gen.is_null() || bool_field(gen, "add_generation_prompt"));
  }
  return {{"count", ids.size()}, {"max_model_len", m.max_context}, {"tokens", ids}};
}

json detokenize_response(const std::string& text, const ServedModel& m) {
  const json body = parse_body(text, m, nullptr);
  if (!m.text) bad("tokens", "detokenizing needs the checkpoint's tokenizer");
  const json& tokens = field_of(body, "tokens");
  if (!tokens.is_array()) wrong_type("tokens", "an array of token ids", tokens);
  const std::vector<int> ids =
      tokens.empty() ? std::vector<int>{} : token_array(tokens, "tokens", m.vocab_size);
  return {{"prompt", m.text->tokenizer().decode(ids)}};
}

json models_response(const ServedModel& m, int64_t created) {
  json model = {{"id", m.name},
                {"object", "model"},
                {"created", created},
                {"owned_by", "megaops"},
                {"max_model_len", m.max_context}};
  return {{"object", "list"}, {"data", json::array({model})}};
}

}  // namespace megaops::serve
