// TEST HELPER: the fixture of the type-command unit tests (types_test.cc, zset_commands_test.cc):
// a dispatcher over the in-memory store double with a fake clock, and a reply flattener.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "asymnvm/kv.h"
#include "kv/resp/commands.h"
#include "kv/resp/test_fake_store.h"

namespace asymnvm::kv::resp::testing {

inline int64_t g_now_ms = 1'700'000'000'000;
inline int64_t FakeClock() { return g_now_ms; }

// Flattens a reply into its scalar items: bulk/simple strings and integers as text, nil as
// "(nil)", errors as "-text"; arrays, maps and sets contribute their elements in order.
inline size_t ParseInto(const std::string& s, size_t pos, std::vector<std::string>* out) {
  size_t nl = s.find("\r\n", pos);
  if (nl == std::string::npos) return std::string::npos;
  char t = s[pos];
  std::string head = s.substr(pos + 1, nl - pos - 1);
  size_t after = nl + 2;
  switch (t) {
    case '+':
    case ':':
    case ',':
      out->push_back(head);
      return after;
    case '-':
      out->push_back("-" + head);
      return after;
    case '_':
      out->push_back("(nil)");
      return after;
    case '$': {
      long n = std::stol(head);
      if (n < 0) {
        out->push_back("(nil)");
        return after;
      }
      out->push_back(s.substr(after, static_cast<size_t>(n)));
      return after + static_cast<size_t>(n) + 2;
    }
    case '*':
    case '~':
    case '%': {
      long n = std::stol(head);
      if (n < 0) {
        out->push_back("(nil)");
        return after;
      }
      if (t == '%') n *= 2;
      for (long i = 0; i < n; ++i) after = ParseInto(s, after, out);
      return after;
    }
  }
  return std::string::npos;
}

inline std::vector<std::string> Items(const std::string& reply) {
  std::vector<std::string> v;
  EXPECT_EQ(ParseInto(reply, 0, &v), reply.size()) << reply;
  return v;
}

class Types : public ::testing::Test {
 protected:
  Types() : dispatcher_(&state_, &store_) {
    state_.clock_ms = &FakeClock;
    state_.run_id = std::string(40, 'a');
  }
  std::string Run(std::vector<std::string> argv) {
    std::string out;
    dispatcher_.Execute(session_, argv, &out);
    return out;
  }
  std::vector<std::string> R(std::vector<std::string> argv) { return Items(Run(std::move(argv))); }
  std::string One(std::vector<std::string> argv) {
    auto v = R(std::move(argv));
    EXPECT_EQ(v.size(), 1u);
    return v.empty() ? "" : v[0];
  }
  // HGETALL as a map.
  std::map<std::string, std::string> All(const std::string& key) {
    auto v = R({"HGETALL", key});
    std::map<std::string, std::string> m;
    EXPECT_EQ(v.size() % 2, 0u);
    for (size_t i = 0; i + 1 < v.size(); i += 2) EXPECT_TRUE(m.emplace(v[i], v[i + 1]).second);
    return m;
  }
  size_t SubRecords() {
    size_t n = 0;
    for (const auto& [k, v] : store_.map()) n += kv::IsRoutedKey(k) ? 1 : 0;
    return n;
  }
  // Runs cmd from store state `before`, moving the store to state `after` at its first read of a
  // sub-record (between its metadata read and the rest: a concurrent writer's commit).
  using StoreMap = std::map<std::string, StoredValue, std::less<>>;
  std::string RunAcrossChange(const StoreMap& before, const StoreMap& after,
                              std::vector<std::string> cmd) {
    store_.map() = before;
    bool swapped = false;
    store_.set_before_get([&](std::string_view key) {
      if (!swapped && kv::IsRoutedKey(key)) {
        swapped = true;
        store_.map() = after;
      }
    });
    std::string r = Run(std::move(cmd));
    store_.set_before_get(nullptr);
    EXPECT_TRUE(swapped) << "the command read no sub-record";
    return r;
  }
  GatewayState state_;
  FakeStore store_;
  Dispatcher dispatcher_;
  Session session_;
};

}  // namespace asymnvm::kv::resp::testing
