// Unit tests of the type commands (types.h) over the in-memory store double: replies, atomic
// batches, retries on conflict, WRONGTYPE, expiry and deletion by incarnation, limits, and a
// randomized comparison against a model.
#include "kv/resp/types.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "asymnvm/kv.h"
#include "kv/resp/test_types.h"

namespace asymnvm::kv::resp {
namespace {

using testing::g_now_ms;
using testing::Items;
using testing::Types;

TEST_F(Types, Hash_SetGetDelLenAndReplies) {
  EXPECT_EQ(One({"HSET", "h", "a", "1", "b", "2", "a", "3"}), "2") << "new fields counted once";
  EXPECT_EQ(One({"HGET", "h", "a"}), "3") << "the last value of a repeated field wins";
  EXPECT_EQ(One({"HGET", "h", "zz"}), "(nil)");
  EXPECT_EQ(One({"HGET", "nosuch", "a"}), "(nil)");
  EXPECT_EQ(One({"HLEN", "h"}), "2");
  EXPECT_EQ(One({"HSET", "h", "b", "22"}), "0");
  EXPECT_EQ(One({"HMSET", "h", "c", "3", "d", "4"}), "OK");
  EXPECT_EQ(R({"HMGET", "h", "a", "x", "d"}), (std::vector<std::string>{"3", "(nil)", "4"}));
  EXPECT_EQ(One({"HEXISTS", "h", "c"}), "1");
  EXPECT_EQ(One({"HEXISTS", "h", "x"}), "0");
  EXPECT_EQ(One({"HSTRLEN", "h", "b"}), "2");
  EXPECT_EQ(One({"HSTRLEN", "h", "x"}), "0");
  EXPECT_EQ(One({"TYPE", "h"}), "hash");
  EXPECT_EQ(All("h"),
            (std::map<std::string, std::string>{{"a", "3"}, {"b", "22"}, {"c", "3"}, {"d", "4"}}));
  auto keys = R({"HKEYS", "h"});
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()),
            (std::set<std::string>{"a", "b", "c", "d"}));
  auto vals = R({"HVALS", "h"});
  EXPECT_EQ(std::multiset<std::string>(vals.begin(), vals.end()),
            (std::multiset<std::string>{"3", "22", "3", "4"}));
  EXPECT_EQ(One({"HDEL", "h", "a", "x", "a"}), "1");
  EXPECT_EQ(One({"HLEN", "h"}), "3");
  EXPECT_EQ(All("h"), (std::map<std::string, std::string>{{"b", "22"}, {"c", "3"}, {"d", "4"}}));
  EXPECT_EQ(One({"HDEL", "h", "b", "c", "d"}), "3");
  EXPECT_EQ(One({"EXISTS", "h"}), "0") << "an emptied hash is deleted";
  EXPECT_EQ(One({"TYPE", "h"}), "none");
  EXPECT_EQ(SubRecords(), 0u) << "removing fields removes their records";
  EXPECT_EQ(Run({"HSET", "h", "a"}), "-ERR wrong number of arguments for 'hset' command\r\n");
  EXPECT_EQ(Run({"HGETALL", "nosuch"}), "*0\r\n");
}

TEST_F(Types, Hash_EachWriteIsOneAtomicBatch) {
  const int64_t before = store_.batches();
  EXPECT_EQ(One({"HSET", "h", "f1", "1", "f2", "2", "f3", "3", "f4", "4", "f5", "5"}), "5");
  EXPECT_EQ(store_.batches(), before + 1) << "5 fields: one batch";
  EXPECT_EQ(store_.puts(), 0) << "no write outside the batch";
}

TEST_F(Types, Hash_FailedCommitWritesNothing) {
  EXPECT_EQ(One({"HSET", "h", "a", "1"}), "1");
  auto snapshot = store_.map();
  int calls = 0;
  store_.set_before_commit([&] {
    // The first commit finds the hash changed by someone else (its metadata bumped): the command
    // re-reads and retries; nothing of the first attempt is applied.
    if (calls++ == 0) store_.Bump("h");
  });
  EXPECT_EQ(One({"HSET", "h", "b", "2", "c", "3"}), "2");
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(All("h"), (std::map<std::string, std::string>{{"a", "1"}, {"b", "2"}, {"c", "3"}}));
  store_.set_before_commit(nullptr);
}

// A hot key: many writers keep changing it, so a command's commit loses again and again (here
// 300 times, more than a fixed count of attempts allowed before). It backs off and goes on until
// it lands, as a write on Redis waits its turn; it never answers TRYAGAIN while the conflicts last
// less than the budget.
TEST_F(Types, HotKey_ManyConflictsBackOffAndStillCommit) {
  EXPECT_EQ(One({"RPUSH", "l", "a"}), "1");
  int calls = 0;
  store_.set_before_commit([&] {
    if (calls++ < 300) store_.Bump("l");
  });
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(One({"RPUSH", "l", "b"}), "2");
  const auto waited = std::chrono::steady_clock::now() - start;
  store_.set_before_commit(nullptr);
  EXPECT_EQ(calls, 301);
  EXPECT_EQ(R({"LRANGE", "l", "0", "-1"}), (std::vector<std::string>{"a", "b"}));
  // It paused between attempts (random pauses from 20 µs up to 2 ms): not a busy loop.
  EXPECT_GT(waited, std::chrono::milliseconds(20));
}

