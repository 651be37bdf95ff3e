// See http_server.h. cpp-httplib (Debian's libcpp-httplib-dev) is seen by this file only.
#include "serve/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "core/error.h"
#include "serve/metrics.h"

namespace megaops::serve {

using json = nlohmann::ordered_json;

namespace {

constexpr auto WAIT_SLICE = std::chrono::milliseconds(100);
// Connections the kernel holds for the accept loop (uvicorn's default, which vLLM serves behind).
constexpr int LISTEN_BACKLOG = 2048;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* status_text(int status) {
  switch (status) {
    case 400:
      return "bad request";
    case 404:
      return "not found";
    case 405:
      return "method not allowed";
    case 408:
      return "request timeout";
    case 413:
      return "payload too large";
    case 414:
      return "URI too long";
    case 431:
      return "request header fields too large";
    case 503:
      return "service unavailable";
    default:
      return status >= 500 ? "server error" : "client error";
  }
}

void send_error(httplib::Response& res, int status, const std::string& message,
                const std::string& param = "", const std::string& type = "invalid_request_error") {
  res.status = status;
  res.set_content(error_body(status, message, param, type), "application/json");
}

// The field an engine InputError names: its message starts with "field: ".
std::string field_of_message(const std::string& message) {
  const size_t colon = message.find(':');
  return colon == std::string::npos ? "" : message.substr(0, colon);
}

// One API request's choices in the engine: their tickets, one channel they all report on, and
// what each has produced so far.
struct Choices {
  ApiRequest request;
  std::string id, model;
  int64_t created = 0;
  int prompt_tokens = 0;
  std::shared_ptr<RequestChannel> channel = std::make_shared<RequestChannel>();
  std::vector<uint64_t> tickets;
  std::map<uint64_t, size_t> index;  // ticket -> choice index
  std::vector<ChoiceResult> results;
  std::vector<int> cached;  // per choice: its prompt tokens the prefix cache held
  std::vector<bool> finished, started;
  std::vector<ToolCallStream> tool_streams;        // streamed chat with tool calls: one a choice
  std::vector<ReasoningStream> reasoning_streams;  // streamed chat with a reasoning reader
  size_t finished_count = 0;
  std::string failure;  // an error or abort that ended the request
  int failure_status = 0;
  bool done() const { return finished_count == results.size() || !failure.empty(); }
};

// Usage's cached prompt tokens: each prompt's first choice's (the prompt is counted once in
// prompt_tokens, as OpenAI counts it).
int cached_tokens(const Choices& c) {
  int n = 0;
  for (size_t i = 0; i < c.cached.size(); i += static_cast<size_t>(c.request.n)) n += c.cached[i];
  return n;
}

}  // namespace

struct HttpServer::Impl {
  AsyncEngine& engine;
  ServedModel model;
  ServerOptions options;
  httplib::Server server;
  std::thread thread;
  int port = 0;
  std::atomic<int> active{0};
  std::atomic<int> listen_fd{-1};  // the listening socket, once made
  mutable std::mutex mutex;        // guards rng and responses
  std::mt19937_64 rng{std::random_device{}()};
  std::map<int, uint64_t> responses;

  Impl(AsyncEngine& e, ServedModel m, ServerOptions o)
      : engine(e), model(std::move(m)), options(std::move(o)) {}

  uint64_t random() {
    std::lock_guard<std::mutex> lock(mutex);
    return rng();
  }
  std::string random_id(const char* prefix) {
    char buf[40];
    std::snprintf(buf, sizeof(buf), "%s%016llx", prefix, static_cast<unsigned long long>(random()));
    return buf;
  }

