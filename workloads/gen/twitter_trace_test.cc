// Twitter cache traces: the format, the reader, the generator's statistics, the shipped samples and
// the asymnvm-trace tool (workloads/gen/twitter_trace.h).
#include "workloads/gen/twitter_trace.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace asymnvm::workloads {
namespace {

std::string RunCmd(const std::string& cmd, int* code) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = ::pclose(p);
  *code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
  return out;
}

TEST(TwitterTrace, PublicFormatParsesAndRoundTrips) {
  auto r = ParseTraceLine("0,q:q:1:8WTfjZU,23,57,1,get,0");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->timestamp, 0u);
  EXPECT_EQ(r->key, "q:q:1:8WTfjZU");
  EXPECT_EQ(r->key_size, 23u);
  EXPECT_EQ(r->value_size, 57u);
  EXPECT_EQ(r->client, 1u);
  EXPECT_EQ(r->op, TraceOp::kGet);
  EXPECT_EQ(r->ttl, 0u);
  // A key holding commas, a CRLF line, every operation.
  auto c = ParseTraceLine("86399,a,b,,c,12,0,7,cas,3600\r");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->key, "a,b,,c");
  EXPECT_EQ(c->op, TraceOp::kCas);
  EXPECT_EQ(c->ttl, 3600u);
  for (int i = 0; i < kTraceOps; i++) {
    TraceRecord x;
    x.timestamp = 7;
    x.key = "k" + std::to_string(i);
    x.key_size = 2;
    x.value_size = 100;
    x.client = 9;
    x.op = static_cast<TraceOp>(i);
    x.ttl = 60;
    auto y = ParseTraceLine(FormatTraceLine(x));
    ASSERT_TRUE(y.ok()) << FormatTraceLine(x);
    EXPECT_EQ(FormatTraceLine(*y), FormatTraceLine(x));
    EXPECT_EQ(y->op, x.op);
  }
}

TEST(TwitterTrace, MalformedLinesAreCorruptionNamingTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "fields"},
      {"0,k,1,2,3,get", "fewer than 7"},
      {"x,k,1,2,3,get,0", "timestamp"},
      {"0,,1,2,3,get,0", "empty key"},
      {"0,k,-1,2,3,get,0", "key size"},
      {"0,k,1,2x,3,get,0", "value size"},
      {"0,k,1,2,,get,0", "client"},
      {"0,k,1,2,3,fetch,0", "unknown operation"},
      {"0,k,1,2,3,get,soon", "TTL"},
      {"0,k,1,99999999999,3,get,0", "value size"},
  };
  for (const auto& [line, what] : cases) {
    auto r = ParseTraceLine(line);
    ASSERT_FALSE(r.ok()) << line;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << line;
    EXPECT_NE(r.status().message().find(what), std::string::npos)
        << line << ": " << r.status().ToString();
  }
}

// The generator reproduces each cluster's published statistics (deterministic for its seed, so
// these bounds are checked on fixed samples, not on luck).
TEST(TwitterTrace, GeneratedTracesHaveTheClustersStatistics) {
  for (int id : TwitterClusterIds()) {
    auto p = TwitterCluster(id);
    ASSERT_TRUE(p.ok());
    auto g = TraceGenerator::Create(*p, 20000, 16, 7);
    ASSERT_TRUE(g.ok());
    TraceStatsBuilder b;
    for (int i = 0; i < 50000; i++) {
      TraceRecord r = (*g)->Next();
      ASSERT_EQ(r.key.size(), p->key_size);
      b.Add(r);
    }
    TraceStats s = b.Finish();
    EXPECT_NEAR(s.write_ratio(), p->set_ratio, 0.01) << "cluster " << id;
    EXPECT_DOUBLE_EQ(s.mean_key_size, p->key_size);
    EXPECT_DOUBLE_EQ(s.mean_value_size, p->value_size);
    EXPECT_EQ(s.clients, 16u);
    if (p->alpha >= 0.5) {
      EXPECT_NEAR(s.zipf_alpha, p->alpha, 0.15) << "cluster " << id;
    } else {
      EXPECT_LT(s.zipf_alpha, 0.5) << "cluster " << id;
    }
  }
  EXPECT_EQ(TwitterCluster(13).status().code(), StatusCode::kNotFound);
  const ClusterProfile c12 = TwitterCluster(12).value();
  EXPECT_EQ(TraceGenerator::Create(c12, 0, 1, 1).status().code(), StatusCode::kInvalidArgument);
}

TEST(TwitterTrace, SameSeedSameTrace) {
  const ClusterProfile c27 = TwitterCluster(27).value();
  auto a = TraceGenerator::Create(c27, 1000, 4, 3);
  auto b = TraceGenerator::Create(c27, 1000, 4, 3);
  for (int i = 0; i < 1000; i++)
    ASSERT_EQ(FormatTraceLine((*a)->Next()), FormatTraceLine((*b)->Next()));
}

// The samples shipped in workloads/traces/ are what `asymnvm-trace gen` writes for them (they
// cannot drift from the generator), and the tool's stat reads them.
TEST(TwitterTrace, ShippedSamplesAreCurrentAndReadable) {
  const std::string dir =
      std::string(::testing::TempDir()) + "/asymnvm-trace-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  for (int id : TwitterClusterIds()) {
    const std::string sample =
        std::string(ASYMNVM_SAMPLE_TRACES) + "/cluster-" + std::to_string(id) + ".sample.csv";
    const std::string fresh = dir + "/c" + std::to_string(id) + ".csv";
    int code = -1;
    std::string out =
        RunCmd(std::string(ASYMNVM_TRACE_BIN) + " gen --cluster " + std::to_string(id) +
                   " --ops 1000 --keys 5000 --clients 8 --seed 1 -o " + fresh,
               &code);
    ASSERT_EQ(code, 0) << out;
    std::ifstream a(sample), b(fresh);
    std::stringstream sa, sb;
    sa << a.rdbuf();
    sb << b.rdbuf();
    ASSERT_FALSE(sa.str().empty()) << sample << " is missing";
    EXPECT_EQ(sa.str(), sb.str()) << sample
                                  << " differs from the generator's output: regenerate it with "
                                  << "asymnvm-trace gen --cluster " << id
                                  << " --ops 1000 --keys 5000 --clients 8 --seed 1 -o " << sample;
    out = RunCmd(std::string(ASYMNVM_TRACE_BIN) + " stat --json " + sample, &code);
    EXPECT_EQ(code, 0) << out;
    EXPECT_NE(out.find("\"requests\":1000"), std::string::npos) << out;
  }
  // A malformed trace: exit 1 naming the file and line.
  const std::string bad = dir + "/bad.csv";
  std::ofstream(bad) << "0,k,1,2,3,get,0\n1,k,1,2,3,frob,0\n";
  int code = -1;
  std::string out = RunCmd(std::string(ASYMNVM_TRACE_BIN) + " stat " + bad, &code);
  EXPECT_EQ(code, 1) << out;
  EXPECT_NE(out.find("bad.csv:2"), std::string::npos) << out;
  out = RunCmd(std::string(ASYMNVM_TRACE_BIN) + " gen --cluster 13", &code);
  EXPECT_EQ(code, 2) << out;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace asymnvm::workloads
