#include "kv/resp/commands.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "kv/resp/test_fake_store.h"

namespace asymnvm::kv::resp {
namespace {

int64_t g_now_ms = 1'700'000'000'000;
int64_t FakeClock() { return g_now_ms; }

class Gateway : public ::testing::Test {
 protected:
  Gateway() : dispatcher_(&state_, &store_) {
    state_.clock_ms = &FakeClock;
    state_.run_id = std::string(40, 'a');
    state_.port = 6399;
    session_.id = 7;
  }
  // Runs one inline-style command line and returns the raw reply bytes.
  std::string Run(const std::string& line) {
    std::vector<std::string> argv;
    EXPECT_TRUE(SplitInlineArgs(line, &argv)) << line;
    std::string out;
    dispatcher_.Execute(session_, argv, &out);
    return out;
  }
  std::string RunArgv(std::vector<std::string> argv) {
    std::string out;
    dispatcher_.Execute(session_, argv, &out);
    return out;
  }
  GatewayState state_;
  testing::FakeStore store_;
  Dispatcher dispatcher_;
  Session session_;
};

TEST_F(Gateway, SetGet_RoundTripAndMissingIsNull) {
  EXPECT_EQ(Run("SET k hello"), "+OK\r\n");
  EXPECT_EQ(Run("GET k"), "$5\r\nhello\r\n");
  EXPECT_EQ(Run("get nosuch"), "$-1\r\n");
  EXPECT_EQ(store_.puts(), 1) << "a plain SET is one unconditional (nilext) PUT";
}

TEST_F(Gateway, SetOptions_NxXxGetKeepTtl) {
  EXPECT_EQ(Run("SET k v1 NX"), "+OK\r\n");
  EXPECT_EQ(Run("SET k v2 NX"), "$-1\r\n");
  EXPECT_EQ(Run("SET other v XX"), "$-1\r\n");
  EXPECT_EQ(Run("SET k v3 XX GET"), "$2\r\nv1\r\n");
  EXPECT_EQ(Run("GET k"), "$2\r\nv3\r\n");
  EXPECT_EQ(Run("SET k v4 NX XX"), "-ERR syntax error\r\n");
  EXPECT_EQ(Run("SET k v4 EX 0"), "-ERR invalid expire time in 'set' command\r\n");
  EXPECT_EQ(Run("SET k v4 EX abc"), "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(Run("SET k v4 EX 10 PX 5"), "-ERR syntax error\r\n");
  EXPECT_EQ(Run("SET k v5 EX 100"), "+OK\r\n");
  EXPECT_EQ(Run("SET k v6 KEEPTTL"), "+OK\r\n");
  EXPECT_EQ(Run("TTL k"), ":100\r\n");
  EXPECT_EQ(Run("SET k v7"), "+OK\r\n");
  EXPECT_EQ(Run("TTL k"), ":-1\r\n");
}

TEST_F(Gateway, Expiry_FollowsTheInjectedClock) {
  g_now_ms = 1'700'000'000'000;
  EXPECT_EQ(Run("SET k v PX 1500"), "+OK\r\n");
  EXPECT_EQ(Run("PTTL k"), ":1500\r\n");
  EXPECT_EQ(Run("TTL k"), ":2\r\n");
  g_now_ms += 1499;
  EXPECT_EQ(Run("GET k"), "$1\r\nv\r\n");
  g_now_ms += 1;
  EXPECT_EQ(Run("GET k"), "$-1\r\n");
  EXPECT_EQ(Run("TTL k"), ":-2\r\n");
  EXPECT_EQ(Run("EXISTS k"), ":0\r\n");
  EXPECT_EQ(Run("SET k w NX"), "+OK\r\n") << "an expired value counts as absent for NX";
  EXPECT_EQ(Run("EXPIRE k 10"), ":1\r\n");
  EXPECT_EQ(Run("EXPIRE k 20 NX"), ":0\r\n");
  EXPECT_EQ(Run("EXPIRE k 5 GT"), ":0\r\n");
  EXPECT_EQ(Run("EXPIRE k 50 GT"), ":1\r\n");
  EXPECT_EQ(Run("TTL k"), ":50\r\n");
  EXPECT_EQ(Run("PERSIST k"), ":1\r\n");
  EXPECT_EQ(Run("TTL k"), ":-1\r\n");
  EXPECT_EQ(Run("EXPIRE k -1"), ":1\r\n");
  EXPECT_EQ(Run("EXISTS k"), ":0\r\n");
  EXPECT_EQ(Run("EXPIRE nosuch 10"), ":0\r\n");
}

TEST_F(Gateway, IncrFamily_ErrorsAndOverflow) {
  EXPECT_EQ(Run("INCR c"), ":1\r\n");
  EXPECT_EQ(Run("INCRBY c 41"), ":42\r\n");
  EXPECT_EQ(Run("DECR c"), ":41\r\n");
  EXPECT_EQ(Run("DECRBY c 50"), ":-9\r\n");
  EXPECT_EQ(Run("GET c"), "$2\r\n-9\r\n");
  EXPECT_EQ(Run("SET s abc"), "+OK\r\n");
  EXPECT_EQ(Run("INCR s"), "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(Run("SET m 9223372036854775807"), "+OK\r\n");
  EXPECT_EQ(Run("INCR m"), "-ERR increment or decrement would overflow\r\n");
  EXPECT_EQ(Run("INCRBY c x"), "-ERR value is not an integer or out of range\r\n");
  EXPECT_EQ(Run("SET t 5 EX 100"), "+OK\r\n");
  EXPECT_EQ(Run("INCR t"), ":6\r\n");
  EXPECT_EQ(Run("TTL t"), ":100\r\n") << "INCR keeps the TTL";
}

TEST_F(Gateway, ReadModifyWrite_RetriesOnAConcurrentChange) {
  EXPECT_EQ(Run("SET c 10"), "+OK\r\n");
  int interfered = 0;
  store_.set_before_put_if([&](std::string_view k) {
    if (interfered++ == 0) store_.Bump(std::string(k));  // another writer got there first
  });
  EXPECT_EQ(Run("APPEND c x"), ":3\r\n");
  EXPECT_EQ(interfered, 2);
  EXPECT_EQ(Run("GET c"), "$3\r\n10x\r\n");
}

TEST_F(Gateway, StringCommands) {
  EXPECT_EQ(Run("APPEND a foo"), ":3\r\n");
  EXPECT_EQ(Run("APPEND a bar"), ":6\r\n");
  EXPECT_EQ(Run("STRLEN a"), ":6\r\n");
  EXPECT_EQ(Run("STRLEN none"), ":0\r\n");
  EXPECT_EQ(Run("GETSET a x"), "$6\r\nfoobar\r\n");
  EXPECT_EQ(Run("GETSET b x"), "$-1\r\n");
  EXPECT_EQ(Run("SETNX b y"), ":0\r\n");
  EXPECT_EQ(Run("MSET k1 v1 k2 v2"), "+OK\r\n");
  EXPECT_EQ(Run("MSET k1 v1 k2"), "-ERR wrong number of arguments for 'mset' command\r\n");
  EXPECT_EQ(Run("MGET k1 nope k2"), "*3\r\n$2\r\nv1\r\n$-1\r\n$2\r\nv2\r\n");
  EXPECT_EQ(Run("EXISTS k1 k1 nope"), ":2\r\n");
  EXPECT_EQ(Run("DEL k1 nope k2"), ":2\r\n");
}

TEST_F(Gateway, ValuesWrittenThroughTheKvApi_ReadBack) {
  ASSERT_TRUE(store_.Put("raw", "written natively").ok());
  EXPECT_EQ(Run("GET raw"), "$16\r\nwritten natively\r\n");
  ASSERT_TRUE(store_.Put("n", "41").ok());
  EXPECT_EQ(Run("INCR n"), ":42\r\n");
  EXPECT_EQ(store_.incrs(), 1) << "a plain counter takes the store's one-round-trip Incr";
  EXPECT_EQ(store_.map()["n"].value, "42");
}

TEST_F(Gateway, ExpiredKeys_HiddenFromScanAndDbsize) {
  g_now_ms = 1'700'000'000'000;
  Run("SET a 1 PX 10");
  Run("SET b 2");
  g_now_ms += 10;
  EXPECT_EQ(Run("DBSIZE"), ":1\r\n");
  EXPECT_EQ(Run("SCAN 0"), "*2\r\n$1\r\n0\r\n*1\r\n$1\r\nb\r\n");
}

TEST_F(Gateway, StoreFailure_GivesErrorReplyNotCrash) {
  store_.set_fail(true);
  EXPECT_EQ(Run("GET k").substr(0, 9), "-TRYAGAIN");
  EXPECT_EQ(Run("SET k v").substr(0, 9), "-TRYAGAIN");
  EXPECT_EQ(Run("PING"), "+PONG\r\n");
}

TEST_F(Gateway, ScanDbsizeFlushall) {
  for (int i = 0; i < 25; ++i) Run("SET key:" + std::to_string(i) + " v");
  Run("SET other v");
  EXPECT_EQ(Run("DBSIZE"), ":26\r\n");
  std::set<std::string> seen;
  std::string cursor = "0";
  int rounds = 0;
  do {
    std::string r = Run("SCAN " + cursor + " MATCH key:* COUNT 7");
    // *2\r\n$<n>\r\n<cursor>\r\n*<m>\r\n($<len>\r\n<key>\r\n)*
    std::istringstream in(r);
    std::string line;
    std::getline(in, line);
    std::getline(in, line);
    std::getline(in, cursor);
    cursor.pop_back();
    std::getline(in, line);
    int m = std::stoi(line.substr(1));
    for (int i = 0; i < m; ++i) {
      std::getline(in, line);
      std::getline(in, line);
      line.pop_back();
      seen.insert(line);
    }
    ASSERT_LT(++rounds, 100);
  } while (cursor != "0");
  EXPECT_EQ(seen.size(), 25u);
  EXPECT_EQ(Run("SCAN 0 TYPE hash"), "*2\r\n$2\r\n10\r\n*0\r\n");
  EXPECT_EQ(Run("SCAN x"), "-ERR invalid cursor\r\n");
  EXPECT_EQ(Run("FLUSHALL"), "+OK\r\n");
  EXPECT_EQ(Run("DBSIZE"), ":0\r\n");
}

TEST_F(Gateway, MultiExec_AtomicWithinOneShard) {
  // Find two keys in the same shard and one in another.
  std::string a = "a0", b, other;
  for (int i = 1; b.empty() || other.empty(); ++i) {
    std::string k = "k" + std::to_string(i);
    if (store_.CommitGroup(k) == store_.CommitGroup(a)) {
      if (b.empty()) b = k;
    } else if (other.empty()) {
      other = k;
    }
  }
  EXPECT_EQ(Run("MULTI"), "+OK\r\n");
  EXPECT_EQ(Run("SET " + a + " 1"), "+QUEUED\r\n");
  EXPECT_EQ(Run("INCR " + b), "+QUEUED\r\n");
  EXPECT_EQ(Run("GET " + a), "+QUEUED\r\n");
  EXPECT_EQ(Run("EXEC"), "*3\r\n+OK\r\n:1\r\n$1\r\n1\r\n");
  EXPECT_EQ(store_.batches(), 1) << "both writes in one atomic batch";
  EXPECT_EQ(store_.puts(), 0) << "nothing written outside the batch";

  EXPECT_EQ(Run("MULTI"), "+OK\r\n");
  Run("SET " + a + " 2");
  Run("SET " + other + " 2");
  EXPECT_EQ(Run("EXEC").substr(0, 10), "-CROSSSLOT");
  EXPECT_EQ(Run("GET " + a), "$1\r\n1\r\n") << "nothing of a cross-shard transaction ran";

  EXPECT_EQ(Run("MULTI"), "+OK\r\n");
  EXPECT_EQ(Run("NOSUCHCMD x").substr(0, 20), "-ERR unknown command");
  EXPECT_EQ(Run("EXEC"), "-EXECABORT Transaction discarded because of previous errors.\r\n");
  EXPECT_EQ(Run("MULTI"), "+OK\r\n");
  EXPECT_EQ(Run("MULTI"), "-ERR MULTI calls can not be nested\r\n");
  EXPECT_EQ(Run("DBSIZE").substr(0, 4), "-ERR");
  EXPECT_EQ(Run("DISCARD"), "+OK\r\n");
  EXPECT_EQ(Run("EXEC"), "-ERR EXEC without MULTI\r\n");
  EXPECT_EQ(Run("DISCARD"), "-ERR DISCARD without MULTI\r\n");
}

TEST_F(Gateway, MultiExec_ReRunsWhenAKeyChangesBeforeCommit) {
  EXPECT_EQ(Run("SET c 1"), "+OK\r\n");
  EXPECT_EQ(Run("MULTI"), "+OK\r\n");
  EXPECT_EQ(Run("INCR c"), "+QUEUED\r\n");
  int commits = 0;
  store_.set_before_commit([&] {
    if (commits++ == 0) {  // another client writes c between the transaction's read and commit
      store_.map()["c"].value = "5";
      store_.Bump("c");
    }
  });
  EXPECT_EQ(Run("EXEC"), "*1\r\n:6\r\n");
  EXPECT_EQ(commits, 2);
  EXPECT_EQ(Run("GET c"), "$1\r\n6\r\n");
}

TEST_F(Gateway, ConnectionCommands) {
  EXPECT_EQ(Run("PING"), "+PONG\r\n");
  EXPECT_EQ(Run("PING hi"), "$2\r\nhi\r\n");
  EXPECT_EQ(Run("ECHO x"), "$1\r\nx\r\n");
  EXPECT_EQ(Run("SELECT 0"), "+OK\r\n");
  EXPECT_EQ(Run("SELECT 1"), "-ERR DB index is out of range\r\n");
  EXPECT_EQ(Run("CLIENT GETNAME"), "$-1\r\n");
  EXPECT_EQ(Run("CLIENT SETNAME app1"), "+OK\r\n");
  EXPECT_EQ(Run("CLIENT GETNAME"), "$4\r\napp1\r\n");
  EXPECT_EQ(Run("CLIENT SETNAME \"a b\"").substr(0, 4), "-ERR");
  EXPECT_EQ(Run("CLIENT SETINFO LIB-NAME redis-py"), "+OK\r\n");
  EXPECT_EQ(Run("CLIENT SETINFO LIB-VER 4.3"), "+OK\r\n");
  EXPECT_EQ(Run("CLIENT ID"), ":7\r\n");
  EXPECT_EQ(Run("CLIENT KILL x"), "-ERR unknown subcommand 'KILL'. Try CLIENT HELP.\r\n");
  EXPECT_EQ(Run("FOO bar"), "-ERR unknown command 'FOO', with args beginning with: 'bar' \r\n");
  EXPECT_EQ(Run("GET"), "-ERR wrong number of arguments for 'get' command\r\n");
  std::string t = Run("TIME");
  EXPECT_EQ(t.substr(0, 4), "*2\r\n");
  EXPECT_EQ(Run("WAIT 1 0"), ":2\r\n");
  EXPECT_EQ(Run("QUIT"), "+OK\r\n");
  EXPECT_TRUE(session_.close_after_reply);
}

TEST_F(Gateway, Hello_SwitchesProtocolAndRefusesOthers) {
  EXPECT_EQ(Run("HELLO 4"), "-NOPROTO unsupported protocol version\r\n");
  EXPECT_EQ(Run("HELLO x"), "-ERR Protocol version is not an integer or out of range\r\n");
  std::string r = Run("HELLO 3 SETNAME me");
  EXPECT_EQ(r.substr(0, 4), "%7\r\n");
  EXPECT_NE(r.find("$5\r\nproto\r\n:3\r\n"), std::string::npos);
  EXPECT_EQ(session_.proto, 3);
  EXPECT_EQ(session_.name, "me");
  EXPECT_EQ(Run("GET nosuch"), "_\r\n");
  EXPECT_EQ(Run("CONFIG GET nosuch"), "%0\r\n");
  EXPECT_EQ(Run("HELLO 2").substr(0, 5), "*14\r\n");
  EXPECT_EQ(Run("GET nosuch"), "$-1\r\n");
}

TEST_F(Gateway, Auth_RequiredWhenASecretIsSet) {
  state_.cluster_secret = "s3cret";
  EXPECT_EQ(Run("GET k"), "-NOAUTH Authentication required.\r\n");
  EXPECT_EQ(Run("HELLO 3").substr(0, 7), "-NOAUTH");
  EXPECT_EQ(Run("AUTH wrong"),
            "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
  EXPECT_EQ(Run("AUTH bob s3cret").substr(0, 10), "-WRONGPASS");
  EXPECT_EQ(Run("AUTH s3cret"), "+OK\r\n");
  EXPECT_EQ(Run("GET k"), "$-1\r\n");
  Session fresh;
  session_ = fresh;
  EXPECT_EQ(Run("HELLO 3 AUTH default s3cret").substr(0, 4), "%7\r\n");
  state_.cluster_secret.clear();
  EXPECT_EQ(Run("AUTH x").substr(0, 4), "-ERR");
}

TEST_F(Gateway, ConfigGet_PairsAndUnknownIsEmpty) {
  EXPECT_EQ(Run("CONFIG GET save"), "*2\r\n$4\r\nsave\r\n$0\r\n\r\n");
  EXPECT_EQ(Run("CONFIG GET appendonly"), "*2\r\n$10\r\nappendonly\r\n$3\r\nyes\r\n");
  EXPECT_EQ(Run("CONFIG GET nosuch"), "*0\r\n");
  EXPECT_EQ(Run("CONFIG GET append*").substr(0, 4), "*4\r\n");
  EXPECT_EQ(Run("CONFIG SET nosuch x").substr(0, 4), "-ERR");
}

TEST_F(Gateway, Command_GetKeys) {
  EXPECT_EQ(Run("COMMAND GETKEYS MSET a 1 b 2"), "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
  // SORT: the last STORE; a GET/BY/LIMIT argument spelled "store" is not the option.
  EXPECT_EQ(Run("COMMAND GETKEYS SORT abc STORE x STORE def"), "*2\r\n$3\r\nabc\r\n$3\r\ndef\r\n");
  EXPECT_EQ(Run("COMMAND GETKEYS SORT abc GET store"), "*1\r\n$3\r\nabc\r\n");
  EXPECT_EQ(Run("COMMAND GETKEYS LMPOP 2 l1 l2 LEFT"), "*2\r\n$2\r\nl1\r\n$2\r\nl2\r\n");
  EXPECT_EQ(Run("COMMAND GETKEYS nosuch a"), "-ERR Invalid command specified\r\n");
  EXPECT_EQ(Run("COMMAND GETKEYS GET"),
            "-ERR Invalid number of arguments specified for command\r\n");
  EXPECT_EQ(Run("COMMAND GETKEYS PING"), "-ERR The command has no key arguments\r\n");
}

TEST_F(Gateway, Command_CountDocsInfoComeFromTheTable) {
  size_t n = CommandTable().size();
  EXPECT_EQ(Run("COMMAND COUNT"), ":" + std::to_string(n) + "\r\n");
  const std::string count = "*" + std::to_string(n) + "\r\n";
  EXPECT_EQ(Run("COMMAND").substr(0, count.size()), count);
  std::string docs = Run("COMMAND DOCS get");
  EXPECT_EQ(docs.substr(0, 4), "*2\r\n");
  EXPECT_NE(docs.find("Returns the string value of a key."), std::string::npos);
  EXPECT_EQ(Run("COMMAND DOCS nosuch"), "*0\r\n");
  std::string info = Run("COMMAND INFO get nosuch");
  EXPECT_EQ(info.substr(0, 20), "*2\r\n*10\r\n$3\r\nget\r\n:2");
  EXPECT_NE(info.find("*-1\r\n"), std::string::npos);
  EXPECT_EQ(Run("COMMAND FOO").substr(0, 4), "-ERR");
}

TEST_F(Gateway, Info_HasTheSectionsClientsRead) {
  Run("SET k v");
  std::string r = Run("INFO");
  for (const char* s :
       {"# Server", "redis_version:", "# Clients", "connected_clients:", "# Persistence",
        "# Replication", "role:master", "# Keyspace", "db0:keys=1"}) {
    EXPECT_NE(r.find(s), std::string::npos) << s;
  }
  std::string only = Run("INFO replication");
  EXPECT_EQ(only.find("# Server"), std::string::npos);
  EXPECT_NE(only.find("connected_slaves:2"), std::string::npos);
}

TEST(RespTable, EveryCommandHasDocsAndAValidArity) {
  for (const auto& c : CommandTable()) {
    EXPECT_NE(c.arity, 0) << c.name;
    EXPECT_GT(std::string(c.summary).size(), 5u) << c.name;
    EXPECT_TRUE(c.handler != nullptr) << c.name;
    EXPECT_EQ(FindCommand(c.name), &c);
  }
  EXPECT_EQ(FindCommand("GeT"), FindCommand("get"));
  EXPECT_EQ(FindCommand("nosuch"), nullptr);
}

TEST(RespTable, DocRespMdHoldsTheGeneratedTable) {
  std::ifstream f(ASYMNVM_RESP_DOC);
  ASSERT_TRUE(f) << ASYMNVM_RESP_DOC;
  std::stringstream ss;
  ss << f.rdbuf();
  std::string doc = ss.str();
  const std::string begin = "<!-- BEGIN GENERATED: asymnvm-resp-doc -->\n";
  const std::string end = "<!-- END GENERATED -->";
  auto b = doc.find(begin);
  auto e = doc.find(end);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(e, std::string::npos);
  EXPECT_EQ(doc.substr(b + begin.size(), e - b - begin.size()), GenerateCompatibilityTable())
      << "doc/resp.md drifted from the dispatch table: run scripts/gen-resp-doc.sh";
}

TEST(RespUtil, ParseInt64AndGlob) {
  int64_t v;
  EXPECT_TRUE(ParseInt64("-9223372036854775808", &v));
  EXPECT_EQ(v, INT64_MIN);
  EXPECT_FALSE(ParseInt64("9223372036854775808", &v));
  EXPECT_FALSE(ParseInt64("01", &v));
  EXPECT_FALSE(ParseInt64(" 1", &v));
  EXPECT_FALSE(ParseInt64("-0", &v));
  EXPECT_TRUE(GlobMatch("key:*", "key:1"));
  EXPECT_TRUE(GlobMatch("k?y", "key"));
  EXPECT_TRUE(GlobMatch("k[a-f]y", "key"));
  EXPECT_FALSE(GlobMatch("k[^e]y", "key"));
  EXPECT_TRUE(GlobMatch("a\\*b", "a*b"));
  EXPECT_FALSE(GlobMatch("a\\*b", "axb"));
  EXPECT_TRUE(GlobMatch("*a*a*a*a*b", std::string(30, 'a') + "b"));
  EXPECT_FALSE(GlobMatch("*a*a*a*a*b", std::string(3000, 'a')));
  EXPECT_TRUE(GlobMatch("APPEND*", "appendonly", true));
}

}  // namespace
}  // namespace asymnvm::kv::resp
