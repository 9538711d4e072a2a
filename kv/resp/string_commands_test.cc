// The string and keyspace commands of string_commands.cc / keyspace_commands.cc, WATCH, CONFIG
// SET, INFO commandstats/errorstats and FUNCTION against the test double of the store, with
// Redis's replies (texts as redis-server 7 gives them).
#include <gtest/gtest.h>

#include "kv/resp/commands.h"
#include "kv/resp/test_fake_store.h"

namespace asymnvm::kv::resp {
namespace {

int64_t g_now = 1'700'000'000'000;
int64_t Clock() { return g_now; }

class RespStrings : public ::testing::Test {
 protected:
  RespStrings() : dispatcher_(&state_, &store_) {
    state_.clock_ms = &Clock;
    state_.run_id = std::string(40, 'b');
    state_.proto_max_bulk_len = 64 << 20;
  }
  std::string Run(const std::string& line) {
    std::vector<std::string> argv;
    EXPECT_TRUE(SplitInlineArgs(line, &argv)) << line;
    std::string out;
    dispatcher_.Execute(session_, argv, &out);
    return out;
  }
  static std::string Bulk(const std::string& s) {
    return "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
  }
  GatewayState state_;
  testing::FakeStore store_;
  Dispatcher dispatcher_;
  Session session_;
};

TEST_F(RespStrings, GetExGetDelSetEx) {
  EXPECT_EQ(Run("SET k v"), "+OK\r\n");
  EXPECT_EQ(Run("GETEX k EX 100"), Bulk("v"));
  EXPECT_EQ(Run("TTL k"), ":100\r\n");
  EXPECT_EQ(Run("GETEX k PERSIST"), Bulk("v"));
  EXPECT_EQ(Run("TTL k"), ":-1\r\n");
  EXPECT_EQ(Run("GETEX k EX 0"), "-ERR invalid expire time in 'getex' command\r\n");
  EXPECT_EQ(Run("GETEX k EX 10 PX 10"), "-ERR syntax error\r\n");
  EXPECT_EQ(Run("GETEX nosuch EX 10"), "$-1\r\n");
  EXPECT_EQ(Run("GETEX k PXAT 1"), Bulk("v")) << "a deadline in the past deletes the key";
  EXPECT_EQ(Run("EXISTS k"), ":0\r\n");
  EXPECT_EQ(Run("SET k v2"), "+OK\r\n");
  EXPECT_EQ(Run("GETDEL k"), Bulk("v2"));
  EXPECT_EQ(Run("GETDEL k"), "$-1\r\n");
  EXPECT_EQ(Run("SETEX k 10 x"), "+OK\r\n");
  EXPECT_EQ(Run("TTL k"), ":10\r\n");
  EXPECT_EQ(Run("PSETEX k 1500 y"), "+OK\r\n");
  EXPECT_EQ(Run("PTTL k"), ":1500\r\n");
  EXPECT_EQ(Run("SETEX k 0 x"), "-ERR invalid expire time in 'setex' command\r\n");
  EXPECT_EQ(Run("SETEX k x x"), "-ERR value is not an integer or out of range\r\n");
}

TEST_F(RespStrings, IncrByFloat_FormatsAsRedis) {
  EXPECT_EQ(Run("INCRBYFLOAT f 1"), Bulk("1"));
  EXPECT_EQ(Run("INCRBYFLOAT f 0.25"), Bulk("1.25"));
  EXPECT_EQ(Run("SET f 10.5"), "+OK\r\n");
  EXPECT_EQ(Run("INCRBYFLOAT f 0.1"), Bulk("10.6"));
  EXPECT_EQ(Run("SET f 5.0e3"), "+OK\r\n");
  EXPECT_EQ(Run("INCRBYFLOAT f 2.0e2"), Bulk("5200"));
  EXPECT_EQ(Run("SET f 1"), "+OK\r\n");
  EXPECT_EQ(Run("INCRBYFLOAT f +inf"), "-ERR increment would produce NaN or Infinity\r\n");
  EXPECT_EQ(Run("INCRBYFLOAT f x"), "-ERR value is not a valid float\r\n");
  EXPECT_EQ(Run("SET f \" 11\""), "+OK\r\n");
  EXPECT_EQ(Run("INCRBYFLOAT f 1"), "-ERR value is not a valid float\r\n");
  EXPECT_EQ(Run("SET f 0"), "+OK\r\n");
  EXPECT_NE(Run("INCRBYFLOAT f 0.024390243902439025").find("\r\n0.02439"), std::string::npos);
  EXPECT_EQ(Run("INCRBYFLOAT f -0.024390243902439025"), Bulk("0")) << "never -0";
}

TEST_F(RespStrings, RangesAndBits) {
  EXPECT_EQ(Run("SET k \"Hello World\""), "+OK\r\n");
  EXPECT_EQ(Run("GETRANGE k 0 3"), Bulk("Hell"));
  EXPECT_EQ(Run("GETRANGE k -4 -1"), Bulk("orld"));
  EXPECT_EQ(Run("GETRANGE k 5 3"), Bulk(""));
  EXPECT_EQ(Run("GETRANGE k -5000 10000"), Bulk("Hello World"));
  EXPECT_EQ(Run("SUBSTR k -1 -3"), Bulk(""));
  EXPECT_EQ(Run("GETRANGE nosuch 0 -1"), Bulk(""));
  EXPECT_EQ(Run("SETRANGE k 12 !"), ":13\r\n");
  EXPECT_EQ(Run("GET k"), Bulk(std::string("Hello World\0!", 13)));
  EXPECT_EQ(Run("SETRANGE n 0 \"\""), ":0\r\n");
  EXPECT_EQ(Run("EXISTS n"), ":0\r\n");
  EXPECT_EQ(Run("SETRANGE k -1 x"), "-ERR offset is out of range\r\n");
  EXPECT_EQ(Run("SETRANGE k 536870908 world"),
            "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n");
  // Redis's "SETRANGE with huge offset": an offset near INT64_MAX must not wrap around the check.
  EXPECT_EQ(Run("SETRANGE k 9223372036854775807 A"),
            "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n");
  EXPECT_EQ(Run("SETBIT b 1 1"), ":0\r\n");
  EXPECT_EQ(Run("GET b"), Bulk("@"));
  EXPECT_EQ(Run("SETBIT b 1 0"), ":1\r\n");
  EXPECT_EQ(Run("GETBIT b 1"), ":0\r\n");
  EXPECT_EQ(Run("GETBIT b 100"), ":0\r\n");
  EXPECT_EQ(Run("SETBIT b 0 2"), "-ERR bit is not an integer or out of range\r\n");
  EXPECT_EQ(Run("SETBIT b -1 1"), "-ERR bit offset is not an integer or out of range\r\n");
  EXPECT_EQ(Run("SET c foobar"), "+OK\r\n");
  EXPECT_EQ(Run("BITCOUNT c"), ":26\r\n");
  EXPECT_EQ(Run("BITCOUNT c 1 1"), ":6\r\n");
  EXPECT_EQ(Run("BITCOUNT c 5 30 BIT"), ":17\r\n");
}

TEST_F(RespStrings, MultiKeyCommands_OneBatchAndCrossSlot) {
  EXPECT_EQ(Run("MSETNX {t}a 1 {t}b 2"), ":1\r\n");
  EXPECT_EQ(Run("MSETNX {t}a 9 {t}c 3"), ":0\r\n");
  EXPECT_EQ(Run("EXISTS {t}c"), ":0\r\n") << "all or nothing";
  EXPECT_EQ(Run("MSETNX {t}x xxx {t}x yyy"), ":1\r\n");
  EXPECT_EQ(Run("GET {t}x"), Bulk("yyy"));
  EXPECT_EQ(Run("MSETNX {t}a"), "-ERR wrong number of arguments for 'msetnx' command\r\n");
  EXPECT_EQ(Run("SET {t}s v EX 100"), "+OK\r\n");
  EXPECT_EQ(Run("RENAME {t}s {t}d"), "+OK\r\n");
  EXPECT_EQ(Run("TTL {t}d"), ":100\r\n") << "RENAME keeps the TTL";
  EXPECT_EQ(Run("EXISTS {t}s"), ":0\r\n");
  EXPECT_EQ(Run("RENAME {t}s {t}d"), "-ERR no such key\r\n");
  EXPECT_EQ(Run("RENAMENX {t}d {t}a"), ":0\r\n");
  EXPECT_EQ(Run("RENAMENX {t}d {t}e"), ":1\r\n");
  EXPECT_EQ(Run("COPY {t}e {t}f"), ":1\r\n");
  EXPECT_EQ(Run("COPY {t}e {t}f"), ":0\r\n");
  EXPECT_EQ(Run("COPY {t}a {t}f REPLACE"), ":1\r\n");
  EXPECT_EQ(Run("GET {t}f"), Bulk("1"));
  EXPECT_EQ(Run("COPY {t}a {t}f DB notanumber"),
            "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(Run("COPY {t}a {t}a"), "-ERR source and destination objects are the same\r\n");
  // Keys of two shards (no common tag): Redis Cluster's CROSSSLOT, nothing written.
  std::string other;
  for (int i = 0; other.empty(); ++i) {
    std::string k = "o" + std::to_string(i);
    if (store_.CommitGroup(k) != store_.CommitGroup("{t}a")) other = k;
  }
  EXPECT_EQ(Run("RENAME {t}a " + other),
            "-CROSSSLOT Keys in request don't hash to the same slot\r\n");
  EXPECT_EQ(Run("EXISTS {t}a"), ":1\r\n");
}

// MSET is one batch (atomic, as Redis's) when its keys commit together and fit one; a repeated key
// takes its last value. Keys of two commit groups (a replicated cluster's shards) are set one by
// one.
TEST_F(RespStrings, Mset_OneBatchWhenTheKeysCommitTogether) {
  const uint64_t before = store_.batches();
  EXPECT_EQ(Run("MSET {m}a 1 {m}b 2 {m}a 3"), "+OK\r\n");
  EXPECT_EQ(store_.batches(), before + 1);
  EXPECT_EQ(Run("MGET {m}a {m}b"), "*2\r\n" + Bulk("3") + Bulk("2"));
  std::string other;
  for (int i = 0; other.empty(); ++i) {
    std::string k = "o" + std::to_string(i);
    if (store_.CommitGroup(k) != store_.CommitGroup("{m}a")) other = k;
  }
  EXPECT_EQ(Run("MSET {m}a 4 " + other + " 5"), "+OK\r\n");
  EXPECT_EQ(store_.batches(), before + 1);
  EXPECT_EQ(Run("MGET {m}a " + other), "*2\r\n" + Bulk("4") + Bulk("5"));
}

TEST_F(RespStrings, Lcs_AsRedis) {
  EXPECT_EQ(Run("MSET {l}1 ohmytext {l}2 mynewtext"), "+OK\r\n");
  EXPECT_EQ(Run("LCS {l}1 {l}2"), Bulk("mytext"));
  EXPECT_EQ(Run("LCS {l}1 {l}2 LEN"), ":6\r\n");
  EXPECT_EQ(Run("LCS {l}1 {l}2 IDX MINMATCHLEN 4 WITHMATCHLEN"),
            "*4\r\n$7\r\nmatches\r\n*1\r\n*3\r\n*2\r\n:4\r\n:7\r\n*2\r\n:5\r\n:8\r\n:4\r\n"
            "$3\r\nlen\r\n:6\r\n");
  EXPECT_EQ(Run("LCS {l}1 {l}2 LEN IDX"),
            "-ERR If you want both the length and indexes, please just use IDX.\r\n");
}

TEST_F(RespStrings, KeyspaceIntrospection) {
  EXPECT_EQ(Run("MSET a 1 b 2 cc 3"), "+OK\r\n");
  EXPECT_EQ(Run("KEYS ?"), "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
  EXPECT_EQ(Run("TYPE a"), "+string\r\n");
  EXPECT_EQ(Run("TYPE zz"), "+none\r\n");
  std::string r = Run("RANDOMKEY");
  EXPECT_TRUE(r == Bulk("a") || r == Bulk("b") || r == Bulk("cc")) << r;
  EXPECT_EQ(Run("TOUCH a b zz"), ":2\r\n");
  EXPECT_EQ(Run("UNLINK a zz"), ":1\r\n");
  EXPECT_EQ(Run("OBJECT ENCODING b"), Bulk("int"));
  EXPECT_EQ(Run("OBJECT ENCODING zz"), "$-1\r\n");
  // A string's bytes are its one entry in the log: 48-byte header + key + value, 64-aligned.
  EXPECT_EQ(Run("MEMORY USAGE cc"), ":64\r\n");
  EXPECT_EQ(Run("SET long " + std::string(100, 'v')), "+OK\r\n");
  EXPECT_EQ(Run("MEMORY USAGE long SAMPLES 0"), ":192\r\n");
  EXPECT_EQ(Run("MEMORY USAGE zz"), "$-1\r\n");
  EXPECT_EQ(Run("MEMORY USAGE cc SAMPLES x"), "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(Run("MEMORY USAGE cc FOO"), "-ERR syntax error\r\n");
  EXPECT_EQ(Run("MEMORY NOPE"), "-ERR unknown subcommand 'NOPE'. Try MEMORY HELP.\r\n");
  EXPECT_EQ(Run("MEMORY PURGE"), "+OK\r\n");
  EXPECT_EQ(Run("DEL long"), ":1\r\n");
  EXPECT_EQ(Run("EXPIREAT b 1800000000"), ":1\r\n");
  EXPECT_EQ(Run("EXPIRETIME b"), ":1800000000\r\n");
  EXPECT_EQ(Run("PEXPIRETIME b"), ":1800000000000\r\n");
  EXPECT_EQ(Run("EXPIRETIME cc"), ":-1\r\n");
  EXPECT_EQ(Run("EXPIRETIME zz"), ":-2\r\n");
  EXPECT_EQ(Run("PEXPIREAT b 1"), ":1\r\n");
  EXPECT_EQ(Run("EXISTS b"), ":0\r\n");
  EXPECT_EQ(Run("FLUSHDB"), "+OK\r\n");
  EXPECT_EQ(Run("DBSIZE"), ":0\r\n");
  EXPECT_EQ(Run("RANDOMKEY"), "$-1\r\n");
}

TEST_F(RespStrings, Watch_FailsExecOnChangeOrExpiry) {
  EXPECT_EQ(Run("SET x 30"), "+OK\r\n");
  EXPECT_EQ(Run("WATCH x"), "+OK\r\n");
  EXPECT_EQ(Run("SET x 40"), "+OK\r\n");
  EXPECT_EQ(Run("MULTI"), "+OK\r\n");
  EXPECT_EQ(Run("PING"), "+QUEUED\r\n");
  EXPECT_EQ(Run("EXEC"), "*-1\r\n");
  // After EXEC nothing is watched.
  EXPECT_EQ(Run("MULTI"), "+OK\r\n");
  EXPECT_EQ(Run("PING"), "+QUEUED\r\n");
  EXPECT_EQ(Run("EXEC"), "*1\r\n+PONG\r\n");
  // Unchanged: EXEC runs.
  EXPECT_EQ(Run("WATCH x"), "+OK\r\n");
  EXPECT_EQ(Run("MULTI"), "+OK\r\n");
  EXPECT_EQ(Run("WATCH x"), "-ERR WATCH inside MULTI is not allowed\r\n");
  EXPECT_EQ(Run("INCR x"), "+QUEUED\r\n");
  EXPECT_EQ(Run("EXEC"), "*1\r\n:41\r\n");
  // A watched key that expires fails EXEC; one already expired when watched does not.
  EXPECT_EQ(Run("SET y v PX 1000"), "+OK\r\n");
  EXPECT_EQ(Run("WATCH y"), "+OK\r\n");
  g_now += 1100;
  EXPECT_EQ(Run("MULTI"), "+OK\r\n");
  EXPECT_EQ(Run("PING"), "+QUEUED\r\n");
  EXPECT_EQ(Run("EXEC"), "*-1\r\n");
  EXPECT_EQ(Run("WATCH y"), "+OK\r\n");
  EXPECT_EQ(Run("MULTI"), "+OK\r\n");
  EXPECT_EQ(Run("PING"), "+QUEUED\r\n");
  EXPECT_EQ(Run("EXEC"), "*1\r\n+PONG\r\n");
  // UNWATCH and DISCARD forget.
  EXPECT_EQ(Run("WATCH x"), "+OK\r\n");
  EXPECT_EQ(Run("UNWATCH"), "+OK\r\n");
  EXPECT_EQ(Run("SET x 1"), "+OK\r\n");
  EXPECT_EQ(Run("MULTI"), "+OK\r\n");
  EXPECT_EQ(Run("PING"), "+QUEUED\r\n");
  EXPECT_EQ(Run("EXEC"), "*1\r\n+PONG\r\n");
}

TEST_F(RespStrings, ServerCommandsTheSuiteSends) {
  EXPECT_EQ(Run("FUNCTION FLUSH"), "+OK\r\n");
  EXPECT_EQ(Run("FUNCTION LIST"), "*0\r\n");
  EXPECT_EQ(Run("FUNCTION LOAD x").substr(0, 4), "-ERR");
  EXPECT_EQ(Run("CONFIG SET hash-max-ziplist-entries 16"), "+OK\r\n");
  EXPECT_EQ(Run("CONFIG GET hash-max-ziplist-entries"),
            "*2\r\n$24\r\nhash-max-ziplist-entries\r\n$2\r\n16\r\n");
  EXPECT_EQ(Run("CONFIG SET maxmemory bla"),
            "-ERR CONFIG SET failed (possibly related to argument 'maxmemory') - argument must be "
            "a memory value\r\n");
  EXPECT_EQ(Run("CONFIG SET maxmemory 10mb"), "+OK\r\n");
  EXPECT_EQ(Run("CONFIG SET nosuch 1"),
            "-ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'\r\n");
  EXPECT_EQ(Run("MULTI"), "+OK\r\n");
  EXPECT_EQ(Run("SET foo bar"), "+QUEUED\r\n");
  EXPECT_EQ(Run("SAVE"), "-ERR Command not allowed inside a transaction\r\n");
  EXPECT_EQ(Run("EXEC"), "-EXECABORT Transaction discarded because of previous errors.\r\n");
  EXPECT_EQ(Run("GET foo"), "$-1\r\n");
  EXPECT_EQ(Run("SAVE"), "+OK\r\n");
  // INFO: Redis's groups, and counters per command and per error code.
  std::string def = Run("INFO");
  EXPECT_NE(def.find("used_cpu_user:"), std::string::npos);
  EXPECT_EQ(def.find("rejected_calls"), std::string::npos);
  EXPECT_NE(def.find("errorstat_EXECABORT:count=1"), std::string::npos);
  std::string all = Run("INFO cpu all");
  EXPECT_NE(all.find("cmdstat_save:calls=1,"), std::string::npos) << all;
  EXPECT_NE(all.find("cmdstat_save:calls=1,usec="), std::string::npos);
  EXPECT_NE(all.find("rejected_calls=1,failed_calls=0"), std::string::npos);
  EXPECT_EQ(all.find("# CPU"), all.rfind("# CPU")) << "a section once";
  EXPECT_EQ(Run("CONFIG RESETSTAT"), "+OK\r\n");
  EXPECT_EQ(Run("INFO commandstats").find("cmdstat_save"), std::string::npos);
}

}  // namespace
}  // namespace asymnvm::kv::resp
