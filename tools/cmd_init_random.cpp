// `megaops init-random`: writes a Hugging Face checkpoint directory (config.json + safetensors,
// and tokenizer.json, tokenizer_config.json and generation_config.json of the family's format)
// with deterministic random weights of a real architecture (a preset, or any config.json the
// loader accepts), so the whole pipeline, file format and text in and out included, runs where no
// weights can be downloaded. Everything is written into a staging directory beside --out and
// renamed to --out at the end, so --out is either complete or absent: an interrupted run (SIGINT,
// SIGTERM, a full disk) removes what it staged and leaves nothing half-written.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "commands.h"
#include "core/error.h"
#include "io/tokenizer_builder.h"
#include "models/checkpoint.h"
#include "models/model_config.h"

namespace megaops::cli {

namespace {

namespace fs = std::filesystem;

bool is_empty_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec) && fs::is_empty(p, ec);
}

// Moves the finished `staged` directory to `out`; with `replace`, an existing `out` is moved
// aside first and removed once the new one is in place.
void publish(const fs::path& staged, const fs::path& out, bool replace) {
  std::error_code ec;
  fs::path old;
  if (fs::exists(out, ec) && !is_empty_dir(out)) {
    if (!replace)
      throw_input_error(out.string(), "",
                        "expected a new or empty directory, found an existing one (use --force "
                        "to replace it)");
    old = out.parent_path() / ("." + out.filename().string() + ".old-" + std::to_string(getpid()));
    fs::rename(out, old, ec);
    if (ec) throw Error(out.string() + ": cannot move aside to replace it: " + ec.message());
  } else if (fs::exists(out, ec)) {
    fs::remove(out, ec);  // an empty directory (rename would replace it, but not on every FS)
  }
  fs::rename(staged, out, ec);
  if (ec) {
    if (!old.empty()) fs::rename(old, out);
    throw Error(out.string() + ": cannot rename from " + staged.string() + ": " + ec.message());
  }
  if (!old.empty()) fs::remove_all(old, ec);
}

// tokenizer.json, tokenizer_config.json and generation_config.json of the family's format, its
// special tokens at the config's bos/eos ids (tokenizer_builder.h).
void write_tokenizer_files(const ModelConfig& cfg, const fs::path& dir) {
  const TokenizerFiles files = build_tokenizer_files(
      cfg.arch == Arch::Qwen3 ? TokenizerFamily::Qwen3 : TokenizerFamily::Llama3, cfg.vocab_size,
      cfg.bos_token_id, cfg.eos_token_ids);
  for (const auto& [name, text] :
       {std::pair{"tokenizer.json", &files.tokenizer_json},
        std::pair{"tokenizer_config.json", &files.tokenizer_config_json},
        std::pair{"generation_config.json", &files.generation_config_json}}) {
    const fs::path path = dir / name;
    std::ofstream f(path, std::ios::binary);
    f << *text;
    f.close();
    if (!f) throw Error(path.string() + ": write failed");
  }
}

}  // namespace

Runner add_init_random(CLI::App& app) {
  struct Opts {
    std::string preset, config, out, dtype = "bf16";
    uint64_t seed = 0;
    double shard_gb = 4.0;
    bool force = false;
  };
  auto o = std::make_shared<Opts>();
  app.add_option(
      "--preset", o->preset, "architecture: " + [] {
        std::string s;
        for (const auto& n : preset_names()) s += (s.empty() ? "" : ", ") + n;
        return s;
      }());
  app.add_option("--config", o->config,
                 "or the architecture of a Hugging Face config.json (a Llama 3 or Qwen 3 of any "
                 "size the loader accepts)");
  app.add_option("--out", o->out, "output directory (new or empty, or any with --force)")
      ->required();
  add_seed_option(app, o->seed, "random seed (same seed, same weights)");
  app.add_option("--dtype", o->dtype, "dtype on disk: bf16, f16 or f32");
  app.add_option("--shard-gb", o->shard_gb, "largest shard in GB before splitting");
  app.add_flag("--force", o->force, "replace --out if it exists (once the new one is written)");
  return [o]() {
    if (o->preset.empty() == o->config.empty())
      throw_input_error("--preset/--config", "",
                        "give exactly one of --preset NAME or --config config.json");
    const ModelConfig cfg =
        o->config.empty() ? preset_config(o->preset) : read_model_config(o->config);
    DType dt;
    if (o->dtype == "bf16") {
      dt = DType::BF16;
    } else if (o->dtype == "f16") {
      dt = DType::F16;
    } else if (o->dtype == "f32") {
      dt = DType::F32;
    } else {
      throw_input_error("--dtype", "", "expected bf16, f16 or f32, found '" + o->dtype + "'");
    }
    if (!(o->shard_gb > 0) || o->shard_gb > 1e9)
      throw_input_error("--shard-gb", "", "expected a size in (0, 1e9] GB");
    fs::path out = fs::absolute(o->out).lexically_normal();
    if (out.filename().empty()) out = out.parent_path();  // "dir/"
    if (!o->force && fs::exists(out) && !is_empty_dir(out))
      throw_input_error(o->out, "",
                        "expected a new or empty directory, found an existing one (use --force "
                        "to replace it)");
    std::error_code ec;
    fs::create_directories(out.parent_path(), ec);
    if (ec) throw Error(out.parent_path().string() + ": cannot create directory: " + ec.message());
    // Beside --out, so the final rename stays on one filesystem.
    const fs::path staged = out.parent_path() / ("." + out.filename().string() + ".partial-" +
                                                 std::to_string(getpid()));
    fs::remove_all(staged, ec);
    ModelConfig c = cfg;
    c.torch_dtype = dt;
    try {
      write_random_checkpoint(c, staged.string(), o->seed, dt,
                              static_cast<size_t>(o->shard_gb * 1e9),
                              [&](size_t done, size_t total) {
                                if (g_interrupted) throw Interrupted(o->out + ": nothing written");
                                print_progress("writing " + o->out, done, total);
                              });
      write_tokenizer_files(c, staged);
      if (g_interrupted) throw Interrupted(o->out + ": nothing written");
      publish(staged, out, o->force);
    } catch (...) {
      fs::remove_all(staged, ec);
      throw;
    }
    std::printf("wrote %s (%s, seed %llu)\n", o->out.c_str(),
                (o->preset.empty() ? o->config : o->preset).c_str(),
                static_cast<unsigned long long>(o->seed));
    return 0;
  };
}

}  // namespace megaops::cli
