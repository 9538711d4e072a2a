// Unit tests of the sorted-set commands (zset_commands.cc) over the in-memory store double:
// replies in RESP2 and RESP3, Redis's argument rules and error texts, one atomic batch per write,
// score printing, dense slots under removal, and a randomized comparison against a model.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "kv/resp/test_types.h"
#include "kv/resp/types.h"

namespace asymnvm::kv::resp {
namespace {

using testing::Types;
using V = std::vector<std::string>;

class Zset : public Types {
 protected:
  // ZRANGE key 0 -1 WITHSCORES as (member, score text) pairs.
  std::vector<std::pair<std::string, std::string>> All(const std::string& key) {
    auto v = R({"ZRANGE", key, "0", "-1", "WITHSCORES"});
    std::vector<std::pair<std::string, std::string>> out;
    for (size_t i = 0; i + 1 < v.size(); i += 2) out.emplace_back(v[i], v[i + 1]);
    return out;
  }
};

TEST_F(Zset, AddScoreCardRemAndType) {
  EXPECT_EQ(One({"ZADD", "z", "1", "a", "2", "b", "1.5", "c", "3", "a"}), "3")
      << "a repeated member counts once; its last score wins";
  EXPECT_EQ(One({"ZSCORE", "z", "a"}), "3");
  EXPECT_EQ(One({"ZSCORE", "z", "x"}), "(nil)");
  EXPECT_EQ(One({"ZSCORE", "nosuch", "a"}), "(nil)");
  EXPECT_EQ(One({"ZCARD", "z"}), "3");
  EXPECT_EQ(One({"ZCARD", "nosuch"}), "0");
  EXPECT_EQ(One({"TYPE", "z"}), "zset");
  EXPECT_EQ(R({"ZMSCORE", "z", "c", "x", "b"}), (V{"1.5", "(nil)", "2"}));
  EXPECT_EQ(R({"ZMSCORE", "nosuch", "a", "b"}), (V{"(nil)", "(nil)"}));
  EXPECT_EQ(R({"ZRANGE", "z", "0", "-1"}), (V{"c", "b", "a"}));
  EXPECT_EQ(One({"ZREM", "z", "c", "x", "c"}), "1");
  EXPECT_EQ(All("z"), (std::vector<std::pair<std::string, std::string>>{{"b", "2"}, {"a", "3"}}));
  EXPECT_EQ(One({"ZREM", "z", "a", "b"}), "2");
  EXPECT_EQ(One({"EXISTS", "z"}), "0") << "an emptied sorted set is deleted";
  EXPECT_EQ(SubRecords(), 0u) << "removing members removes their records";
  EXPECT_EQ(One({"ZADD", "z", "1", "a"}), "1");
  EXPECT_EQ(One({"OBJECT", "ENCODING", "z"}), "skiplist");
  EXPECT_EQ(One({"SET", "str", "v"}), "OK");
  EXPECT_EQ(R({"SCAN", "0", "TYPE", "zset"}), (V{"0", "z"}));
  EXPECT_EQ(One({"EXPIRE", "z", "10"}), "1");
  EXPECT_EQ(One({"TTL", "z"}), "10");
  EXPECT_EQ(One({"ZSCORE", "z", "a"}), "1") << "EXPIRE keeps the sorted set";
  testing::g_now_ms += 11'000;
  EXPECT_EQ(One({"EXISTS", "z"}), "0");
  EXPECT_EQ(One({"ZCARD", "z"}), "0") << "expired";
  EXPECT_EQ(One({"ZADD", "z", "2", "b"}), "1");
  EXPECT_EQ(R({"ZRANGE", "z", "0", "-1"}), (V{"b"})) << "a new incarnation: a is gone";
  EXPECT_EQ(One({"DEL", "z"}), "1");
  EXPECT_EQ(One({"ZCARD", "z"}), "0");
}

TEST_F(Zset, AddOptionsAndErrors) {
  EXPECT_EQ(One({"ZADD", "z", "XX", "1", "a"}), "0") << "XX on a missing key creates nothing";
  EXPECT_EQ(One({"EXISTS", "z"}), "0");
  EXPECT_EQ(One({"ZADD", "z", "1", "a", "2", "b"}), "2");
  EXPECT_EQ(One({"ZADD", "z", "NX", "5", "a", "3", "c"}), "1");
  EXPECT_EQ(One({"ZSCORE", "z", "a"}), "1") << "NX never updates";
  EXPECT_EQ(One({"ZADD", "z", "XX", "CH", "7", "a", "9", "d"}), "1") << "CH counts the update";
  EXPECT_EQ(One({"ZSCORE", "z", "d"}), "(nil)") << "XX never adds";
  EXPECT_EQ(One({"ZADD", "z", "GT", "CH", "6", "a", "4", "b"}), "1") << "a: 7→6 refused";
  EXPECT_EQ(One({"ZSCORE", "z", "a"}), "7");
  EXPECT_EQ(One({"ZADD", "z", "LT", "CH", "6", "a", "5", "b"}), "1");
  EXPECT_EQ(One({"ZSCORE", "z", "a"}), "6");
  EXPECT_EQ(One({"ZADD", "z", "INCR", "2.5", "a"}), "8.5");
  EXPECT_EQ(One({"ZADD", "z", "NX", "INCR", "1", "a"}), "(nil)") << "INCR refused: nil";
  EXPECT_EQ(One({"ZADD", "z", "GT", "INCR", "-1", "a"}), "(nil)");
  EXPECT_EQ(One({"ZINCRBY", "z", "-0.5", "a"}), "8");
  EXPECT_EQ(One({"ZINCRBY", "z", "2", "new"}), "2");
  EXPECT_EQ(One({"ZADD", "z", "1", "a", "2"}), "-ERR syntax error");
  EXPECT_EQ(One({"ZADD", "z", "NX", "1"}), "-ERR syntax error");
  EXPECT_EQ(One({"ZADD", "z", "NX", "XX", "1", "a"}),
            "-ERR XX and NX options at the same time are not compatible");
  EXPECT_EQ(One({"ZADD", "z", "GT", "LT", "1", "a"}),
            "-ERR GT, LT, and/or NX options at the same time are not compatible");
  EXPECT_EQ(One({"ZADD", "z", "NX", "GT", "1", "a"}),
            "-ERR GT, LT, and/or NX options at the same time are not compatible");
  EXPECT_EQ(One({"ZADD", "z", "INCR", "1", "a", "2", "b"}),
            "-ERR INCR option supports a single increment-element pair");
  EXPECT_EQ(One({"ZADD", "z", "1", "a", "nan", "b"}), "-ERR value is not a valid float");
  EXPECT_EQ(One({"ZADD", "z", "1x", "b"}), "-ERR value is not a valid float");
  EXPECT_EQ(One({"ZINCRBY", "z", "abc", "a"}), "-ERR value is not a valid float");
  EXPECT_EQ(One({"ZADD", "z", "inf", "top"}), "1");
  EXPECT_EQ(One({"ZINCRBY", "z", "-inf", "top"}), "-ERR resulting score is not a number (NaN)");
  EXPECT_EQ(One({"ZSCORE", "z", "top"}), "inf") << "the failed increment changed nothing";
  EXPECT_EQ(One({"ZADD", "z", "1"}), "-ERR wrong number of arguments for 'zadd' command");
}

TEST_F(Zset, WrongType) {
  EXPECT_EQ(One({"SET", "s", "x"}), "OK");
  EXPECT_EQ(One({"SADD", "set", "x"}), "1");
  const std::string wt = "-" + std::string(kErrWrongType);
  for (const V& cmd :
       {V{"ZADD", "s", "1", "a"}, V{"ZSCORE", "s", "a"}, V{"ZCARD", "s"},
        V{"ZRANGE", "s", "0", "-1"}, V{"ZRANK", "s", "a"}, V{"ZPOPMIN", "s"}, V{"ZREM", "s", "a"},
        V{"ZRANGESTORE", "d", "set", "0", "-1"}, V{"ZUNION", "2", "set", "s"}}) {
    EXPECT_EQ(One(cmd), wt) << cmd[0];
  }
  EXPECT_EQ(One({"ZADD", "z", "1", "a"}), "1");
  EXPECT_EQ(One({"GET", "z"}), wt);
  EXPECT_EQ(One({"SADD", "z", "a"}), wt);
  EXPECT_EQ(One({"HGET", "z", "a"}), wt);
}

TEST_F(Zset, RangesByRankScoreAndLex) {
  EXPECT_EQ(One({"ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e"}), "5");
  EXPECT_EQ(R({"ZRANGE", "z", "1", "-2"}), (V{"b", "c", "d"}));
  EXPECT_EQ(R({"ZRANGE", "z", "-100", "100"}), (V{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(R({"ZRANGE", "z", "3", "1"}), V{});
  EXPECT_EQ(R({"ZREVRANGE", "z", "0", "1", "WITHSCORES"}), (V{"e", "5", "d", "4"}));
  EXPECT_EQ(R({"ZRANGE", "z", "0", "1", "REV"}), (V{"e", "d"}));
  EXPECT_EQ(R({"ZRANGEBYSCORE", "z", "(1", "3"}), (V{"b", "c"}));
  EXPECT_EQ(R({"ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "1", "2"}), (V{"b", "c"}));
  EXPECT_EQ(R({"ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "-1", "2"}), V{});
  EXPECT_EQ(R({"ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "4", "-1"}), (V{"e"}));
  EXPECT_EQ(R({"ZREVRANGEBYSCORE", "z", "4", "(2", "WITHSCORES"}), (V{"d", "4", "c", "3"}));
  EXPECT_EQ(R({"ZRANGE", "z", "(4", "+inf", "BYSCORE"}), (V{"e"}));
  EXPECT_EQ(R({"ZRANGE", "z", "4", "2", "BYSCORE", "REV", "LIMIT", "0", "2"}), (V{"d", "c"}));
  EXPECT_EQ(R({"ZRANGEBYSCORE", "z", "3", "1"}), V{});
  EXPECT_EQ(One({"ZCOUNT", "z", "(1", "3"}), "2");
  EXPECT_EQ(One({"ZCOUNT", "nosuch", "-inf", "inf"}), "0");

  EXPECT_EQ(One({"ZADD", "l", "0", "alpha", "0", "bar", "0", "cool", "0", "down"}), "4");
  EXPECT_EQ(R({"ZRANGEBYLEX", "l", "-", "+"}), (V{"alpha", "bar", "cool", "down"}));
  EXPECT_EQ(R({"ZRANGEBYLEX", "l", "[bar", "(down"}), (V{"bar", "cool"}));
  EXPECT_EQ(R({"ZREVRANGEBYLEX", "l", "+", "(bar", "LIMIT", "1", "5"}), (V{"cool"}));
  EXPECT_EQ(R({"ZRANGE", "l", "[b", "[d", "BYLEX"}), (V{"bar", "cool"}));
  EXPECT_EQ(One({"ZLEXCOUNT", "l", "(alpha", "+"}), "3");
  EXPECT_EQ(R({"ZRANGEBYLEX", "l", "+", "-"}), V{});

  EXPECT_EQ(One({"ZRANGEBYSCORE", "z", "x", "1"}), "-ERR min or max is not a float");
  EXPECT_EQ(One({"ZCOUNT", "z", "1", "(nan"}), "-ERR min or max is not a float");
  EXPECT_EQ(One({"ZRANGEBYLEX", "l", "a", "+"}), "-ERR min or max not valid string range item");
  EXPECT_EQ(One({"ZLEXCOUNT", "l", "-", "+x"}), "-ERR min or max not valid string range item");
  EXPECT_EQ(One({"ZRANGE", "z", "0", "1", "LIMIT", "0", "1"}),
            "-ERR syntax error, LIMIT is only supported in combination with either BYSCORE or "
            "BYLEX");
  EXPECT_EQ(One({"ZRANGE", "l", "-", "+", "BYLEX", "WITHSCORES"}),
            "-ERR syntax error, WITHSCORES not supported in combination with BYLEX");
  EXPECT_EQ(One({"ZRANGEBYSCORE", "z", "0", "1", "REV"}), "-ERR syntax error");
  EXPECT_EQ(One({"ZRANGE", "z", "0", "1", "BYSCORE", "BYLEX"}), "-ERR syntax error");
  EXPECT_EQ(One({"ZRANGE", "z", "a", "1"}), "-ERR value is not an integer or out of range");
  EXPECT_EQ(Run({"ZRANGE", "nosuch", "0", "-1"}), "*0\r\n");
}

TEST_F(Zset, RankPopRemRangeStore) {
  EXPECT_EQ(One({"ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e"}), "5");
  EXPECT_EQ(One({"ZRANK", "z", "c"}), "2");
  EXPECT_EQ(One({"ZREVRANK", "z", "c"}), "2");
  EXPECT_EQ(One({"ZREVRANK", "z", "a"}), "4");
  EXPECT_EQ(R({"ZRANK", "z", "d", "WITHSCORE"}), (V{"3", "4"}));
  EXPECT_EQ(One({"ZRANK", "z", "x"}), "(nil)");
  EXPECT_EQ(Run({"ZRANK", "z", "x", "WITHSCORE"}), "*-1\r\n");
  EXPECT_EQ(One({"ZRANK", "z", "a", "BAD"}), "-ERR syntax error");
  EXPECT_EQ(One({"ZRANGESTORE", "dst", "z", "1", "3"}), "3");
  EXPECT_EQ(R({"ZRANGE", "dst", "0", "-1", "WITHSCORES"}), (V{"b", "2", "c", "3", "d", "4"}));
  EXPECT_EQ(One({"ZRANGESTORE", "dst", "z", "(5", "inf", "BYSCORE"}), "0");
  EXPECT_EQ(One({"EXISTS", "dst"}), "0") << "an empty result deletes the destination";
  EXPECT_EQ(One({"ZRANGESTORE", "dst", "z", "0", "1", "WITHSCORES"}), "-ERR syntax error");

  EXPECT_EQ(R({"ZPOPMIN", "z"}), (V{"a", "1"}));
  EXPECT_EQ(R({"ZPOPMAX", "z", "2"}), (V{"e", "5", "d", "4"}));
  EXPECT_EQ(Run({"ZPOPMIN", "z", "0"}), "*0\r\n");
  EXPECT_EQ(Run({"ZPOPMIN", "nosuch"}), "*0\r\n");
  EXPECT_EQ(One({"ZPOPMIN", "z", "-1"}), "-ERR value is out of range, must be positive");
  EXPECT_EQ(One({"ZPOPMIN", "z", "1", "2"}), "-ERR syntax error");
  EXPECT_EQ(R({"ZMPOP", "2", "nosuch", "z", "MIN", "COUNT", "10"}), (V{"z", "b", "2", "c", "3"}));
  EXPECT_EQ(One({"EXISTS", "z"}), "0");
  EXPECT_EQ(Run({"ZMPOP", "1", "z", "MAX"}), "*-1\r\n");
  EXPECT_EQ(One({"ZMPOP", "0", "z", "MAX"}), "-ERR numkeys should be greater than 0");
  EXPECT_EQ(One({"ZMPOP", "1", "z", "MAX", "COUNT", "0"}), "-ERR count should be greater than 0");
  EXPECT_EQ(One({"ZMPOP", "1", "z", "MIDDLE"}), "-ERR syntax error");
  EXPECT_EQ(One({"ZMPOP", "5", "z", "MIN"}), "-ERR syntax error");

  EXPECT_EQ(One({"ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e"}), "5");
  EXPECT_EQ(One({"ZREMRANGEBYRANK", "z", "0", "1"}), "2");
  EXPECT_EQ(One({"ZREMRANGEBYSCORE", "z", "(3", "4"}), "1");
  EXPECT_EQ(R({"ZRANGE", "z", "0", "-1"}), (V{"c", "e"}));
  EXPECT_EQ(One({"ZREMRANGEBYLEX", "z", "-", "+"}), "2");
  EXPECT_EQ(One({"EXISTS", "z"}), "0");
  EXPECT_EQ(One({"ZREMRANGEBYSCORE", "z", "a", "1"}), "-ERR min or max is not a float");
  EXPECT_EQ(One({"ZREMRANGEBYRANK", "nosuch", "0", "-1"}), "0");
}

TEST_F(Zset, UnionInterDiffAndCard) {
  EXPECT_EQ(One({"ZADD", "a", "1", "x", "2", "y", "3", "z"}), "3");
  EXPECT_EQ(One({"ZADD", "b", "10", "y", "20", "z", "30", "w"}), "3");
  EXPECT_EQ(One({"SADD", "s", "z", "w"}), "2");
  EXPECT_EQ(R({"ZUNION", "2", "a", "b", "WITHSCORES"}),
            (V{"x", "1", "y", "12", "z", "23", "w", "30"}));
  EXPECT_EQ(R({"ZINTER", "2", "a", "b", "WEIGHTS", "2", "1", "AGGREGATE", "MAX", "WITHSCORES"}),
            (V{"y", "10", "z", "20"}));
  EXPECT_EQ(R({"ZINTER", "3", "a", "b", "s", "WITHSCORES"}), (V{"z", "24"}))
      << "a set source gives each member score 1";
  EXPECT_EQ(R({"ZDIFF", "2", "a", "b", "WITHSCORES"}), (V{"x", "1"}));
  EXPECT_EQ(R({"ZUNION", "2", "a", "nosuch", "AGGREGATE", "MIN"}), (V{"x", "y", "z"}));
  EXPECT_EQ(One({"ZINTERCARD", "2", "a", "b"}), "2");
  EXPECT_EQ(One({"ZINTERCARD", "2", "a", "b", "LIMIT", "1"}), "1");
  EXPECT_EQ(One({"ZINTERCARD", "2", "a", "b", "LIMIT", "-1"}), "-ERR LIMIT can't be negative");
  EXPECT_EQ(One({"ZUNIONSTORE", "d", "2", "a", "b", "WEIGHTS", "1", "-1"}), "4");
  EXPECT_EQ(R({"ZRANGE", "d", "0", "-1", "WITHSCORES"}),
            (V{"w", "-30", "z", "-17", "y", "-8", "x", "1"}));
  EXPECT_EQ(One({"ZINTERSTORE", "d", "2", "a", "nosuch"}), "0");
  EXPECT_EQ(One({"EXISTS", "d"}), "0");
  EXPECT_EQ(One({"ZDIFFSTORE", "a", "2", "a", "b"}), "1") << "the destination may be a source";
  EXPECT_EQ(R({"ZRANGE", "a", "0", "-1"}), (V{"x"}));
  EXPECT_EQ(One({"ZUNION", "0", "a"}), "-ERR at least 1 input key is needed for 'zunion' command");
  EXPECT_EQ(One({"ZUNIONSTORE", "d", "0", "a"}),
            "-ERR at least 1 input key is needed for 'zunionstore' command");
  EXPECT_EQ(One({"ZUNION", "3", "a", "b"}), "-ERR syntax error");
  EXPECT_EQ(One({"ZUNION", "2", "a", "b", "WEIGHTS", "1", "x"}),
            "-ERR weight value is not a float");
  EXPECT_EQ(One({"ZUNION", "2", "a", "b", "AGGREGATE", "AVG"}), "-ERR syntax error");
  EXPECT_EQ(One({"ZDIFF", "2", "a", "b", "WEIGHTS", "1", "1"}), "-ERR syntax error");
  EXPECT_EQ(One({"ZUNIONSTORE", "d", "2", "a", "b", "WITHSCORES"}), "-ERR syntax error");
  EXPECT_EQ(One({"ZUNION", "x", "a"}), "-ERR value is not an integer or out of range");
}

TEST_F(Zset, Resp3RepliesAndScorePrinting) {
  EXPECT_EQ(One({"ZADD", "z", "0.1", "a", "1e20", "b", "-inf", "c", "1.5e-7", "d", "100", "e"}),
            "5");
  EXPECT_EQ(One({"ZSCORE", "z", "a"}), "0.1") << "the shortest text that reads back";
  EXPECT_EQ(One({"ZSCORE", "z", "b"}), "1e+20");
  EXPECT_EQ(One({"ZSCORE", "z", "c"}), "-inf");
  EXPECT_EQ(One({"ZSCORE", "z", "d"}), "1.5e-07");
  EXPECT_EQ(One({"ZSCORE", "z", "e"}), "100");
  EXPECT_EQ(Run({"ZSCORE", "z", "a"}), "$3\r\n0.1\r\n");
  const std::string dblmax =
      "179769313486231570814527423731704356798070567525844996598917476803"
      "157260780028538760589558632766878171540458953514382464234321326889"
      "464182768467546703537516986049910576551282076245490090389328944075"
      "868508455133942304583236903222948165808559332123348274797826204144"
      "723168738177180919299881250404026184124858368.00000000000000000";
  EXPECT_EQ(One({"ZADD", "big", dblmax, "m"}), "1") << "a 330-character score parses";
  EXPECT_EQ(One({"ZSCORE", "big", "m"}), "1.7976931348623157e+308");
  EXPECT_EQ(One({"ZADD", "big", "1e400", "m"}), "-ERR value is not a valid float")
      << "an overflow is refused";
  session_.proto = 3;
  EXPECT_EQ(Run({"ZSCORE", "z", "a"}), ",0.1\r\n");
  EXPECT_EQ(Run({"ZSCORE", "z", "c"}), ",-inf\r\n");
  EXPECT_EQ(Run({"ZSCORE", "z", "x"}), "_\r\n");
  EXPECT_EQ(Run({"ZINCRBY", "z", "1", "e"}), ",101\r\n");
  EXPECT_EQ(Run({"ZRANGE", "z", "0", "1", "WITHSCORES"}),
            "*2\r\n*2\r\n$1\r\nc\r\n,-inf\r\n*2\r\n$1\r\nd\r\n,1.5e-07\r\n");
  EXPECT_EQ(Run({"ZRANGE", "z", "0", "0"}), "*1\r\n$1\r\nc\r\n");
  EXPECT_EQ(Run({"ZPOPMIN", "z"}), "*2\r\n$1\r\nc\r\n,-inf\r\n") << "no count: flat";
  EXPECT_EQ(Run({"ZPOPMIN", "z", "1"}), "*1\r\n*2\r\n$1\r\nd\r\n,1.5e-07\r\n")
      << "with a count: pairs";
  EXPECT_EQ(Run({"ZRANK", "z", "e", "WITHSCORE"}), "*2\r\n:1\r\n,101\r\n");
  EXPECT_EQ(Run({"ZRANDMEMBER", "z", "-1", "WITHSCORES"}).substr(0, 6), "*1\r\n*2");
  EXPECT_EQ(Run({"ZMSCORE", "z", "a", "x"}), "*2\r\n,0.1\r\n_\r\n");
  EXPECT_EQ(Run({"ZSCAN", "z", "0", "MATCH", "a"}),
            "*2\r\n$1\r\n0\r\n*2\r\n$1\r\na\r\n$3\r\n0.1\r\n")
      << "ZSCAN's scores are bulk strings in RESP3 too";
}

TEST_F(Zset, RandMemberAndScan) {
  std::set<std::string> members;
  std::vector<std::string> args{"ZADD", "z"};
  for (int i = 0; i < 30; ++i) {
    args.push_back(std::to_string(i));
    args.push_back("m" + std::to_string(i));
    members.insert("m" + std::to_string(i));
  }
  EXPECT_EQ(One(args), "30");
  auto distinct = R({"ZRANDMEMBER", "z", "10"});
  EXPECT_EQ(std::set<std::string>(distinct.begin(), distinct.end()).size(), 10u);
  EXPECT_EQ(R({"ZRANDMEMBER", "z", "100"}).size(), 30u);
  EXPECT_EQ(R({"ZRANDMEMBER", "z", "-100"}).size(), 100u);
  auto ws = R({"ZRANDMEMBER", "z", "5", "WITHSCORES"});
  ASSERT_EQ(ws.size(), 10u);
  for (size_t i = 0; i < ws.size(); i += 2) EXPECT_EQ("m" + ws[i + 1], ws[i]);
  EXPECT_EQ(Run({"ZRANDMEMBER", "nosuch"}), "$-1\r\n");
  EXPECT_EQ(Run({"ZRANDMEMBER", "nosuch", "3"}), "*0\r\n");
  EXPECT_EQ(One({"ZRANDMEMBER", "z", "1", "x"}), "-ERR syntax error");
  EXPECT_EQ(One({"ZRANDMEMBER", "z", "-9223372036854775808"}), "-ERR value is out of range");
  EXPECT_EQ(
      One({"ZRANDMEMBER", "z", "-4611686018427387903"}).rfind("-ERR value is out of range", 0), 0u)
      << "a reply that could never be built is refused, not attempted";
  EXPECT_EQ(R({"ZRANGEBYLEX", "z", "-", "+", "LIMIT", "9223372036854775807", "1"}), V{});
  EXPECT_EQ(R({"ZREVRANGEBYSCORE", "z", "+inf", "-inf", "LIMIT", "9223372036854775807", "1"}), V{});
  // ZSCAN under deletions never misses a survivor; on a static set it never repeats.
  std::multiset<std::string> seen;
  std::string cursor = "0";
  bool deleted = false;
  do {
    auto v = R({"ZSCAN", "z", cursor, "COUNT", "7"});
    ASSERT_GE(v.size(), 1u);
    cursor = v[0];
    for (size_t i = 1; i + 1 < v.size(); i += 2) seen.insert(v[i]);
    if (!deleted) {
      EXPECT_EQ(One({"ZREM", "z", "m0", "m1", "m2"}), "3");
      deleted = true;
    }
  } while (cursor != "0");
  for (int i = 3; i < 30; ++i) EXPECT_GE(seen.count("m" + std::to_string(i)), 1u) << i;
  EXPECT_EQ(R({"ZSCAN", "z", "0", "COUNT", "100", "NOSCORES"}).size(), 28u);
  EXPECT_EQ(One({"ZSCAN", "z", "x"}), "-ERR invalid cursor");
}

TEST_F(Zset, EachWriteIsOneBatchAndALargeOneCommitsInParts) {
  const int64_t before = store_.batches();
  EXPECT_EQ(One({"ZADD", "z", "1", "a", "2", "b", "3", "c"}), "3");
  EXPECT_EQ(store_.batches(), before + 1);
  EXPECT_EQ(store_.puts(), 0) << "no write outside the batch";
  std::vector<std::string> big{"ZADD", "z"};
  for (int i = 0; i < 40; ++i) {
    big.push_back("1");
    big.push_back("n" + std::to_string(i));
  }
  // 81 records: the members under a new incarnation in parts, then the metadata (types_test.cc).
  EXPECT_EQ(One(big), "40");
  EXPECT_GE(store_.batches(), before + 4);
  EXPECT_EQ(One({"ZCARD", "z"}), "43");
  EXPECT_EQ(R({"ZRANGE", "z", "1", "2", "WITHSCORES"}),
            (std::vector<std::string>{"n0", "1", "n1", "1"}));
  EXPECT_EQ(One({"ZSCORE", "z", "c"}), "3");
}

// A concurrent writer commits between a command's metadata read and its member read: the member
// record names a slot beyond the size read. That is a stale read (the command starts over), not
// corruption.
TEST_F(Zset, StaleReadBetweenMetadataAndMemberStartsOver) {
  EXPECT_EQ(One({"ZADD", "z", "1", "b"}), "1");  // b in slot 0, size 1
  auto before = store_.map();
  EXPECT_EQ(One({"ZADD", "z", "2", "x", "3", "y"}), "2");
  EXPECT_EQ(One({"ZREM", "z", "b"}), "1");       // y moves into slot 0
  EXPECT_EQ(One({"ZADD", "z", "4", "b"}), "1");  // b in slot 2, size 3
  auto after = store_.map();
  auto replay = [&](const V& cmd) { return RunAcrossChange(before, after, cmd); };
  EXPECT_EQ(replay({"ZSCORE", "z", "b"}), "$1\r\n4\r\n") << "a read starts over";
  EXPECT_EQ(replay({"ZADD", "z", "10", "b"}), ":0\r\n") << "a write starts over";
  EXPECT_EQ(R({"ZRANGE", "z", "0", "-1", "WITHSCORES"}), (V{"x", "2", "y", "3", "b", "10"}));
}

// Random ZADD/ZINCRBY/ZREM/ZPOP*/ZREMRANGEBYRANK against a std::map model; after each step the
// full range, ranks and ZCARD agree (slots stay dense and records consistent).
TEST_F(Zset, RandomizedAgainstModel) {
  std::mt19937 rng(28);
  std::map<std::string, double> model;
  auto sorted_model = [&] {
    std::vector<std::pair<double, std::string>> v;
    for (const auto& [m, s] : model) v.emplace_back(s, m);
    std::sort(v.begin(), v.end());
    return v;
  };
  for (int step = 0; step < 400; ++step) {
    const std::string m = "m" + std::to_string(rng() % 25);
    const int score = static_cast<int>(rng() % 10);
    switch (rng() % 6) {
      case 0:
      case 1:
        One({"ZADD", "z", std::to_string(score), m});
        model[m] = score;
        break;
      case 2:
        One({"ZINCRBY", "z", std::to_string(score), m});
        model[m] += score;
        break;
      case 3:
        One({"ZREM", "z", m});
        model.erase(m);
        break;
      case 4: {
        auto v = R({"ZPOPMIN", "z"});
        auto sm = sorted_model();
        if (sm.empty()) {
          EXPECT_TRUE(v.empty());
        } else {
          ASSERT_EQ(v.size(), 2u);
          EXPECT_EQ(v[0], sm[0].second);
          model.erase(sm[0].second);
        }
        break;
      }
      case 5: {
        auto sm = sorted_model();
        One({"ZREMRANGEBYRANK", "z", "-2", "-1"});
        for (size_t i = sm.size() >= 2 ? sm.size() - 2 : 0; i < sm.size(); ++i) {
          model.erase(sm[i].second);
        }
        break;
      }
    }
    auto sm = sorted_model();
    auto got = R({"ZRANGE", "z", "0", "-1"});
    ASSERT_EQ(got.size(), sm.size()) << "step " << step;
    for (size_t i = 0; i < sm.size(); ++i) ASSERT_EQ(got[i], sm[i].second) << "step " << step;
    EXPECT_EQ(One({"ZCARD", "z"}), std::to_string(sm.size()));
    if (!sm.empty()) {
      size_t k = rng() % sm.size();
      EXPECT_EQ(One({"ZRANK", "z", sm[k].second}), std::to_string(k));
    }
  }
}

}  // namespace
}  // namespace asymnvm::kv::resp
