// `megaops serve`: an OpenAI-compatible HTTP server (src/serve/http_server.h) over the engine
// (include/megaops/engine.h), on the GPU runner or, with --cpu or without a GPU, on the CPU
// oracle. SIGTERM or SIGINT closes admission (new requests get 503), lets the running requests
// finish within --drain-seconds, aborts what is left, and exits 0.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "commands.h"
#include "core/error.h"
#include "engine/async_engine.h"
#include "engine/cpu_runner.h"
#include "engine/gpu_runner.h"
#include "engine_runner.h"
#include "io/text_file.h"
#include "io/tokenizer_files.h"
#include "models/checkpoint.h"
#include "plan_flags.h"
#include "serve/http_server.h"
#include "serve/metrics.h"

namespace megaops::cli {

namespace {

struct ServeOpts {
  EngineRunnerOptions runner;  // its max_batch is --max-batch
  std::string host = "127.0.0.1", served_name, tool_call_parser = "auto", api_key,
              reasoning_parser = "auto", chat_template;
  int port = 8000, max_context = 4096, max_prefill_chunk = 0, http_threads = 128;
  double drain_seconds = 30, log_stats_seconds = 10;
  bool no_prefix_caching = false;
  size_t max_body_bytes = size_t{4} << 20;
};

void check_options(const ServeOpts& o) {
  check_engine_runner_options(o.runner);
  require_at_least("--port", o.port, 0);
  if (o.port > 65535) throw_input_error("--port", "", "expected 0..65535");
  require_at_least("--max-batch", o.runner.max_batch, 1);
  if (o.runner.max_batch > 256) throw_input_error("--max-batch", "", "expected 1..256");
  require_at_least("--max-context", o.max_context, 2);
  require_at_least("--max-prefill-chunk", o.max_prefill_chunk, 0);
  require_at_least("--http-threads", o.http_threads, 2);
  if (!(o.drain_seconds >= 0)) throw_input_error("--drain-seconds", "", "expected >= 0");
  if (!(o.log_stats_seconds >= 0))
    throw_input_error("--log-stats-interval", "", "expected >= 0 (0: no stats lines)");
  if (o.max_body_bytes < 1024) throw_input_error("--max-body-bytes", "", "expected >= 1024");
  if (o.tool_call_parser != "auto")
    serve::parse_tool_call_format(o.tool_call_parser, "--tool-call-parser");
  if (o.reasoning_parser != "auto")
    serve::parse_reasoning_format(o.reasoning_parser, "--reasoning-parser");
}

// Waits for SIGTERM / SIGINT, then drains: admission closes, running requests get the deadline,
// what is left is aborted, and the responses in flight are given a moment to be written.
void serve_until_signal(AsyncEngine& engine, serve::HttpServer& server, double drain_seconds,
                        double log_seconds) {
  // Every log_seconds while there is work (or was since the last line), one line of the
  // engine's state and throughput.
  EngineStats before = engine.stats();
  auto last = std::chrono::steady_clock::now();
  while (!g_interrupted) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (log_seconds <= 0) continue;
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - last).count();
    if (dt < log_seconds) continue;
    const EngineStats s = engine.stats();
    if (s.running + s.waiting > 0 || s.steps_total != before.steps_total)
      std::fprintf(stderr, "%s\n", serve::stats_log_line(s, before, dt).c_str());
    before = s;
    last = now;
  }
  engine.close_admission();
  const EngineStats s = engine.stats();
  std::fprintf(stderr, "serve: draining %d running and %d waiting requests (at most %.0f s)\n",
               s.running, s.waiting, drain_seconds);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(drain_seconds));
  if (!engine.drain(deadline)) {
    const EngineStats left = engine.stats();
    std::fprintf(stderr, "serve: drain deadline passed; aborting %d requests\n",
                 left.running + left.waiting);
    engine.abort_all();
    engine.drain(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  }
  const auto grace = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (server.active_responses() > 0 && std::chrono::steady_clock::now() < grace)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  server.stop();
  // What a leak would leave behind (scripts/serve_load.py checks it after a SIGTERM under load).
  const EngineStats end = engine.stats();
  std::fprintf(stderr, "serve: stopped; %d KV blocks in use, %d requests running, %d waiting\n",
               end.kv_blocks_used, end.running, end.waiting);
}

}  // namespace

