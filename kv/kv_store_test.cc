// Store: operations, versions, recovery by scanning (crash-simulating PM), exactly-once skips of
// OQ re-executions, torn tails, and a GC soak of >= 10x the log capacity against a shadow map.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "common/checksum.h"
#include "kv/format.h"
#include "kv/store.h"
#include "pm/pm_test_util.h"

#ifndef KV_SOAK_FACTOR
#define KV_SOAK_FACTOR 10  // overwrites, in multiples of the log capacity (long build: 1000)
#define KV_SUITE KvStore
#else
#define KV_SUITE KvStoreLong  // distinct ctest names, so the labels do not collide
#endif

namespace asymnvm::kv {
namespace {

struct Fixture {
  pm::testing::TempDir dir;
  std::unique_ptr<pm::Pool> pool;
  std::unique_ptr<Store> store;
  format::ServerHeader geo;

  bool group_commit = false;

  explicit Fixture(uint32_t segments = 24, uint32_t segment_size = 64 * 1024, uint32_t workers = 2,
                   uint32_t shards = 4, bool group = false)
      : group_commit(group) {
    geo.workers = workers;
    geo.shards = shards;
    geo.segment_size = segment_size;
    geo.segments = segments;
    pm::PoolOptions po;
    po.mode = pm::PersistMode::kFlushOnly;
    po.crash_sim = true;
    po.layout = "kv-test";
    auto p = pm::Pool::Create(dir.File("kv.pool"),
                              4096 + format::kHeaderPage + uint64_t{segments} * segment_size, po);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    pool = std::move(p).value();
    Open();
  }
  void Open() {
    StoreOptions so;
    so.header_page = pool->user_base();
    so.log_base = pool->user_base() + format::kHeaderPage;
    so.persister = pool->persister();
    so.geometry = geo;
    so.group_commit = group_commit;
    auto s = Store::Open(so);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    store = std::move(s).value();
  }
  // Drops every line not flushed+drained, then reopens (a process crash at an arbitrary point).
  void CrashAndReopen(uint64_t seed) {
    store.reset();
    ASSERT_TRUE(pool->SimulateCrash(seed, 0.0, nullptr, nullptr).ok());
    Open();
  }
  uint32_t W(std::string_view k) const {
    return Store::WorkerOf(ShardOf(k, geo.shards), geo.workers);
  }
  uint32_t S(std::string_view k) const { return ShardOf(k, geo.shards); }
  Result<uint64_t> Put(std::string_view k, std::string_view v, uint64_t pos = 0) {
    return store->Put(W(k), S(k), k, v, pos, false);
  }
  ReadResult Get(std::string_view k) { return store->Get(W(k), S(k), k, 0, 1 << 20); }
};

TEST(KV_SUITE, Operations_ReturnValuesAndVersions) {
  Fixture f;
  auto v1 = f.Put("alpha", "one");
  ASSERT_TRUE(v1.ok());
  auto g = f.Get("alpha");
  EXPECT_TRUE(g.found);
  EXPECT_EQ(g.bytes, "one");
  EXPECT_EQ(g.version, *v1);
  auto v2 = f.Put("alpha", "");
  ASSERT_TRUE(v2.ok());
  EXPECT_GT(*v2, *v1);
  EXPECT_EQ(f.Get("alpha").bytes, "");
  EXPECT_TRUE(f.Get("alpha").found);
  EXPECT_FALSE(f.Get("beta").found);

  auto d = f.store->Delete(f.W("alpha"), f.S("alpha"), "alpha", 0);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->existed);
  EXPECT_EQ(d->version, *v2);
  EXPECT_FALSE(f.Get("alpha").found);
  auto d2 = f.store->Delete(f.W("alpha"), f.S("alpha"), "alpha", 0);
  ASSERT_TRUE(d2.ok());
  EXPECT_FALSE(d2->existed);

  // PutIf: 0 = must not exist.
  auto c1 = f.store->PutIf(f.W("alpha"), f.S("alpha"), "alpha", "x", 0, 0);
  ASSERT_TRUE(c1.ok());
  EXPECT_TRUE(c1->applied);
  EXPECT_GT(c1->version, *v2);
  auto c2 = f.store->PutIf(f.W("alpha"), f.S("alpha"), "alpha", "y", 0, 0);
  ASSERT_TRUE(c2.ok());
  EXPECT_FALSE(c2->applied);
  EXPECT_EQ(c2->version, c1->version);
  auto c3 = f.store->PutIf(f.W("alpha"), f.S("alpha"), "alpha", "y", c1->version, 0);
  ASSERT_TRUE(c3.ok());
  EXPECT_TRUE(c3->applied);
  EXPECT_EQ(f.Get("alpha").bytes, "y");

