// The step graph (models/step_graph.h) as the one description of a step: the CPU oracle's forward
// pass runs the same op list, op by op (code, layer, output shape), for prefill and decode, with
// and without tensor parallelism, on both families; the graph's tensors and folds are consistent;
// bad requests get one-line errors.
#include "models/step_graph.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "graph/tensor_parallel.h"
#include "reference/model.h"
#include "reference/ref_weights.h"
#include "test_util.h"

namespace megaops {
namespace {

std::string describe(OpCode code, int layer, int64_t rows, int64_t cols) {
  return std::string(op_code_name(code)) + " layer " + std::to_string(layer) + " [" +
         std::to_string(rows) + ", " + std::to_string(cols) + "]";
}

// The graph's ops a forward pass of the oracle runs: all but the sampler and step_advance, which
// run outside it (ref::sample, the caller's bookkeeping).
std::vector<const Op*> forward_ops(const OpGraph& g) {
  std::vector<const Op*> out;
  for (const Op& op : g.ops)
    if (op.code != OpCode::Sample && op.code != OpCode::StepAdvance) out.push_back(&op);
  return out;
}

// The oracle's records of one forward pass against the graph's ops, op by op. The LM head's rows
// are the graph's sampled rows; the oracle computes logits for every row of the pass.
void expect_same_ops(const std::vector<ref::OpRecord>& recs, const OpGraph& g,
                     const std::string& what) {
  const std::vector<const Op*> ops = forward_ops(g);
  ASSERT_EQ(recs.size(), ops.size()) << what;
  for (size_t i = 0; i < ops.size(); ++i) {
    const Op& op = *ops[i];
    const ref::OpRecord& r = recs[i];
    const int64_t rows = op.code == OpCode::LmHead ? r.rows : op.rows;
    EXPECT_EQ(describe(r.code, r.layer, r.rows, r.cols), describe(op.code, op.layer, rows, op.cols))
        << what << ", op " << i << " (" << op.name << ")";
  }
}

TEST(StepGraph, OracleRunsTheGraphsOpsInOrder) {
  for (const std::string preset : {"tiny-llama3", "tiny-qwen3"})
    for (int tp : {1, 2}) {
      const ModelConfig cfg = preset_config(preset);
      const ref::Weights w = testing::random_ref_weights(cfg, 3);
      ref::Model m(w, 64, tp);
      std::vector<ref::OpRecord> recs;
      m.set_observer([&](const ref::OpRecord& r) { recs.push_back(r); });
      const ModelConfig rank = tp_rank_config(cfg, tp_shape(cfg, tp, 0));
      const std::string what = preset + " tp " + std::to_string(tp);

      StepRequest prefill;
      prefill.step = StepKind::Prefill;
      prefill.rows = 7;
      prefill.sequences = 1;
      prefill.tensor_parallel = tp > 1;
      m.forward({1, 2, 3, 4, 5, 6, 7});
      expect_same_ops(recs, build_step_graph(rank, prefill), what + " prefill");

      recs.clear();
      StepRequest decode;
      decode.step = StepKind::Decode;
      decode.rows = 1;
      decode.sequences = 1;
      decode.context = 7;
      decode.tensor_parallel = tp > 1;
      m.forward({9});
      expect_same_ops(recs, build_step_graph(rank, decode), what + " decode");
    }
}

// Every tensor an op reads is an input of the step (tokens, positions, the KV cache) or written by
// an earlier op; every op writes something; matmuls read the tensor the op before them wrote.
TEST(StepGraph, TensorsFlowFromOpToOp) {
  for (StepKind kind : {StepKind::Decode, StepKind::Prefill}) {
    StepRequest req;
    req.step = kind;
    req.rows = kind == StepKind::Decode ? 4 : 40;
    req.sequences = kind == StepKind::Decode ? 4 : 3;
    req.context = 16;
    req.tensor_parallel = true;
    const OpGraph g = build_step_graph(preset_config("tiny-qwen3"), req);
    std::vector<bool> written(g.tensors.size(), false);
    for (const char* input : {"tokens", "positions", "kv_cache"}) {
      const auto at = std::find_if(g.tensors.begin(), g.tensors.end(),
                                   [&](const Tensor& t) { return t.name == input; });
      ASSERT_NE(at, g.tensors.end()) << input;
      written[at - g.tensors.begin()] = true;
    }
    for (const Op& op : g.ops) {
      EXPECT_FALSE(op.io.writes.empty()) << op.name;
      for (int t : op.io.reads) {
        ASSERT_GE(t, 0);
        ASSERT_LT(t, static_cast<int>(g.tensors.size()));
        EXPECT_TRUE(written[t]) << op.name << " reads " << g.tensors[t].name << " before a write";
      }
      for (int t : op.io.writes) written[t] = true;
      if (op.kind == OpKind::Matmul) {
        const Op& before = g.ops[op.inputs.at(0).producer];
        EXPECT_NE(std::find(before.io.writes.begin(), before.io.writes.end(), op.io.reads.at(0)),
                  before.io.writes.end())
            << op.name << " layer " << op.layer;
      }
    }
    // The sampled rows: every sequence (decode) or each sequence's last row (prefill).
    const Op& lm = g.ops[find_op(g, "lm_head", -1)];
    EXPECT_EQ(lm.rows, req.sequences);
    EXPECT_EQ(g.tensors[lm.io.writes.at(0)].rows, req.sequences);
  }
}

// The folds the executors may apply, as the graph declares them.
TEST(StepGraph, DeclaresWhichOpsMayFold) {
  const OpGraph d = build_decode_graph(preset_config("llama3.2-1b"), "m", 1, 32);
  const OpGraph p = build_prefill_graph(preset_config("llama3.2-1b"), "m", 64, 0);
  for (const OpGraph* g : {&d, &p})
    for (const Op& op : g->ops) {
      const bool norm = op.kind == OpKind::Norm;
      EXPECT_EQ((op.folds & FOLD_INTO_CONSUMER_PROLOGUE) != 0,
                norm || op.code == OpCode::SiluMul ||
                    (op.code == OpCode::QkvRope && g->step == StepKind::Decode))
          << op.name;
      EXPECT_EQ((op.folds & FOLD_INTO_PRODUCER_EPILOGUE) != 0,
                op.code == OpCode::SiluMul || op.code == OpCode::Sample)
          << op.name;
      if (norm) EXPECT_EQ(g->ops.at(&op - g->ops.data() + 1).kind, OpKind::Matmul) << op.name;
    }
  // Only decode steps advance the device state; only tensor-parallel graphs all-reduce.
  EXPECT_EQ(d.ops.back().code, OpCode::StepAdvance);
  EXPECT_EQ(p.ops.back().code, OpCode::Sample);
  for (const Op& op : d.ops) EXPECT_NE(op.code, OpCode::AllReduce);
}

TEST(StepGraph, BadRequestsNameTheField) {
  const ModelConfig cfg = preset_config("tiny-llama3");
  StepRequest r;
  r.step = StepKind::Prefill;
  r.rows = 4;
  r.sequences = 5;
  testing::expect_input_error([&] { build_step_graph(cfg, r); }, {"sequences"});
  r.sequences = 0;
  testing::expect_input_error([&] { build_step_graph(cfg, r); }, {"sequences"});
  r.sequences = 1;
  r.rows = 0;
  testing::expect_input_error([&] { build_step_graph(cfg, r); }, {"tokens"});
  r.rows = 1;
  r.context = -1;
  testing::expect_input_error([&] { build_step_graph(cfg, r); }, {"context"});
}

// An executor refuses a graph with an op it cannot run, naming it.
TEST(StepGraph, CheckOpCodesNamesAnUnknownOp) {
  const OpGraph g = build_decode_graph(preset_config("tiny-llama3"), "m", 1, 4);
  check_op_codes(g,
                 {OpCode::Embedding, OpCode::InputNorm, OpCode::QkvProj, OpCode::QkvRope,
                  OpCode::DecodeAttention, OpCode::OProj, OpCode::PostNorm, OpCode::GateUpProj,
                  OpCode::SiluMul, OpCode::DownProj, OpCode::FinalNorm, OpCode::LmHead,
                  OpCode::Sample, OpCode::StepAdvance},
                 "test");
  testing::expect_input_error([&] { check_op_codes(g, {OpCode::Embedding}, {"test"}); },
                              {"input_layernorm (layer 0)"});
}

}  // namespace
}  // namespace megaops
