// `megaops stream`: runs a streaming pipeline (docs/pipeline.md) for --batch streams and
// publishes each chunk of audio as soon as it is ready: appended to a WAV file (stream
// --write-stream, mono float at the codec's sample rate; the file is a complete WAV after every
// chunk) and timed in a JSON file of per-chunk timestamps. On the GPU: the producer and the local
// transformer on the executors with the composition's decode plans, the codec on cuDNN; on the
// CPU oracle with --cpu or without a GPU. --repeats runs the stream again (the audio is the same)
// for the first publication's mean and p95; several --composition files are timed in one process
// (the weights loaded once), in --rounds that alternate their order; --evidence-out writes the
// planner's evidence (tools/stream_evidence.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "graph/pipeline_composition.h"
#include "io/text_file.h"
#include "io/wav.h"
#include "models/pipeline_json.h"
#include "pipeline/stream.h"
#include "reference/pipeline_oracle.h"

#ifdef MEGAOPS_HAVE_CUDA
#include <cuda_runtime.h>

#include "models/step_graph.h"
#include "runtime/pipeline_stages.h"
#include "stream_evidence.h"
#endif

namespace megaops::cli {

namespace {

struct Opts {
  std::string pipeline, out, timestamps, evidence_out;
  std::vector<std::string> compositions;
  int batch = 1, repeats = 1, warmup = -1, rounds = 1, write_stream = 0;
  uint64_t seed = 0;
  bool cpu = false;
};

// A composition to run: its file (empty: the default) and what it says.
struct Comp {
  std::string file;
  PipelineComposition c;
  StagePlans plans;
  std::vector<StreamTimes> runs;
};

double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * (v.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos)), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - lo) * (v[hi] - v[lo]);
}

nlohmann::json summary(const std::vector<double>& v) {
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  return {{"mean", mean},
          {"p95", percentile(v, 0.95)},
          {"min", *std::min_element(v.begin(), v.end())},
          {"max", *std::max_element(v.begin(), v.end())}};
}

double t_pub_ms(const StreamTimes& t) {
  return t.chunks.at(0).published_s * 1e3;
}

double rtfx(const PipelineConfig& p, const StreamTimes& t) {
  return stream_rtfx(p, t.chunks.back().published_s);
}

nlohmann::json comp_json(const PipelineConfig& p, const Comp& c) {
  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> tpub, rt, steady;
  for (const StreamTimes& t : c.runs) {
    rows.push_back({{"t_pub_ms", t_pub_ms(t)},
                    {"first_chunk_decoded_ms", t.chunks[0].decoded_s * 1e3},
                    {"step_h_ms", t.step_done_s.at(t.step_h - 1) * 1e3},
                    {"last_chunk_ms", t.chunks.back().published_s * 1e3},
                    {"total_ms", t.total_s * 1e3},
                    {"rtfx", rtfx(p, t)},
                    {"steady_rtfx", steady_rtfx(p, t)}});
    tpub.push_back(t_pub_ms(t));
    rt.push_back(rtfx(p, t));
    steady.push_back(steady_rtfx(p, t));
  }
  return {{"file", c.file},
          {"label", c.c.label},
          {"t_pub_ms", summary(tpub)},
          {"rtfx", summary(rt)},
          {"steady_rtfx", summary(steady)},
          {"runs", rows}};
}