std::vector<std::string> HsetArgs(const std::string& key, int fields) {
  std::vector<std::string> argv = {"HSET", key};
  for (int i = 0; i < fields; ++i) {
    argv.push_back("f" + std::to_string(i));
    argv.push_back("v" + std::to_string(i));
  }
  return argv;
}

// A command too large for one batch (40 new fields: 81 records) commits in parts: the whole hash
// under a new incarnation in batches the store accepts (FakeStore refuses more than 64 records),
// then the metadata alone.
TEST_F(Types, Hash_LargeCommandCommitsInParts) {
  EXPECT_EQ(One({"HSET", "h", "a", "0"}), "1");
  const int64_t before = store_.batches();
  EXPECT_EQ(One(HsetArgs("h", 40)), "40");
  EXPECT_GE(store_.batches(), before + 3) << "two parts and the metadata";
  auto all = All("h");
  EXPECT_EQ(all.size(), 41u);
  EXPECT_EQ(all["a"], "0");
  EXPECT_EQ(all["f39"], "v39");
  EXPECT_EQ(One({"HLEN", "h"}), "41");
  EXPECT_EQ(One({"HDEL", "h", "f0", "a"}), "2") << "the new incarnation's slots are dense";
  EXPECT_EQ(One({"HGET", "h", "f1"}), "v1");
  EXPECT_EQ(One({"HLEN", "h"}), "39");
}

// The commit point of a command in parts is its metadata batch: while someone else keeps changing
// the hash it never lands, and readers see the old hash whole (the parts are a dead incarnation's
// records); once the other writer stops, the retried command lands whole.
TEST_F(Types, Hash_LargeCommandIsInvisibleUntilItsMetadataCommits) {
  EXPECT_EQ(One({"HSET", "h", "a", "0"}), "1");
  store_.set_before_commit([&] { store_.Bump("h"); });  // every commit finds h moved
  ConflictRetry::SetBudgetForTesting(std::chrono::milliseconds(300));
  EXPECT_EQ(One(HsetArgs("h", 40)), std::string("-") + std::string(kErrTryAgain));
  ConflictRetry::SetBudgetForTesting(ConflictRetry::kBudget);
  store_.set_before_commit(nullptr);
  EXPECT_EQ(All("h"), (std::map<std::string, std::string>{{"a", "0"}}));
  int calls = 0;
  store_.set_before_commit([&] {
    if (calls++ == 0) store_.Bump("h");  // the first attempt loses its commit point
  });
  EXPECT_EQ(One(HsetArgs("h", 40)), "40");
  store_.set_before_commit(nullptr);
  EXPECT_GE(calls, 6) << "two attempts of three batches";
  EXPECT_EQ(All("h").size(), 41u);
}

// An existing list, a set and a sorted set past one batch: the relocated incarnation keeps every
// element and its order.
TEST_F(Types, LargeCommandsOnEveryType) {
  EXPECT_EQ(One({"RPUSH", "l", "first"}), "1");
  std::vector<std::string> push = {"RPUSH", "l"};
  std::vector<std::string> sadd = {"SADD", "s"};
  std::vector<std::string> zadd = {"ZADD", "z"};
  for (int i = 0; i < 100; ++i) {
    push.push_back("e" + std::to_string(i));
    sadd.push_back("m" + std::to_string(i));
    zadd.push_back(std::to_string(i));
    zadd.push_back("z" + std::to_string(i));
  }
  EXPECT_EQ(One(push), "101");
  auto l = R({"LRANGE", "l", "0", "-1"});
  ASSERT_EQ(l.size(), 101u);
  EXPECT_EQ(l[0], "first");
  EXPECT_EQ(l[100], "e99");
  EXPECT_EQ(One(sadd), "100");
  EXPECT_EQ(One({"SCARD", "s"}), "100");
  EXPECT_EQ(One({"SISMEMBER", "s", "m57"}), "1");
  EXPECT_EQ(One(zadd), "100");
  EXPECT_EQ(One({"ZSCORE", "z", "z42"}), "42");
  EXPECT_EQ(R({"ZRANGE", "z", "0", "1"}), (std::vector<std::string>{"z0", "z1"}));
}

