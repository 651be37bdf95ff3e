// See pipeline_json.h. The reader walks the document once, naming each field by its path
// ("stages[2].layers[5].layers[1].in"); the stage models are config.json objects read by
// parse_model_config, and what ties the stages together is validate_pipeline's.
#include "models/pipeline_json.h"

#include <cmath>
#include <initializer_list>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_describe.h"
#include "io/text_file.h"
#include "models/model_config.h"

namespace megaops {

namespace {

using nlohmann::json;

// Channels, kernels, strides and dilations past this are no codec: refusing them keeps every
// product of them in 64 bits.
constexpr int64_t MAX_LAYER_VALUE = 65536;

// What the reader is looking at: the file and the field path.
struct Where {
  const std::string& origin;
  std::string path;

  Where at(const std::string& key) const { return {origin, path.empty() ? key : path + "." + key}; }
  Where index(size_t i) const { return {origin, path + "[" + std::to_string(i) + "]"}; }
  [[noreturn]] void fail(const std::string& message) const {
    throw_input_error(origin, path, message);
  }
};

std::string describe(const json& v) {
  if (v.is_object()) return "object " + describe_json(v);
  if (v.is_array()) return "array " + describe_json(v);
  return describe_json(v);
}

std::string list(std::initializer_list<const char*> names) {
  std::string s;
  size_t i = 0;
  for (const char* n : names) {
    s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + std::string(n);
    ++i;
  }
  return s;
}

// An object holding only `allowed` keys.
const json& object(const json& v, const Where& w, std::initializer_list<const char*> allowed) {
  if (!v.is_object()) w.fail("expected an object, found " + describe(v));
  for (auto it = v.begin(); it != v.end(); ++it) {
    bool known = false;
    for (const char* a : allowed) known = known || it.key() == a;
    if (!known) w.at(it.key()).fail("unknown field (expected " + list(allowed) + ")");
  }
  return v;
}

const json& field(const json& obj, const char* key, const Where& w) {
  auto it = obj.find(key);
  if (it == obj.end()) w.at(key).fail("missing");
  return *it;
}

int as_int(const json& v, const Where& w, int min) {
  if (!v.is_number_integer())
    w.fail("expected an integer >= " + std::to_string(min) + ", found " + describe(v));
  const int64_t i = v.get<int64_t>();
  if (i < min || i > std::numeric_limits<int>::max())
    w.fail("expected an integer >= " + std::to_string(min) + ", found " + v.dump());
  return static_cast<int>(i);
}

int int_field(const json& obj, const char* key, const Where& w, int min) {
  return as_int(field(obj, key, w), w.at(key), min);
}

int optional_int(const json& obj, const char* key, const Where& w, int min, int fallback) {
  return obj.contains(key) ? int_field(obj, key, w, min) : fallback;
}

std::string string_field(const json& obj, const char* key, const Where& w) {
  const json& v = field(obj, key, w);
  if (!v.is_string()) w.at(key).fail("expected a string, found " + describe(v));
  return v.get<std::string>();
}

double positive_number(const json& obj, const char* key, const Where& w) {
  const json& v = field(obj, key, w);
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() <= 0)
    w.at(key).fail("expected a positive number, found " + describe(v));
  return v.get<double>();
}

ModelConfig model_field(const json& stage, const Where& w) {
  const json& m = field(stage, "model", w);
  const Where mw = w.at("model");
  if (!m.is_object()) mw.fail("expected a config.json object, found " + describe(m));
  return parse_model_config(m.dump(), w.origin + ": " + mw.path);
}

bool upsamples(const std::vector<CodecLayer>& layers) {
  for (const CodecLayer& l : layers)
    if (l.kind == CodecLayerKind::ConvTranspose1d ||
        (l.kind == CodecLayerKind::Residual && upsamples(l.body)))
      return true;
  return false;
}

// The layers of a codec decoder (or of a residual block's body) taking `channels` channels in;
// returns the channels out.
int parse_layers(const json& v, const Where& w, int channels, int depth,
                 std::vector<CodecLayer>& out) {
  if (!v.is_array() || v.empty())
    w.fail("expected a non-empty array of layers, found " + describe(v));
  if (depth > 4) w.fail("expected residual blocks nested at most 4 deep");
  for (size_t i = 0; i < v.size(); ++i) {
    const Where lw = w.index(i);
    const json& l = v[i];
    if (!l.is_object()) lw.fail("expected a layer object, found " + describe(l));
    const std::string op = string_field(l, "op", lw);
    CodecLayer layer;
    layer.in_channels = channels;
    layer.out_channels = channels;
    if (op == "conv1d" || op == "conv_transpose1d") {
      const bool tr = op == "conv_transpose1d";
      if (tr)
        object(l, lw, {"op", "in", "out", "kernel", "stride"});
      else
        object(l, lw, {"op", "in", "out", "kernel", "dilation"});
      layer.kind = tr ? CodecLayerKind::ConvTranspose1d : CodecLayerKind::Conv1d;
      const int in = int_field(l, "in", lw, 1);
      for (const char* f : {"out", "kernel", "stride", "dilation"})
        if (l.contains(f) && l.at(f).is_number_integer() &&
            l.at(f).get<int64_t>() > MAX_LAYER_VALUE)
          lw.at(f).fail("expected at most " + std::to_string(MAX_LAYER_VALUE) + ", found " +
                        l.at(f).dump());
      if (in != channels)
        lw.at("in").fail("expected " + std::to_string(channels) +
                         " (the channels of the layer before), found " + std::to_string(in));
      layer.out_channels = int_field(l, "out", lw, 1);
      layer.kernel = int_field(l, "kernel", lw, 1);
      layer.stride = tr ? int_field(l, "stride", lw, 1) : 1;
      layer.dilation = tr ? 1 : optional_int(l, "dilation", lw, 1, 1);
      if (tr && layer.kernel < layer.stride)
        lw.at("kernel").fail("expected >= stride (" + std::to_string(layer.stride) +
                             ": every output sample covered), found " +
                             std::to_string(layer.kernel));
    } else if (op == "elu" || op == "snake") {
      object(l, lw, {"op"});
      layer.kind = op == "elu" ? CodecLayerKind::Elu : CodecLayerKind::Snake;
    } else if (op == "residual") {
      object(l, lw, {"op", "layers"});
      layer.kind = CodecLayerKind::Residual;
      const int body_out =
          parse_layers(field(l, "layers", lw), lw.at("layers"), channels, depth + 1, layer.body);
      if (body_out != channels)
        lw.at("layers").fail("expected the block's layers to give back its " +
                             std::to_string(channels) + " input channels, found " +
                             std::to_string(body_out));
      if (upsamples(layer.body))
        lw.at("layers").fail(
            "expected the block's layers to keep the sample rate (its input is added to their "
            "output), found a conv_transpose1d");
    } else {
      lw.at("op").fail("expected conv1d, conv_transpose1d, elu, snake or residual, found " +
                       describe(l.at("op")));
    }
    channels = layer.out_channels;
    out.push_back(std::move(layer));
  }
  return channels;
}

LocalTransformerConfig parse_local(const json& st, const Where& w) {
  object(st, w, {"type", "name", "codebooks", "codebook_size", "model"});
  LocalTransformerConfig lt;
  lt.codebooks = int_field(st, "codebooks", w, 1);
  lt.codebook_size = int_field(st, "codebook_size", w, 1);
  lt.model = model_field(st, w);
  return lt;
}

CodecConfig parse_codec(const json& st, const Where& w) {
  object(st, w,
         {"type", "name", "codebooks", "codebook_size", "codebook_dim", "sample_rate", "frame_rate",
          "context_frames", "layers"});
  CodecConfig c;
  c.codebooks = int_field(st, "codebooks", w, 1);
  c.codebook_size = int_field(st, "codebook_size", w, 1);
  c.codebook_dim = int_field(st, "codebook_dim", w, 1);
  c.sample_rate = int_field(st, "sample_rate", w, 1);
  c.frame_rate = positive_number(st, "frame_rate", w);
  c.context_frames = int_field(st, "context_frames", w, 1);
  if (c.context_frames > MAX_LAYER_VALUE)
    w.at("context_frames")
        .fail("expected at most " + std::to_string(MAX_LAYER_VALUE) + ", found " +
              std::to_string(c.context_frames));
  parse_layers(field(st, "layers", w), w.at("layers"), c.codebook_dim, 0, c.layers);
  return c;
}

PipelineSchedule parse_schedule(const json& v, const Where& w) {
  object(v, w,
         {"prompt_tokens", "stream_frames", "frames_per_step", "delay_steps", "first_chunk_frames",
          "chunk_frames", "lookahead_steps"});
  PipelineSchedule s;
  s.prompt_tokens = int_field(v, "prompt_tokens", w, 1);
  s.stream_frames = int_field(v, "stream_frames", w, 1);
  s.frames_per_step = optional_int(v, "frames_per_step", w, 1, 1);
  s.delay_steps = optional_int(v, "delay_steps", w, 0, 0);
  s.first_chunk_frames = int_field(v, "first_chunk_frames", w, 1);
  s.chunk_frames = int_field(v, "chunk_frames", w, 1);
  s.lookahead_steps = optional_int(v, "lookahead_steps", w, 0, 1);
  return s;
}

constexpr const char* STAGE_TYPES[] = {"producer", "local_transformer", "codec_decoder"};

void parse_stages(const json& v, const Where& w, PipelineConfig& p) {
  if (!v.is_array()) w.fail("expected an array of 3 stages, found " + describe(v));
  for (size_t i = 0; i < v.size(); ++i) {
    const Where sw = w.index(i);
    const json& st = v[i];
    if (!st.is_object()) sw.fail("expected a stage object, found " + describe(st));
    const std::string type = string_field(st, "type", sw);
    int kind = -1;
    for (int k = 0; k < 3; ++k)
      if (type == STAGE_TYPES[k]) kind = k;
    if (kind < 0)
      sw.at("type").fail("expected producer, local_transformer or codec_decoder, found " +
                         describe(st.at("type")));
    if (kind != static_cast<int>(i))
      sw.at("type").fail(std::string("expected ") + (i < 3 ? STAGE_TYPES[i] : "no stage") +
                         " (the stages are producer, local_transformer, codec_decoder in this "
                         "order), found \"" +
                         type + "\"");
    if (kind == 0) {
      object(st, sw, {"type", "name", "model"});
      p.producer = model_field(st, sw);
    } else if (kind == 1) {
      p.local = parse_local(st, sw);
    } else {
      p.codec = parse_codec(st, sw);
    }
  }
  if (v.size() != 3)
    w.fail("expected 3 stages (producer, local_transformer, codec_decoder), found " +
           std::to_string(v.size()));
}

}  // namespace

