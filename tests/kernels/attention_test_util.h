// Inputs shared by the attention tests (attention_test.cu, attention_prefill_test.cu): head shapes,
// a bf16 KV cache poisoned with NaN outside the rows a test fills (with a float copy for the CPU
// reference), queries scaled for a useful softmax, and a packed prefill launch's inputs on the
// host and on the device.
#pragma once

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/attention.cuh"
#include "reference/ops.h"

namespace megaops::testing {

struct AttentionShape {
  int num_heads, num_kv_heads, head_dim;
};

inline std::string shape_name(const AttentionShape& s) {
  return "H=" + std::to_string(s.num_heads) + " KV=" + std::to_string(s.num_kv_heads) +
         " hd=" + std::to_string(s.head_dim);
}

// A poisoned bf16 cache [max_batch, max_seq, KV, hd] with a float copy for the reference.
struct KvCache {
  std::vector<uint16_t> k_bits, v_bits;
  std::vector<float> k, v;
  size_t row;  // elements per position
  KvCache(int max_batch, int max_seq, const AttentionShape& s)
      : k_bits(static_cast<size_t>(max_batch) * max_seq * s.num_kv_heads * s.head_dim, 0xffff),
        v_bits(k_bits.size(), 0xffff),
        k(k_bits.size(), NAN),
        v(k_bits.size(), NAN),
        row(static_cast<size_t>(s.num_kv_heads) * s.head_dim) {}
  // Fills positions [0, len) of one slot with random values.
  void fill(int slot, int max_seq, int len, std::mt19937_64& rng) {
    const size_t at = static_cast<size_t>(slot) * max_seq * row, n = len * row;
    const auto kb = to_bf16_bits(random_floats(n, -1, 1, rng));
    const auto vb = to_bf16_bits(random_floats(n, -1, 1, rng));
    std::copy(kb.begin(), kb.end(), k_bits.begin() + at);
    std::copy(vb.begin(), vb.end(), v_bits.begin() + at);
    for (size_t i = 0; i < n; ++i)
      k[at + i] = bf16_to_float(kb[i]), v[at + i] = bf16_to_float(vb[i]);
  }
  const float* k_slot(int slot, int max_seq) const {
    return k.data() + static_cast<size_t>(slot) * max_seq * row;
  }
  const float* v_slot(int slot, int max_seq) const {
    return v.data() + static_cast<size_t>(slot) * max_seq * row;
  }
};

// Queries scaled so softmax is neither flat nor one-hot: scores of order a few units.
// With k uniform in [-1, 1] and q in [-5, 5], q.k * head_dim^-1/2 has a standard deviation of
// about 1.7 for any head_dim.
inline std::vector<uint16_t> random_q(size_t n, std::mt19937_64& rng) {
  return to_bf16_bits(random_floats(n, -5, 5, rng));
}

// One sequence of a prefill launch: n_q tokens at positions [pos0, pos0 + n_q) of slot.
struct PrefillSeq {
  int slot, pos0, n_q;
};

inline std::string describe(const AttentionShape& s, const std::vector<PrefillSeq>& seqs,
                            bool pdl) {
  std::string name = shape_name(s) + " pdl=" + std::to_string(pdl) + " seqs:";
  for (const PrefillSeq& q : seqs)
    name += " (slot " + std::to_string(q.slot) + ", p0 " + std::to_string(q.pos0) + ", n " +
            std::to_string(q.n_q) + ")";
  return name;
}

// The host side of a packed prefill launch: seqs' tokens one sequence after the other, the cache
// random at positions [0, pos0 + n_q) of each sequence's slot (NaN elsewhere), q random.
struct PrefillInputs {
  AttentionShape shape;
  std::vector<PrefillSeq> seqs;
  int max_seq;
  KvCache cache;
  std::vector<int32_t> slots, positions;
  std::vector<uint16_t> q_bits;
  std::vector<float> q;
  float scale;

  PrefillInputs(const AttentionShape& s, std::vector<PrefillSeq> packed, int max_batch,
                int max_seq_, std::mt19937_64& rng)
      : shape(s),
        seqs(std::move(packed)),
        max_seq(max_seq_),
        cache(max_batch, max_seq_, s),
        scale(1.0f / std::sqrt(static_cast<float>(s.head_dim))) {
    for (const PrefillSeq& sq : seqs) {
      cache.fill(sq.slot, max_seq, sq.pos0 + sq.n_q, rng);
      for (int i = 0; i < sq.n_q; ++i) slots.push_back(sq.slot), positions.push_back(sq.pos0 + i);
    }
    q_bits = random_q(static_cast<size_t>(t()) * token(), rng);
    q = from_bf16_bits(q_bits);
  }
  int t() const { return static_cast<int>(slots.size()); }
  // q and out elements a token.
  size_t token() const { return static_cast<size_t>(shape.num_heads) * shape.head_dim; }
  // The first token of sequence i.
  int first_token(size_t i) const {
    int at = 0;
    for (size_t j = 0; j < i; ++j) at += seqs[j].n_q;
    return at;
  }
  // ref::attention_prefill of sequence i, [n_q, num_heads, head_dim].
  std::vector<float> reference(size_t i) const {
    const PrefillSeq& sq = seqs[i];
    std::vector<float> out(sq.n_q * token());
    ref::attention_prefill(q.data() + first_token(i) * token(), cache.k_slot(sq.slot, max_seq),
                           cache.v_slot(sq.slot, max_seq), sq.n_q, sq.pos0, shape.num_heads,
                           shape.num_kv_heads, shape.head_dim, scale, out.data());
    return out;
  }
};

// PrefillInputs on the device (out not written yet) and the params that launch on them.
struct PrefillDeviceInputs {
  DeviceBuffer<uint16_t> q, k, v, out;
  DeviceBuffer<int32_t> slots, positions;
  PrefillAttentionParams params;

  PrefillDeviceInputs(const PrefillInputs& in, bool pdl)
      : q(in.q_bits.size()),
        k(in.cache.k_bits.size()),
        v(in.cache.v_bits.size()),
        out(in.q_bits.size()),
        slots(in.slots.size()),
        positions(in.positions.size()) {
    q.upload(in.q_bits);
    k.upload(in.cache.k_bits);
    v.upload(in.cache.v_bits);
    slots.upload(in.slots);
    positions.upload(in.positions);
    params.q = reinterpret_cast<const bf16*>(q.ptr);
    params.k_cache = reinterpret_cast<const bf16*>(k.ptr);
    params.v_cache = reinterpret_cast<const bf16*>(v.ptr);
    params.slots = slots.ptr;
    params.positions = positions.ptr;
    params.out = reinterpret_cast<bf16*>(out.ptr);
    params.t = in.t();
    params.num_heads = in.shape.num_heads;
    params.num_kv_heads = in.shape.num_kv_heads;
    params.head_dim = in.shape.head_dim;
    params.max_seq = in.max_seq;
    params.scale = in.scale;
    params.launch.pdl = pdl;
  }
};

}  // namespace megaops::testing