TEST_F(Types, WrongTypeBothWays) {
  const std::string kWrong = "-WRONGTYPE Operation against a key holding the wrong kind of value";
  EXPECT_EQ(One({"SET", "s", "v"}), "OK");
  EXPECT_EQ(One({"HSET", "s", "f", "v"}), kWrong);
  EXPECT_EQ(One({"HGET", "s", "f"}), kWrong);
  EXPECT_EQ(One({"HLEN", "s"}), kWrong);
  EXPECT_EQ(One({"HGETALL", "s"}), kWrong);
  EXPECT_EQ(One({"HSET", "h", "f", "v"}), "1");
  EXPECT_EQ(One({"GET", "h"}), kWrong);
  EXPECT_EQ(One({"APPEND", "h", "x"}), kWrong);
  EXPECT_EQ(One({"INCR", "h"}), kWrong);
  EXPECT_EQ(One({"STRLEN", "h"}), kWrong);
  EXPECT_EQ(One({"TYPE", "s"}), "string");
  EXPECT_EQ(One({"SET", "h", "plain"}), "OK") << "SET replaces a key of any type";
  EXPECT_EQ(One({"GET", "h"}), "plain");
  EXPECT_EQ(One({"TYPE", "h"}), "string");
}

// The string and keyspace commands of string_commands.cc / keyspace_commands.cc on collections:
// WRONGTYPE as Redis, TYPE and OBJECT ENCODING from the metadata record, sub-records never
// listed.
TEST_F(Types, StringAndKeyspaceCommandsOnCollections) {
  const std::string kWrong = "-WRONGTYPE Operation against a key holding the wrong kind of value";
  EXPECT_EQ(One({"HSET", "h", "f", "v", "g", "w"}), "2");
  EXPECT_EQ(One({"RPUSH", "l", "a", "b"}), "2");
  EXPECT_EQ(One({"SADD", "s", "m"}), "1");
  for (const std::string k : {"h", "l", "s"}) {
    EXPECT_EQ(One({"GETRANGE", k, "0", "-1"}), kWrong) << k;
    EXPECT_EQ(One({"SETRANGE", k, "0", "x"}), kWrong) << k;
    EXPECT_EQ(One({"GETDEL", k}), kWrong) << k;
    EXPECT_EQ(One({"GETEX", k, "PERSIST"}), kWrong) << k;
    EXPECT_EQ(One({"BITCOUNT", k}), kWrong) << k;
    EXPECT_EQ(One({"SETBIT", k, "1", "1"}), kWrong) << k;
    EXPECT_EQ(One({"INCRBYFLOAT", k, "1.5"}), kWrong) << k;
  }
  EXPECT_EQ(One({"TYPE", "h"}), "hash");
  EXPECT_EQ(One({"TYPE", "l"}), "list");
  EXPECT_EQ(One({"TYPE", "s"}), "set");
  EXPECT_EQ(One({"OBJECT", "ENCODING", "l"}), "quicklist");
  EXPECT_EQ(One({"HLEN", "h"}), "2") << "nothing was changed";
  EXPECT_EQ(One({"SET", "str", "x"}), "OK");
  EXPECT_EQ(One({"DBSIZE"}), "4") << "sub-records are not keys";
  auto keys = R({"KEYS", "*"});
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"h", "l", "s", "str"}));
  EXPECT_EQ(R({"SCAN", "0", "COUNT", "1000", "TYPE", "list"}),
            (std::vector<std::string>{"0", "l"}));
}

