// The clean-close mark of the ownership journal (frontend/alloc_journal.h; doc/alloc.md §Reclaim
// at recovery): the reclaim walk at recovery (every structure of the pool read) runs after a
// crash of the id, or after a session that freed objects in blocks an earlier incarnation carved
// — not after every clean close, which it did before (on TATP at 10 000 subscribers that was
// 7–9 s at every start of a session).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "asymnvm/structures/structure.h"
#include "common/coding.h"
#include "structures/testing.h"

namespace asymnvm::structures {
namespace {

using frontend::Level;

constexpr uint64_t kFe = 40;
constexpr size_t kValueBytes = 100;

Options MapOptions() {
  Options o;
  o.value_size = kValueBytes;
  return o;
}

// The crash child: front-end kFe puts keys 100000.. until killed, appending each acknowledged
// key (8 bytes) to the acks file. Spec "ADDRESS|ACKS".
[[noreturn]] void RunChild(const char* spec) {
  const auto f = testing::SplitSpec(spec);
  if (f.size() != 2) _exit(2);
  auto o = test_support::TestSessionOptions({f[0]}, kFe, Level::kRcb);
  auto s = frontend::Session::Open(o);
  if (!s.ok()) _exit(3);
  RegisterReplays(**s);
  auto m = OpenMap(**s, Kind::kHashTable, "h", MapOptions());
  if (!m.ok() || !(*s)->Replay().ok()) _exit(4);
  FILE* acks = std::fopen(f[1].c_str(), "ab");
  if (acks == nullptr) _exit(5);
  for (uint64_t k = 100000;; k++) {
    if (!(*m)->Put(k, testing::TestValue(k, 1, kValueBytes)).ok()) _exit(6);
    uint8_t rec[8];
    PutLe64(rec, k);
    if (std::fwrite(rec, 1, 8, acks) != 8 || std::fflush(acks) != 0) _exit(7);
  }
}

class CleanCloseTest : public testing::StructuresTest {
 protected:
  std::unique_ptr<frontend::Session> Open() {
    auto s = OpenSession(kFe, Level::kRcb);
    if (s) RegisterReplays(*s);
    return s;
  }
  // Opens the id's session and its map and replays (the recovery of every step below).
  void OpenAndReplay(std::unique_ptr<frontend::Session>* s, std::unique_ptr<Map>* map) {
    *s = Open();
    ASSERT_TRUE(*s);
    auto m = OpenMap(**s, Kind::kHashTable, "h", MapOptions());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    *map = std::move(*m);
    ASSERT_TRUE((*s)->Replay().ok());
  }
  uint64_t UsedBlocks() const {
    uint64_t n = 0;
    for (const auto& x : be_->Extents()) n += x.bytes / 4096;
    return n;
  }
};

TEST_F(CleanCloseTest, OnlyACrashOrAFreeInAnEarlierIncarnationsBlockMakesTheNextOpenWalk) {
  constexpr uint64_t kKeys = 3000;
  // 1. The first incarnation fills several slabs and closes cleanly.
  {
    std::unique_ptr<frontend::Session> s;
    std::unique_ptr<Map> m;
    OpenAndReplay(&s, &m);
    if (HasFatalFailure()) return;
    for (uint64_t k = 0; k < kKeys; k++) {
      ASSERT_TRUE(m->Put(k, testing::TestValue(k, 0, kValueBytes)).ok());
    }
  }
  // 2. Its journal still names its slabs (they hold live objects), but it closed cleanly: no
  //    walk. This session then deletes every key — frees of objects in those slabs.
  {
    auto s = Open();
    ASSERT_TRUE(s);
    EXPECT_FALSE(s->InheritedExtents().empty());
    auto m = OpenMap(*s, Kind::kHashTable, "h", MapOptions());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    ASSERT_TRUE(s->Replay().ok());
    EXPECT_EQ(s->counters().reclaim_runs, 0u) << "a walk after a clean close";
    Value v;
    for (uint64_t k = 0; k < kKeys; k++) {
      ASSERT_TRUE((*m)->Get(k, &v).ok()) << k;
      ASSERT_EQ(v, testing::TestValue(k, 0, kValueBytes)) << k;
      ASSERT_TRUE((*m)->Delete(k).ok()) << k;
    }
    EXPECT_GT(s->counters().orphan_frees, 0u);
  }
  // 3. Its predecessor freed objects in blocks an earlier incarnation carved: this open walks,
  //    and frees the blocks nothing reaches any more.
  const uint64_t used_before = UsedBlocks();
  {
    std::unique_ptr<frontend::Session> s;
    std::unique_ptr<Map> m;
    OpenAndReplay(&s, &m);
    if (HasFatalFailure()) return;
    EXPECT_EQ(s->counters().reclaim_runs, 1u) << "no walk after frees in inherited blocks";
    EXPECT_GT(s->counters().reclaimed_blocks, 0u);
  }
  EXPECT_LT(UsedBlocks(), used_before);
  // 4. A crash of the id (a child SIGKILLed mid-put): the next open walks, and holds every
  //    acknowledged put.
  const std::string acks = path_ + ".acks";
  std::remove(acks.c_str());
  const testing::ChildEnd child = testing::RunSelfAsChild(
      {{"ASYMNVM_CLEAN_CLOSE_CHILD", be_->address() + "|" + acks}}, "clean-close-child",
      [&] { return testing::AckedRecords(acks, 8) >= 200; });
  ASSERT_FALSE(child.exited) << "the child ended by itself: status " << child.status;
  const int64_t acked = testing::AckedRecords(acks, 8);
  ASSERT_GE(acked, 200);
  {
    std::unique_ptr<frontend::Session> s;
    std::unique_ptr<Map> m;
    OpenAndReplay(&s, &m);
    if (HasFatalFailure()) return;
    EXPECT_EQ(s->counters().reclaim_runs, 1u) << "no walk after a crash";
    Value v;
    for (int64_t i = 0; i < acked; i++) {
      const uint64_t k = 100000 + static_cast<uint64_t>(i);
      ASSERT_TRUE(m->Get(k, &v).ok()) << "acknowledged key " << k;
      ASSERT_EQ(v, testing::TestValue(k, 1, kValueBytes)) << k;
    }
  }
  // 5. That recovery closed cleanly: no walk again.
  {
    std::unique_ptr<frontend::Session> s;
    std::unique_ptr<Map> m;
    OpenAndReplay(&s, &m);
    if (HasFatalFailure()) return;
    EXPECT_EQ(s->counters().reclaim_runs, 0u);
  }
  std::remove(acks.c_str());
}

}  // namespace
}  // namespace asymnvm::structures

int main(int argc, char** argv) {
  if (const char* spec = std::getenv("ASYMNVM_CLEAN_CLOSE_CHILD")) {
    asymnvm::structures::RunChild(spec);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