void write_timestamps(const Opts& o, const PipelineConfig& p, const std::string& backend,
                      const std::vector<Comp>& comps, const std::string& device) {
  const int hop = codec_hop(p.codec);
  const StreamTimes& last = comps.front().runs.back();
  nlohmann::json chunks = nlohmann::json::array();
  for (const StreamChunkEvent& e : last.chunks)
    chunks.push_back({{"index", e.index},
                      {"first_frame", e.chunk.first_frame},
                      {"end_frame", e.chunk.end_frame},
                      {"samples", (e.chunk.end_frame - e.chunk.first_frame) * hop},
                      {"ready_step", e.chunk.ready_step},
                      {"decoded_ms", e.decoded_s * 1e3},
                      {"published_ms", e.published_s * 1e3}});
  nlohmann::json steps = nlohmann::json::array();
  for (double s : last.step_done_s) steps.push_back(s * 1e3);
  nlohmann::json all = nlohmann::json::array();
  for (const Comp& c : comps) all.push_back(comp_json(p, c));
  const nlohmann::json first = all.front();
  const nlohmann::json j = {{"schema", "megaops-stream-times/1"},
                            {"pipeline", p.name},
                            {"batch", o.batch},
                            {"backend", backend},
                            {"gpu", device},
                            {"composition", comps.front().c.label},
                            {"sample_rate", p.codec.sample_rate},
                            {"hop", hop},
                            {"stream_frames", p.schedule.stream_frames},
                            {"audio_s", p.schedule.stream_frames / p.codec.frame_rate},
                            {"step_h", last.step_h},
                            {"repeats", o.repeats},
                            {"rounds", o.rounds},
                            {"t_pub_ms", first["t_pub_ms"]},
                            {"rtfx", first["rtfx"]},
                            {"steady_rtfx", first["steady_rtfx"]},
                            {"runs", first["runs"]},
                            {"compositions", all},
                            {"chunks", chunks},
                            {"steps_done_ms", steps}};
  std::ofstream f(o.timestamps, std::ios::trunc);
  if (!f || !(f << j.dump(1) << "\n") || !f.flush()) throw Error("cannot write " + o.timestamps);
}

void check_options(const Opts& o) {
  if (o.batch < 1 || o.batch > 64)
    throw_input_error("--batch", "", "expected 1..64, found " + std::to_string(o.batch));
  if (o.repeats < 1)
    throw_input_error("--repeats", "", "expected >= 1, found " + std::to_string(o.repeats));
  if (o.rounds < 1)
    throw_input_error("--rounds", "", "expected >= 1, found " + std::to_string(o.rounds));
  if (o.warmup < -1) throw_input_error("--warmup", "", "expected >= 0");
  if (o.write_stream < 0 || o.write_stream >= o.batch)
    throw_input_error("--write-stream", "",
                      "expected 0.." + std::to_string(o.batch - 1) +
                          " (a stream of the batch), found " + std::to_string(o.write_stream));
  if (o.out.empty() && o.evidence_out.empty())
    throw_input_error("--out", "", "missing (the WAV file to write)");
}

std::vector<Comp> read_compositions(const Opts& o) {
  std::vector<Comp> out;
  if (o.compositions.empty()) out.push_back({"", default_composition(), {}, {}});
  for (const std::string& f : o.compositions)
    out.push_back({f, parse_composition(read_text_file(f), f), {}, {}});
  for (Comp& c : out) c.plans = composition_stage_plans(c.c, c.file.empty() ? "default" : c.file);
  return out;
}

#ifdef MEGAOPS_HAVE_CUDA
std::string device_name() {
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess ? prop.name : "?";
}
#endif

// Runs every composition `rounds` times (odd rounds in reverse order), each `warmup` untimed and
// `repeats` timed streams; the first timed stream of the first composition writes the WAV.
void run_all(const Opts& o, const PipelineConfig& p, PipelineStages& stages,
             std::vector<Comp>& comps, const std::function<void(const Comp&)>& use, int warmup) {
  const auto prompts = pipeline_prompts(p, o.batch, o.seed + 3);
  bool wav_done = false;
  for (int r = 0; r < o.rounds && !g_interrupted; ++r)
    for (size_t k = 0; k < comps.size() && !g_interrupted; ++k) {
      Comp& c = comps[r % 2 == 0 ? k : comps.size() - 1 - k];
      use(c);
      for (int w = 0; w < warmup && !g_interrupted; ++w) stream_pipeline(p, stages, prompts, {});
      for (int i = 0; i < o.repeats && !g_interrupted; ++i) {
        std::unique_ptr<WavWriter> wav;
        if (!wav_done && &c == &comps.front())
          wav = std::make_unique<WavWriter>(o.out, p.codec.sample_rate);
        c.runs.push_back(stream_pipeline(
            p, stages, prompts, [&](const StreamChunkEvent& e, const StreamSamples& s) {
              if (!wav) return;
              wav->append(s.at(o.write_stream).data(), s[o.write_stream].size());
              std::fprintf(stderr, "stream: chunk %d (frames %d..%d) published at %.3f ms\n",
                           e.index, e.chunk.first_frame, e.chunk.end_frame - 1,
                           e.published_s * 1e3);
            }));
        if (wav) {
          wav->close();
          wav_done = true;
        }
      }
    }
}

}  // namespace