// COPY and RENAME of every collection type: the elements under the new name (a new incarnation:
// changing the copy leaves the source alone), the TTL kept, REPLACE and NX as Redis.
TEST_F(Types, CopyAndRenameCollections) {  // keys tagged {t}: one shard
  EXPECT_EQ(One({"HSET", "{t}h", "f", "v", "g", "w"}), "2");
  EXPECT_EQ(One({"RPUSH", "{t}l", "a", "b", "c"}), "3");
  EXPECT_EQ(One({"SADD", "{t}s", "m", "n"}), "2");
  EXPECT_EQ(One({"ZADD", "{t}z", "1", "x", "2", "y"}), "2");
  EXPECT_EQ(One({"EXPIRE", "{t}l", "100"}), "1");
  EXPECT_EQ(One({"COPY", "{t}h", "{t}h2"}), "1");
  EXPECT_EQ(All("{t}h2"), (std::map<std::string, std::string>{{"f", "v"}, {"g", "w"}}));
  EXPECT_EQ(One({"HSET", "{t}h2", "f", "changed"}), "0");
  EXPECT_EQ(One({"HGET", "{t}h", "f"}), "v") << "the copy is separate";
  EXPECT_EQ(One({"COPY", "{t}l", "{t}l2"}), "1");
  EXPECT_EQ(R({"LRANGE", "{t}l2", "0", "-1"}), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(One({"TTL", "{t}l2"}), "100");
  EXPECT_EQ(One({"COPY", "{t}s", "{t}h2"}), "0") << "the destination exists";
  EXPECT_EQ(One({"COPY", "{t}s", "{t}h2", "REPLACE"}), "1");
  EXPECT_EQ(One({"TYPE", "{t}h2"}), "set");
  EXPECT_EQ(One({"SCARD", "{t}h2"}), "2");
  EXPECT_EQ(One({"RENAME", "{t}z", "{t}z2"}), "OK");
  EXPECT_EQ(One({"EXISTS", "{t}z"}), "0");
  EXPECT_EQ(R({"ZRANGE", "{t}z2", "0", "-1", "WITHSCORES"}),
            (std::vector<std::string>{"x", "1", "y", "2"}));
  EXPECT_EQ(One({"RENAMENX", "{t}z2", "{t}l"}), "0");
  EXPECT_EQ(One({"RENAMENX", "{t}z2", "{t}z3"}), "1");
  EXPECT_EQ(One({"RENAME", "{t}z3", "{t}z3"}), "OK");
  EXPECT_EQ(One({"RENAMENX", "{t}z3", "{t}z3"}), "0");
  EXPECT_EQ(One({"RENAME", "{t}l", "{t}str"}), "OK");
  EXPECT_EQ(One({"SET", "{t}plain", "1"}), "OK");
  EXPECT_EQ(One({"RENAME", "{t}str", "{t}plain"}), "OK") << "replaces a string";
  EXPECT_EQ(R({"LRANGE", "{t}plain", "0", "-1"}), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(One({"TTL", "{t}plain"}), "100");
  // A large one (more records than one batch) in parts.
  EXPECT_EQ(One(HsetArgs("{t}big", 40)), "40");
  EXPECT_EQ(One({"RENAME", "{t}big", "{t}big2"}), "OK");
  EXPECT_EQ(All("{t}big2").size(), 40u);
  EXPECT_EQ(One({"HGET", "{t}big2", "f7"}), "v7");
}

TEST_F(Types, DeleteAndExpireStartANewIncarnation) {
  EXPECT_EQ(One({"HSET", "h", "a", "1", "b", "2"}), "2");
  EXPECT_EQ(One({"DEL", "h"}), "1");
  EXPECT_EQ(One({"HGET", "h", "a"}), "(nil)");
  EXPECT_EQ(One({"HSET", "h", "c", "3"}), "1");
  EXPECT_EQ(All("h"), (std::map<std::string, std::string>{{"c", "3"}}))
      << "the old incarnation's fields are not visible";
  EXPECT_EQ(One({"EXPIRE", "h", "10"}), "1");
  EXPECT_EQ(One({"TTL", "h"}), "10");
  EXPECT_EQ(One({"TYPE", "h"}), "hash") << "EXPIRE keeps the type";
  EXPECT_EQ(One({"HSET", "h", "d", "4"}), "1");
  EXPECT_EQ(One({"TTL", "h"}), "10") << "a write keeps the TTL";
  g_now_ms += 11'000;
  EXPECT_EQ(One({"HLEN", "h"}), "0");
  EXPECT_EQ(One({"EXISTS", "h"}), "0");
  EXPECT_EQ(One({"HSET", "h", "e", "5"}), "1");
  EXPECT_EQ(All("h"), (std::map<std::string, std::string>{{"e", "5"}}));
  EXPECT_EQ(One({"TTL", "h"}), "-1");
  EXPECT_EQ(One({"EXPIRE", "h", "10"}), "1");
  EXPECT_EQ(One({"PERSIST", "h"}), "1");
  EXPECT_EQ(One({"TYPE", "h"}), "hash");
}

// A writer commits between a command's metadata read and its sub-record reads: the command starts
// over on the new state instead of reporting corruption (CollTx::Inconsistent).
TEST_F(Types, StaleReadsStartOver) {
  EXPECT_EQ(One({"HSET", "h", "a", "1"}), "1");  // a in slot 0, size 1
  EXPECT_EQ(One({"RPUSH", "l", "x", "y"}), "2");
  auto before = store_.map();
  EXPECT_EQ(One({"HSET", "h", "b", "2", "c", "3"}), "2");
  EXPECT_EQ(One({"HDEL", "h", "a"}), "1");       // c moves to slot 0
  EXPECT_EQ(One({"HSET", "h", "a", "4"}), "1");  // a in slot 2, size 3
  EXPECT_EQ(One({"LPOP", "l"}), "x");            // x's record is gone
  auto after = store_.map();
  EXPECT_EQ(RunAcrossChange(before, after, {"HSET", "h", "a", "5"}), ":0\r\n");
  EXPECT_EQ(One({"HGET", "h", "a"}), "5");
  EXPECT_EQ(RunAcrossChange(before, after, {"HGET", "h", "a"}), "$1\r\n4\r\n");
  EXPECT_EQ(RunAcrossChange(before, after, {"LPOP", "l"}), "$1\r\ny\r\n");
  EXPECT_EQ(RunAcrossChange(before, after, {"LINDEX", "l", "0"}), "$1\r\ny\r\n");
}

// MEMORY USAGE of a collection: its metadata record plus its elements' records (sampled).
TEST_F(Types, MemoryUsageGrowsWithTheElements) {
  EXPECT_EQ(One({"HSET", "h", "a", "1"}), "1");
  const std::string one = One({"MEMORY", "USAGE", "h", "SAMPLES", "0"});
  EXPECT_EQ(One({"HSET", "h", "b", "2", "c", "3"}), "2");
  const std::string three = One({"MEMORY", "USAGE", "h", "SAMPLES", "0"});
  EXPECT_GT(std::stoll(one), 0);
  EXPECT_GT(std::stoll(three), std::stoll(one));
  // Every element has the same size: sampling one extrapolates to the exact figure.
  EXPECT_EQ(One({"MEMORY", "USAGE", "h", "SAMPLES", "1"}), three);
  EXPECT_EQ(One({"RPUSH", "l", "x", "y"}), "2");
  EXPECT_GT(std::stoll(One({"MEMORY", "USAGE", "l"})), 64);
}

TEST_F(Types, Hash_Incr) {
  EXPECT_EQ(One({"HINCRBY", "h", "n", "5"}), "5");
  EXPECT_EQ(One({"HINCRBY", "h", "n", "-7"}), "-2");
  EXPECT_EQ(One({"HINCRBY", "h", "n", "x"}), "-ERR value is not an integer or out of range");
  EXPECT_EQ(One({"HSET", "h", "s", "abc", "big", "9223372036854775807"}), "2");
  EXPECT_EQ(One({"HINCRBY", "h", "s", "1"}), "-ERR hash value is not an integer");
  EXPECT_EQ(One({"HINCRBY", "h", "big", "1"}), "-ERR increment or decrement would overflow");
  EXPECT_EQ(One({"HINCRBYFLOAT", "h", "f", "10.5"}), "10.5");
  EXPECT_EQ(One({"HINCRBYFLOAT", "h", "f", "0.1"}), "10.6");
  EXPECT_EQ(One({"HINCRBYFLOAT", "h", "n", "2"}), "0");
  EXPECT_EQ(One({"HINCRBYFLOAT", "h", "s", "1"}), "-ERR hash value is not a float");
  EXPECT_EQ(One({"HINCRBYFLOAT", "h", "f", "nan"}), "-ERR value is not a valid float");
  EXPECT_EQ(One({"HINCRBYFLOAT", "h", "f", "+inf"}), "-ERR value is NaN or Infinity");
  EXPECT_EQ(One({"HSETNX", "h", "f", "1"}), "0");
  EXPECT_EQ(One({"HSETNX", "h", "g", "1"}), "1");
  EXPECT_EQ(One({"HGET", "h", "g"}), "1");
}

TEST_F(Types, Hash_ScanNeverMissesSurvivorsAndNeverRepeatsOnStaticHash) {
  std::map<std::string, std::string> want;
  for (int i = 0; i < 100; i += 20) {
    std::vector<std::string> argv = {"HSET", "h"};
    for (int j = i; j < i + 20; ++j) {
      argv.push_back("f" + std::to_string(j));
      argv.push_back(std::to_string(j));
      want["f" + std::to_string(j)] = std::to_string(j);
    }
    EXPECT_EQ(One(argv), "20");
  }
  // Static: exactly every field once.
  std::vector<std::string> seen;
  std::string cursor = "0";
  do {
    auto v = R({"HSCAN", "h", cursor, "COUNT", "7"});
    ASSERT_GE(v.size(), 1u);
    cursor = v[0];
    for (size_t i = 1; i + 1 < v.size(); i += 2) seen.push_back(v[i]);
  } while (cursor != "0");
  EXPECT_EQ(seen.size(), 100u);
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), 100u);
  // Deleting during the scan: every field present throughout is returned.
  std::set<std::string> got;
  cursor = "0";
  int round = 0;
  do {
    auto v = R({"HSCAN", "h", cursor, "COUNT", "5"});
    cursor = v[0];
    for (size_t i = 1; i + 1 < v.size(); i += 2) got.insert(v[i]);
    std::string victim = "f" + std::to_string((round++ * 37) % 100);
    if (One({"HDEL", "h", victim}) == "1") want.erase(victim);
  } while (cursor != "0");
  for (const auto& [f, v] : want) EXPECT_TRUE(got.count(f)) << f << " was present throughout";
  auto nov = R({"HSCAN", "h", "0", "COUNT", "1000", "MATCH", "f1*", "NOVALUES"});
  for (size_t i = 1; i < nov.size(); ++i) EXPECT_EQ(nov[i].substr(0, 2), "f1");
}

