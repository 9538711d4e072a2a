// SORT and SORT_RO over the in-memory store double: Redis 7's orders, LIMIT clamping, BY and GET
// patterns (strings and hash fields), BY nosort, STORE (replace, empty result deletes) and errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kv/resp/test_types.h"

namespace asymnvm::kv::resp {
namespace {

using testing::Types;
using V = std::vector<std::string>;

TEST_F(Types, Sort_NumericAlphaLimitDesc) {
  EXPECT_EQ(One({"RPUSH", "l", "3", "10", "1", "2.5", "-4"}), "5");
  EXPECT_EQ(R({"SORT", "l"}), (V{"-4", "1", "2.5", "3", "10"}));
  EXPECT_EQ(R({"SORT", "l", "DESC"}), (V{"10", "3", "2.5", "1", "-4"}));
  EXPECT_EQ(R({"SORT", "l", "ALPHA"}), (V{"-4", "1", "10", "2.5", "3"}));
  EXPECT_EQ(R({"SORT", "l", "LIMIT", "1", "2"}), (V{"1", "2.5"}));
  EXPECT_EQ(R({"SORT", "l", "LIMIT", "-5", "2"}), (V{"-4", "1"})) << "a negative offset is 0";
  EXPECT_EQ(R({"SORT", "l", "LIMIT", "3", "-1"}), (V{"3", "10"})) << "a negative count is all";
  EXPECT_EQ(R({"SORT", "l", "LIMIT", "9", "2"}), V{});
  EXPECT_EQ(R({"SORT_RO", "l", "DESC", "LIMIT", "0", "1"}), (V{"10"}));
  EXPECT_EQ(R({"SORT", "nosuch"}), V{});
  EXPECT_EQ(One({"RPUSH", "w", "1", "x"}), "2");
  EXPECT_EQ(One({"SORT", "w"}), "-ERR One or more scores can't be converted into double");
  EXPECT_EQ(One({"SET", "str", "v"}), "OK");
  EXPECT_EQ(One({"SORT", "str"}),
            "-WRONGTYPE Operation against a key holding the wrong kind of value");
  EXPECT_EQ(One({"SORT", "l", "LIMIT", "1"}), "-ERR syntax error");
  EXPECT_EQ(One({"SORT", "l", "LIMIT", "a", "1"}), "-ERR value is not an integer or out of range");
  EXPECT_EQ(One({"SORT_RO", "l", "STORE", "x"}), "-ERR syntax error");
}

TEST_F(Types, Sort_SetsAndSortedSets) {
  EXPECT_EQ(One({"SADD", "s", "b", "c", "a"}), "3");
  EXPECT_EQ(R({"SORT", "s", "ALPHA"}), (V{"a", "b", "c"}));
  EXPECT_EQ(One({"ZADD", "z", "3", "x", "1", "y", "2", "w"}), "3");
  EXPECT_EQ(R({"SORT", "z", "BY", "nosort"}), (V{"y", "w", "x"})) << "the sorted set's own order";
  EXPECT_EQ(R({"SORT", "z", "BY", "nosort", "DESC"}), (V{"x", "w", "y"}));
  EXPECT_EQ(R({"SORT", "z", "ALPHA", "DESC"}), (V{"y", "x", "w"}));
}

TEST_F(Types, Sort_ByAndGetPatterns) {
  EXPECT_EQ(One({"RPUSH", "ids", "1", "2", "3"}), "3");
  EXPECT_EQ(One({"MSET", "weight_1", "30", "weight_2", "10", "weight_3", "20"}), "OK");
  EXPECT_EQ(One({"MSET", "name_1", "ann", "name_3", "cid"}), "OK");
  EXPECT_EQ(R({"SORT", "ids", "BY", "weight_*"}), (V{"2", "3", "1"}));
  EXPECT_EQ(R({"SORT", "ids", "BY", "weight_*", "GET", "#", "GET", "name_*"}),
            (V{"2", "(nil)", "3", "cid", "1", "ann"}));
  EXPECT_EQ(R({"SORT", "ids", "BY", "nosort", "DESC"}), (V{"3", "2", "1"}))
      << "BY without * keeps the list's order";
  EXPECT_EQ(One({"HSET", "obj_1", "rank", "2"}), "1");
  EXPECT_EQ(One({"HSET", "obj_2", "rank", "1"}), "1");
  EXPECT_EQ(One({"HSET", "obj_3", "rank", "3", "tag", "t3"}), "2");
  EXPECT_EQ(R({"SORT", "ids", "BY", "obj_*->rank", "GET", "obj_*->tag"}),
            (V{"(nil)", "(nil)", "t3"}));
  EXPECT_EQ(R({"SORT", "ids", "BY", "obj_*->rank"}), (V{"2", "1", "3"}));
  EXPECT_EQ(R({"SORT", "ids", "BY", "name_*", "ALPHA"}), (V{"2", "1", "3"}))
      << "ALPHA BY: a missing weight sorts first";
  EXPECT_EQ(R({"SORT", "ids", "GET", "noglob"}), (V{"(nil)", "(nil)", "(nil)"}));
}

TEST_F(Types, Sort_Store) {
  EXPECT_EQ(One({"RPUSH", "{t}src", "b", "a", "c"}), "3");
  EXPECT_EQ(One({"SET", "{t}dst", "old"}), "OK");
  EXPECT_EQ(One({"SORT", "{t}src", "ALPHA", "STORE", "{t}dst"}), "3");
  EXPECT_EQ(One({"TYPE", "{t}dst"}), "list");
  EXPECT_EQ(R({"LRANGE", "{t}dst", "0", "-1"}), (V{"a", "b", "c"}));
  EXPECT_EQ(One({"RPUSH", "{t}dst", "d"}), "4") << "a list like any other";
  EXPECT_EQ(One({"SORT", "{t}empty", "STORE", "{t}dst"}), "0");
  EXPECT_EQ(One({"EXISTS", "{t}dst"}), "0") << "an empty result deletes the destination";
  // A result larger than one batch: stored in parts (doc/types.md §Large commands).
  std::vector<std::string> push = {"RPUSH", "{t}big"};
  for (int i = 0; i < 150; ++i) push.push_back(std::to_string(150 - i));
  EXPECT_EQ(One(push), "150");
  EXPECT_EQ(One({"SORT", "{t}big", "STORE", "{t}sorted"}), "150");
  auto v = R({"LRANGE", "{t}sorted", "0", "-1"});
  ASSERT_EQ(v.size(), 150u);
  EXPECT_EQ(v.front(), "1");
  EXPECT_EQ(v.back(), "150");
  std::string other = "k";
  while (store_.CommitGroup(other) == store_.CommitGroup("{t}src")) other += "k";
  EXPECT_EQ(One({"SORT", "{t}src", "STORE", other}).rfind("-CROSSSLOT", 0), 0u);
}

}  // namespace
}  // namespace asymnvm::kv::resp