  void routes();
  void generate(const httplib::Request& req, httplib::Response& res, bool chat);
  std::shared_ptr<Choices> submit(ApiRequest r, httplib::Response& res);
  void take(Choices& c, std::vector<RequestOutput> outs, std::string* sse);
  void abort_all(Choices& c);
  void respond(Choices& c, httplib::Response& res);
  void stream(std::shared_ptr<Choices> c, httplib::Response& res);
};

std::shared_ptr<Choices> HttpServer::Impl::submit(ApiRequest r, httplib::Response& res) {
  auto c = std::make_shared<Choices>();
  c->request = std::move(r);
  const ApiRequest& q = c->request;
  c->id = random_id(q.chat ? "chatcmpl-" : "cmpl-");
  c->model = model.name;
  c->created = unix_now();
  try {
    for (const std::vector<int>& prompt : q.prompts) {
      c->prompt_tokens += static_cast<int>(prompt.size());
      for (int j = 0; j < q.n; ++j) {
        RequestParams p = q.params;
        // Choice j of a seeded request draws with seed + j, so choices differ and a request with
        // a seed is reproducible; without one each choice gets a random seed (vLLM's behaviour).
        p.sampling.seed = q.seed_given ? q.params.sampling.seed + j : random();
        const AsyncEngine::Ticket t = engine.submit(prompt, p, c->channel);
        c->index[t.id] = c->tickets.size();
        c->tickets.push_back(t.id);
      }
    }
  } catch (const Unavailable& e) {
    abort_all(*c);
    send_error(res, 503, e.what(), "", "service_unavailable");
    return nullptr;
  } catch (const InputError& e) {
    abort_all(*c);
    send_error(res, 400, e.what(), field_of_message(e.what()));
    return nullptr;
  }
  c->results.resize(c->tickets.size());
  c->cached.assign(c->tickets.size(), 0);
  c->finished.assign(c->tickets.size(), false);
  c->started.assign(c->tickets.size(), false);
  if (q.stream && q.tool_calls != ToolCallFormat::None)
    for (size_t i = 0; i < c->tickets.size(); ++i)
      c->tool_streams.emplace_back(q.tool_calls, [this] { return random_id("chatcmpl-tool-"); });
  if (q.stream && q.reasoning != ReasoningFormat::None)
    c->reasoning_streams.assign(c->tickets.size(), ReasoningStream(q.reasoning));
  return c;
}

void HttpServer::Impl::abort_all(Choices& c) {
  for (size_t i = 0; i < c.tickets.size(); ++i)
    if (i >= c.finished.size() || !c.finished[i]) engine.abort(c.tickets[i]);
}

// Folds outputs into the choices; with `sse`, appends the events a streamed response sends.
void HttpServer::Impl::take(Choices& c, std::vector<RequestOutput> outs, std::string* sse) {
  const auto event = [&](const json& j) {
    if (sse) *sse += "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
  };
  for (RequestOutput& o : outs) {
    const auto it = c.index.find(o.id);
    if (it == c.index.end() || !c.failure.empty()) continue;
    const size_t i = it->second;
    if (c.finished[i]) continue;
    if (o.finish_reason == FinishReason::Error || o.finish_reason == FinishReason::Abort) {
      c.failure = o.finish_reason == FinishReason::Error
                      ? "the request failed: " + o.stop_reason
                      : "the request was aborted: the server is shutting down";
      c.failure_status = o.finish_reason == FinishReason::Error ? 500 : 503;
      if (sse)
        *sse += "data: " + error_body(c.failure_status, c.failure, "", "server_error") + "\n\n";
      continue;
    }
    ChoiceResult& r = c.results[i];
    c.cached[i] = o.cached_tokens;
    r.text += o.text;
    r.completion_tokens = o.completion_tokens;
    std::string reason = o.finished ? finish_reason_name(o.finish_reason) : "";
    // A streamed chunk carries the logprobs of the tokens of its output, even where their text
    // is still held (a partial character, a possible stop string, a tool call).
    const json logprobs = sse && !o.logprobs.empty()
                              ? logprobs_json(c.request, o.logprobs, model.text, &r.text_offset)
                              : json(nullptr);
    r.logprobs.insert(r.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
    if (sse && (!c.tool_streams.empty() || !c.reasoning_streams.empty())) {
      // The reasoning goes out as reasoning_content; the content as it comes, up to where a call
      // may begin; the calls, whole, at the end.
      ReasoningSplit part = c.reasoning_streams.empty() ? ReasoningSplit{"", o.text}
                                                        : c.reasoning_streams[i].feed(o.text);
      if (o.finished && !c.reasoning_streams.empty()) {
        ReasoningSplit end = c.reasoning_streams[i].finish();
        part.reasoning += end.reasoning;
        part.content += end.content;
      }
      std::string text =
          c.tool_streams.empty() ? part.content : c.tool_streams[i].feed(part.content);
      ChoiceResult calls;
      if (o.finished && !c.tool_streams.empty()) {
        calls.finish_reason = reason;
        apply_tool_calls(c.request, c.tool_streams[i].finish(), &calls);
        text += calls.text;
        reason = calls.finish_reason;
      }
      json lp = logprobs;  // on the first chunk this output sends
      if (!part.reasoning.empty()) {
        event(reasoning_chunk(c.request, c.id, c.created, c.model, static_cast<int>(i),
                              part.reasoning, !c.started[i], lp));
        c.started[i] = true;
        lp = nullptr;
      }
      const std::string pending = calls.tool_calls.empty() ? reason : "";
      if (!text.empty() || !pending.empty() || !c.started[i] || !lp.is_null()) {
        event(stream_chunk(c.request, c.id, c.created, c.model, static_cast<int>(i), text, pending,
                           !c.started[i], lp));
        c.started[i] = true;
      }
      if (!calls.tool_calls.empty()) {
        event(tool_calls_chunk(c.request, c.id, c.created, c.model, static_cast<int>(i),
                               calls.tool_calls, !c.started[i]));
        event(stream_chunk(c.request, c.id, c.created, c.model, static_cast<int>(i), "", reason,
                           false));
      }
    } else if (!o.text.empty() || !reason.empty() || !c.started[i] || !logprobs.is_null()) {
      // echo: a choice's first chunk starts with its prompt.
      const std::string text =
          c.request.echo && !c.started[i]
              ? c.request.prompt_texts.at(i / static_cast<size_t>(c.request.n)) + o.text
              : o.text;
      event(stream_chunk(c.request, c.id, c.created, c.model, static_cast<int>(i), text, reason,
                         !c.started[i], logprobs));
    }
    c.started[i] = true;
    if (o.finished) {
      r.finish_reason = reason;
      c.finished[i] = true;
      ++c.finished_count;
    }
  }
  if (!c.failure.empty()) abort_all(c);
  if (sse && c.done()) {
    if (c.failure.empty() && c.request.include_usage) {
      int completion = 0;
      for (const ChoiceResult& r : c.results) completion += r.completion_tokens;
      event(usage_chunk(c.request, c.id, c.created, c.model, c.prompt_tokens, completion,
                        cached_tokens(c)));
    }
    *sse += "data: [DONE]\n\n";
  }
}

void HttpServer::Impl::respond(Choices& c, httplib::Response& res) {
  while (!c.done()) take(c, c.channel->wait(WAIT_SLICE), nullptr);
  if (!c.failure.empty()) {
    send_error(res, c.failure_status, c.failure, "", "server_error");
    return;
  }
  for (ChoiceResult& r : c.results)
    split_reply(c.request, &r, [this] { return random_id("chatcmpl-tool-"); });
  res.set_content(completion_response(c.request, c.id, c.created, c.model, c.results,
                                      c.prompt_tokens, model.text, cached_tokens(c))
                      .dump(-1, ' ', false, json::error_handler_t::replace),
                  "application/json");
}

void HttpServer::Impl::stream(std::shared_ptr<Choices> c, httplib::Response& res) {
  ++active;
  auto ended = std::make_shared<std::atomic<bool>>(false);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, c](size_t, httplib::DataSink& sink) {
        if (c->done()) {
          sink.done();
          return true;
        }
        std::string sse;
        take(*c, c->channel->wait(WAIT_SLICE), &sse);
        // A failed write is a client that went away: false ends the response, and the releaser
        // aborts what is still running.
        if (!sse.empty() && !sink.write(sse.data(), sse.size())) return false;
        if (c->done()) sink.done();
        return true;
      },
      [this, c, ended](bool) {
        if (ended->exchange(true)) return;
        abort_all(*c);
        --active;
      });
}