TEST_F(Types, Hash_RandField) {
  EXPECT_EQ(One({"HRANDFIELD", "nosuch"}), "(nil)");
  EXPECT_EQ(One({"HSET", "h", "a", "1", "b", "2", "c", "3"}), "3");
  auto f = One({"HRANDFIELD", "h"});
  EXPECT_TRUE(f == "a" || f == "b" || f == "c") << f;
  auto d = R({"HRANDFIELD", "h", "10"});
  EXPECT_EQ(std::set<std::string>(d.begin(), d.end()), (std::set<std::string>{"a", "b", "c"}));
  EXPECT_EQ(d.size(), 3u) << "a positive count gives distinct fields";
  EXPECT_EQ(R({"HRANDFIELD", "h", "-7"}).size(), 7u) << "a negative count may repeat";
  auto wv = R({"HRANDFIELD", "h", "2", "WITHVALUES"});
  ASSERT_EQ(wv.size(), 4u);
  for (size_t i = 0; i < wv.size(); i += 2) {
    EXPECT_EQ(wv[i + 1], std::string(1, static_cast<char>('1' + (wv[i][0] - 'a'))));
  }
}

TEST_F(Types, Hash_InsideMultiExec) {
  EXPECT_EQ(One({"MULTI"}), "OK");
  EXPECT_EQ(One({"HSET", "h", "a", "1", "b", "2"}), "QUEUED");
  EXPECT_EQ(One({"HINCRBY", "h", "a", "10"}), "QUEUED");
  EXPECT_EQ(One({"HDEL", "h", "b"}), "QUEUED");
  EXPECT_EQ(R({"EXEC"}), (std::vector<std::string>{"2", "11", "1"}));
  EXPECT_EQ(All("h"), (std::map<std::string, std::string>{{"a", "11"}}));
  EXPECT_EQ(One({"HLEN", "h"}), "1");
}

