// `megaops stream`: runs a streaming pipeline (docs/pipeline.md) for --batch streams and
// publishes each chunk of audio as soon as it is ready: appended to a WAV file (stream
// --write-stream, mono float at the codec's sample rate; the file is a complete WAV after every
// chunk) and timed in a JSON file of per-chunk timestamps. On the GPU: the producer and the local
// transformer on the executors with the composition's decode plans, the codec on cuDNN; on the
// CPU oracle with --cpu or without a GPU. --repeats runs the stream again (the audio is the same)
// for the first publication's mean and p95; --codec-bench-out writes the codec ops' GPU times as
// the planner's evidence.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "graph/pipeline_composition.h"
#include "io/text_file.h"
#include "io/wav.h"
#include "models/codec_graph.h"
#include "models/pipeline_json.h"
#include "pipeline/stream.h"
#include "reference/pipeline_oracle.h"

#ifdef MEGAOPS_HAVE_CUDA
#include <cuda_runtime.h>

#include "models/step_graph.h"
#include "runtime/pipeline_stages.h"
#endif

namespace megaops::cli {

namespace {

struct Opts {
  std::string pipeline, out, timestamps, composition, codec_bench_out;
  int batch = 1, repeats = 1, warmup = -1, write_stream = 0;
  uint64_t seed = 0;
  bool cpu = false;
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

nlohmann::json run_row(const PipelineConfig& p, const StreamTimes& t) {
  return {{"t_pub_ms", t_pub_ms(t)},
          {"first_chunk_decoded_ms", t.chunks[0].decoded_s * 1e3},
          {"step_h_ms", t.step_done_s.at(t.step_h - 1) * 1e3},
          {"last_chunk_ms", t.chunks.back().published_s * 1e3},
          {"total_ms", t.total_s * 1e3},
          {"rtfx", stream_rtfx(p, t.chunks.back().published_s)}};
}

void write_timestamps(const Opts& o, const PipelineConfig& p, const std::string& backend,
                      const std::string& label, const std::vector<StreamTimes>& runs,
                      const std::string& gpu) {
  const int hop = codec_hop(p.codec);
  const StreamTimes& last = runs.back();
  nlohmann::json chunks = nlohmann::json::array();
  for (const StreamChunkEvent& e : last.chunks)
    chunks.push_back({{"index", e.index},
                      {"first_frame", e.chunk.first_frame},
                      {"end_frame", e.chunk.end_frame},
                      {"samples", (e.chunk.end_frame - e.chunk.first_frame) * hop},
                      {"ready_step", e.chunk.ready_step},
                      {"decoded_ms", e.decoded_s * 1e3},
                      {"published_ms", e.published_s * 1e3}});
  nlohmann::json rows = nlohmann::json::array();
  std::vector<double> tpub, rtfx;
  for (const StreamTimes& t : runs) {
    rows.push_back(run_row(p, t));
    tpub.push_back(t_pub_ms(t));
    rtfx.push_back(stream_rtfx(p, t.chunks.back().published_s));
  }
  nlohmann::json steps = nlohmann::json::array();
  for (double s : last.step_done_s) steps.push_back(s * 1e3);
  const nlohmann::json j = {{"schema", "megaops-stream-times/1"},
                            {"pipeline", p.name},
                            {"batch", o.batch},
                            {"backend", backend},
                            {"gpu", gpu},
                            {"composition", label},
                            {"sample_rate", p.codec.sample_rate},
                            {"hop", hop},
                            {"stream_frames", p.schedule.stream_frames},
                            {"audio_s", p.schedule.stream_frames / p.codec.frame_rate},
                            {"step_h", last.step_h},
                            {"repeats", runs.size()},
                            {"t_pub_ms", summary(tpub)},
                            {"rtfx", summary(rtfx)},
                            {"runs", rows},
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
  if (o.warmup < -1) throw_input_error("--warmup", "", "expected >= 0");
  if (o.write_stream < 0 || o.write_stream >= o.batch)
    throw_input_error("--write-stream", "",
                      "expected 0.." + std::to_string(o.batch - 1) +
                          " (a stream of the batch), found " + std::to_string(o.write_stream));
  if (o.out.empty() && o.codec_bench_out.empty())
    throw_input_error("--out", "", "missing (the WAV file to write)");
}

#ifdef MEGAOPS_HAVE_CUDA
std::string device_name() {
  cudaDeviceProp prop{};
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess ? prop.name : "?";
}

// The codec ops' GPU times at the planner's two codec windows as a megaops-op-bench/1 file keyed
// like the codec graph's ops (models/codec_graph.h).
void write_codec_bench(const Opts& o, const PipelineConfig& p) {
  const PipelineGraphs g = build_pipeline_graphs(p, o.batch);
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  nlohmann::json entries = nlohmann::json::array();
  for (const OpGraph* cg : {&g.codec_first, &g.codec_chunk}) {
    const std::vector<double> us = time_codec_ops(p, o.batch, cg->context, o.seed + 2, 20, true);
    for (size_t i = 0; i < us.size(); ++i)
      entries.push_back({{"op", cg->ops[i].name},
                         {"shape", shape_signature(cg->ops[i], cg->context)},
                         {"backend", "conventional"},
                         {"cta_budget", prop.multiProcessorCount},
                         {"us", us[i]},
                         {"samples", 20}});
  }
  const nlohmann::json j = {{"schema", "megaops-op-bench/1"},
                            {"gpu", prop.name},
                            {"dtype", "fp32"},
                            {"source", "megaops stream --codec-bench-out, pipeline " + p.name},
                            {"entries", entries}};
  std::ofstream f(o.codec_bench_out, std::ios::trunc);
  if (!f || !(f << j.dump(1) << "\n") || !f.flush())
    throw Error("cannot write " + o.codec_bench_out);
  std::fprintf(stderr, "stream: codec op times at windows of %d and %d frames -> %s\n",
               g.codec_first.context, g.codec_chunk.context, o.codec_bench_out.c_str());
}
#endif

std::unique_ptr<PipelineStages> make_stages(const Opts& o, const PipelineConfig& p,
                                            const PipelineComposition& comp, bool gpu) {
  if (!gpu) return std::make_unique<ref::PipelineOracle>(p, o.seed, o.batch);
#ifdef MEGAOPS_HAVE_CUDA
  const StagePlans plans = composition_stage_plans(comp, o.composition);
  GpuPipelineOptions go;
  go.step_graph = build_step_graph;
  go.producer_plan = plans.producer;
  go.local_plan = plans.local;
  go.max_batch = o.batch;
  go.seed = o.seed;
  return make_gpu_pipeline_stages(p, go);
#else
  (void)comp;
  throw DeviceError("stream: this build has no CUDA support");
#endif
}

}  // namespace

Runner add_stream(CLI::App& app) {
  auto o = std::make_shared<Opts>();
  app.add_option("--pipeline", o->pipeline, "pipeline file (docs/pipeline-format.md)")->required();
  app.add_option("--out", o->out, "WAV file the chunks are appended to as they are published");
  app.add_option("--timestamps", o->timestamps, "write per-chunk timestamps (JSON) here");
  app.add_option("--batch", o->batch, "streams run together (1..64)");
  app.add_option("--composition", o->composition,
                 "composition file (`megaops plan-pipeline --out`); default: all conventional");
  app.add_option("--repeats", o->repeats, "streams timed (T_pub mean and p95 over them)");
  app.add_option("--warmup", o->warmup, "untimed streams first (default: 1 on the GPU, 0 on CPU)");
  app.add_option("--write-stream", o->write_stream, "which stream of the batch the WAV holds");
  app.add_option("--codec-bench-out", o->codec_bench_out,
                 "GPU: write the codec ops' times (megaops-op-bench/1, the planner's evidence)");
  add_seed_option(app, o->seed, "seed of the random weights and prompts");
  app.add_flag("--cpu", o->cpu, "run the CPU oracle even where a GPU is present");
  return [o]() -> int {
    check_options(*o);
    const PipelineConfig p = read_pipeline(o->pipeline);
    const PipelineComposition comp =
        o->composition.empty() ? default_composition()
                               : parse_composition(read_text_file(o->composition), o->composition);
    if (!o->composition.empty()) composition_stage_plans(comp, o->composition);  // runnable?
    const bool gpu = !o->cpu && gpu_available();
    if (!gpu)
      std::fprintf(stderr, "stream: %s; running on the CPU oracle (fp32, slow)\n",
                   o->cpu ? "--cpu given" : "no CUDA device");
    std::string device = "cpu";
#ifdef MEGAOPS_HAVE_CUDA
    if (gpu) device = device_name();
    if (!o->codec_bench_out.empty()) {
      if (!gpu) throw DeviceError("stream: --codec-bench-out needs a GPU");
      write_codec_bench(*o, p);
      if (o->out.empty()) return 0;
    }
#else
    if (!o->codec_bench_out.empty())
      throw DeviceError("stream: --codec-bench-out needs a GPU (this build has no CUDA support)");
#endif
    std::unique_ptr<PipelineStages> stages = make_stages(*o, p, comp, gpu);
    const auto prompts = pipeline_prompts(p, o->batch, o->seed + 3);
    const int warmup = o->warmup >= 0 ? o->warmup : (gpu ? 1 : 0);
    for (int w = 0; w < warmup && !g_interrupted; ++w) stream_pipeline(p, *stages, prompts, {});
    std::vector<StreamTimes> runs;
    for (int r = 0; r < o->repeats && !g_interrupted; ++r) {
      std::unique_ptr<WavWriter> wav;
      if (r == 0) wav = std::make_unique<WavWriter>(o->out, p.codec.sample_rate);
      runs.push_back(stream_pipeline(
          p, *stages, prompts, [&](const StreamChunkEvent& e, const StreamSamples& s) {
            if (!wav) return;
            wav->append(s.at(o->write_stream).data(), s[o->write_stream].size());
            std::fprintf(stderr, "stream: chunk %d (frames %d..%d) published at %.3f ms\n", e.index,
                         e.chunk.first_frame, e.chunk.end_frame - 1, e.published_s * 1e3);
          }));
      if (wav) wav->close();
    }
    if (runs.empty()) return interrupt_status();
    if (!o->timestamps.empty())
      write_timestamps(*o, p, stages->backend(), comp.label, runs, device);
    const StreamTimes& t = runs.back();
    std::printf(
        "stream: %s, batch %d on %s (%s): T_pub %.3f ms (first chunk decoded %.3f ms, producer "
        "step %d %.3f ms), %zu chunks, RTFx %.2f (%.2f s of audio in %.3f s)\n",
        p.name.c_str(), o->batch, stages->backend().c_str(), comp.label.c_str(), t_pub_ms(t),
        t.chunks[0].decoded_s * 1e3, t.step_h, t.step_done_s.at(t.step_h - 1) * 1e3,
        t.chunks.size(), stream_rtfx(p, t.chunks.back().published_s),
        p.schedule.stream_frames / p.codec.frame_rate, t.chunks.back().published_s);
    return g_interrupted ? interrupt_status() : 0;
  };
}

}  // namespace megaops::cli