void HttpServer::Impl::generate(const httplib::Request& req, httplib::Response& res, bool chat) {
  if (!engine.admitting()) {
    send_error(res, 503, "the server is shutting down", "", "service_unavailable");
    return;
  }
  ApiRequest r;
  try {
    r = parse_request(req.body, chat, model);
  } catch (const ApiError& e) {
    res.status = e.status;
    res.set_content(error_body(e), "application/json");
    return;
  }
  std::shared_ptr<Choices> c = submit(std::move(r), res);
  if (!c) return;
  if (c->request.stream) {
    stream(std::move(c), res);
    return;
  }
  ++active;
  try {
    respond(*c, res);
  } catch (...) {
    abort_all(*c);
    --active;
    throw;
  }
  --active;
}

void HttpServer::Impl::routes() {
  if (!options.api_key.empty()) {
    const std::string expected = "Bearer " + options.api_key;
    server.set_pre_routing_handler(
        [this, expected](const httplib::Request& q, httplib::Response& s) {
          const bool guarded =
              q.path.rfind("/v1/", 0) == 0 || q.path == "/tokenize" || q.path == "/detokenize";
          // A constant-time comparison: the time taken says nothing of how much of a key matched.
          const std::string got = q.get_header_value("Authorization");
          unsigned char diff = got.size() != expected.size();
          for (size_t i = 0; i < got.size() && i < expected.size(); ++i)
            diff |= got[i] ^ expected[i];
          if (!guarded || diff == 0) return httplib::Server::HandlerResponse::Unhandled;
          s.set_header("WWW-Authenticate", "Bearer");
          send_error(s, 401, "missing or wrong API key (Authorization: Bearer <key>)", "",
                     "authentication_error");
          return httplib::Server::HandlerResponse::Handled;
        });
  }
  server.Get("/version", [](const httplib::Request&, httplib::Response& s) {
    s.set_content(json{{"version", MEGAOPS_VERSION}}.dump(), "application/json");
  });
  server.Post("/v1/completions",
              [this](const httplib::Request& q, httplib::Response& s) { generate(q, s, false); });
  server.Post("/v1/chat/completions",
              [this](const httplib::Request& q, httplib::Response& s) { generate(q, s, true); });
  for (const bool detokenize : {false, true})
    server.Post(detokenize ? "/detokenize" : "/tokenize",
                [this, detokenize](const httplib::Request& q, httplib::Response& s) {
                  try {
                    const json out = detokenize ? detokenize_response(q.body, model)
                                                : tokenize_response(q.body, model);
                    s.set_content(out.dump(-1, ' ', false, json::error_handler_t::replace),
                                  "application/json");
                  } catch (const ApiError& e) {
                    s.status = e.status;
                    s.set_content(error_body(e), "application/json");
                  }
                });
  server.Get("/v1/models", [this](const httplib::Request&, httplib::Response& s) {
    s.set_content(models_response(model, unix_now()).dump(), "application/json");
  });
  server.Get("/health", [this](const httplib::Request&, httplib::Response& s) {
    if (!engine.admitting())
      send_error(s, 503, "the server is shutting down", "", "service_unavailable");
  });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& s) {
    std::map<int, uint64_t> counts;
    {
      std::lock_guard<std::mutex> lock(mutex);
      counts = responses;
    }
    s.set_content(prometheus_text(engine.stats(), counts, model.name), "text/plain; version=0.0.4");
  });
  // Statuses httplib sets itself (404 no route, 413 body too large, 400 unreadable request...)
  // get the same JSON error body as the handlers' own.
  server.set_error_handler(
      httplib::Server::HandlerWithResponse([this](const httplib::Request& q, httplib::Response& s) {
        if (!s.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string message = status_text(s.status);
        if (s.status == 404) message = "no route for " + q.method + " " + q.path;
        if (s.status == 413)
          message = "the body is larger than " + std::to_string(options.max_body_bytes) + " bytes";
        s.set_content(error_body(s.status, message), "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& s, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        send_error(s, 500, what, "", "server_error");
      });
  server.set_logger([this](const httplib::Request&, const httplib::Response& s) {
    std::lock_guard<std::mutex> lock(mutex);
    ++responses[s.status];
  });
}

HttpServer::HttpServer(AsyncEngine& engine, ServedModel model, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, std::move(model), std::move(options))) {
  const int threads = impl_->options.http_threads;
  impl_->server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  impl_->server.set_payload_max_length(impl_->options.max_body_bytes);
  // SO_REUSEADDR only: a restart may bind over connections in TIME_WAIT, but a second server on a
  // port in use must fail (httplib's default SO_REUSEPORT would let both listen and split the
  // connections between them).
  Impl* m = impl_.get();
  impl_->server.set_socket_options([m](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, reinterpret_cast<void*>(&yes), sizeof(yes));
    m->listen_fd = static_cast<int>(sock);
  });
  impl_->routes();
}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::start() {
  Impl& m = *impl_;
  const bool bound = m.options.port == 0 ? (m.port = m.server.bind_to_any_port(m.options.host)) > 0
                                         : m.server.bind_to_port(m.options.host, m.options.port);
  if (!bound)
    throw Error("serve: cannot listen on " + m.options.host + ":" + std::to_string(m.options.port) +
                " (in use, or not an address of this host)");
  if (m.options.port != 0) m.port = m.options.port;
  // Debian's cpp-httplib 0.11 listens with a backlog of 5 (compiled into its library): a burst
  // of clients connecting at once while the accept loop waits for a core overflowed it, and the
  // connections beyond it were reset or refused after a second without any status (seen with 32
  // and 48 clients at once on a two-core machine, scripts/serve_load.py). listen() again on the
  // bound socket sets the backlog; the kernel caps it at net.core.somaxconn.
  if (m.listen_fd >= 0 && ::listen(m.listen_fd, LISTEN_BACKLOG) != 0)
    throw Error("serve: cannot listen on " + m.options.host + ":" + std::to_string(m.port) +
                " with a backlog of " + std::to_string(LISTEN_BACKLOG));
  m.thread = std::thread([&m] { m.server.listen_after_bind(); });
}

int HttpServer::port() const {
  return impl_->port;
}

int HttpServer::active_responses() const {
  return impl_->active.load();
}

void HttpServer::stop() {
  if (!impl_->thread.joinable()) return;
  impl_->server.stop();
  impl_->thread.join();
}

std::string HttpServer::metrics_text() const {
  std::map<int, uint64_t> counts;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    counts = impl_->responses;
  }
  return prometheus_text(impl_->engine.stats(), counts, impl_->model.name);
}

}  // namespace megaops::serve
