#include "backend/naming.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <set>

namespace asymnvm::backend {
namespace {

constexpr uint64_t kOff = 4096;

struct Mem {
  explicit Mem(size_t slots) : bytes(kOff + slots * kNamingSlotSize, 0) {}
  std::vector<uint8_t> bytes;
  Result<std::unique_ptr<NamingSpace>> Open(bool format, bool strict = true) {
    return NamingSpace::Open(bytes.data(), kOff, bytes.size() - kOff, pm::DramPersister(), format,
                             strict);
  }
};

TEST(Naming, CreateLookupRemoveList) {
  Mem m(16);
  auto ns = m.Open(true);
  ASSERT_TRUE(ns.ok()) << ns.status().ToString();
  auto a = (*ns)->Create("bst", 5, {64, 0, 0, 0});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->name, "bst");
  EXPECT_EQ(a->type, 5u);
  EXPECT_EQ(a->params[0], 64u);
  EXPECT_EQ(a->root_addr % 8, 0u);
  EXPECT_EQ(a->lock_addr, a->root_addr + 8);
  EXPECT_EQ(a->seq_addr, a->root_addr + 16);
  EXPECT_GE(a->root_addr, kOff);
  NamingEntry existing;
  EXPECT_EQ((*ns)->Create("bst", 5, {}, &existing).status().code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(existing.slot, a->slot);
  auto l = (*ns)->Lookup("bst");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->root_addr, a->root_addr);
  EXPECT_EQ((*ns)->Lookup("queue").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE((*ns)->Create("queue", 1, {}).ok());
  EXPECT_EQ((*ns)->List().size(), 2u);
  EXPECT_TRUE((*ns)->Remove("bst").ok());
  EXPECT_EQ((*ns)->Remove("bst").code(), StatusCode::kNotFound);
  EXPECT_EQ((*ns)->Lookup("bst").status().code(), StatusCode::kNotFound);
  EXPECT_EQ((*ns)->live(), 1u);
}

TEST(Naming, BadInputIsRejected) {
  Mem m(4);
  auto ns = m.Open(true);
  ASSERT_TRUE(ns.ok());
  EXPECT_EQ((*ns)->Create("", 1, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*ns)->Create(std::string(64, 'x'), 1, {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE((*ns)->Create(std::string(63, 'x'), 1, {}).ok());
  EXPECT_EQ((*ns)->Create(std::string("a\0b", 3), 1, {}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*ns)->Create("t0", 0, {}).status().code(), StatusCode::kInvalidArgument);
  std::vector<uint8_t> raw(1000);
  EXPECT_EQ(NamingSpace::Open(raw.data(), 3, 512, pm::DramPersister(), true).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(NamingSpace::Open(raw.data(), 0, 300, pm::DramPersister(), true).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(Naming, FullTableTombstonesAndProbing) {
  Mem m(4);
  auto ns = m.Open(true);
  ASSERT_TRUE(ns.ok());
  for (int i = 0; i < 4; i++)
    ASSERT_TRUE((*ns)->Create(std::string("s") + std::to_string(i), 1, {}).ok());
  EXPECT_EQ((*ns)->Create("s4", 1, {}).status().code(), StatusCode::kResourceExhausted);
  // Every name stays reachable after removing others (probing continues past tombstones).
  ASSERT_TRUE((*ns)->Remove("s1").ok());
  ASSERT_TRUE((*ns)->Remove("s2").ok());
  for (const char* n : {"s0", "s3"}) EXPECT_TRUE((*ns)->Lookup(n).ok()) << n;
  ASSERT_TRUE((*ns)->Create("s5", 1, {}).ok());
  ASSERT_TRUE((*ns)->Create("s6", 1, {}).ok());
  EXPECT_EQ((*ns)->Create("s7", 1, {}).status().code(), StatusCode::kResourceExhausted);
  std::set<uint32_t> slots;
  for (const auto& e : (*ns)->List()) slots.insert(e.slot);
  EXPECT_EQ(slots.size(), 4u);
}

TEST(Naming, CorruptLiveSlotIsReportedNotTrusted) {
  Mem m(8);
  {
    auto ns = m.Open(true);
    ASSERT_TRUE(ns.ok());
    ASSERT_TRUE((*ns)->Create("a", 1, {}).ok());
    ASSERT_TRUE((*ns)->Create("b", 1, {}).ok());
  }
  auto ns = m.Open(false);
  ASSERT_TRUE(ns.ok());
  const uint32_t slot_a = (*ns)->Lookup("a")->slot;
  ns->reset();
  m.bytes[kOff + slot_a * kNamingSlotSize + 20] ^= 0x40;  // a byte of the name region
  EXPECT_EQ(m.Open(false).status().code(), StatusCode::kCorruption);
  auto lenient = m.Open(false, false);
  ASSERT_TRUE(lenient.ok());
  auto problems = (*lenient)->Check();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find(std::string("slot ") + std::to_string(slot_a)), std::string::npos);
  EXPECT_TRUE((*lenient)->Lookup("b").ok());
  EXPECT_EQ((*lenient)->Lookup("a").status().code(), StatusCode::kNotFound);
  // The corrupt slot is never reused for a new name.
  for (int i = 0; i < 6; i++)
    ASSERT_TRUE((*lenient)->Create(std::string("n") + std::to_string(i), 1, {}).ok());
  EXPECT_EQ((*lenient)->Create("n6", 1, {}).status().code(), StatusCode::kResourceExhausted);
}

TEST(Naming, TornCreateLeavesAFreeSlot) {
  Mem m(4);
  auto ns = m.Open(true);
  ASSERT_TRUE(ns.ok());
  // A crash after the body was written but before the state flipped: garbage body, state free.
  std::memset(m.bytes.data() + kOff + kNamingSlotSize + 8, 0x5a, 100);
  ns->reset();
  auto again = m.Open(false);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_TRUE((*again)->Check().empty());
  EXPECT_EQ((*again)->live(), 0u);
  for (int i = 0; i < 4; i++)
    ASSERT_TRUE((*again)->Create(std::string("x") + std::to_string(i), 1, {}).ok());
}

TEST(Naming, SurvivesRestartAndPowerLoss) {
  const std::string path = ::testing::TempDir() + "/naming_pool";
  std::remove(path.c_str());
  pm::PoolOptions po;
  po.crash_sim = true;
  uint64_t root_addr = 0;
  {
    auto pool = pm::Pool::Create(path, 1 << 20, po);
    ASSERT_TRUE(pool.ok());
    auto ns =
        NamingSpace::Open((*pool)->base(), kOff, 64 * kNamingSlotSize, (*pool)->persister(), true);
    ASSERT_TRUE(ns.ok());
    auto e = (*ns)->Create("hash", 3, {1, 2, 3, 4});
    ASSERT_TRUE(e.ok());
    root_addr = e->root_addr;
    ASSERT_TRUE((*pool)->SimulateCrash(9, 0.0, nullptr, nullptr).ok());
    auto after =
        NamingSpace::Open((*pool)->base(), kOff, 64 * kNamingSlotSize, (*pool)->persister(), false);
    ASSERT_TRUE(after.ok()) << after.status().ToString();
    auto l = (*after)->Lookup("hash");
    ASSERT_TRUE(l.ok()) << l.status().ToString();
    EXPECT_EQ(l->params[3], 4u);
  }
  po.crash_sim = false;
  auto pool = pm::Pool::Open(path, po);
  ASSERT_TRUE(pool.ok());
  auto ns =
      NamingSpace::Open((*pool)->base(), kOff, 64 * kNamingSlotSize, (*pool)->persister(), false);
  ASSERT_TRUE(ns.ok());
  auto l = (*ns)->Lookup("hash");
  ASSERT_TRUE(l.ok());
  EXPECT_EQ(l->root_addr, root_addr);  // addresses stay valid across restarts
  pool->reset();
  std::remove(path.c_str());
}

}  // namespace
}  // namespace asymnvm::backend