// Random HSET/HDEL/HINCRBY/DEL against a model; after each step HGETALL and HLEN agree with it.
TEST_F(Types, Hash_RandomizedAgainstModel) {
  std::mt19937 rng(7);
  std::map<std::string, std::map<std::string, std::string>> model;
  const std::vector<std::string> keys = {"h1", "h2", "h3"};
  for (int step = 0; step < 600; ++step) {
    const std::string& k = keys[rng() % keys.size()];
    auto& m = model[k];
    int op = static_cast<int>(rng() % 10);
    if (op < 5) {
      std::vector<std::string> argv = {"HSET", k};
      int n = 1 + static_cast<int>(rng() % 4);
      std::map<std::string, std::string> add;
      for (int i = 0; i < n; ++i) {
        std::string f = "f" + std::to_string(rng() % 12), v = std::to_string(rng() % 1000);
        argv.push_back(f);
        argv.push_back(v);
        add[f] = v;
      }
      int64_t fresh = 0;
      for (const auto& [f, v] : add) fresh += m.count(f) ? 0 : 1;
      for (const auto& [f, v] : add) m[f] = v;
      ASSERT_EQ(One(argv), std::to_string(fresh));
    } else if (op < 8) {
      std::vector<std::string> argv = {"HDEL", k};
      std::set<std::string> del;
      int n = 1 + static_cast<int>(rng() % 3);
      for (int i = 0; i < n; ++i) {
        std::string f = "f" + std::to_string(rng() % 12);
        argv.push_back(f);
        del.insert(f);
      }
      int64_t gone = 0;
      for (const auto& f : del) gone += m.erase(f);
      ASSERT_EQ(One(argv), std::to_string(gone));
    } else if (op < 9) {
      std::string f = "f" + std::to_string(rng() % 12);
      int64_t cur = 0;
      if (m.count(f) && !ParseInt64(m[f], &cur)) continue;
      m[f] = std::to_string(cur + 3);
      ASSERT_EQ(One({"HINCRBY", k, f, "3"}), m[f]);
    } else {
      ASSERT_EQ(One({"DEL", k}), m.empty() ? "0" : "1");
      m.clear();
    }
    ASSERT_EQ(All(k), m) << "step " << step;
    ASSERT_EQ(One({"HLEN", k}), std::to_string(m.size()));
  }
}

std::set<std::string> AsSet(const std::vector<std::string>& v) {
  return std::set<std::string>(v.begin(), v.end());
}

