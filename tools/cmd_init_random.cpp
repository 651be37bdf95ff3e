// `megaops init-random`: writes a Hugging Face checkpoint directory (config.json + safetensors)
// with deterministic random weights of a real architecture, so the whole pipeline, file format
// included, runs where no weights can be downloaded.
#include <cstdio>

#include "commands.h"
#include "core/error.h"
#include "models/checkpoint.h"

namespace megaops::cli {

Runner add_init_random(CLI::App& app) {
  struct Opts {
    std::string preset, out, dtype = "bf16";
    uint64_t seed = 0;
    double shard_gb = 4.0;
  };
  auto o = std::make_shared<Opts>();
  app.add_option(
         "--preset", o->preset,
         "architecture: " +
             [] {
               std::string s;
               for (const auto& n : preset_names()) s += (s.empty() ? "" : ", ") + n;
               return s;
             }())
      ->required();
  app.add_option("--out", o->out, "output directory")->required();
  app.add_option("--seed", o->seed, "random seed (same seed, same weights)");
  app.add_option("--dtype", o->dtype, "dtype on disk: bf16, f16 or f32");
  app.add_option("--shard-gb", o->shard_gb, "largest shard in GB before splitting");
  return [o]() {
    const ModelConfig cfg = preset_config(o->preset);
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
    if (!(o->shard_gb > 0)) throw_input_error("--shard-gb", "", "expected a positive size");
    ModelConfig c = cfg;
    c.torch_dtype = dt;
    write_random_checkpoint(
        c, o->out, o->seed, dt, static_cast<size_t>(o->shard_gb * 1e9),
        [&](size_t done, size_t total) { print_progress("writing " + o->out, done, total); });
    std::printf("wrote %s (%s, seed %llu)\n", o->out.c_str(), o->preset.c_str(),
                static_cast<unsigned long long>(o->seed));
    return 0;
  };
}

}  // namespace megaops::cli
