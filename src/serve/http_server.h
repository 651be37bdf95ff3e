// `megaops serve`'s HTTP front end: an OpenAI-compatible server (/v1/completions and
// /v1/chat/completions, streamed as server-sent events or not, /v1/models, /health, /metrics in
// Prometheus' text format) on cpp-httplib, in front of one AsyncEngine. Handler threads parse
// and check a request (4xx with an OpenAI-style JSON error naming the field), submit its choices
// and wait on their channel; a client that disconnects mid-stream aborts its requests, which frees
// their KV blocks. Admission closes for a drain (503) while running requests finish.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "engine/async_engine.h"
#include "serve/openai_api.h"

namespace megaops::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (port() says which)
  size_t max_body_bytes = size_t{4} << 20;
  // Connections served at once: a streamed request holds its connection's thread to its end.
  int http_threads = 128;
  // Non-empty: every /v1/ route, /tokenize and /detokenize need "Authorization: Bearer <key>"
  // (vLLM's --api-key; 401 otherwise). /health, /metrics and /version stay open.
  std::string api_key;
};

class HttpServer {
 public:
  HttpServer(AsyncEngine& engine, ServedModel model, ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and serves on a thread of its own. Throws Error naming host:port when it cannot bind.
  void start();
  int port() const;
  // Responses being produced now (a streamed one until its last chunk is written or it failed).
  int active_responses() const;
  // Stops accepting and closes the connections; returns once the serving thread has ended.
  void stop();
  // The /metrics page.
  std::string metrics_text() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace megaops::serve
