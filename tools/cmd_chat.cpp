// `megaops chat`: an interactive conversation with a checkpoint, as llama.cpp's llama-cli and
// vLLM's chat give one: each line read from stdin is a user turn, the whole conversation is
// rendered by the checkpoint's own chat template and the reply streams as text, one request on
// the engine (include/megaops/engine.h) a turn. A line "/reset" starts over, "/exit" or end of
// input ends. A summary line per reply goes to stderr.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "io/tokenizer_files.h"
#include "megaops/engine.h"
#include "plan_flags.h"
#include "text_session.h"

namespace megaops::cli {

namespace {

struct ChatOpts {
  std::string model, system, template_kwargs;
  std::vector<std::string> stop;
  int max_new_tokens = 512, max_context = 4096;
  float temperature = -1, top_p = -1;
  int top_k = -1;
  uint64_t seed = 0;
  bool cpu = false, ignore_eos = false, quiet = false;
  std::string plan_file;  // --plan
};

}  // namespace

Runner add_chat(CLI::App& app) {
  auto o = std::make_shared<ChatOpts>();
  app.add_option("--model", o->model, "Hugging Face checkpoint directory")->required();
  app.add_option("--system", o->system, "system prompt");
  app.add_option("--max-new-tokens", o->max_new_tokens, "longest reply in tokens (default 512)");
  app.add_option("--max-context", o->max_context,
                 "longest conversation in tokens (default 4096, at most the model's)");
  app.add_option("--temperature", o->temperature,
                 "0 = greedy (default: generation_config.json's when it samples, else 0)");
  app.add_option("--top-k", o->top_k, "keep the k most likely tokens (0 = off)");
  app.add_option("--top-p", o->top_p, "nucleus sampling threshold (1 = off)");
  add_seed_option(app, o->seed, "sampling seed");
  app.add_option("--stop", o->stop, "stop string (repeatable); the reply ends before it");
  app.add_option("--chat-template-kwargs", o->template_kwargs,
                 "JSON object of extra template variables, e.g. '{\"enable_thinking\": false}'");
  app.add_flag("--ignore-eos", o->ignore_eos, "keep generating past end-of-sequence tokens");
  app.add_flag("--cpu", o->cpu, "run on the fp32 CPU oracle even if a GPU is present");
  app.add_flag("--quiet", o->quiet, "no prompt marker and no summary lines");
  add_plan_option(app, o->plan_file);
  return [o, &app]() {
    if (o->max_new_tokens < 1)
      throw_input_error("--max-new-tokens", "",
                        "expected >= 1, found " + std::to_string(o->max_new_tokens));
    nlohmann::ordered_json kwargs = nullptr;
    if (!o->template_kwargs.empty()) {
      try {
        kwargs = nlohmann::ordered_json::parse(o->template_kwargs);
      } catch (const nlohmann::json::exception&) {
        kwargs = nullptr;
      }
      if (!kwargs.is_object())
        throw_input_error("--chat-template-kwargs", "",
                          "expected a JSON object, found '" + o->template_kwargs + "'");
    }
    if (o->cpu && !o->plan_file.empty())
      throw_input_error("--plan", "",
                        "cannot be combined with --cpu (the CPU oracle runs no plan)");
    // The plan file is read and checked on every machine, before the model loads.
    const PlanChoice plan = choose_plan(app, o->plan_file, 1);
    const CheckpointText text = CheckpointText::open(o->model);
    if (!text.has_chat_template())
      throw_input_error(o->model + "/tokenizer_config.json", "chat_template",
                        "missing (chat needs the checkpoint's template; use generate --prompt)");
    const Checkpoint ckpt = Checkpoint::open(o->model);
    const int max_context = std::min(o->max_context, ckpt.config().max_position_embeddings);
    if (max_context < 2)
      throw_input_error("--max-context", "", "expected >= 2, found " + std::to_string(max_context));
    const SamplingParams sampling = resolve_sampling(text.generation(), o->temperature, o->top_k,
                                                     o->top_p, o->seed, CLI_SAMPLING_NAMES);
    CliRunner runner = make_runner(ckpt, o->cpu, sampling, max_context, plan.plan, plan.label);
    if (plan.kind == PlanKind::File && !runner.gpu)
      print_plan_line(plan, ", not run: the CPU oracle runs no plan");
    if (!o->quiet)
      std::fprintf(stderr, "chat: %s on the %s; /reset starts over, /exit or end of input ends\n",
                   o->model.c_str(), runner.label.c_str());
    EngineOptions eo;
    if (!o->ignore_eos) eo.eos_token_ids = text.eos_token_ids();
    Engine engine(std::move(runner.runner), &text, eo);
    RequestParams params;
    params.sampling = sampling;
    params.stop = o->stop;
    params.ignore_eos = o->ignore_eos;

    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    const auto reset = [&] {
      messages = nlohmann::ordered_json::array();
      if (!o->system.empty()) messages.push_back({{"role", "system"}, {"content", o->system}});
    };
    reset();
    const bool tty = isatty(fileno(stdin));
    std::string line;
    while (!g_interrupted) {
      if (tty && !o->quiet) std::fprintf(stderr, "> ");
      if (!std::getline(std::cin, line)) break;
      if (line == "/exit") break;
      if (line == "/reset") {
        reset();
        continue;
      }
      if (line.empty()) continue;
      messages.push_back({{"role", "user"}, {"content", line}});
      const std::string prompt_text = text.render_chat(messages, true, kwargs);
      const std::vector<int> prompt = text.tokenizer().encode(prompt_text, false);
      params.max_tokens =
          std::min(o->max_new_tokens, max_context - static_cast<int>(prompt.size()));
      if (params.max_tokens < 1)
        throw_input_error("--max-context", "",
                          "the conversation (" + std::to_string(prompt.size()) +
                              " tokens) fills the context of " + std::to_string(max_context) +
                              "; /reset or raise --max-context");
      const StreamResult r =
          run_request("chat", engine, prompt, params, [](const RequestOutput& out) {
            std::fwrite(out.text.data(), 1, out.text.size(), stdout);
            std::fflush(stdout);
          });
      std::printf("\n");
      std::fflush(stdout);
      messages.push_back({{"role", "assistant"}, {"content", r.text}});
      if (!o->quiet) std::fprintf(stderr, "chat: %s\n", stream_summary(r).c_str());
    }
    return g_interrupted ? 130 : 0;
  };
}

}  // namespace megaops::cli