Runner add_stream(CLI::App& app) {
  auto o = std::make_shared<Opts>();
  app.add_option("--pipeline", o->pipeline, "pipeline file (docs/pipeline-format.md)")->required();
  app.add_option("--out", o->out, "WAV file the chunks are appended to as they are published");
  app.add_option("--timestamps", o->timestamps, "write per-chunk timestamps (JSON) here");
  app.add_option("--batch", o->batch, "streams run together (1..64)");
  app.add_option("--composition", o->compositions,
                 "composition file (`megaops plan-pipeline --out`; repeatable: each is timed); "
                 "default: all conventional");
  app.add_option("--repeats", o->repeats, "timed streams a composition and round");
  app.add_option("--rounds", o->rounds, "passes over the compositions (odd ones in reverse)");
  app.add_option("--warmup", o->warmup,
                 "untimed streams before each composition's timed ones (default: 1 on the GPU, 0 "
                 "on the CPU)");
  app.add_option("--write-stream", o->write_stream, "which stream of the batch the WAV holds");
  app.add_option("--evidence-out", o->evidence_out,
                 "GPU: write the planner's evidence (producer.json, local.json, codec.json) here");
  add_seed_option(app, o->seed, "seed of the random weights and prompts");
  app.add_flag("--cpu", o->cpu, "run the CPU oracle even where a GPU is present");
  return [o]() -> int {
    check_options(*o);
    const PipelineConfig p = read_pipeline(o->pipeline);
    std::vector<Comp> comps = read_compositions(*o);
    const bool gpu = !o->cpu && gpu_available();
    if (!o->evidence_out.empty() && !gpu) throw DeviceError("stream: --evidence-out needs a GPU");
    if (!gpu)
      std::fprintf(stderr, "stream: %s; running on the CPU oracle (fp32, slow)\n",
                   o->cpu ? "--cpu given" : "no CUDA device");
    std::unique_ptr<PipelineStages> stages;
    std::function<void(const Comp&)> use = [](const Comp&) {};
    std::string device = "cpu";
#ifdef MEGAOPS_HAVE_CUDA
    if (gpu) {
      device = device_name();
      GpuPipelineOptions go;
      go.step_graph = build_step_graph;
      go.producer_plan = comps.front().plans.producer;
      go.local_plan = comps.front().plans.local;
      go.max_batch = o->batch;
      go.seed = o->seed;
      std::unique_ptr<GpuPipeline> g = make_gpu_pipeline_stages(p, go);
      if (!o->evidence_out.empty())
        write_stream_evidence(p, o->batch, o->seed, *g, o->evidence_out);
      GpuPipeline* raw = g.get();
      use = [raw](const Comp& c) { raw->set_plans(c.plans.producer, c.plans.local); };
      stages = std::move(g);
    }
#endif
    if (!gpu) stages = std::make_unique<ref::PipelineOracle>(p, o->seed, o->batch);
    if (o->out.empty()) return 0;  // evidence only
    run_all(*o, p, *stages, comps, use, o->warmup >= 0 ? o->warmup : (gpu ? 1 : 0));
    for (const Comp& c : comps)
      if (c.runs.empty()) return interrupt_status();
    if (!o->timestamps.empty()) write_timestamps(*o, p, stages->backend(), comps, device);
    for (const Comp& c : comps) {
      const StreamTimes& t = c.runs.back();
      std::printf(
          "stream: %s, batch %d on %s (%s): T_pub %.3f ms (first chunk decoded %.3f ms, "
          "producer step %d %.3f ms), %zu chunks, RTFx %.2f (%.2f s of audio in %.3f s; steady "
          "state %.2f)\n",
          p.name.c_str(), o->batch, device.c_str(), c.c.label.c_str(), t_pub_ms(t),
          t.chunks[0].decoded_s * 1e3, t.step_h, t.step_done_s.at(t.step_h - 1) * 1e3,
          t.chunks.size(), rtfx(p, t), p.schedule.stream_frames / p.codec.frame_rate,
          t.chunks.back().published_s, steady_rtfx(p, t));
    }
    return g_interrupted ? interrupt_status() : 0;
  };
}

}  // namespace megaops::cli
