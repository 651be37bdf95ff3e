// The prefill side of the paged KV cache (kernels/kv_pages.cuh): qkv_rope's cache writes and the
// prefill attention kernels (tensor-core flash, and the scalar one other head dims go to) through
// block tables. Every case runs on a cache paged at random (each slot's blocks shuffled over a
// larger pool, shared with no other slot, the pool's other rows poisoned) and on the contiguous
// cache with the same contents: the outputs (and qkv_rope's written rows, read back through the
// table) must be the same bits, nothing outside the table may be written, and the paged prefill
// attention must match the oracle reading through the table (ref::attention_prefill_paged).
// Block sizes 16 and 32; sequences of 1, 17, 111, 1000 and 8191 tokens, packed.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "gpu_test_util.h"
#include "kernels/attention_prefill.cuh"
#include "kernels/attention_test_util.h"
#include "kernels/paged_test_util.h"
#include "kernels/qkv_rope.cuh"
#include "reference/ops.h"

namespace megaops {
namespace {

using testing::DeviceBuffer;
using testing::PrefillSeq;
using testing::RandomPaging;
using Shape = testing::AttentionShape;

// flash: launch_prefill_attention_flash (head dims 64 and 128; others forward to the scalar
// kernel), else launch_prefill_attention (the scalar kernel) directly.
void run_prefill_case(const Shape& s, const std::vector<PrefillSeq>& seqs, int max_batch,
                      int max_seq, int block_size, bool flash, std::mt19937_64& rng) {
  SCOPED_TRACE(testing::describe(s, seqs, false) + " block_size " + std::to_string(block_size) +
               (flash ? " flash" : " scalar"));
  const testing::PrefillInputs in(s, seqs, max_batch, max_seq, rng);
  const RandomPaging paging(max_batch, max_seq, block_size, 2, rng);
  testing::PrefillDeviceInputs dev(in, false);
  auto launch = [&](const PrefillAttentionParams& p) {
    dev.out.poison();
    EXPECT_EQ(flash ? launch_prefill_attention_flash(p) : launch_prefill_attention(p), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    return dev.out.download();
  };
  const std::vector<uint16_t> flat = launch(dev.params);
  const size_t row = in.cache.row;
  const std::vector<uint16_t> kb = paging.to_paged(in.cache.k_bits, row, uint16_t{0xffff});
  const std::vector<uint16_t> vb = paging.to_paged(in.cache.v_bits, row, uint16_t{0xffff});
  DeviceBuffer<uint16_t> d_k(kb.size()), d_v(vb.size());
  DeviceBuffer<int32_t> d_table(paging.table.size());
  d_k.upload(kb);
  d_v.upload(vb);
  d_table.upload(paging.table);
  PrefillAttentionParams p = dev.params;
  p.k_cache = reinterpret_cast<const bf16*>(d_k.ptr);
  p.v_cache = reinterpret_cast<const bf16*>(d_v.ptr);
  p.kv = paging.pages(d_table.ptr);
  const std::vector<uint16_t> paged = launch(p);
  EXPECT_TRUE(paged == flat) << "the paged launch differs from the contiguous one";
  // The oracle through the table, 2e-2 per sequence (bf16 against fp32, DESIGN.md).
  const std::vector<float> kf = testing::from_bf16_bits(kb), vf = testing::from_bf16_bits(vb);
  const std::vector<float> got = testing::from_bf16_bits(paged);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const PrefillSeq& sq = seqs[i];
    std::vector<float> expect(sq.n_q * in.token());
    ref::attention_prefill_paged(in.q.data() + in.first_token(i) * in.token(), kf.data(), vf.data(),
                                 paging.slot_table(sq.slot), block_size, sq.n_q, sq.pos0,
                                 s.num_heads, s.num_kv_heads, s.head_dim, in.scale, expect.data());
    EXPECT_LE(testing::rel_error(got.data() + in.first_token(i) * in.token(), expect.data(),
                                 expect.size()),
              2e-2)
        << "slot " << sq.slot;
  }
}

TEST(PrefillAttentionPaged, FlashMatchesReferenceAndContiguous) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 51);
  for (const Shape& s : {Shape{32, 8, 64}, Shape{32, 8, 128}, Shape{16, 2, 128}, Shape{8, 8, 64}})
    for (int bs : {16, 32}) {
      run_prefill_case(s, {{1, 0, 17}}, 3, 1024, bs, true, rng);
      run_prefill_case(s, {{0, 0, 1}}, 3, 1024, bs, true, rng);
      // Packed: boundaries inside a 64-row block, a chunk continuing a cached prefix, a 1-token
      // chunk, a 1000-token prompt.
      run_prefill_case(s, {{2, 0, 17}, {0, 300, 111}, {1, 999, 1}}, 3, 1024, bs, true, rng);
      run_prefill_case(s, {{1, 0, 1000}, {2, 5, 12}}, 3, 1024, bs, true, rng);
    }
}

TEST(PrefillAttentionPaged, LongPrompt) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 52);
  for (int bs : {16, 32}) {
    // Contexts of 8191 keys: a chunk at the end of a long cached prefix (the oracle's cost grows
    // with queries x keys, so the chunk is short).
    run_prefill_case({32, 8, 128}, {{0, 8100, 91}}, 1, 8191, bs, true, rng);
    run_prefill_case({32, 8, 64}, {{1, 8000, 191}, {0, 0, 64}}, 2, 8191, bs, true, rng);
  }
}