TEST_F(Types, Set_Commands) {
  EXPECT_EQ(One({"SADD", "s", "a", "b", "c", "a"}), "3");
  EXPECT_EQ(One({"SADD", "s", "a"}), "0");
  EXPECT_EQ(One({"SCARD", "s"}), "3");
  EXPECT_EQ(One({"SISMEMBER", "s", "b"}), "1");
  EXPECT_EQ(One({"SISMEMBER", "s", "z"}), "0");
  EXPECT_EQ(R({"SMISMEMBER", "s", "a", "z", "c"}), (std::vector<std::string>{"1", "0", "1"}));
  EXPECT_EQ(AsSet(R({"SMEMBERS", "s"})), (std::set<std::string>{"a", "b", "c"}));
  EXPECT_EQ(One({"TYPE", "s"}), "set");
  EXPECT_EQ(One({"SREM", "s", "a", "zz"}), "1");
  EXPECT_EQ(AsSet(R({"SMEMBERS", "s"})), (std::set<std::string>{"b", "c"}));
  EXPECT_EQ(One({"SADD", "t", "c", "d"}), "2");
  EXPECT_EQ(AsSet(R({"SINTER", "s", "t"})), (std::set<std::string>{"c"}));
  EXPECT_EQ(AsSet(R({"SUNION", "s", "t", "nosuch"})), (std::set<std::string>{"b", "c", "d"}));
  EXPECT_EQ(AsSet(R({"SDIFF", "s", "t"})), (std::set<std::string>{"b"}));
  EXPECT_EQ(R({"SINTER", "s", "nosuch"}).size(), 0u);
  EXPECT_EQ(One({"SINTERCARD", "2", "s", "t"}), "1");
  EXPECT_EQ(One({"SINTERCARD", "2", "s", "t", "LIMIT", "0"}), "1");
  EXPECT_EQ(One({"SUNIONSTORE", "u", "s", "t"}), "3");
  EXPECT_EQ(AsSet(R({"SMEMBERS", "u"})), (std::set<std::string>{"b", "c", "d"}));
  EXPECT_EQ(One({"SET", "str", "x"}), "OK");
  EXPECT_EQ(One({"SDIFFSTORE", "str", "s", "t"}), "1") << "a STORE replaces any type";
  EXPECT_EQ(One({"TYPE", "str"}), "set");
  EXPECT_EQ(One({"SINTERSTORE", "u", "s", "nosuch"}), "0");
  EXPECT_EQ(One({"EXISTS", "u"}), "0") << "an empty result deletes the destination";
  EXPECT_EQ(One({"SMOVE", "s", "t", "b"}), "1");
  EXPECT_EQ(One({"SMOVE", "s", "t", "b"}), "0");
  EXPECT_EQ(AsSet(R({"SMEMBERS", "t"})), (std::set<std::string>{"b", "c", "d"}));
  EXPECT_EQ(One({"SMOVE", "s", "t", "c"}), "1");
  EXPECT_EQ(One({"EXISTS", "s"}), "0") << "SMOVE of the last member deletes the source";
  EXPECT_EQ(One({"SET", "x", "1"}), "OK");
  EXPECT_EQ(One({"SADD", "x", "1"}),
            "-WRONGTYPE Operation against a key holding the wrong kind of value");
  EXPECT_EQ(One({"SINTER", "t", "x"}),
            "-WRONGTYPE Operation against a key holding the wrong kind of value");
  auto p = R({"SPOP", "t", "2"});
  EXPECT_EQ(p.size(), 2u);
  EXPECT_EQ(One({"SCARD", "t"}), "1");
  auto last = One({"SPOP", "t"});
  EXPECT_EQ(AsSet({p[0], p[1], last}), (std::set<std::string>{"b", "c", "d"}));
  EXPECT_EQ(One({"EXISTS", "t"}), "0");
  EXPECT_EQ(One({"SPOP", "t"}), "(nil)");
  EXPECT_EQ(One({"SPOP", "t", "-1"}), "-ERR value is out of range, must be positive");
  EXPECT_EQ(One({"SADD", "r", "a", "b", "c"}), "3");
  EXPECT_EQ(AsSet(R({"SPOP", "r", "10"})), (std::set<std::string>{"a", "b", "c"}));
  EXPECT_EQ(One({"EXISTS", "r"}), "0");
  EXPECT_EQ(One({"SADD", "r", "a", "b", "c"}), "3");
  EXPECT_EQ(R({"SRANDMEMBER", "r", "-5"}).size(), 5u);
  EXPECT_EQ(AsSet(R({"SRANDMEMBER", "r", "5"})), (std::set<std::string>{"a", "b", "c"}));
  std::set<std::string> scanned;
  std::string cursor = "0";
  do {
    auto v = R({"SSCAN", "r", cursor, "COUNT", "1"});
    cursor = v[0];
    for (size_t i = 1; i < v.size(); ++i) EXPECT_TRUE(scanned.insert(v[i]).second) << v[i];
  } while (cursor != "0");
  EXPECT_EQ(scanned, (std::set<std::string>{"a", "b", "c"}));
}

