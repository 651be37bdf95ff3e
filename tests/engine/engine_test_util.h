// What the engine tests share: the tiny-llama3 preset's random weights (in memory, fp32) and its
// tokenizer files (written once to a temporary directory), and engines over the CPU runner.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "engine/cpu_runner.h"
#include "io/tokenizer_builder.h"
#include "io/tokenizer_files.h"
#include "megaops/engine.h"
#include "models/model_config.h"
#include "reference/model.h"

namespace megaops::testing {

inline std::shared_ptr<const ref::Weights> tiny_weights() {
  static const std::shared_ptr<const ref::Weights> w = [] {
    auto weights = std::make_shared<ref::Weights>();
    weights->cfg = preset_config("tiny-llama3");
    const std::vector<WeightSpec> specs = expected_weights(weights->cfg);
    for (size_t i = 0; i < specs.size(); ++i) {
      size_t n = 1;
      for (int64_t d : specs[i].shape) n *= static_cast<size_t>(d);
      std::vector<float> v(n);
      random_weight_values(specs[i], static_cast<uint32_t>(i), 7, 0, n, v.data());
      weights->tensors.emplace(specs[i].name, std::move(v));
    }
    return weights;
  }();
  return w;
}

inline const CheckpointText& tiny_text() {
  static const CheckpointText text = [] {
    const ModelConfig cfg = preset_config("tiny-llama3");
    const TokenizerFiles files = build_tokenizer_files(TokenizerFamily::Llama3, cfg.vocab_size,
                                                       cfg.bos_token_id, cfg.eos_token_ids);
    const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) /
                                      ("megaops-engine-text-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "tokenizer.json") << files.tokenizer_json;
    std::ofstream(dir / "tokenizer_config.json") << files.tokenizer_config_json;
    std::ofstream(dir / "generation_config.json") << files.generation_config_json;
    CheckpointText t = CheckpointText::open(dir.string());
    std::filesystem::remove_all(dir);
    return t;
  }();
  return text;
}

inline std::unique_ptr<Engine> tiny_engine(CpuRunnerOptions ro = {}, EngineOptions eo = {},
                                           bool with_text = true) {
  if (ro.max_context == 4096) ro.max_context = 256;
  return std::make_unique<Engine>(std::make_unique<CpuModelRunner>(tiny_weights(), ro),
                                  with_text ? &tiny_text() : nullptr, eo);
}

// A prompt of `n` ids in [3, 500), different for each `salt`.
inline std::vector<int> prompt_ids(int n, int salt) {
  std::vector<int> p;
  for (int i = 0; i < n; ++i) p.push_back(3 + (i * 37 + salt * 101 + i * i) % 497);
  return p;
}

struct Finished {
  std::vector<int> tokens;
  std::string text;
  FinishReason reason = FinishReason::None;
  std::string stop_reason;
};

// Steps `e` until it has no work; collects every request's tokens, text and ending.
inline std::map<uint64_t, Finished> run_to_end(Engine& e, int max_steps = 100000) {
  std::map<uint64_t, Finished> out;
  for (int i = 0; i < max_steps && e.has_work(); ++i)
    for (const RequestOutput& o : e.step()) {
      Finished& f = out[o.id];
      f.tokens.insert(f.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      f.text += o.text;
      if (o.finished) {
        f.reason = o.finish_reason;
        f.stop_reason = o.stop_reason;
      }
    }
  EXPECT_FALSE(e.has_work()) << "the engine did not finish in " << max_steps << " steps";
  return out;
}

}  // namespace megaops::testing
