// The KV block allocator with prefix caching: registered blocks are found again by their tokens
// and everything before them, shared by reference, kept while free and forgotten only when handed
// out again (least recently released first), and never let the pool hold less than without the
// cache.
#include "engine/block_manager.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace megaops {
namespace {

std::function<int(int)> tokens_of(const std::vector<int>& t) {
  return [&t](int i) { return t.at(i); };
}

// A sequence that grows to `computed` positions and registers what it filled.
std::vector<int32_t> fill(BlockManager& m, const std::vector<int>& t, int computed,
                          PrefixChain& chain) {
  std::vector<int32_t> table;
  EXPECT_TRUE(m.grow(table, computed));
  m.register_full(tokens_of(t), computed, table, chain);
  return table;
}

TEST(BlockManager, RegisteredBlocksAreFoundByTheirWholePrefix) {
  BlockManager m(16, 4);
  std::vector<int> a = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};  // two full blocks and 3 positions
  PrefixChain ca;
  std::vector<int32_t> ta = fill(m, a, 11, ca);
  EXPECT_EQ(ca.blocks, 2);
  EXPECT_EQ(m.num_cached(), 2);
  EXPECT_EQ(m.num_used(), 3);

  // The same tokens: both full blocks, shared (a block held twice is used once).
  std::vector<int32_t> tb;
  PrefixChain cb;
  EXPECT_EQ(m.match_prefix(tokens_of(a), 10, tb, cb), 8);
  EXPECT_EQ(tb, (std::vector<int32_t>{ta[0], ta[1]}));
  EXPECT_EQ(m.num_used(), 3);
  // The limit is in whole blocks: 7 tokens cover one.
  std::vector<int32_t> tc;
  PrefixChain cc;
  EXPECT_EQ(m.match_prefix(tokens_of(a), 7, tc, cc), 4);
  // A different token in the second block stops the match there; one in the first block stops
  // it at once, even though the second block's own tokens are the same (its prefix is not).
  std::vector<int> d = a, e = a;
  d[5] = 99;
  e[0] = 99;
  std::vector<int32_t> td, te;
  PrefixChain cd, ce;
  EXPECT_EQ(m.match_prefix(tokens_of(d), 10, td, cd), 4);
  EXPECT_EQ(m.match_prefix(tokens_of(e), 10, te, ce), 0);
  EXPECT_THROW(m.match_prefix(tokens_of(a), 10, td, cd), Error);  // the table must be empty

  // Shared blocks stay held until the last table lets go.
  m.release(ta, &ca);
  EXPECT_EQ(ca.blocks, 0);
  EXPECT_EQ(m.num_used(), 2);
  for (auto* t : {&tb, &tc, &td, &te}) m.release(*t);
  EXPECT_EQ(m.num_used(), 0);
  EXPECT_EQ(m.num_cached(), 2);  // free, still cached
  std::vector<int32_t> again;
  PrefixChain cg;
  EXPECT_EQ(m.match_prefix(tokens_of(a), 11, again, cg), 8);
  EXPECT_EQ(m.num_used(), 2);
  m.release(again);
  std::vector<int32_t> not_held = {0};
  EXPECT_THROW(m.release(not_held), Error);
}

TEST(BlockManager, FreeCachedBlocksAreReusedLeastRecentlyReleasedFirst) {
  BlockManager m(4, 2);
  std::vector<int> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  PrefixChain ca, cb;
  std::vector<int32_t> ta = fill(m, a, 4, ca), tb = fill(m, b, 4, cb);
  m.release(ta);  // a's tail first, then its head; then b's
  m.release(tb);
  EXPECT_EQ(m.num_free(), 4);
  EXPECT_EQ(m.num_cached(), 4);
  // The pool is all there: a table of 3 blocks takes the least recently released ones, a's two
  // and b's tail, which are forgotten; b's head still matches.
  std::vector<int32_t> big;
  ASSERT_TRUE(m.grow(big, 6));
  EXPECT_EQ(m.num_cached(), 1);
  std::vector<int32_t> t;
  PrefixChain c;
  EXPECT_EQ(m.match_prefix(tokens_of(a), 4, t, c), 0);
  EXPECT_EQ(m.match_prefix(tokens_of(b), 4, t, c), 2);
  EXPECT_EQ(m.num_free(), 0);
  m.release(t);
  m.release(big);
  EXPECT_EQ(m.num_used(), 0);
}

TEST(BlockManager, TheSamePrefixTwiceIsCachedOnce) {
  BlockManager m(8, 2);
  std::vector<int> a = {1, 2, 3, 4};
  PrefixChain c1, c2;
  std::vector<int32_t> t1 = fill(m, a, 4, c1), t2 = fill(m, a, 4, c2);  // computed side by side
  EXPECT_EQ(m.num_cached(), 2);
  EXPECT_EQ(c1.hash, c2.hash);
  m.release(t1);
  m.release(t2);
  std::vector<int32_t> t;
  PrefixChain c;
  EXPECT_EQ(m.match_prefix(tokens_of(a), 4, t, c), 4);
  EXPECT_EQ(t, (std::vector<int32_t>{0, 1}));
}

TEST(BlockManager, WithoutPrefixCachingNothingIsShared) {
  BlockManager m(8, 2, false);
  std::vector<int> a = {1, 2, 3, 4};
  PrefixChain c;
  std::vector<int32_t> t = fill(m, a, 4, c);
  EXPECT_EQ(m.num_cached(), 0);
  std::vector<int32_t> u;
  PrefixChain cu;
  EXPECT_EQ(m.match_prefix(tokens_of(a), 4, u, cu), 0);
  EXPECT_TRUE(u.empty());
  EXPECT_FALSE(m.prefix_caching());
}

}  // namespace
}  // namespace megaops
