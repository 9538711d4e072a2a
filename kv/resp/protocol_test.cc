#include "kv/resp/protocol.h"

#include <gtest/gtest.h>

#include <random>

#include "kv/resp/value.h"

namespace asymnvm::kv::resp {
namespace {

using Kind = RequestParser::Kind;
using Args = std::vector<std::string>;

// Feeds `input` (optionally one byte at a time) and collects every event.
struct Events {
  std::vector<Args> commands;
  std::string fatal;
  std::vector<char> order;  // 'c' command, 'f' fatal
};

Events Parse(const std::string& input, bool bytewise = false, ParserLimits limits = {}) {
  RequestParser p(limits);
  Events ev;
  auto drain = [&] {
    for (;;) {
      Request r;
      Kind k = p.Next(&r);
      if (k == Kind::kNeedMore) return;
      if (k == Kind::kCommand) {
        ev.commands.push_back(r.argv);
        ev.order.push_back('c');
      } else {
        ev.fatal = p.message();
        ev.order.push_back('f');
        return;
      }
    }
  };
  if (bytewise) {
    for (char c : input) {
      p.Append(&c, 1);
      drain();
      if (!ev.fatal.empty()) break;
    }
  } else {
    p.Append(input.data(), input.size());
    drain();
  }
  return ev;
}

TEST(RespParser, PipelinedMultibulkAndInline_ParseInOrder) {
  std::string in =
      "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n";
  for (bool bytewise : {false, true}) {
    auto ev = Parse(in, bytewise);
    ASSERT_EQ(ev.commands.size(), 3u) << bytewise;
    EXPECT_EQ(ev.commands[0], (Args{"SET", "k", "hello"}));
    EXPECT_EQ(ev.commands[1], (Args{"PING"}));
    EXPECT_EQ(ev.commands[2], (Args{"GET", "k"}));
    EXPECT_TRUE(ev.fatal.empty());
  }
}

TEST(RespParser, BinarySafeBulk_KeepsCrLfAndNul) {
  std::string v("a\r\n\0b", 5);
  std::string in = "*2\r\n$4\r\nECHO\r\n$5\r\n" + v + "\r\n";
  auto ev = Parse(in, true);
  ASSERT_EQ(ev.commands.size(), 1u);
  EXPECT_EQ(ev.commands[0][1], v);
}

// Redis's networking.c: every limit is answered at once (the payload behind an oversized length
// is never waited for) and the connection closes; the commands before it still run.
TEST(RespParser, OversizedBulk_FatalAtOnceWithRedisText) {
  ParserLimits l;
  l.max_bulk_len = 8;
  for (bool bytewise : {false, true}) {
    // Only the header: the payload never comes (Redis's "$2000000000" test).
    auto ev = Parse("PING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100\r\n", bytewise, l);
    ASSERT_EQ(ev.order, (std::vector<char>{'c', 'f'})) << bytewise;
    EXPECT_EQ(ev.fatal, "ERR Protocol error: invalid bulk length");
  }
  EXPECT_EQ(Parse("*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$2000000000\r\n").fatal,
            "ERR Protocol error: invalid bulk length");
}

TEST(RespParser, TooManyArguments_FatalInvalidMultibulkLength) {
  ParserLimits l;
  l.max_array_len = 2;
  auto ev = Parse("*3\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\nPING\r\n", true, l);
  ASSERT_EQ(ev.order, (std::vector<char>{'f'}));
  EXPECT_EQ(ev.fatal, "ERR Protocol error: invalid multibulk length");
  EXPECT_EQ(Parse("*3000000000\r\n").fatal, "ERR Protocol error: invalid multibulk length");
}

TEST(RespParser, RequestBytesLimit_Fatal) {
  ParserLimits l;
  l.max_request_bytes = 10;
  auto ev = Parse("*2\r\n$6\r\nabcdef\r\n$6\r\nghijkl\r\n*1\r\n$4\r\nPING\r\n", false, l);
  ASSERT_EQ(ev.order, (std::vector<char>{'f'}));
  EXPECT_EQ(ev.fatal, "ERR Protocol error: command larger than 10 bytes");
}

// The texts of the suite's unit/protocol.
TEST(RespParser, RedisSuiteFrames_RedisTexts) {
  EXPECT_EQ(Parse("*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n").fatal,
            "ERR Protocol error: expected '$', got 'f'");
  EXPECT_EQ(Parse("*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n").fatal,
            "ERR Protocol error: invalid bulk length");
  EXPECT_EQ(Parse("*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$blabla\r\n").fatal,
            "ERR Protocol error: invalid bulk length");
  EXPECT_EQ(Parse("*1\r\nfoo\r\n").fatal, "ERR Protocol error: expected '$', got 'f'");
  auto ev = Parse("*-10\r\n\r\nPING\r\n");
  EXPECT_EQ(ev.order, (std::vector<char>{'c'}));
}

TEST(RespParser, MalformedLengths_AreFatalWithClearMessage) {
  EXPECT_EQ(Parse("*x\r\n").fatal, "ERR Protocol error: invalid multibulk length");
  EXPECT_EQ(Parse("*1\r\n$-5\r\n").fatal, "ERR Protocol error: invalid bulk length");
  EXPECT_EQ(Parse("*1\r\n+OK\r\n").fatal, "ERR Protocol error: expected '$', got '+'");
  EXPECT_EQ(Parse("*1\r\n$99999999999999999999999\r\n").fatal,
            "ERR Protocol error: invalid bulk length");
  EXPECT_EQ(Parse("*1\r\n$3\r\nabcXY").fatal,
            "ERR Protocol error: bulk payload not terminated by CRLF");
  EXPECT_EQ(Parse("*9999999999\r\n").fatal, "ERR Protocol error: invalid multibulk length");
}

TEST(RespParser, AfterFatal_EverythingIsIgnored) {
  RequestParser p;
  std::string in = "*x\r\nPING\r\n";
  p.Append(in.data(), in.size());
  Request r;
  EXPECT_EQ(p.Next(&r), Kind::kFatal);
  p.Append("PING\r\n", 6);
  EXPECT_EQ(p.Next(&r), Kind::kFatal);
}

TEST(RespParser, InlineTooLong_IsFatal) {
  ParserLimits l;
  l.max_inline_len = 16;
  auto ev = Parse(std::string(40, 'a'), true, l);
  EXPECT_EQ(ev.fatal, "ERR Protocol error: too big inline request");
}

TEST(RespParser, InlineQuotesAndBlankLines) {
  auto ev = Parse("\r\n\nSET \"a b\" 'c\\'d' \"\\x41\\n\"\r\n   \r\nECHO x\n");
  ASSERT_EQ(ev.commands.size(), 2u);
  EXPECT_EQ(ev.commands[0], (Args{"SET", "a b", "c'd", "A\n"}));
  EXPECT_EQ(ev.commands[1], (Args{"ECHO", "x"}));
}

TEST(RespParser, InlineUnbalancedQuotes_Fatal) {
  auto ev = Parse("PING\r\nset \"\"\"test-key\"\"\" test-value\r\nPING\r\n");
  ASSERT_EQ(ev.order, (std::vector<char>{'c', 'f'}));
  EXPECT_EQ(ev.fatal, "ERR Protocol error: unbalanced quotes in request");
}

TEST(RespParser, EmptyAndNullMultibulk_CarryNoCommand) {
  auto ev = Parse("*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n");
  ASSERT_EQ(ev.commands.size(), 1u);
}

TEST(RespParser, RandomSplits_SameCommandsAsWholeInput) {
  std::mt19937 rng(42);
  std::string in;
  std::vector<Args> want;
  for (int i = 0; i < 200; ++i) {
    Args a{"SET", "key:" + std::to_string(i),
           std::string(rng() % 300, static_cast<char>('a' + i % 26))};
    want.push_back(a);
    in += "*3\r\n";
    for (auto& s : a) in += "$" + std::to_string(s.size()) + "\r\n" + s + "\r\n";
  }
  RequestParser p;
  std::vector<Args> got;
  size_t off = 0;
  while (off < in.size()) {
    size_t n = std::min<size_t>(in.size() - off, 1 + rng() % 97);
    p.Append(in.data() + off, n);
    off += n;
    Request r;
    while (p.Next(&r) == Kind::kCommand) got.push_back(r.argv);
  }
  EXPECT_EQ(got, want) << "seed 42";
}

TEST(RespWriter, Resp2AndResp3Encodings) {
  std::string o2, o3;
  ReplyWriter w2(&o2, 2), w3(&o3, 3);
  for (ReplyWriter* w : {&w2, &w3}) {
    w->Map(1);
    w->Bulk("k");
    w->Null();
    w->Bool(true);
    w->Double(1.5);
    w->Set(0);
    w->NullArray();
    w->Verbatim("hi");
  }
  EXPECT_EQ(o2, "*2\r\n$1\r\nk\r\n$-1\r\n:1\r\n$3\r\n1.5\r\n*0\r\n*-1\r\n$2\r\nhi\r\n");
  EXPECT_EQ(o3, "%1\r\n$1\r\nk\r\n_\r\n#t\r\n,1.5\r\n~0\r\n_\r\n=6\r\ntxt:hi\r\n");
  std::string e;
  ReplyWriter we(&e);
  we.Error("ERR a\r\nb");
  we.Simple("x\ny");
  we.Integer(-7);
  EXPECT_EQ(e, "-ERR a  b\r\n+x y\r\n:-7\r\n");
}

TEST(RespValue, PlainBytesStayRawFramingOnlyForTtlOrMagic) {
  EXPECT_EQ(EncodeValue("abc", 0), "abc") << "no TTL: stored as is (KV API and INCR interoperate)";
  DecodedValue d = DecodeValue("abc");
  EXPECT_EQ(d.data, "abc");
  EXPECT_EQ(d.expire_at_ms, 0);
  std::string e = EncodeValue("", 1234567890123);
  EXPECT_EQ(e.size(), kMaxValueOverhead);
  d = DecodeValue(e);
  EXPECT_EQ(d.data, "");
  EXPECT_EQ(d.expire_at_ms, 1234567890123);
  std::string tricky = std::string(kValueMagic) + "x";
  std::string enc = EncodeValue(tricky, 0);
  EXPECT_NE(enc, tricky) << "bytes that look framed are framed";
  EXPECT_EQ(DecodeValue(enc).data, tricky);
  EXPECT_EQ(DecodeValue(std::string(kValueMagic) + "\x07zz").data,
            std::string(kValueMagic) + "\x07zz");
  EXPECT_EQ(DecodeValue("").data, "");
}

}  // namespace
}  // namespace asymnvm::kv::resp