Runner add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOpts>();
  add_engine_runner_options(app, o->runner);
  app.add_option("--host", o->host, "address to listen on (default 127.0.0.1)");
  app.add_option("--port", o->port, "port to listen on (default 8000; 0: any free port)");
  // vLLM's names too (--max-num-seqs, --max-model-len), so its users' command lines carry over.
  app.add_option("--max-batch,--max-num-seqs", o->runner.max_batch,
                 "most requests decoded together (default 8; on the GPU 1..64, the largest "
                 "captured decode bucket)");
  app.add_option("--max-context,--max-model-len", o->max_context,
                 "positions per request: prompt + max_tokens (default 4096, at most the model's)");
  app.add_option("--max-prefill-chunk", o->max_prefill_chunk,
                 "most prompt tokens of one request in a step (default: the budget)");
  app.add_option("--served-model-name", o->served_name,
                 "the name clients send as \"model\" (default: the directory's name)");
  app.add_option("--drain-seconds", o->drain_seconds,
                 "on SIGTERM, how long running requests get to finish (default 30)");
  app.add_option("--max-body-bytes", o->max_body_bytes,
                 "largest request body accepted (default 4 MiB; larger: 413)");
  app.add_option("--http-threads", o->http_threads,
                 "connections served at once (default 128; a stream holds one to its end)");
  app.add_option("--log-stats-interval", o->log_stats_seconds,
                 "seconds between the stats lines logged while requests run (default 10; 0: "
                 "none)");
  app.add_option("--api-key", o->api_key,
                 "require \"Authorization: Bearer KEY\" on /v1/ routes, /tokenize and /detokenize "
                 "(default: $MEGAOPS_API_KEY; none: open)")
      ->envname("MEGAOPS_API_KEY");
  app.add_flag("--no-enable-prefix-caching", o->no_prefix_caching,
               "compute every prompt in full (default: requests that start as an earlier one "
               "did reuse its K/V blocks, vLLM's automatic prefix caching)");
  app.add_option("--chat-template", o->chat_template,
                 "a Jinja chat template (a file, or the template itself) in place of the "
                 "checkpoint's (vLLM's flag)");
  app.add_option("--reasoning-parser", o->reasoning_parser,
                 "where chat replies' <think> blocks go: qwen3 / deepseek_r1 (reasoning_content), "
                 "none (the content), or auto (default: qwen3 when the chat template writes "
                 "<think>)");
  app.add_option("--tool-call-parser", o->tool_call_parser,
                 "how chat replies' tool calls are read: hermes, llama3_json, none, or auto "
                 "(default: the format the chat template teaches)");
  return [o]() {
    check_options(*o);
    // A client gone mid-stream makes a write fail; without this the write would kill the server.
    std::signal(SIGPIPE, SIG_IGN);
    const Checkpoint ckpt = Checkpoint::open(o->runner.model);
    std::unique_ptr<CheckpointText> text;
    if (std::filesystem::exists(std::filesystem::path(o->runner.model) / "tokenizer.json"))
      text = std::make_unique<CheckpointText>(CheckpointText::open(o->runner.model));
    else
      std::fprintf(stderr, "serve: %s has no tokenizer.json: token-id prompts only, no chat\n",
                   o->runner.model.c_str());
    if (!o->chat_template.empty()) {
      if (!text) throw_input_error("--chat-template", "", "needs the checkpoint's tokenizer.json");
      // A path to a file, else the template itself (as vLLM takes it); text with no Jinja
      // delimiter that names no file is a mistyped path, not a template.
      std::error_code ec;
      const bool file = std::filesystem::is_regular_file(o->chat_template, ec);
      if (!file && o->chat_template.find("{{") == std::string::npos &&
          o->chat_template.find("{%") == std::string::npos)
        throw_input_error(
            "--chat-template", "",
            "'" + o->chat_template + "' is no file, nor a template (it holds no {{ or {%)");
      text->set_chat_template(file ? read_text_file(o->chat_template) : o->chat_template,
                              file ? o->chat_template : std::string("--chat-template"));
    }
    const int max_context = std::min(o->max_context, ckpt.config().max_position_embeddings);
    std::string label;
    std::unique_ptr<ModelRunner> runner = make_engine_runner(o->runner, ckpt, max_context, &label);
    const KvCacheGeometry kv = runner->kv_geometry();
    EngineOptions eo;
    eo.max_running = o->runner.max_batch;
    eo.max_step_tokens = o->runner.max_step_tokens;
    eo.max_prefill_chunk = o->max_prefill_chunk;
    eo.prefix_caching = !o->no_prefix_caching;
    if (text) eo.eos_token_ids = text->eos_token_ids();
    for (int e : ckpt.config().eos_token_ids)
      if (std::find(eo.eos_token_ids.begin(), eo.eos_token_ids.end(), e) == eo.eos_token_ids.end())
        eo.eos_token_ids.push_back(e);
    const int decode_rows = runner->max_decode_rows();
    AsyncEngine engine(std::make_unique<Engine>(std::move(runner), text.get(), eo));

    serve::ServedModel model;
    const std::string dir_name =
        std::filesystem::path(o->runner.model).lexically_normal().filename().string();
    model.name = !o->served_name.empty() ? o->served_name
                 : dir_name.empty()      ? o->runner.model
                                         : dir_name;
    model.aliases = {o->runner.model};
    model.text = text.get();
    model.max_context = max_context;
    model.kv_positions = kv.num_blocks * kv.block_size;
    model.vocab_size = ckpt.config().vocab_size;
    // The readers' formats: as named, or ("auto") what the chat template teaches (no template:
    // none).
    const std::string chat_template =
        text && text->has_chat_template() ? text->config().chat_template : "";
    model.tool_call_format =
        o->tool_call_parser == "auto"
            ? serve::detect_tool_call_format(chat_template)
            : serve::parse_tool_call_format(o->tool_call_parser, "--tool-call-parser");
    model.reasoning_format =
        o->reasoning_parser == "auto"
            ? serve::detect_reasoning_format(chat_template)
            : serve::parse_reasoning_format(o->reasoning_parser, "--reasoning-parser");
    serve::ServerOptions so;
    so.host = o->host;
    so.port = o->port;
    so.max_body_bytes = o->max_body_bytes;
    so.http_threads = o->http_threads;
    so.api_key = o->api_key;
    serve::HttpServer server(engine, model, so);
    server.start();
    std::fprintf(stderr,
                 "serve: '%s' on the %s: %d requests a step, context %d, %d KV blocks of %d\n",
                 model.name.c_str(), label.c_str(), std::min(decode_rows, o->runner.max_batch),
                 max_context, kv.num_blocks, kv.block_size);
    std::fprintf(stderr, "serve: tool calls read as %s, reasoning as %s; prefix caching %s\n",
                 serve::tool_call_format_name(model.tool_call_format),
                 serve::reasoning_format_name(model.reasoning_format),
                 engine.stats().prefix_caching ? "on" : "off");
    std::fprintf(stderr, "serve: listening on http://%s:%d\n", o->host.c_str(), server.port());
    serve_until_signal(engine, server, o->drain_seconds, o->log_stats_seconds);
    return 0;
  };
}

}  // namespace megaops::cli