PipelineConfig parse_pipeline(const std::string& json_text, const std::string& origin) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::exception& e) {
    std::string what = e.what();
    if (auto pos = what.find("] ");
        what.rfind("[json.exception", 0) == 0 && pos != std::string::npos)
      what = what.substr(pos + 2);
    throw_input_error(origin, "", "malformed JSON: " + what);
  }
  const Where w{origin, ""};
  object(root, w, {"schema", "name", "sources", "stages", "schedule"});
  const std::string schema = string_field(root, "schema", w);
  if (schema != PIPELINE_SCHEMA)
    w.at("schema").fail(std::string("expected \"") + PIPELINE_SCHEMA + "\", found \"" + schema +
                        "\"");
  PipelineConfig p;
  p.name = string_field(root, "name", w);
  if (root.contains("sources")) {
    const json& s = root.at("sources");
    if (!s.is_array()) w.at("sources").fail("expected an array of strings, found " + describe(s));
    for (size_t i = 0; i < s.size(); ++i) {
      if (!s[i].is_string())
        w.at("sources").index(i).fail("expected a string, found " + describe(s[i]));
      p.sources.push_back(s[i].get<std::string>());
    }
  }
  parse_stages(field(root, "stages", w), w.at("stages"), p);
  p.schedule = parse_schedule(field(root, "schedule", w), w.at("schedule"));
  validate_pipeline(p, origin);
  return p;
}

PipelineConfig read_pipeline(const std::string& path) {
  return parse_pipeline(read_text_file(path), path);
}

}  // namespace megaops