TEST(PrefillAttentionPaged, ScalarKernelMatchesReferenceAndContiguous) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 53);
  for (const Shape& s : {Shape{6, 2, 96}, Shape{8, 8, 256}, Shape{32, 8, 128}})
    for (int bs : {16, 32}) {
      run_prefill_case(s, {{2, 0, 17}, {0, 40, 33}, {1, 0, 1}}, 3, 512, bs, false, rng);
      run_prefill_case(s, {{1, 100, 300}}, 3, 512, bs, false, rng);
    }
}

// qkv_rope writing through the table: q and every written row the contiguous launch's bits, and
// no row outside the written (slot, position) pairs touched, in the pool or the table's blocks.
void run_rope_case(int heads, int kv_heads, int hd, bool norm, int t, int slots, int max_seq,
                   int block_size, std::mt19937_64& rng) {
  SCOPED_TRACE("H=" + std::to_string(heads) + " KV=" + std::to_string(kv_heads) +
               " hd=" + std::to_string(hd) + " t=" + std::to_string(t) + " block_size " +
               std::to_string(block_size));
  const size_t per_tok = static_cast<size_t>(heads + 2 * kv_heads) * hd;
  const size_t row = static_cast<size_t>(kv_heads) * hd;
  const RandomPaging paging(slots, max_seq, block_size, 2, rng);
  const auto qkv = testing::random_floats(t * per_tok, -2, 2, rng);
  const auto nb = testing::to_bf16_bits(testing::random_floats(hd, 0.5f, 1.5f, rng));
  std::vector<float> inv(hd / 2);
  for (int i = 0; i < hd / 2; ++i) inv[i] = static_cast<float>(std::pow(500000.0, -2.0 * i / hd));
  std::vector<int32_t> pos(t), slot(t);
  std::set<std::pair<int, int>> used;
  std::uniform_int_distribution<int> pick_pos(0, max_seq - 1), pick_slot(0, slots - 1);
  for (int i = 0; i < t; ++i) do {
      pos[i] = i == 0 ? max_seq - 1 : pick_pos(rng);
      slot[i] = pick_slot(rng);
    } while (!used.insert({slot[i], pos[i]}).second);
  DeviceBuffer<float> d_qkv(qkv.size()), d_inv(inv.size());
  DeviceBuffer<uint16_t> d_norm(hd);
  DeviceBuffer<int32_t> d_pos(t), d_slot(t), d_table(paging.table.size());
  d_qkv.upload(qkv);
  d_inv.upload(inv);
  d_norm.upload(nb);
  d_pos.upload(pos);
  d_slot.upload(slot);
  d_table.upload(paging.table);
  std::vector<uint16_t> q_out[2], k_out[2], v_out[2];
  for (int paged = 0; paged < 2; ++paged) {
    const size_t n = paged ? static_cast<size_t>(paging.num_blocks) * block_size * row
                           : static_cast<size_t>(slots) * max_seq * row;
    DeviceBuffer<uint16_t> d_q(t * static_cast<size_t>(heads) * hd), d_k(n), d_v(n);
    d_q.poison();
    d_k.poison();
    d_v.poison();
    QkvRopeParams p;
    p.qkv_f32 = d_qkv.ptr;
    p.positions = d_pos.ptr;
    p.slots = d_slot.ptr;
    p.q_norm = p.k_norm = norm ? reinterpret_cast<const bf16*>(d_norm.ptr) : nullptr;
    p.inv_freq = d_inv.ptr;
    p.q_out = reinterpret_cast<bf16*>(d_q.ptr);
    p.k_cache = reinterpret_cast<bf16*>(d_k.ptr);
    p.v_cache = reinterpret_cast<bf16*>(d_v.ptr);
    if (paged) p.kv = paging.pages(d_table.ptr);
    p.t = t;
    p.num_heads = heads;
    p.num_kv_heads = kv_heads;
    p.head_dim = hd;
    p.max_seq = max_seq;
    ASSERT_EQ(launch_qkv_rope(p), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    q_out[paged] = d_q.download();
    k_out[paged] = d_k.download();
    v_out[paged] = d_v.download();
  }
  EXPECT_TRUE(q_out[1] == q_out[0]);
  EXPECT_TRUE(paging.to_contiguous(k_out[1], row) == k_out[0]) << "k rows differ";
  EXPECT_TRUE(paging.to_contiguous(v_out[1], row) == v_out[0]) << "v rows differ";
  EXPECT_TRUE(paging.unmapped_untouched(k_out[1], row, uint16_t{0xffff})) << "k written off-table";
  EXPECT_TRUE(paging.unmapped_untouched(v_out[1], row, uint16_t{0xffff})) << "v written off-table";
}

TEST(QkvRopePaged, WritesThroughTheBlockTable) {
  MEGAOPS_REQUIRE_GPU();
  std::mt19937_64 rng(testing::test_seed() + 54);
  for (int bs : {16, 32}) {
    run_rope_case(32, 8, 64, false, 1, 4, 1000, bs, rng);
    run_rope_case(16, 8, 128, true, 17, 4, 8191, bs, rng);
    run_rope_case(8, 2, 256, false, 300, 3, 1000, bs, rng);
  }
}

}  // namespace
}  // namespace megaops