TEST_F(Types, List_Commands) {
  EXPECT_EQ(One({"RPUSH", "l", "a", "b", "c"}), "3");
  EXPECT_EQ(One({"LPUSH", "l", "z", "y"}), "5");
  EXPECT_EQ(R({"LRANGE", "l", "0", "-1"}), (std::vector<std::string>{"y", "z", "a", "b", "c"}));
  EXPECT_EQ(R({"LRANGE", "l", "-2", "100"}), (std::vector<std::string>{"b", "c"}));
  EXPECT_EQ(R({"LRANGE", "l", "3", "1"}).size(), 0u);
  EXPECT_EQ(One({"LLEN", "l"}), "5");
  EXPECT_EQ(One({"LINDEX", "l", "0"}), "y");
  EXPECT_EQ(One({"LINDEX", "l", "-1"}), "c");
  EXPECT_EQ(One({"LINDEX", "l", "9"}), "(nil)");
  EXPECT_EQ(One({"TYPE", "l"}), "list");
  EXPECT_EQ(One({"LPOP", "l"}), "y");
  EXPECT_EQ(One({"RPOP", "l"}), "c");
  EXPECT_EQ(R({"LPOP", "l", "2"}), (std::vector<std::string>{"z", "a"}));
  EXPECT_EQ(One({"LSET", "l", "0", "B"}), "OK");
  EXPECT_EQ(One({"LSET", "l", "5", "B"}), "-ERR index out of range");
  EXPECT_EQ(One({"LSET", "nosuch", "0", "B"}), "-ERR no such key");
  EXPECT_EQ(One({"RPOP", "l"}), "B");
  EXPECT_EQ(One({"EXISTS", "l"}), "0") << "popping the last element deletes the list";
  EXPECT_EQ(One({"LPOP", "l"}), "(nil)");
  EXPECT_EQ(Run({"LPOP", "l", "2"}), "*-1\r\n");
  EXPECT_EQ(One({"LPUSHX", "l", "a"}), "0");
  EXPECT_EQ(One({"RPUSH", "l", "a", "b", "a", "c", "a"}), "5");
  EXPECT_EQ(One({"LREM", "l", "-2", "a"}), "2");
  EXPECT_EQ(R({"LRANGE", "l", "0", "-1"}), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(One({"LINSERT", "l", "BEFORE", "b", "x"}), "4");
  EXPECT_EQ(One({"LINSERT", "l", "AFTER", "c", "y"}), "5");
  EXPECT_EQ(One({"LINSERT", "l", "AFTER", "nope", "y"}), "-1");
  EXPECT_EQ(R({"LRANGE", "l", "0", "-1"}), (std::vector<std::string>{"a", "x", "b", "c", "y"}));
  EXPECT_EQ(One({"LPOS", "l", "c"}), "3");
  EXPECT_EQ(One({"RPUSHX", "l", "c"}), "6");
  EXPECT_EQ(R({"LPOS", "l", "c", "COUNT", "0"}), (std::vector<std::string>{"3", "5"}));
  EXPECT_EQ(One({"LPOS", "l", "c", "RANK", "-1"}), "5");
  EXPECT_EQ(One({"LTRIM", "l", "1", "-2"}), "OK");
  EXPECT_EQ(R({"LRANGE", "l", "0", "-1"}), (std::vector<std::string>{"x", "b", "c", "y"}));
  EXPECT_EQ(One({"RPOPLPUSH", "l", "m"}), "y");
  EXPECT_EQ(One({"LMOVE", "l", "m", "LEFT", "RIGHT"}), "x");
  EXPECT_EQ(R({"LRANGE", "m", "0", "-1"}), (std::vector<std::string>{"y", "x"}));
  EXPECT_EQ(One({"LMOVE", "m", "m", "LEFT", "RIGHT"}), "y") << "a rotation";
  EXPECT_EQ(R({"LRANGE", "m", "0", "-1"}), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(One({"LTRIM", "m", "5", "9"}), "OK");
  EXPECT_EQ(One({"EXISTS", "m"}), "0");
  EXPECT_EQ(One({"LPUSH", "h1", "x"}), "1");
  EXPECT_EQ(One({"HSET", "h1", "f", "v"}),
            "-WRONGTYPE Operation against a key holding the wrong kind of value");
}

// Random pushes, pops, LSET, LREM, LINSERT, LTRIM against a std::deque model.
TEST_F(Types, List_RandomizedAgainstModel) {
  std::mt19937 rng(11);
  std::vector<std::string> m;
  for (int step = 0; step < 500; ++step) {
    const std::string v = std::to_string(rng() % 6);
    switch (rng() % 8) {
      case 0:
        m.insert(m.begin(), v);
        ASSERT_EQ(One({"LPUSH", "l", v}), std::to_string(m.size()));
        break;
      case 1:
      case 2:
        m.push_back(v);
        ASSERT_EQ(One({"RPUSH", "l", v}), std::to_string(m.size()));
        break;
      case 3:
        if (m.empty()) {
          ASSERT_EQ(One({"LPOP", "l"}), "(nil)");
        } else {
          ASSERT_EQ(One({"LPOP", "l"}), m.front());
          m.erase(m.begin());
        }
        break;
      case 4: {
        int64_t removed = 0;
        std::vector<std::string> kept;
        for (auto& e : m) {
          if (e == v && removed < 1) {
            ++removed;
          } else {
            kept.push_back(e);
          }
        }
        m = kept;
        ASSERT_EQ(One({"LREM", "l", "1", v}), std::to_string(removed));
        break;
      }
      case 5: {
        auto it = std::find(m.begin(), m.end(), v);
        std::string want = m.empty() ? "0" : "-1";
        if (it != m.end()) {
          m.insert(it + 1, "n" + v);
          want = std::to_string(m.size());
        }
        ASSERT_EQ(One({"LINSERT", "l", "AFTER", v, "n" + v}), want);
        break;
      }
      case 6:
        if (!m.empty()) {
          size_t i = rng() % m.size();
          m[i] = "s" + v;
          ASSERT_EQ(One({"LSET", "l", std::to_string(i), "s" + v}), "OK");
        }
        break;
      default:
        if (m.size() > 20) {
          m.erase(m.begin(), m.begin() + 2);
          m.pop_back();
          ASSERT_EQ(One({"LTRIM", "l", "2", "-2"}), "OK");
        }
    }
    ASSERT_EQ(R({"LRANGE", "l", "0", "-1"}), m) << "step " << step;
    ASSERT_EQ(One({"LLEN", "l"}), std::to_string(m.size()));
  }
}

}  // namespace
}  // namespace asymnvm::kv::resp
