// The op graph of real configurations: op order and count, weight bytes against the checkpoint
// layout (expected_weights), FLOPs, and the tiling contracts each consumer reads through.
#include "graph/op_graph.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "models/step_graph.h"

namespace megaops {
namespace {

int64_t checkpoint_bytes(const ModelConfig& cfg) {
  int64_t total = 0;
  for (const WeightSpec& w : expected_weights(cfg)) {
    int64_t n = 2;
    for (int64_t d : w.shape) n *= d;
    total += n;
  }
  return total;
}

TEST(OpGraph, Llama8bDecodeOpsAndWeightBytes) {
  const ModelConfig cfg = preset_config("llama3.1-8b");
  const OpGraph g = build_decode_graph(cfg, "llama3.1-8b", 1, 32);
  ASSERT_EQ(g.ops.size(), 1u + 32u * 9u + 4u);
  EXPECT_EQ(g.ops.front().name, "embedding");
  EXPECT_EQ(g.ops[1].name, "input_layernorm");
  EXPECT_EQ(g.ops[9].name, "down_proj");
  EXPECT_EQ(g.ops.back().name, "step_advance");
  EXPECT_EQ(checkpoint_bytes(cfg), 16060522496);
  // A step streams every weight but the (untied) embedding table, of which it gathers one row.
  const int64_t embed_table = int64_t{cfg.vocab_size} * cfg.hidden_size * 2;
  EXPECT_EQ(g.ops[0].weight_bytes, int64_t{cfg.hidden_size} * 2);
  EXPECT_EQ(g.total_weight_bytes() - g.ops[0].weight_bytes, checkpoint_bytes(cfg) - embed_table);
  // Matmul FLOPs are 2 m n k; the whole step is about 2 FLOPs per streamed parameter.
  const Op& qkv = g.ops[2];
  EXPECT_EQ(qkv.name, "qkv_proj");
  EXPECT_EQ(qkv.n, 4096 + 2 * 1024);
  EXPECT_DOUBLE_EQ(qkv.flops, 2.0 * 1 * 6144 * 4096);
  EXPECT_LT(g.total_tiles(), 40000);
}

TEST(OpGraph, TiedEmbeddingIsStreamedByTheLmHead) {
  const ModelConfig cfg = preset_config("llama3.2-1b");
  const OpGraph g = build_decode_graph(cfg, "llama3.2-1b", 8, 64);
  ASSERT_EQ(g.ops.size(), 1u + 16u * 9u + 4u);
  EXPECT_EQ(g.total_weight_bytes() - g.ops[0].weight_bytes, checkpoint_bytes(cfg));
  const Op& att = g.ops[find_op(g, "decode_attention", 3)];
  EXPECT_EQ(att.kv_bytes, int64_t{8} * 64 * cfg.kv_dim() * 2 * 2);
}

TEST(OpGraph, ContractsMapTilesAsDeclared) {
  const ModelConfig cfg = preset_config("llama3.1-8b");  // 32 heads, 8 KV heads, head_dim 128
  const OpGraph g = build_decode_graph(cfg, "m", 4, 16);
  const int qkv = find_op(g, "qkv_proj", 0), rope = find_op(g, "qkv_rope", 0),
            att = find_op(g, "decode_attention", 0), o = find_op(g, "o_proj", 0),
            gu = find_op(g, "gate_up_proj", 0), sm = find_op(g, "silu_mul", 0);
  // Decode tiles span every batch row: one row block.
  EXPECT_EQ(g.ops[qkv].row_blocks(), 1);
  EXPECT_EQ(g.ops[qkv].tile_rows, 4);
  // Matmul: every K chunk of its input.
  EXPECT_EQ(input_tiles(g, qkv, 0, 5).size(), static_cast<size_t>(g.ops[qkv - 1].num_tiles()));
  // Rope tile = one head: the qkv tiles covering its columns.
  const int64_t w = g.ops[qkv].tile_cols;
  const auto r = input_tiles(g, rope, 0, 3);
  ASSERT_FALSE(r.empty());
  EXPECT_EQ(r.front(), 3 * 128 / w);
  EXPECT_EQ(r.back(), (4 * 128 - 1) / w);
  // Attention head 13 reads q head 13 and K/V head 13 / 4 = 3 of the rope output.
  EXPECT_EQ(input_tiles(g, att, 0, 13), (std::vector<int64_t>{13, 32 + 3, 32 + 8 + 3}));
  // O projection folds every head.
  EXPECT_EQ(input_tiles(g, o, 0, 0).size(), 32u);
  // SiLU-mul: the gate and the up columns of the same index.
  const auto p = input_tiles(g, sm, 0, 2);
  const int64_t gw = g.ops[gu].tile_cols, sw = g.ops[sm].tile_cols;
  EXPECT_EQ(p.front(), 2 * sw / gw);
  EXPECT_EQ(p.back(), (cfg.intermediate_size + 3 * sw - 1) / gw);
  EXPECT_THROW(input_tiles(g, att, 0, 32), InputError);
  EXPECT_THROW(input_tiles(g, att, 1, 0), InputError);
}

TEST(OpGraph, PrefillTilesAreRowBlocksAndAttentionIsCausal) {
  const ModelConfig cfg = preset_config("tiny-llama3");  // 4 heads, 2 KV heads, head_dim 32
  const OpGraph g = build_prefill_graph(cfg, "tiny", 300, 0);
  const int att = find_op(g, "prefill_attention", 1), rope = att - 1;
  EXPECT_EQ(g.ops[att].row_blocks(), 3);  // 128 + 128 + 44 rows
  // Row block 2, head 1 (KV head 0): q, k and v columns of row blocks 0..2.
  const int64_t ct = g.ops[rope].col_tiles();
  const auto in = input_tiles(g, att, 0, 2 * g.ops[att].col_tiles() + 1);
  EXPECT_EQ(in.size(), 9u);
  EXPECT_EQ(in.back(), 2 * ct + 4 + 2);
  // The final norm runs over every row; the LM head reads its last row block (the last row).
  const int lm = find_op(g, "lm_head", -1);
  EXPECT_EQ(g.ops[lm].m, 1);
  EXPECT_EQ(g.ops[lm - 1].rows, 300);
  EXPECT_EQ(producer_row_block(g, lm, 0, 0), 2);
  EXPECT_THROW(build_decode_graph(cfg, "tiny", 0, 1), InputError);
}

// What a persistent region can hold: every op but step_advance at batch 1 (the streaming
// kernel's matmuls, the per-query-head attention, the LM head's greedy epilogue); at batch 8 no
// matmul (small-m, cuBLASLt) and no sampler over the logits, and attention only where every query
// head of the batch gets an SM (qwen3-0.6b's 8 x 16 heads on 132 SMs, not the 1B's 8 x 32).
TEST(OpGraph, PersistentRefusalFollowsTheExecutors) {
  for (const char* preset : {"llama3.2-1b", "qwen3-0.6b"}) {
    const ModelConfig cfg = preset_config(preset);
    const OpGraph g1 = build_decode_graph(cfg, preset, 1, 32);
    for (int i = 0; i + 1 < static_cast<int>(g1.ops.size()); ++i)
      EXPECT_EQ(persistent_refusal(g1, i, true, 132), "") << preset << " " << g1.ops[i].name;
    EXPECT_NE(persistent_refusal(g1, static_cast<int>(g1.ops.size()) - 1, true, 132), "");
    const OpGraph g8 = build_decode_graph(cfg, preset, 8, 32);
    for (int i = 0; i < static_cast<int>(g8.ops.size()); ++i) {
      const Op& op = g8.ops[i];
      const std::string why = persistent_refusal(g8, i, true, 132);
      if (op.kind == OpKind::Matmul || op.code == OpCode::Sample || op.code == OpCode::StepAdvance)
        EXPECT_NE(why, "") << preset << " " << op.name;
      else if (op.code == OpCode::DecodeAttention)
        EXPECT_EQ(why == "", std::string(preset) == "qwen3-0.6b") << preset << " " << why;
      else
        EXPECT_EQ(why, "") << preset << " " << op.name;
    }
  }
  // 2-8 query heads per kv head; MHA (one) takes the kv-group kernel.
  ModelConfig mha = preset_config("llama3.2-1b");
  mha.num_kv_heads = mha.num_heads;
  const OpGraph g = build_decode_graph(mha, "mha", 1, 32);
  EXPECT_NE(persistent_refusal(g, find_op(g, "decode_attention", 0), true, 132), "");
}

}  // namespace
}  // namespace megaops