  // Incr.
  auto i1 = f.store->Incr(f.W("ctr"), f.S("ctr"), "ctr", 5, 0);
  ASSERT_TRUE(i1.ok());
  EXPECT_EQ(i1->value, 5);
  auto i2 = f.store->Incr(f.W("ctr"), f.S("ctr"), "ctr", -7, 0);
  ASSERT_TRUE(i2.ok());
  EXPECT_EQ(i2->value, -2);
  EXPECT_EQ(f.Get("ctr").bytes, "-2");
  auto bad = f.store->Incr(f.W("alpha"), f.S("alpha"), "alpha", 1, 0);
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(f.Put("big", "9223372036854775807").ok());
  auto of = f.store->Incr(f.W("big"), f.S("big"), "big", 1, 0);
  EXPECT_EQ(of.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(f.Get("big").bytes, "9223372036854775807");
}

TEST(KV_SUITE, ParseCounter_AcceptsOnlyCanonicalInt64) {
  int64_t v;
  EXPECT_TRUE(ParseCounter("0", &v));
  EXPECT_TRUE(ParseCounter("-9223372036854775808", &v));
  EXPECT_EQ(v, INT64_MIN);
  for (const char* s : {"", "+1", "01", "-0", " 1", "1 ", "1a", "9223372036854775808", "--1"}) {
    EXPECT_FALSE(ParseCounter(s, &v)) << s;
  }
}

TEST(KV_SUITE, Scan_VisitsEveryKeyOfAShardOnce) {
  Fixture f(24, 64 * 1024, 2, 3);
  std::map<std::string, std::string> want[3];
  for (int i = 0; i < 300; i++) {
    std::string k = "key" + std::to_string(i), v = "v" + std::to_string(i);
    ASSERT_TRUE(f.Put(k, v).ok());
    want[f.S(k)][k] = v;
  }
  ASSERT_TRUE(f.store->Delete(f.W("key7"), f.S("key7"), "key7", 0).ok());
  want[f.S("key7")].erase("key7");
  for (uint32_t s = 0; s < 3; s++) {
    std::map<std::string, std::string> got;
    uint64_t cursor = 0;
    for (int rounds = 0;; rounds++) {
      ASSERT_LT(rounds, 1000);
      ScanOut out = f.store->Scan(s, cursor, 7, 60000, 16384);
      for (auto& it : out.items) {
        EXPECT_TRUE(got.emplace(it.key, it.value).second) << "duplicate " << it.key;
      }
      if (out.done) break;
      cursor = out.next_cursor;
    }
    EXPECT_EQ(got, want[s]) << "shard " << s;
  }
}

TEST(KV_SUITE, Reopen_RebuildsIndexAndVersionsKeepGrowing) {
  Fixture f;
  uint64_t last = 0;
  for (int i = 0; i < 100; i++) {
    auto v = f.Put("k" + std::to_string(i % 10), "value" + std::to_string(i));
    ASSERT_TRUE(v.ok());
    last = std::max(last, *v);
  }
  ASSERT_TRUE(f.store->Delete(f.W("k3"), f.S("k3"), "k3", 0).ok());
  f.CrashAndReopen(1);
  for (int i = 0; i < 10; i++) {
    std::string k = "k" + std::to_string(i);
    auto g = f.Get(k);
    if (i == 3) {
      EXPECT_FALSE(g.found) << "a deleted key came back";
      continue;
    }
    EXPECT_TRUE(g.found) << k;
    EXPECT_EQ(g.bytes, "value" + std::to_string(90 + i));
  }
  // A new write of a key gets a larger version than anything before the crash of its shard.
  auto g9 = f.Get("k9");
  auto v = f.Put("k9", "after");
  ASSERT_TRUE(v.ok());
  EXPECT_GT(*v, g9.version);
  auto c = f.store->PutIf(f.W("k3"), f.S("k3"), "k3", "again", 0, 0);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->applied);
}

TEST(KV_SUITE, RecoveringPut_AtAppliedPositionIsSkipped) {
  Fixture f;
  const std::string k = "pos-key";
  const uint32_t w = f.W(k);
  const uint64_t base = uint64_t{w} << 56;
  ASSERT_TRUE(f.store->Put(w, f.S(k), k, "a", base | 100, false).ok());
  ASSERT_TRUE(f.store->Delete(w, f.S(k), k, base | 101).ok());
  f.CrashAndReopen(2);
  // OQ recovery re-executes the nilext put at position 100: it must not resurrect the key.
  auto r = f.store->Put(w, f.S(k), k, "a", base | 100, true);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(f.Get(k).found);
  EXPECT_EQ(f.store->stats().recovery_skipped, 1u);
  // A request past the applied position is executed.
  ASSERT_TRUE(f.store->Put(w, f.S(k), k, "b", base | 102, true).ok());
  EXPECT_EQ(f.Get(k).bytes, "b");
}

TEST(KV_SUITE, TornTail_IsIgnoredAndEarlierEntriesSurvive) {
  Fixture f;
  ASSERT_TRUE(f.Put("a", "1").ok());
  ASSERT_TRUE(f.Put("a", "2").ok());
  // Corrupt the last entry of the log holding "a": flip a value byte (the checksum fails).
  const std::string k = "a";
  // Find the entry by scanning the log area for the value "2" after the key "a".
  uint8_t* log = f.pool->user_base() + format::kHeaderPage;
  bool flipped = false;
  for (size_t seg = 0; seg < f.geo.segments && !flipped; seg++) {
    uint8_t* base = log + seg * f.geo.segment_size;
    format::SegmentHeader sh;
    if (!format::DecodeSegmentHeader(base, &sh).ok()) continue;
    size_t off = format::kSegmentHeaderSize;
    format::EntryHeader h;
    while (format::DecodeEntry(base + off, f.geo.segment_size - off, sh.generation, &h).ok()) {
      if (format::EntryValue(base + off, h) == "2") {
        base[off + format::kEntryHeaderSize + 1] ^= 0xFF;
        f.pool->persister()->Persist(base + off, 64);
        flipped = true;
        break;
      }
      off += format::EntryFootprint(h.key_len, h.value_len);
    }
  }
  ASSERT_TRUE(flipped);
  f.CrashAndReopen(3);
  auto g = f.Get("a");
  EXPECT_TRUE(g.found);
  EXPECT_EQ(g.bytes, "1");
}

TEST(KV_SUITE, GcSoak_TenTimesLogCapacityMatchesShadowMap) {
  const uint32_t segments = 24, seg_size = 64 * 1024;
  Fixture f(segments, seg_size);
  const uint64_t capacity = uint64_t{segments} * seg_size;
  std::mt19937_64 rng(20261123);
  SCOPED_TRACE("seed 20261123");
  std::map<std::string, std::string> shadow;
  uint64_t written = 0, freed = 0;
  int round = 0;
  while (written < KV_SOAK_FACTOR * capacity) {
    std::string k = "key" + std::to_string(rng() % 200);
    if (rng() % 10 == 0) {
      auto d = f.store->Delete(f.W(k), f.S(k), k, 0);
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      EXPECT_EQ(d->existed, shadow.count(k) == 1);
      shadow.erase(k);
    } else {
      std::string v(rng() % 600, static_cast<char>('a' + rng() % 26));
      auto p = f.Put(k, v);
      ASSERT_TRUE(p.ok()) << p.status().ToString() << " after " << written << " bytes";
      shadow[k] = v;
      written += format::EntryFootprint(k.size(), v.size());
    }
    while (f.store->NeedsCleaning()) {
      auto c = f.store->CleanOnce();
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      if (*c == 0) break;
    }
    if (++round % 5000 == 0) {
      freed += f.store->stats().gc_segments_freed;
      f.CrashAndReopen(round);
    }
  }
  freed += f.store->stats().gc_segments_freed;
  EXPECT_GT(freed, segments * 5u);
  auto check = [&] {
    for (int i = 0; i < 200; i++) {
      std::string k = "key" + std::to_string(i);
      auto g = f.Get(k);
      auto it = shadow.find(k);
      ASSERT_EQ(g.found, it != shadow.end()) << k;
      if (g.found) {
        EXPECT_EQ(g.bytes, it->second) << k;
      }
    }
  };
  check();
  f.CrashAndReopen(99);
  check();
}

// Worker threads overwrite and delete their own keys while the cleaner runs in its own thread
// and a scanner walks a shard: every scanned value must belong to its key (a moved entry is never
// read half-moved or from a recycled segment) and the final state must match the shadow maps.
TEST(KV_SUITE, GcSoak_ConcurrentCleanerAndScans) {
  const uint32_t segments = 32, seg_size = 64 * 1024;
  Fixture f(segments, seg_size, 2, 2);
  const uint64_t capacity = uint64_t{segments} * seg_size;
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bad_scans{0}, scans{0};
  std::map<std::string, std::string> shadow[2];
  std::vector<std::thread> ts;
  std::atomic<int> failures{0};
  for (uint32_t w = 0; w < 2; w++) {
    ts.emplace_back([&, w] {
      std::mt19937_64 rng(seed + w);
      std::vector<std::string> keys;
      for (int i = 0; keys.size() < 100; i++) {
        std::string k = "k" + std::to_string(i);
        if (Store::WorkerOf(ShardOf(k, 2), 2) == w) keys.push_back(k);
      }
      uint64_t written = 0, n = 0;
      while (written < KV_SOAK_FACTOR * capacity / 2) {
        const std::string& k = keys[rng() % keys.size()];
        const uint32_t shard = ShardOf(k, 2);
        if (rng() % 8 == 0) {
          if (!f.store->Delete(w, shard, k, 0).ok()) failures++;
          shadow[w].erase(k);
          continue;
        }
        std::string v = k + "|" + std::to_string(++n) + "|";
        v.append(rng() % 700, 'x');
        auto r = f.store->Put(w, shard, k, v, 0, false);
        if (!r.ok()) {
          failures++;
          ADD_FAILURE() << r.status().ToString();
          return;
        }
        shadow[w][k] = v;
        written += format::EntryFootprint(k.size(), v.size());
      }
    });
  }
  std::thread cleaner([&] {
    auto wait = std::chrono::microseconds(100);
    while (!stop) {
      auto r = f.store->CleanOnce();
      if (!r.ok()) {
        ADD_FAILURE() << r.status().ToString();
        return;
      }
      wait = *r > 0 ? std::chrono::microseconds(100)
                    : std::min(wait * 2, std::chrono::microseconds(2000));
      std::this_thread::sleep_for(wait);
    }
  });
  std::thread scanner([&] {
    while (!stop) {
      uint64_t cursor = 0;
      for (;;) {
        ScanOut out = f.store->Scan(scans % 2, cursor, 16, 60000, 16384);
        for (auto& it : out.items) {
          if (it.value.rfind(it.key + "|", 0) != 0) bad_scans++;
        }
        if (out.done) break;
        cursor = out.next_cursor;
      }
      scans++;
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  for (auto& t : ts) t.join();
  stop = true;
  cleaner.join();
  scanner.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(bad_scans.load(), 0u) << "a scan returned another key's bytes";
  EXPECT_GT(scans.load(), 0u);
  EXPECT_GT(f.store->stats().gc_segments_freed, uint64_t{segments});
  auto check = [&] {
    for (uint32_t w = 0; w < 2; w++) {
      for (int i = 0; i < 400; i++) {
        std::string k = "k" + std::to_string(i);
        if (Store::WorkerOf(ShardOf(k, 2), 2) != w) continue;
        auto g = f.store->Get(w, ShardOf(k, 2), k, 0, 1 << 20);
        auto it = shadow[w].find(k);
        ASSERT_EQ(g.found, it != shadow[w].end()) << k;
        if (g.found) {
          EXPECT_EQ(g.bytes, it->second) << k;
        }
      }
    }
  };
  check();
  f.CrashAndReopen(seed);
  check();
}

// ---- RDMP server-bypass slots (doc/kv.md §RDMP) ----

// What a bypass client does one-sidedly: the value, durable; then (flag = true) the persist flag.
void ClientWrites(Fixture& f, const BypassSlot& s, std::string_view key, std::string_view value,
                  bool flag) {
  uint8_t* e = f.store->log_base() + s.log_offset;
  std::memcpy(e + format::kEntryHeaderSize + key.size(), value.data(), value.size());
  f.pool->persister()->Persist(e + format::kEntryHeaderSize + key.size(), value.size());
  if (!flag) return;
  const uint64_t pf = format::PersistWord(s.version);
  std::memcpy(e + format::BypassFlagOffset(key.size(), value.size()), &pf, 8);
  f.pool->persister()->Persist(e + format::BypassFlagOffset(key.size(), value.size()), 8);
}

Result<BypassSlot> Reserve(Fixture& f, std::string_view k, std::string_view v) {
  return f.store->Reserve(f.W(k), f.S(k), k, static_cast<uint32_t>(v.size()),
                          Crc32c(v.data(), v.size()));
}

TEST(KV_SUITE, Bypass_PublishedSlotIsTheValue_UnflaggedOrCorruptIsRefused) {
  Fixture f;
  ASSERT_TRUE(f.Put("k", "old").ok());
  const std::string value(5000, 'v');
  auto s = Reserve(f, "k", value);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->footprint, format::BypassFootprint(1, value.size()));
  EXPECT_EQ(f.store->pending_slots(), 1u);
  // Not visible before it is published; a publish before the flag is refused.
  EXPECT_EQ(f.Get("k").bytes, "old");
  ClientWrites(f, *s, "k", value, false);
  auto early = f.store->Publish(f.W("k"), f.S("k"), "k", s->log_offset, s->version);
  EXPECT_EQ(early.status().code(), StatusCode::kFailedPrecondition) << early.status().ToString();
  EXPECT_EQ(f.Get("k").bytes, "old");
  // Flag set but a value byte wrong: the value does not match the reserved checksum.
  ClientWrites(f, *s, "k", std::string(4999, 'v') + "X", true);
  EXPECT_EQ(f.store->Publish(f.W("k"), f.S("k"), "k", s->log_offset, s->version).status().code(),
            StatusCode::kFailedPrecondition);
  ClientWrites(f, *s, "k", value, true);
  // A publish naming another key, version or offset finds no slot.
  EXPECT_FALSE(f.store->Publish(f.W("k"), f.S("k"), "k", s->log_offset, s->version + 1).ok());
  EXPECT_FALSE(f.store->Publish(f.W("k"), f.S("k"), "k", s->log_offset + 64, s->version).ok());
  EXPECT_FALSE(f.store->Publish(f.W("k"), f.S("k"), "k", uint64_t{1} << 40, s->version).ok());
  auto v = f.store->Publish(f.W("k"), f.S("k"), "k", s->log_offset, s->version);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, s->version);
  EXPECT_EQ(f.store->pending_slots(), 0u);
  auto g = f.Get("k");
  EXPECT_EQ(g.bytes, value);
  EXPECT_EQ(g.version, s->version);
  // Publishing again (an OQ re-execution) changes nothing.
  EXPECT_TRUE(f.store->Publish(f.W("k"), f.S("k"), "k", s->log_offset, s->version).ok());
  EXPECT_EQ(f.store->stats().keys, 1u);
  Located at = f.store->Locate(f.W("k"), f.S("k"), "k");
  EXPECT_TRUE(at.found);
  EXPECT_EQ(at.log_offset, s->log_offset);
  EXPECT_EQ(at.value_len, value.size());
}

TEST(KV_SUITE, Bypass_NewerWriteWinsOverALaterPublish) {
  Fixture f;
  auto s = Reserve(f, "k", "slow");
  ASSERT_TRUE(s.ok());
  auto newer = f.Put("k", "fast");  // reserved first, written first
  ASSERT_TRUE(newer.ok());
  EXPECT_GT(*newer, s->version);
  ClientWrites(f, *s, "k", "slow", true);
  auto v = f.store->Publish(f.W("k"), f.S("k"), "k", s->log_offset, s->version);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, *newer);  // the version now current
  EXPECT_EQ(f.Get("k").bytes, "fast");
  f.CrashAndReopen(1);
  EXPECT_EQ(f.Get("k").bytes, "fast");
}

// After a crash only slots whose persist flag is set count: unflagged ones are garbage, flagged
// but unpublished ones are visible (the RDMP-KV recovery rule), and versions never go back.
TEST(KV_SUITE, Bypass_CrashKeepsExactlyTheFlaggedSlots) {
  Fixture f;
  for (const char* k : {"a", "b", "c"}) ASSERT_TRUE(f.Put(k, "old").ok());
  const std::string va(3000, 'a'), vb(3000, 'b'), vc(3000, 'c');
  auto sa = Reserve(f, "a", va), sb = Reserve(f, "b", vb), sc = Reserve(f, "c", vc);
  ASSERT_TRUE(sa.ok() && sb.ok() && sc.ok());
  ClientWrites(f, *sa, "a", va, false);  // value only
  ClientWrites(f, *sb, "b", vb, true);   // flagged, never published
  ClientWrites(f, *sc, "c", vc, true);
  ASSERT_TRUE(f.store->Publish(f.W("c"), f.S("c"), "c", sc->log_offset, sc->version).ok());
  ASSERT_TRUE(f.Put("after", "x").ok());  // entries behind the slots are found too
  f.CrashAndReopen(7);
  EXPECT_EQ(f.Get("a").bytes, "old");
  EXPECT_EQ(f.Get("b").bytes, vb);
  EXPECT_EQ(f.Get("b").version, sb->version);
  EXPECT_EQ(f.Get("c").bytes, vc);
  EXPECT_EQ(f.Get("after").bytes, "x");
  EXPECT_EQ(f.store->pending_slots(), 0u);
  auto next = f.Put("a", "new");
  ASSERT_TRUE(next.ok());
  EXPECT_GT(*next, sa->version);  // the abandoned slot's version is never reissued
  // A publish of the flagged slot after the restart (the OQ re-executing it) is harmless.
  EXPECT_TRUE(f.store->Publish(f.W("b"), f.S("b"), "b", sb->log_offset, sb->version).ok());
  EXPECT_EQ(f.Get("b").bytes, vb);
}

// A pending slot pins its segment against the cleaner; Settle publishes a flagged slot and
// abandons an unflagged one; the cleaner then copies the published value as a plain entry.
TEST(KV_SUITE, Bypass_PendingSlotsPinTheirSegment_SettleAndCleanerKeepValues) {
  Fixture f(/*segments=*/16, /*segment_size=*/64 * 1024, /*workers=*/1, /*shards=*/1);
  const std::string vf(2000, 'f'), vu(2000, 'u');
  auto flagged = Reserve(f, "flagged", vf);
  auto unflagged = Reserve(f, "unflagged", vu);
  ASSERT_TRUE(flagged.ok() && unflagged.ok());
  ClientWrites(f, *flagged, "flagged", vf, true);
  ClientWrites(f, *unflagged, "unflagged", vu, false);
  const uint64_t seg_size = 64 * 1024;
  const uint64_t pinned = flagged->log_offset / seg_size;
  // Fill the log past that segment with overwrites (its other entries become garbage).
  for (int i = 0; i < 300; i++) ASSERT_TRUE(f.Put("churn", std::string(1000, 'c')).ok());
  for (int i = 0; i < 5; i++) ASSERT_TRUE(f.store->CleanOnce().ok());
  // Still pinned: the client may be writing it.
  format::SegmentHeader sh;
  EXPECT_TRUE(format::DecodeSegmentHeader(f.store->log_base() + pinned * seg_size, &sh).ok());
  EXPECT_EQ(f.store->pending_slots(), 2u);
  f.store->Settle(flagged->log_offset);
  f.store->Settle(unflagged->log_offset);
  f.store->Settle(unflagged->log_offset);  // twice: no effect
  EXPECT_EQ(f.store->pending_slots(), 0u);
  EXPECT_EQ(f.Get("flagged").bytes, vf);
  EXPECT_FALSE(f.Get("unflagged").found);
  for (int i = 0; i < 200; i++) ASSERT_TRUE(f.Put("churn", std::string(1000, 'c')).ok());
  uint64_t freed = 0;
  for (int i = 0; i < 10; i++) {
    auto r = f.store->CleanOnce();
    ASSERT_TRUE(r.ok());
    freed += *r;
  }
  EXPECT_GT(freed, 0u);
  EXPECT_EQ(f.Get("flagged").bytes, vf);
  f.CrashAndReopen(3);
  EXPECT_EQ(f.Get("flagged").bytes, vf);
  EXPECT_FALSE(f.Get("unflagged").found);
}

TEST(KV_SUITE, Bypass_ReserveRejectsOversizedValues) {
  Fixture f;
  EXPECT_EQ(f.store->Reserve(0, 0, "k", kMaxValueSize + 1, 0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(f.store->Reserve(0, 99, "k", 10, 0).status().code(), StatusCode::kInvalidArgument);
}

// ---- Atomic batches (doc/kv.md §Batches) ----

// `n` distinct keys of shard `shard` (of f.geo.shards).
std::vector<std::string> KeysOfShard(const Fixture& f, uint32_t shard, size_t n) {
  std::vector<std::string> keys;
  for (int i = 0; keys.size() < n; i++) {
    std::string k = "acct" + std::to_string(i);
    if (f.S(k) == shard) keys.push_back(k);
  }
  return keys;
}

TEST(KV_SUITE, Batch_AllOrNothing_ConditionsAndChecks) {
  Fixture f;
  const auto k = KeysOfShard(f, 1, 4);
  const uint32_t w = Store::WorkerOf(1, f.geo.workers);
  auto v0 = f.Put(k[0], "a0");
  auto v3 = f.Put(k[3], "gone");
  ASSERT_TRUE(v0.ok() && v3.ok());
  // A failed condition writes nothing and reports the current versions.
  std::vector<WriteOp> ops = {{k[0], "a1", true, *v0 + 100}, {k[1], "b1", false, 0}};
  auto r = f.store->Batch(w, 1, ops, 0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->applied);
  EXPECT_EQ(r->versions, (std::vector<uint64_t>{*v0, 0}));
  EXPECT_FALSE(f.Get(k[1]).found);
  // A failed check (a read the batch depends on) too.
  ops = {{k[0], "a1", true, *v0}, {k[2], std::nullopt, true, 7, true}};
  r = f.store->Batch(w, 1, ops, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->applied);
  EXPECT_EQ(f.Get(k[0]).bytes, "a0");
  // Puts, a put on an absent key, a delete and a check: all applied, consecutive versions.
  ops = {{k[0], "a1", true, *v0},
         {k[1], "b1", true, 0},
         {k[3], std::nullopt, false, 0},
         {k[2], std::nullopt, true, 0, true}};
  r = f.store->Batch(w, 1, ops, 0);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->applied);
  EXPECT_EQ(r->versions[1], r->versions[0] + 1);
  EXPECT_EQ(r->versions[2], r->versions[1] + 1);
  EXPECT_EQ(r->versions[3], 0u);  // the check: k[2] absent
  EXPECT_EQ(f.Get(k[0]).bytes, "a1");
  EXPECT_EQ(f.Get(k[1]).bytes, "b1");
  EXPECT_FALSE(f.Get(k[3]).found);
  f.CrashAndReopen(5);
  EXPECT_EQ(f.Get(k[0]).bytes, "a1");
  EXPECT_EQ(f.Get(k[1]).version, r->versions[1]);
  EXPECT_FALSE(f.Get(k[3]).found);
  // Bad input: another shard's key, a duplicate, the wrong worker, a check without a condition.
  const auto other = KeysOfShard(f, 2, 1);
  EXPECT_EQ(f.store->Batch(w, 1, std::vector<WriteOp>{{other[0], "x"}}, 0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(f.store->Batch(w, 1, std::vector<WriteOp>{{k[0], "x"}, {k[0], "y"}}, 0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(f.store->Batch(w ^ 1, 1, std::vector<WriteOp>{{k[0], "x"}}, 0).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(f.store->Batch(w, 1, std::vector<WriteOp>{{k[0], std::nullopt, false, 0, true}}, 0)
                .status()
                .code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(f.store->Batch(w, 1, std::vector<WriteOp>{}, 0).status().code(),
            StatusCode::kInvalidArgument);
}

// A batch whose last member did not reach PM whole is not applied at all after a crash; one
// replicated to a backup is applied whole, and a truncated copy is refused.
TEST(KV_SUITE, Batch_TornBatchVanishesWhole_ReplicaAppliesWhole) {
  std::vector<uint8_t> shipped;
  Fixture f;
  StoreOptions so;
  so.header_page = f.pool->user_base();
  so.log_base = f.pool->user_base() + format::kHeaderPage;
  so.persister = f.pool->persister();
  so.geometry = f.geo;
  so.replicate = [&](uint32_t, uint32_t, std::span<const uint8_t> e) {
    shipped.assign(e.begin(), e.end());
    return Status::Ok();
  };
  f.store.reset();
  auto reopened = Store::Open(so);
  ASSERT_TRUE(reopened.ok());
  f.store = std::move(reopened).value();
  const auto k = KeysOfShard(f, 0, 3);
  const uint32_t w = Store::WorkerOf(0, f.geo.workers);
  for (const auto& key : k) ASSERT_TRUE(f.Put(key, "old").ok());
  const std::string wide(300, 'x');  // outlives the ops (they hold views)
  std::vector<WriteOp> ops = {{k[0], wide}, {k[1], "new"}, {k[2], "new"}};
  auto r = f.store->Batch(w, 0, ops, 0);
  ASSERT_TRUE(r.ok() && r->applied);
  EXPECT_EQ(f.Get(k[2]).bytes, "new");
  // The backup: a whole copy applies all three; a truncated one is refused with nothing applied.
  Fixture backup;
  std::vector<uint8_t> cut(shipped.begin(), shipped.end() - 1);
  EXPECT_EQ(backup.store->ApplyReplica(cut).code(), StatusCode::kCorruption);
  EXPECT_FALSE(backup.Get(k[0]).found);
  ASSERT_TRUE(backup.store->ApplyReplica(shipped).ok());
  EXPECT_EQ(backup.Get(k[1]).bytes, "new");
  EXPECT_EQ(backup.Get(k[0]).version, r->versions[0]);
  ASSERT_TRUE(backup.store->ApplyReplica(shipped).ok());  // twice: no change
  backup.CrashAndReopen(2);
  EXPECT_EQ(backup.Get(k[2]).bytes, "new");
  // Tear the primary's last member (as if its line never reached PM), then crash.
  Located last = f.store->Locate(w, 0, k[2]);
  ASSERT_TRUE(last.found);
  uint8_t* e = f.store->log_base() + last.log_offset;
  e[format::kEntryHeaderSize] ^= 0xff;  // a key byte: the member's checksum fails
  f.pool->persister()->Persist(e + format::kEntryHeaderSize, 1);
  f.CrashAndReopen(9);
  for (const auto& key : k) EXPECT_EQ(f.Get(key).bytes, "old") << key;
}

// A stand-alone server's batch across shards (BatchAcrossShards, under every worker): all or
// nothing across partitions, each member indexed in its own shard with its shard's versions, whole
// after a crash, gone whole when its last member is torn; a backup refuses such a batch.
TEST(KV_SUITE, Batch_AcrossShards_AllOrNothing_TornVanishesWhole) {
  Fixture f;
  ASSERT_NE(Store::WorkerOf(0, f.geo.workers), Store::WorkerOf(1, f.geo.workers));
  const std::string a = KeysOfShard(f, 0, 1)[0], b = KeysOfShard(f, 1, 1)[0],
                    c = KeysOfShard(f, 2, 1)[0];
  auto va = f.Put(a, "a0");
  auto vb = f.Put(b, "b0");
  ASSERT_TRUE(va.ok() && vb.ok());
  // A failed condition in one shard writes nothing in the others.
  std::vector<WriteOp> ops = {{a, "a1", true, *va}, {b, "b1", true, *vb + 1}, {c, "c1"}};
  auto r = f.store->BatchAcrossShards(ops);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->applied);
  EXPECT_EQ(r->versions, (std::vector<uint64_t>{*va, *vb, 0}));
  EXPECT_EQ(f.Get(a).bytes, "a0");
  EXPECT_FALSE(f.Get(c).found);
  ops = {{a, "a1", true, *va}, {b, "b1", true, *vb}, {c, "c1", true, 0}};
  r = f.store->BatchAcrossShards(ops);
  ASSERT_TRUE(r.ok() && r->applied);
  EXPECT_GT(r->versions[0], *va);  // each takes its own shard's next version
  EXPECT_GT(r->versions[1], *vb);
  EXPECT_EQ(f.Get(b).bytes, "b1");
  EXPECT_EQ(f.Get(c).version, r->versions[2]);
  f.CrashAndReopen(21);
  EXPECT_EQ(f.Get(a).bytes, "a1");
  EXPECT_EQ(f.Get(b).bytes, "b1");
  EXPECT_EQ(f.Get(c).bytes, "c1");
  // Later writes of each shard continue above the recovered versions.
  auto vb2 = f.Put(b, "b2");
  ASSERT_TRUE(vb2.ok());
  EXPECT_GT(*vb2, r->versions[1]);
  // The batch's bytes as a primary would ship them: a backup refuses members of several shards.
  ops = {{a, "a3"}, {b, "b3"}, {c, "c3"}};
  r = f.store->BatchAcrossShards(ops);
  ASSERT_TRUE(r.ok() && r->applied);
  Located first = f.store->Locate(f.W(a), 0, a), last = f.store->Locate(f.W(c), 2, c);
  ASSERT_TRUE(first.found && last.found);
  ASSERT_GT(last.log_offset, first.log_offset);
  std::vector<uint8_t> shipped(
      f.store->log_base() + first.log_offset,
      f.store->log_base() + last.log_offset + format::kEntryHeaderSize + c.size() + 2);
  Fixture backup;
  EXPECT_EQ(backup.store->ApplyReplica(shipped).code(), StatusCode::kCorruption);
  EXPECT_FALSE(backup.Get(a).found);
  // Tear the last member (its line never reached PM), crash: none of the three is applied.
  uint8_t* e = f.store->log_base() + last.log_offset;
  e[format::kEntryHeaderSize] ^= 0xff;
  f.pool->persister()->Persist(e + format::kEntryHeaderSize, 1);
  f.CrashAndReopen(22);
  EXPECT_EQ(f.Get(a).bytes, "a1");
  EXPECT_EQ(f.Get(b).bytes, "b2");
  EXPECT_EQ(f.Get(c).bytes, "c1");
}

// ---- Group commit of the workers' writes (doc/kv.md §Write path) ----

// With group commit a write is not durable until the worker syncs; a crash before loses it from
// the log, and the OQ's re-execution of that (nilext) PUT must then apply it — not skip it because
// a later position made it to PM (exact positions, not the largest one).
TEST(KV_SUITE, GroupCommit_LostWriteIsReexecuted_SyncDeferredMakesWritesDurable) {
  Fixture f(24, 64 * 1024, 1, 1, /*group=*/true);
  const uint64_t base = uint64_t{0} << 56;
  // "a" nearly fills the first segment and stays unsynced; "b", at a later position, lands in
  // the next segment and is synced (on another thread: its own sync; in the server: a sync
  // interrupted by the crash after it reached "b"'s lines but not "a"'s).
  const std::string big(60 * 1024, 'a');
  ASSERT_TRUE(f.store->Put(0, 0, "a", big, base | 10, false).ok());
  EXPECT_EQ(f.Get("a").bytes, big);  // readable at once
  std::thread([&] {
    ASSERT_TRUE(f.store->Put(0, 0, "b", big, base | 11, false).ok());
    f.store->SyncDeferred(0);
  }).join();
  f.CrashAndReopen(11);
  EXPECT_FALSE(f.Get("a").found);
  EXPECT_EQ(f.Get("b").bytes, big);
  // OQ recovery re-executes both: "b" is in the log (skipped), "a" is not (applied) — the
  // largest durable position (11) must not hide the missing 10.
  ASSERT_TRUE(f.store->Put(0, 0, "b", big, base | 11, true).ok());
  ASSERT_TRUE(f.store->Put(0, 0, "a", big, base | 10, true).ok());
  EXPECT_EQ(f.store->stats().recovery_skipped, 1u);
  EXPECT_EQ(f.Get("a").bytes, big);
  f.store->EndRecovery();
  // Every kind of write waits for SyncDeferred: put, delete, batch, reservation.
  ASSERT_TRUE(f.store->Put(0, 0, "c", "1", base | 20, false).ok());
  ASSERT_TRUE(f.store->Delete(0, 0, "b", base | 21).ok());
  ASSERT_TRUE(f.store->Batch(0, 0, std::vector<WriteOp>{{"d", "2"}, {"e", "3"}}, base | 22).ok());
  auto slot = f.store->Reserve(0, 0, "s", 4, Crc32c("slot", 4));
  ASSERT_TRUE(slot.ok());
  f.store->SyncDeferred(0);
  ASSERT_TRUE(f.store->Put(0, 0, "g", "4", base | 23, false).ok());  // never synced
  ASSERT_TRUE(f.store->Delete(0, 0, "c", base | 24).ok());           // never synced
  f.CrashAndReopen(12);
  EXPECT_EQ(f.Get("c").bytes, "1");
  EXPECT_FALSE(f.Get("b").found);
  EXPECT_EQ(f.Get("d").bytes, "2");
  EXPECT_EQ(f.Get("e").bytes, "3");
  EXPECT_FALSE(f.Get("g").found);
  // The slot's header survived (its version is not reissued).
  auto next = f.store->Put(0, 0, "h", "5", 0, false);
  ASSERT_TRUE(next.ok());
  EXPECT_GT(*next, slot->version);
}

// SetSharedLog (a co-located front end holding every worker, Server::BeginLocal): writes of every
// worker's keys go to one t-log, so one sync covers them; each key stays in its own partition.
// After a crash every synced write is back (indexed by its shard, not by the log holding it), an
// unsynced one is not, and the cleaner moves shared-log entries like any others.
TEST(KV_SUITE, SharedLog_OneSyncCoversEveryWorkersKeys_RecoveredAndCleaned) {
  Fixture f(24, 64 * 1024, 2, 4, /*group=*/true);
  std::vector<std::string> keys;
  for (int i = 0; keys.size() < 40; i++) keys.push_back("shared:" + std::to_string(i));
  bool both = false;
  for (const auto& k : keys) both |= f.W(k) != f.W(keys[0]);
  ASSERT_TRUE(both) << "the keys must span both workers";
  std::map<std::string, std::string> want;
  for (int round = 0; round < 30; round++) {  // ~3 segments of overwrites: the cleaner has work
    f.store->SetSharedLog(1);
    for (const auto& k : keys) {
      const std::string v = k + "#" + std::to_string(round) + std::string(40, 'v');
      ASSERT_TRUE(f.Put(k, v).ok());
      want[k] = v;
    }
    f.store->SetSharedLog(UINT32_MAX);
    for (uint32_t w = 0; w < 2; w++) f.store->HandOffDeferred(w);
    EXPECT_FALSE(f.store->Deferred(0));
    f.store->SyncThread();  // one drain of this thread's ranges: both workers' writes
  }
  f.store->SetSharedLog(0);
  ASSERT_TRUE(f.Put(keys[0], "never synced").ok());
  f.store->SetSharedLog(UINT32_MAX);
  f.CrashAndReopen(5);
  for (const auto& [k, v] : want) EXPECT_EQ(f.Get(k).bytes, v) << k;
  for (int i = 0; i < 5; i++) ASSERT_TRUE(f.store->CleanOnce().ok());
  EXPECT_GT(f.store->stats().gc_segments_freed, 0u);
  for (const auto& [k, v] : want) EXPECT_EQ(f.Get(k).bytes, v) << k;
  f.store->SyncThread();
  f.CrashAndReopen(6);
  for (const auto& [k, v] : want) EXPECT_EQ(f.Get(k).bytes, v) << k;
}

}  // namespace
}  // namespace asymnvm::kv
