// Front-end crash campaign over every structure (the front-end killed, restarted,
// replay)"; §7.2 case 2): a child process (this binary re-executed) runs a seeded operation
// sequence at rcb against an in-process back-end of the parent and records every operation that
// returned; the parent SIGKILLs it at a seeded moment, opens the same front-end id, opens the
// structure, replays the op logs the back-end still holds (Session::Replay) and checks the
// structure against the model: exactly the acknowledged operations, plus possibly the one that
// was in flight (its op log may have become durable before the kill).
//
// ASYMNVM_CRASH_ROUNDS (default 1) sets the rounds per structure; the ctest entry
// structures_crash_long (label long) runs 10 rounds per structure (80 SIGKILLs).
// ASYMNVM_RECLAIM_CRASH_ROUNDS (default 1): the minimum rounds per (crash point, kind) of
// OnlineReclaimTest.CrashInsideTheReclaimThenRecoverAgain (a crash inside the online reclaim).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "structures/testing.h"
#include "structures/walk.h"
#include "tools/ctl.h"
#include "workloads/driver/backend_process.h"

namespace asymnvm::structures {
namespace {

using frontend::Level;
using testing::TestValue;

constexpr uint64_t kKeys = 150;
constexpr int kOps = 4000;

// One seeded operation sequence; Step applies operation i to a model and returns what the real
// structure call should do.
struct Op {
  bool write;  // push / put
  uint64_t key;
  Value value;
  // Maps, one operation in 20: a PutBatch of 2..6 pairs (one vector run, so it is atomic like a
  // Put: small enough for one op log and one transaction of every kind; the hash table's
  // PutBatch is atomic whatever its size up to one transaction).
  std::vector<KeyValue> batch;
  // Maps with a vector delete, one operation in 20: a DeleteBatch of 2..8 keys (duplicates and
  // absent keys among them; one vector run, so atomic like a Delete).
  std::vector<uint64_t> dels;
};

bool Vectorized(Kind kind) { return !IsSequence(kind); }
// The kinds whose DeleteBatch is a vector path (op type 4); the others loop Delete, so a kill in
// the middle of a batch could leave a prefix of it.
bool VectorDeletes(Kind kind) {
  return kind == Kind::kSkipList || kind == Kind::kBst || kind == Kind::kMvBst ||
         kind == Kind::kMvBPlusTree;
}

// The map key of key number `i` (the model keeps the numbers): the integer itself, or for maps with
// byte keys (key_size > 0) a byte string of varied length sharing a prefix with every other one.
Key CrashKey(uint64_t i, uint32_t key_size) {
  if (key_size == 0) return Key(i);
  std::string k = "crash:" + std::to_string(i) + "|";
  k.append((i * 13) % 24, static_cast<char>(0x80 + i % 64));
  return Key(k.substr(0, key_size));
}

std::vector<KeyValue> MapKeys(const std::vector<KeyValue>& batch, uint32_t key_size) {
  std::vector<KeyValue> out;
  for (const auto& [k, v] : batch) out.emplace_back(CrashKey(k.u64(), key_size), v);
  return out;
}

// value_bytes > 0: every Put / Push value is that long instead (the same rng draws).
Op MakeOp(std::mt19937_64& rng, int i, Kind kind, uint32_t value_bytes = 0) {
  const bool sequence = IsSequence(kind);
  Op op;
  const int r = static_cast<int>(rng() % 20);
  op.write = sequence ? r < 12 : r < 14 || r == 19;
  op.key = rng() % kKeys;
  const size_t len = 1 + rng() % 64;  // >= 48 B: pointers
  op.value = TestValue(op.key, static_cast<uint64_t>(i), value_bytes > 0 ? value_bytes : len);
  if (Vectorized(kind) && r == 19) {
    const int n = 2 + static_cast<int>(rng() % 5);
    for (int k = 0; k < n; k++) {
      const uint64_t key = rng() % kKeys;
      op.batch.emplace_back(key, TestValue(key, static_cast<uint64_t>(i) * 8 + k, 1 + rng() % 40));
    }
  }
  if (VectorDeletes(kind) && r == 18) {
    const int n = 2 + static_cast<int>(rng() % 7);
    for (int k = 0; k < n; k++) op.dels.push_back(rng() % kKeys);
  }
  return op;
}

struct Model {
  bool sequence = false, lifo = false;
  std::deque<Value> seq;
  std::map<uint64_t, Value> map;
  void Apply(const Op& op) {
    if (sequence) {
      if (op.write) {
        seq.push_back(op.value);
      } else if (!seq.empty()) {
        if (lifo) {
          seq.pop_back();
        } else {
          seq.pop_front();
        }
      }
    } else if (!op.batch.empty()) {
      for (const auto& [k, v] : op.batch)
        map[k.u64()] = v;  // in order: the last of equal keys wins
    } else if (!op.dels.empty()) {
      for (uint64_t k : op.dels) map.erase(k);
    } else if (op.write) {
      map[op.key] = op.value;
    } else {
      map.erase(op.key);
    }
  }
};

// ---- the child ----

using testing::SplitSpec;

[[noreturn]] void RunChild(const char* spec) {
  // spec: address|kind|fe|seed|ackfile|companion|key_size[|name[|value_bytes]]
  const std::vector<std::string> f = SplitSpec(spec);
  if (f.size() < 7 || f.size() > 9) _exit(90);
  const std::string name = f.size() >= 8 ? f[7] : std::string("crash-") + f[1] + "-" + f[2];
  const uint32_t value_bytes = f.size() == 9 ? static_cast<uint32_t>(std::stoul(f[8])) : 0;
  const bool companion = f[5] == "1";
  Options opts;
  opts.key_size = static_cast<uint32_t>(std::stoul(f[6]));
  if (value_bytes > 0) opts.value_size = value_bytes;
  auto kind = ParseKind(f[1]);
  if (!kind.ok()) _exit(91);
  frontend::SessionOptions o;
  o.backends = {f[0]};
  o.frontend_id = std::stoull(f[2]);
  o.level = Level::kRcb;
  o.batch_ops = 64;
  o.batch_timeout = std::chrono::hours(1);
  auto session = frontend::Session::Open(o);
  if (!session.ok()) _exit(92);
  auto h = Open(**session, *kind, name, opts);
  if (!h.ok()) {
    std::fprintf(stderr, "child open: %s\n", h.status().ToString().c_str());
    _exit(93);
  }
  // The companion: a stack in the same session whose pushes stay pending (annulment) while the
  // main structure commits — the OPN must not pass them.
  std::unique_ptr<Sequence> comp;
  if (companion) {
    auto c = OpenSequence(**session, Kind::kStack, "companion-" + f[2]);
    if (!c.ok()) _exit(98);
    comp = std::move(*c);
  }
  const int fd = open(f[4].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) _exit(94);
  std::mt19937_64 rng(std::stoull(f[3]));
  const bool sequence = IsSequence(*kind);
  for (int i = 0; i < kOps; i++) {
    Op op = MakeOp(rng, i, *kind, value_bytes);
    Status st;
    if (sequence) {
      auto* q = static_cast<Sequence*>(h->get());
      Value v;
      st = op.write ? q->Push(op.value) : q->Pop(&v);
    } else {
      auto* m = static_cast<Map*>(h->get());
      if (!op.batch.empty()) {
        st = m->PutBatch(MapKeys(op.batch, opts.key_size));
      } else if (!op.dels.empty()) {
        std::vector<Key> keys;
        for (uint64_t k : op.dels) keys.push_back(CrashKey(k, opts.key_size));
        st = m->DeleteBatch(keys);
      } else {
        const Key key = CrashKey(op.key, opts.key_size);
        st = op.write ? m->Put(key, op.value) : m->Delete(key);
      }
    }
    if (!st.ok() && st.code() != StatusCode::kNotFound) {
      std::fprintf(stderr, "child op %d: %s\n", i, st.ToString().c_str());
      _exit(95);
    }
    if (comp) {
      uint8_t b[4];
      std::memcpy(b, &i, 4);
      if (!comp->Push(b).ok()) _exit(99);
    }
    // Acknowledged: one 4-byte record per operation.
    int32_t rec = i;
    if (write(fd, &rec, 4) != 4) _exit(96);
  }
  _exit(0);
}

// The recovering process of a crash during recovery: opens the crashed front-end id and its
// structures as the parent's recovery does and replays, armed by the parent
// (ASYMNVM_CRASH_AT=frontend.replay.after_op:N) to be killed in the middle of the replay. Exit 0
// when the replay finished first (fewer than N ops to replay).
[[noreturn]] void RunRecoverChild(const char* spec) {
  // spec: address|kind|fe|companion|key_size|name[|value_bytes]
  const std::vector<std::string> f = SplitSpec(spec);
  if (f.size() != 6 && f.size() != 7) _exit(90);
  auto kind = ParseKind(f[1]);
  if (!kind.ok()) _exit(91);
  frontend::SessionOptions o;
  o.backends = {f[0]};
  o.frontend_id = std::stoull(f[2]);
  o.level = Level::kRcb;
  auto session = frontend::Session::Open(o);
  if (!session.ok()) _exit(92);
  RegisterReplays(**session);
  Options opts;
  opts.key_size = static_cast<uint32_t>(std::stoul(f[4]));
  if (f.size() == 7) opts.value_size = static_cast<uint32_t>(std::stoul(f[6]));
  auto h = Open(**session, *kind, f[5], opts);
  if (!h.ok()) _exit(93);
  std::unique_ptr<Sequence> comp;
  if (f[3] == "1") {
    auto c = OpenSequence(**session, Kind::kStack, "companion-" + f[2]);
    if (!c.ok()) _exit(98);
    comp = std::move(*c);
  }
  Status rep = (*session)->Replay();
  if (!rep.ok()) {
    std::fprintf(stderr, "recover child replay: %s\n", rep.ToString().c_str());
    _exit(95);
  }
  _exit(0);
}

// A child that fills five slabs with one object each and frees them: with more than two slabs
// empty, the allocator returns the surplus (journal entry cleared, then request 22). spec:
// address|fe. Armed with a crash point by the parent.
[[noreturn]] void RunSlabChild(const char* spec) {
  const std::string s(spec);
  const size_t bar = s.find('|');
  frontend::SessionOptions o;
  o.backends = {s.substr(0, bar)};
  o.frontend_id = std::stoull(s.substr(bar + 1));
  o.level = Level::kRcb;
  auto session = frontend::Session::Open(o);
  if (!session.ok()) _exit(92);
  std::vector<uint64_t> objs;
  for (int i = 0; i < 5; i++) {
    auto a = (*session)->Malloc(4000);
    if (!a.ok()) _exit(93);
    objs.push_back(*a);
  }
  for (uint64_t a : objs) {
    if (!(*session)->Free(a).ok()) _exit(94);
  }
  _exit(0);
}

// ---- the parent ----

class CrashTest : public testing::StructuresTest, public ::testing::WithParamInterface<Kind> {};

int64_t AckedOps(const std::string& path) { return testing::AckedRecords(path, 4); }

// One round: child against `address`, SIGKILL at a seeded moment (`also_kill` runs right after
// the child is killed: the both-at-once campaign kills the back-end daemon there and returns the
// restarted daemon's address), then recovery through `recover_address` and the model check.
// crash_at ("name:N"): instead the child kills itself the Nth time it reaches that crash point
// (ASYMNVM_CRASH_AT; kill_after is ignored), where the in-flight operation's op log is durable:
// the recovered structure must then hold it.
// What a round does besides the plain kill and recovery.
struct RoundOptions {
  std::map<uint64_t, Value>* recovered = nullptr;  // the content the recovery found
  uint32_t key_size = 0;                           // byte keys of this size (0: integers)
  std::string structure_name;                      // "" = crash-<kind>-<fe>
  uint32_t value_bytes = 0;  // > 0: every Put / Push value is this long (MakeOp)
  std::string crash_at;      // the child kills itself at this crash point ("name:N") instead
  // Not empty ("name:N"): a recovering process runs first, armed with this crash point (its
  // replay or its reclaim); replay_crashed: whether it was killed there (it may have ended first).
  std::string recovery_crash_at;
  bool* replay_crashed = nullptr;
  bool crash_in_vector = false;  // crash_at is inside a vector: the replay must apply it whole
  frontend::Counters* recovery_counters = nullptr;  // the recovery's counters after its Replay

  RoundOptions& Recovered(std::map<uint64_t, Value>* m) { return recovered = m, *this; }
  RoundOptions& KeySize(uint32_t k) { return key_size = k, *this; }
  RoundOptions& Name(std::string n) { return structure_name = std::move(n), *this; }
  RoundOptions& ValueBytes(uint32_t n) { return value_bytes = n, *this; }
  RoundOptions& CrashAt(std::string point) { return crash_at = std::move(point), *this; }
  RoundOptions& CrashInVector(std::string point) {
    crash_in_vector = true;
    return CrashAt(std::move(point));
  }
  RoundOptions& CrashReplayAt(int nth, bool* crashed) {
    return CrashRecoveryAt("frontend.replay.after_op:" + std::to_string(nth), crashed);
  }
  RoundOptions& CrashRecoveryAt(std::string point, bool* crashed) {
    recovery_crash_at = std::move(point);
    replay_crashed = crashed;
    return *this;
  }
  RoundOptions& RecoveryCounters(frontend::Counters* c) { return recovery_counters = c, *this; }
};

void CrashRound(
    Kind kind, bool companion, int round, uint64_t fe, uint64_t seed, int64_t kill_after,
    const std::string& address, const std::string& scratch,
    const std::function<std::string()>& also_kill,
    const std::function<std::unique_ptr<frontend::Session>(const std::string&, uint64_t)>& open,
    const RoundOptions& ro = {}) {
  std::map<uint64_t, Value>* recovered = ro.recovered;
  const uint32_t key_size = ro.key_size;
  const std::string& structure_name = ro.structure_name;
  const std::string& crash_at = ro.crash_at;
  bool* replay_crashed = ro.replay_crashed;
  {
    const std::string name = structure_name.empty()
                                 ? std::string("crash-") + KindName(kind) + "-" + std::to_string(fe)
                                 : structure_name;
    const std::string acks = scratch + ".acks";
    std::remove(acks.c_str());
    const std::string spec = address + "|" + KindName(kind) + "|" + std::to_string(fe) + "|" +
                             std::to_string(seed) + "|" + acks + "|" + (companion ? "1" : "0") +
                             "|" + std::to_string(key_size) + "|" + name +
                             (ro.value_bytes > 0 ? "|" + std::to_string(ro.value_bytes) : "");
    std::vector<std::pair<std::string, std::string>> env{{"ASYMNVM_CRASH_CHILD", spec}};
    if (!crash_at.empty()) env.emplace_back("ASYMNVM_CRASH_AT", crash_at);
    const testing::ChildEnd end = testing::RunSelfAsChild(
        env, "crash-child", [&] { return crash_at.empty() && AckedOps(acks) >= kill_after; },
        std::chrono::seconds(60));
    const int status = end.status;
    const bool exited = end.exited;
    if (!crash_at.empty()) {
      // It must have stopped at its crash point (SIGKILL of its own), not finished.
      ASSERT_TRUE(exited && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
          << "round " << round << ": the child did not reach crash point " << crash_at
          << " (status " << status << ")";
    } else {
      ASSERT_TRUE(!exited || (WIFEXITED(status) && WEXITSTATUS(status) == 0))
          << "child failed: status " << status;
    }
    const int64_t acked = AckedOps(acks);
    const std::string recover_address = also_kill ? also_kill() : address;
    ASSERT_FALSE(recover_address.empty());
    if (!ro.recovery_crash_at.empty()) {
      // A crash during recovery: a process recovers the id and is SIGKILLed at the armed point
      // (the Nth replayed op, or inside the reclaim that follows the replay) unless it ended
      // first; the recovery below then starts over.
      const std::string spec = recover_address + "|" + KindName(kind) + "|" + std::to_string(fe) +
                               "|" + (companion ? "1" : "0") + "|" + std::to_string(key_size) +
                               "|" + name +
                               (ro.value_bytes > 0 ? "|" + std::to_string(ro.value_bytes) : "");
      const testing::ChildEnd rend = testing::RunSelfAsChild(
          {{"ASYMNVM_CRASH_RECOVER", spec}, {"ASYMNVM_CRASH_AT", ro.recovery_crash_at}},
          "crash-recover-child");
      ASSERT_TRUE(rend.exited) << "the recovering process did not end within 120 s";
      const int rstatus = rend.status;
      const bool killed = WIFSIGNALED(rstatus) && WTERMSIG(rstatus) == SIGKILL;
      ASSERT_TRUE(killed || (WIFEXITED(rstatus) && WEXITSTATUS(rstatus) == 0))
          << "recover child failed: status " << rstatus;
      if (replay_crashed != nullptr) *replay_crashed = killed;
    }
    // The model after `acked` operations, and after one more (in flight at the kill).
    const bool sequence = IsSequence(kind);
    Model before, after;
    before.sequence = after.sequence = sequence;
    before.lifo = after.lifo = kind == Kind::kStack;
    std::mt19937_64 rng(seed);
    Op inflight;
    for (int64_t i = 0; i <= acked && i < kOps; i++) {
      Op op = MakeOp(rng, static_cast<int>(i), kind, ro.value_bytes);
      if (i < acked) before.Apply(op);
      after.Apply(op);
      if (i == acked) inflight = op;
    }

    auto s = open(recover_address, fe);
    ASSERT_TRUE(s);
    RegisterReplays(*s);
    Options opts;
    opts.key_size = key_size;
    if (ro.value_bytes > 0) opts.value_size = ro.value_bytes;
    auto h = Open(*s, kind, name, opts);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
    std::unique_ptr<Sequence> comp;
    if (companion) {
      auto c = OpenSequence(*s, Kind::kStack, "companion-" + std::to_string(fe));
      ASSERT_TRUE(c.ok()) << c.status().ToString();
      comp = std::move(*c);
    }
    Status rep = s->Replay();
    ASSERT_TRUE(rep.ok()) << rep.ToString();
    if (ro.recovery_counters != nullptr) *ro.recovery_counters = s->counters();
    const Status verified = (*h)->Verify();
    ASSERT_TRUE(verified.ok()) << verified.ToString();
    if (comp) {
      std::vector<int32_t> got;
      Value v;
      Status st;
      while ((st = comp->Pop(&v)).ok()) {
        ASSERT_EQ(v.size(), 4u);
        int32_t x;
        std::memcpy(&x, v.data(), 4);
        got.push_back(x);
      }
      ASSERT_EQ(st.code(), StatusCode::kNotFound);
      std::reverse(got.begin(), got.end());
      ASSERT_TRUE(static_cast<int64_t>(got.size()) == acked ||
                  static_cast<int64_t>(got.size()) == acked + 1)
          << "companion stack holds " << got.size() << " pushes, " << acked << " acknowledged";
      for (size_t i = 0; i < got.size(); i++) ASSERT_EQ(got[i], static_cast<int32_t>(i)) << i;
    }
    std::printf("round %d: %s killed=%d%s%s after %lld acknowledged ops, replayed %llu\n", round,
                KindName(kind), exited ? 0 : 1, also_kill ? " (+ back-end)" : "",
                crash_at.empty() ? "" : (" at " + crash_at).c_str(), static_cast<long long>(acked),
                static_cast<unsigned long long>(s->counters().replayed_ops));
    if (sequence) {
      auto* q = static_cast<Sequence*>(h->get());
      std::deque<Value> got;
      Value v;
      Status st;
      while ((st = q->Pop(&v)).ok()) got.push_back(v);
      ASSERT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
      if (before.lifo) std::reverse(got.begin(), got.end());
      EXPECT_TRUE(got == before.seq || got == after.seq)
          << "round " << round << ": " << got.size() << " elements, model " << before.seq.size()
          << " (or " << after.seq.size() << ")";
    } else {
      auto* m = static_cast<Map*>(h->get());
      std::map<uint64_t, Value> got;
      for (uint64_t k = 0; k < kKeys; k++) {
        Value v;
        Status st = m->Get(CrashKey(k, key_size), &v);
        if (st.ok()) {
          got[k] = v;
        } else {
          ASSERT_EQ(st.code(), StatusCode::kNotFound) << st.ToString();
        }
      }
      EXPECT_TRUE(got == before.map || got == after.map)
          << "round " << round << ": " << got.size() << " keys, model " << before.map.size()
          << " (or " << after.map.size() << ")";
      if (ro.crash_in_vector) {
        // Killed inside a vector (a delete batch at its point): its op log was durable, so the
        // replay applied it whole.
        EXPECT_TRUE(!inflight.batch.empty() || !inflight.dels.empty())
            << "round " << round << ": the in-flight operation is not a vector";
        EXPECT_TRUE(got == after.map)
            << "round " << round << ": the logged vector was not replayed (" << got.size()
            << " keys, " << before.map.size() << " before it, " << after.map.size() << " after)";
        EXPECT_NE(before.map, after.map) << "round " << round << ": the vector changed nothing";
      }
      if (recovered != nullptr) *recovered = got;
      auto n = m->Count();
      ASSERT_TRUE(n.ok());
      EXPECT_EQ(*n, got.size());
    }
  }
}

bool Built(frontend::Session& s, Kind kind) {
  auto h = Open(s, kind, "probe");
  return h.ok() || h.status().code() != StatusCode::kNotSupported;
}

int Rounds() {
  const char* env = std::getenv("ASYMNVM_CRASH_ROUNDS");
  return env ? std::max(1, std::atoi(env)) : 1;
}

TEST_P(CrashTest, AcknowledgedOperationsSurviveSigkillAndReplay) {
  const Kind kind = GetParam();
  {  // kinds not built yet are reported, not silently passed
    auto s = OpenSession(999, Level::kRcb);
    if (!Built(*s, kind)) GTEST_SKIP() << KindName(kind) << " is not built";
  }
  std::mt19937_64 seeds(1000 + static_cast<int>(kind));
  for (int round = 0; round < Rounds(); round++) {
    const uint64_t seed = seeds();
    const int64_t kill_after = 50 + static_cast<int64_t>(seeds() % 1500);
    CrashRound(kind, false, round, 100 + static_cast<uint64_t>(round), seed, kill_after,
               be_->address(), path_, nullptr,
               [&](const std::string&, uint64_t fe) { return OpenSession(fe, Level::kRcb); });
    if (HasFatalFailure() || HasFailure()) return;
  }
}

// The same with byte-string keys (key_size 32): the keys' op logs, vector op logs and node slots
// survive the kill and replay like integer ones.
class ByteKeyCrashTest : public CrashTest {};

TEST_P(ByteKeyCrashTest, AcknowledgedOperationsSurviveSigkillAndReplay) {
  const Kind kind = GetParam();
  std::mt19937_64 seeds(5000 + static_cast<int>(kind));
  for (int round = 0; round < Rounds(); round++) {
    const uint64_t seed = seeds();
    const int64_t kill_after = 50 + static_cast<int64_t>(seeds() % 1500);
    CrashRound(
        kind, false, round, 500 + static_cast<uint64_t>(round), seed, kill_after, be_->address(),
        path_, nullptr,
        [&](const std::string&, uint64_t fe) { return OpenSession(fe, Level::kRcb); },
        RoundOptions().KeySize(32));
    if (HasFatalFailure() || HasFailure()) return;
  }
}

// A crash during recovery: after the writer's SIGKILL a second process recovers the id and is
// itself killed in the middle of its replay (after its Nth re-executed op, N seeded in 1..6);
// the recovery that follows replays again and must still hold exactly the acknowledged
// operations (plus possibly the in-flight one). Every kind, integer keys and — for the maps —
// byte keys; the companion stack (annulment across two structures) in the sequence rounds. A
// round whose recovering process had fewer ops to replay than N ends normally; the test
// requires the kill to have happened in at least one of its rounds.
void CrashDuringRecoveryRounds(
    Kind kind, uint32_t key_size, uint64_t fe_base, const std::string& address,
    const std::string& scratch,
    const std::function<std::unique_ptr<frontend::Session>(const std::string&, uint64_t)>& open) {
  std::mt19937_64 seeds(7000 + static_cast<int>(kind) + key_size);
  // Rounds until two of them killed their recovering process (at most 12; ASYMNVM_CRASH_ROUNDS
  // raises the minimum).
  int crashed_rounds = 0;
  for (int round = 0; round < 12 && (crashed_rounds < 2 || round < Rounds()); round++) {
    const uint64_t seed = seeds();
    const int64_t kill_after = 50 + static_cast<int64_t>(seeds() % 1500);
    const int nth = 1 + static_cast<int>(seeds() % 6);
    bool crashed = false;
    CrashRound(kind, IsSequence(kind), round, fe_base + static_cast<uint64_t>(round), seed,
               kill_after, address, scratch, nullptr, open,
               RoundOptions().KeySize(key_size).CrashReplayAt(nth, &crashed));
    if (::testing::Test::HasFatalFailure() || ::testing::Test::HasFailure()) return;
    std::printf("round %d: recovering process %s at replayed op %d\n", round,
                crashed ? "killed" : "finished before", nth);
    crashed_rounds += crashed ? 1 : 0;
  }
  EXPECT_GT(crashed_rounds, 0) << "no round killed its recovering process: the test tested nothing";
}

TEST_P(CrashTest, CrashDuringRecoveryThenRecoverAgain) {
  CrashDuringRecoveryRounds(
      GetParam(), 0, 700, be_->address(), path_,
      [&](const std::string&, uint64_t fe) { return OpenSession(fe, Level::kRcb); });
}

TEST_P(ByteKeyCrashTest, CrashDuringRecoveryThenRecoverAgain) {
  CrashDuringRecoveryRounds(
      GetParam(), 32, 800, be_->address(), path_,
      [&](const std::string&, uint64_t fe) { return OpenSession(fe, Level::kRcb); });
}

// Two structures in one session: the main one commits while a companion stack keeps pushes
// pending (annulment); after the kill both hold exactly their acknowledged operations (the OPN
// sent with the main structure's transactions never passed the companion's open ops).
TEST_P(CrashTest, TwoStructuresInOneSession) {
  const Kind kind = GetParam();
  std::mt19937_64 seeds(3000 + static_cast<int>(kind));
  for (int round = 0; round < Rounds(); round++) {
    const uint64_t seed = seeds();
    const int64_t kill_after = 50 + static_cast<int64_t>(seeds() % 1500);
    CrashRound(kind, true, round, 300 + static_cast<uint64_t>(round), seed, kill_after,
               be_->address(), path_, nullptr,
               [&](const std::string&, uint64_t fe) { return OpenSession(fe, Level::kRcb); });
    if (HasFatalFailure() || HasFailure()) return;
  }
}

// Both at once: the back-end is an asymnvm-backend daemon; the front-end child and the daemon are
// SIGKILLed together, the daemon restarts on the same pool, and the front-end recovers.
TEST_P(CrashTest, FrontendAndBackendKilledTogether) {
  const Kind kind = GetParam();
  {
    auto s = OpenSession(999, Level::kRcb);
    if (!Built(*s, kind)) GTEST_SKIP() << KindName(kind) << " is not built";
  }
  const std::string pool = path_ + ".daemon";
  std::remove(pool.c_str());
  auto start = [&]() -> std::unique_ptr<driver::BackendProcess> {
    auto be = driver::BackendProcess::Start(ASYMNVM_BACKEND_BIN, pool, "64M",
                                            {"--pm-mode", "flush", "--log-segment", "256K"});
    EXPECT_TRUE(be.ok()) << be.status().ToString();
    return be.ok() ? std::move(*be) : nullptr;
  };
  auto daemon = start();
  ASSERT_TRUE(daemon);
  std::mt19937_64 seeds(2000 + static_cast<int>(kind));
  for (int round = 0; round < Rounds(); round++) {
    const uint64_t seed = seeds();
    const int64_t kill_after = 50 + static_cast<int64_t>(seeds() % 1500);
    CrashRound(
        kind, false, round, 200 + static_cast<uint64_t>(round), seed, kill_after, daemon->address(),
        pool,
        [&]() -> std::string {
          daemon->Kill();
          daemon = start();
          return daemon ? daemon->address() : std::string();
        },
        [&](const std::string& address, uint64_t fe) -> std::unique_ptr<frontend::Session> {
          auto o = SessionOpts(fe, Level::kRcb);
          o.backends = {address};
          auto s = frontend::Session::Open(o);
          EXPECT_TRUE(s.ok()) << s.status().ToString();
          return s.ok() ? std::move(*s) : nullptr;
        });
    if (HasFatalFailure() || HasFailure()) break;
  }
  daemon.reset();
  std::remove(pool.c_str());
  std::remove((pool + ".backend.log").c_str());
}

INSTANTIATE_TEST_SUITE_P(All, CrashTest, ::testing::ValuesIn(kAllKinds),
                         [](const auto& info) { return std::string(KindName(info.param)); });
constexpr Kind kByteKeyKinds[] = {Kind::kHashTable, Kind::kSkipList, Kind::kBst,
                                  Kind::kBPlusTree, Kind::kMvBst,    Kind::kMvBPlusTree};
INSTANTIATE_TEST_SUITE_P(Maps, ByteKeyCrashTest, ::testing::ValuesIn(kByteKeyKinds),
                         [](const auto& info) { return std::string(KindName(info.param)); });

// A vector delete killed between its durable op log and its memory logs (crash point
// structures.vector_delete.mid_writes, at the Nth delete batch that removes something): after
// Session::Replay the structure holds every acknowledged operation plus that whole batch. Rounds
// alternate integer keys and 32-byte keys. Every kind with a vector delete.
class DeleteBatchCrashTest : public CrashTest {};

TEST_P(DeleteBatchCrashTest, KilledBetweenOpLogAndMemoryLogsReplaysTheBatch) {
  const Kind kind = GetParam();
  std::mt19937_64 seeds(9000 + static_cast<int>(kind));
  for (int round = 0; round < std::max(2, Rounds()); round++) {
    const uint64_t seed = seeds();
    const int64_t nth = 1 + static_cast<int64_t>(seeds() % 40);
    const uint32_t key_size = round % 2 == 0 ? 0 : 32;
    CrashRound(
        kind, false, round, 900 + static_cast<uint64_t>(round), seed, kOps, be_->address(), path_,
        nullptr, [&](const std::string&, uint64_t fe) { return OpenSession(fe, Level::kRcb); },
        RoundOptions().KeySize(key_size).CrashInVector("structures.vector_delete.mid_writes:" +
                                                       std::to_string(nth)));
    if (HasFatalFailure() || HasFailure()) return;
  }
}

constexpr Kind kVectorDeleteKinds[] = {Kind::kSkipList, Kind::kBst, Kind::kMvBst,
                                       Kind::kMvBPlusTree};
INSTANTIATE_TEST_SUITE_P(Maps, DeleteBatchCrashTest, ::testing::ValuesIn(kVectorDeleteKinds),
                         [](const auto& info) { return std::string(KindName(info.param)); });

// No leaks across crashes (doc/alloc.md §Leaks across crashes): CrashRound's SIGKILLed writer
// child over every kind in turn (puts, deletes, batches; pushes and pops), each round recovered
// and checked against the model. Every 10 rounds and at the end the back-end is stopped,
// `asymnvm-ctl gc` frees what the dead writers left (their slabs, unpublished MV nodes, nodes
// whose frees were orphaned), and `check` then finds used blocks = reachable blocks; after the
// restart every structure of every round still verifies and holds what its round recovered (the
// later rounds reuse the freed blocks). ASYMNVM_LEAK_ROUNDS (default 10); the ctest entry
// structures_leak_long (label long) runs 50.
class LeakCampaignTest : public testing::StructuresTest {};

TEST_F(LeakCampaignTest, GcAfterSigkillRoundsLeavesUsedEqualReachable) {
  const char* env = std::getenv("ASYMNVM_LEAK_ROUNDS");
  const int rounds = env ? std::max(1, std::atoi(env)) : 10;
  struct Recovered {
    Kind kind;
    std::string name;
    std::map<uint64_t, Value> map;  // maps; sequences are emptied by the round's check
  };
  std::vector<Recovered> all;
  uint64_t total_leaked = 0, total_freed = 0;
  double gc_seconds = 0;
  auto gc_and_check = [&](int after_round) {
    be_->Stop();
    be_.reset();
    std::ostringstream out, err;
    // Exit 5 when the dead writers left whole blocks unreached, 0 when every block they left
    // still holds a reachable object; never corruption.
    const int rc = tools::RunCtl({"check", path_, "--json"}, out, err);
    ASSERT_TRUE(rc == tools::kCtlLeaks || rc == tools::kCtlOk) << rc << out.str() << err.str();
    const auto before = nlohmann::json::parse(out.str())["leaks"];
    const uint64_t leaked = before["leaked_blocks"].get<uint64_t>();
    std::ostringstream gout, gerr;
    ASSERT_EQ(tools::RunCtl({"gc", path_, "--json"}, gout, gerr), tools::kCtlOk)
        << gout.str() << gerr.str();
    const auto gc = nlohmann::json::parse(gout.str());
    uint64_t freed = 0;
    for (const auto& x : gc["freed"]) freed += x["bytes"].get<uint64_t>() / 4096;
    EXPECT_EQ(freed, leaked);
    // gc clears the front-end ownership journals (and frees their extents apart from the leaks).
    EXPECT_EQ(gc["journals_cleared"].get<uint64_t>(), before["journals"].get<uint64_t>());
    std::ostringstream cout_, cerr_;
    ASSERT_EQ(tools::RunCtl({"check", path_, "--json"}, cout_, cerr_), tools::kCtlOk)
        << cout_.str() << cerr_.str();
    const auto after = nlohmann::json::parse(cout_.str())["leaks"];
    EXPECT_EQ(
        after["blocks_used"].get<uint64_t>(),
        after["blocks_reachable"].get<uint64_t>() + after["blocks_pending_free"].get<uint64_t>());
    EXPECT_TRUE(after["leaked"].empty());
    std::printf(
        "after round %d: %llu blocks used, %llu leaked before gc, gc freed %llu in %.3f s; "
        "%llu used = %llu reachable after\n",
        after_round, static_cast<unsigned long long>(before["blocks_used"]),
        static_cast<unsigned long long>(leaked), static_cast<unsigned long long>(freed),
        gc["seconds"].get<double>(), static_cast<unsigned long long>(after["blocks_used"]),
        static_cast<unsigned long long>(after["blocks_reachable"]));
    total_leaked += leaked;
    total_freed += freed;
    gc_seconds += gc["seconds"].get<double>();
    StartBackend();
    // Every structure so far: Verify, and the content its round recovered.
    auto s = OpenSession(999, Level::kRcb);
    ASSERT_TRUE(s);
    for (const Recovered& r : all) {
      auto h = Open(*s, r.kind, r.name);
      ASSERT_TRUE(h.ok()) << r.name << ": " << h.status().ToString();
      ASSERT_TRUE((*h)->Verify().ok()) << r.name;
      if (IsSequence(r.kind)) {
        auto n = (*h)->Count();
        ASSERT_TRUE(n.ok()) << r.name;
        EXPECT_EQ(*n, 0u) << r.name;
        continue;
      }
      auto* m = static_cast<Map*>(h->get());
      for (uint64_t k = 0; k < kKeys; k++) {
        Value v;
        Status st = m->Get(k, &v);
        auto it = r.map.find(k);
        if (it == r.map.end()) {
          ASSERT_EQ(st.code(), StatusCode::kNotFound) << r.name << " key " << k;
        } else {
          ASSERT_TRUE(st.ok()) << r.name << " key " << k << ": " << st.ToString();
          ASSERT_EQ(v, it->second) << r.name << " key " << k;
        }
      }
    }
  };
  std::mt19937_64 seeds(4242);
  for (int round = 0; round < rounds; round++) {
    const Kind kind = kAllKinds[round % std::size(kAllKinds)];
    const uint64_t fe = 500 + static_cast<uint64_t>(round);
    const uint64_t seed = seeds();
    const int64_t kill_after = 50 + static_cast<int64_t>(seeds() % 400);
    Recovered rec{kind, std::string("crash-") + KindName(kind) + "-" + std::to_string(fe), {}};
    CrashRound(
        kind, false, round, fe, seed, kill_after, be_->address(), path_, nullptr,
        [&](const std::string&, uint64_t id) { return OpenSession(id, Level::kRcb); },
        RoundOptions().Recovered(&rec.map));
    if (HasFatalFailure() || HasFailure()) return;
    all.push_back(std::move(rec));
    if ((round + 1) % 10 == 0 || round + 1 == rounds) {
      gc_and_check(round);
      if (HasFatalFailure() || HasFailure()) return;
    }
  }
  std::printf("%d rounds: %llu leaked blocks found and %llu freed by gc in %.3f s total\n", rounds,
              static_cast<unsigned long long>(total_leaked),
              static_cast<unsigned long long>(total_freed), gc_seconds);
}

// ---- online reclamation (doc/alloc.md §Leaks across crashes) ----

// `asymnvm-ctl check --json` of the test's pool, the back-end stopped and restarted around it:
// the "leaks" object.
nlohmann::json CheckPool(std::unique_ptr<backend::Backend>& be, const std::string& path,
                         const std::function<void()>& restart) {
  be->Stop();
  be.reset();
  std::ostringstream out, err;
  const int rc = tools::RunCtl({"check", path, "--json"}, out, err);
  EXPECT_TRUE(rc == tools::kCtlLeaks || rc == tools::kCtlOk) << rc << out.str() << err.str();
  restart();
  auto j = nlohmann::json::parse(out.str(), nullptr, false);
  return j.is_discarded() ? nlohmann::json() : j["leaks"];
}

class OnlineReclaimTest : public testing::StructuresTest {
 protected:
  nlohmann::json Check() {
    return CheckPool(be_, path_, [this] { StartBackend(); });
  }
  // A session of `fe` whose reclaim is on or off.
  std::unique_ptr<frontend::Session> Recovery(uint64_t fe, bool reclaim) {
    auto o = SessionOpts(fe, Level::kRcb);
    o.reclaim_on_recovery = reclaim;
    return OpenSession(o);
  }
  // N SIGKILL rounds of a writer over every kind in turn (puts, deletes, batches; pushes, pops),
  // front-end ids 700..702 restarted round after round (each round's recovery is the restart of
  // the id it killed: Replay, then the reclaim), then one more restart of each id (the last
  // round's recovery emptied sequences and deleted keys after its reclaim). Returns the leaks
  // object of `check` (no gc) and the counters summed over the recoveries.
  nlohmann::json Campaign(int rounds, bool reclaim, frontend::Counters* sum) {
    std::mt19937_64 seeds(777);
    auto add = [&](const frontend::Counters& c) {
      sum->reclaim_runs += c.reclaim_runs;
      sum->reclaimed_blocks += c.reclaimed_blocks;
      sum->reclaim_deferred += c.reclaim_deferred;
      sum->reclaim_refused += c.reclaim_refused;
      sum->reclaim_failures += c.reclaim_failures;
      sum->reclaim_walk_us += c.reclaim_walk_us;
    };
    for (int round = 0; round < rounds; round++) {
      const Kind kind = kAllKinds[round % std::size(kAllKinds)];
      const uint64_t fe = 700 + static_cast<uint64_t>(round % 3);
      const uint64_t seed = seeds();
      const int64_t kill_after = 50 + static_cast<int64_t>(seeds() % 400);
      CrashRound(
          kind, false, round, fe, seed, kill_after, be_->address(), path_, nullptr,
          [&](const std::string&, uint64_t id) { return Recovery(id, reclaim); },
          RoundOptions().Name(std::string("online-") + KindName(kind) + "-" +
                              std::to_string(round)));
      if (HasFatalFailure() || HasFailure()) return {};
    }
    for (uint64_t fe = 700; fe < 703; fe++) {
      auto s = Recovery(fe, reclaim);
      if (!s) return {};
      RegisterReplays(*s);
      Status r = s->Replay();
      EXPECT_TRUE(r.ok()) << r.ToString();
      add(s->counters());
    }
    // What the journals still name (a session of the id lists them; it changes nothing).
    journaled_.clear();
    for (uint64_t fe = 700; fe < 703; fe++) {
      auto s = Recovery(fe, false);
      if (!s) return {};
      for (uint64_t a : s->InheritedExtents()) journaled_.insert(a);
      std::printf("front-end %llu: %zu journaled extent(s)\n", static_cast<unsigned long long>(fe),
                  s->InheritedExtents().size());
    }
    return Check();
  }
  std::set<uint64_t> journaled_;
  uint64_t UsedBlocks() const {
    uint64_t n = 0;
    for (const auto& x : be_->Extents()) n += x.bytes / 4096;
    return n;
  }
};

int OnlineRounds() {
  const char* env = std::getenv("ASYMNVM_ONLINE_LEAK_ROUNDS");
  return env ? std::max(1, std::atoi(env)) : 8;
}

// With reclamation on, no gc: used blocks = reachable blocks (+ pending
// deferred frees) after N SIGKILL rounds (8 by default; structures_leak_online_long: 50).
TEST_F(OnlineReclaimTest, LeakCampaignWithoutGcLeavesUsedEqualReachableOnline) {
  const int rounds = OnlineRounds();
  frontend::Counters sum;
  const auto t0 = std::chrono::steady_clock::now();
  const nlohmann::json leaks = Campaign(rounds, true, &sum);
  if (HasFatalFailure() || HasFailure()) return;
  ASSERT_FALSE(leaks.is_null());
  // Every block the dead writers held was journaled (the back-end records an allocation in the
  // same request), and every journaled block no structure reaches was reclaimed: nothing is
  // leaked, without gc.
  uint64_t window_leaks = 0;
  for (const auto& x : leaks["leaked"]) {
    EXPECT_EQ(journaled_.count(x["addr"].get<uint64_t>()), 0u)
        << "a journaled block was left unreclaimed: " << x.dump();
    window_leaks += x["bytes"].get<uint64_t>() / 4096;
  }
  EXPECT_TRUE(leaks["leaked"].empty()) << leaks.dump();
  EXPECT_EQ(leaks["blocks_used"].get<uint64_t>(), leaks["blocks_reachable"].get<uint64_t>() +
                                                      leaks["blocks_pending_free"].get<uint64_t>())
      << leaks.dump();
  EXPECT_EQ(leaks["journals"].get<uint64_t>(), 3u);
  EXPECT_EQ(sum.reclaim_failures, 0u);
  EXPECT_EQ(sum.reclaim_deferred, 0u);
  std::printf(
      "%d rounds online: %llu blocks used = %llu reachable + %llu leaked; the final restarts "
      "reclaimed %llu block(s), their walks of %d structures took "
      "%.1f ms each; %.1f s\n",
      rounds, static_cast<unsigned long long>(leaks["blocks_used"].get<uint64_t>()),
      static_cast<unsigned long long>(leaks["blocks_reachable"].get<uint64_t>()),
      static_cast<unsigned long long>(window_leaks),
      static_cast<unsigned long long>(sum.reclaimed_blocks), rounds,
      sum.reclaim_runs ? sum.reclaim_walk_us / 1000.0 / sum.reclaim_runs : 0.0,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  // gc finds nothing more; it clears the journals and frees their extents; check stays clean
  // after it (used = reachable, no journal left).
  be_->Stop();
  be_.reset();
  std::ostringstream gout, gerr;
  ASSERT_EQ(tools::RunCtl({"gc", path_, "--json"}, gout, gerr), tools::kCtlOk)
      << gout.str() << gerr.str();
  const auto gc = nlohmann::json::parse(gout.str());
  EXPECT_EQ(gc["journals_cleared"].get<uint64_t>(), 3u);
  EXPECT_EQ(gc["freed"].size(), leaks["leaked"].size()) << gc.dump();  // journals freed apart
  std::ostringstream cout_, cerr_;
  ASSERT_EQ(tools::RunCtl({"check", path_, "--json"}, cout_, cerr_), tools::kCtlOk) << cout_.str();
  const auto after = nlohmann::json::parse(cout_.str())["leaks"];
  EXPECT_EQ(after["journals"].get<uint64_t>(), 0u);
  EXPECT_TRUE(after["leaked"].empty());
  StartBackend();
}

// Negative control: the same campaign with reclamation off leaves leaks (what the online reclaim
// frees; before it, only gc did).
TEST_F(OnlineReclaimTest, WithoutReclamationTheCampaignLeaks) {
  frontend::Counters sum;
  const nlohmann::json leaks = Campaign(std::min(OnlineRounds(), 4), false, &sum);
  if (HasFatalFailure() || HasFailure()) return;
  ASSERT_FALSE(leaks.is_null());
  EXPECT_GT(leaks["leaked_blocks"].get<uint64_t>(), 0u) << leaks.dump();
  EXPECT_EQ(sum.reclaim_runs, 0u);
}

// Deferral: a live front-end holding another structure's writer lock → the recovery frees
// nothing and counts a deferred reclaim; once it closed, a retry reclaims.
TEST_F(OnlineReclaimTest, LockHeldByLiveFrontendDefersTheReclaim) {
  const uint64_t fe = 720;
  CrashRound(Kind::kHashTable, false, 0, fe, 99, 300, be_->address(), path_, nullptr,
             [&](const std::string&, uint64_t id) { return Recovery(id, false); });
  if (HasFatalFailure()) return;
  {
    // A later session of the same id deletes every key: the dead incarnation's value objects are
    // orphans now, and its slabs (journaled under 720) are reached by no structure.
    auto s = Recovery(fe, false);
    ASSERT_TRUE(s);
    auto m = OpenMap(*s, Kind::kHashTable, "crash-hash-720");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    for (uint64_t k = 0; k < kKeys; k++) {
      Status d = (*m)->Delete(k);
      ASSERT_TRUE(d.ok() || d.code() == StatusCode::kNotFound) << d.ToString();
    }
  }
  auto other = OpenSession(721, Level::kRcb);
  ASSERT_TRUE(other);
  auto held = OpenMap(*other, Kind::kBPlusTree, "held-by-721");
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  const Status put = (*held)->Put(1, TestValue(1, 1, 10));
  ASSERT_TRUE(put.ok()) << put.ToString();
  const uint64_t used_before = UsedBlocks();
  auto o = SessionOpts(fe, Level::kRcb);
  o.reclaim_lock_wait = std::chrono::milliseconds(100);
  auto s = OpenSession(o);
  ASSERT_TRUE(s);
  RegisterReplays(*s);
  const size_t inherited = s->InheritedExtents().size();
  ASSERT_GT(inherited, 0u);
  ASSERT_TRUE(s->Replay().ok());
  EXPECT_EQ(s->counters().reclaim_deferred, 1u);
  EXPECT_EQ(s->counters().reclaimed_blocks, 0u);
  EXPECT_TRUE(s->reclaim_pending());
  EXPECT_EQ(s->InheritedExtents().size(), inherited);  // the journal is as it was
  EXPECT_EQ(UsedBlocks(), used_before);
  held->reset();
  other.reset();
  auto r = ReclaimDeadAllocations(*s);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_FALSE(r->deferred);
  EXPECT_GT(r->freed_blocks, 0u);
  EXPECT_FALSE(s->reclaim_pending());
  EXPECT_LT(UsedBlocks(), used_before);
  std::printf("deferred, then reclaimed %llu block(s) of %zu journaled extent(s), kept %llu\n",
              static_cast<unsigned long long>(r->freed_blocks), inherited,
              static_cast<unsigned long long>(r->kept_extents));
  s.reset();
  const auto leaks = Check();
  ASSERT_FALSE(leaks.is_null());
  EXPECT_TRUE(leaks["leaked"].empty()) << leaks.dump();
}

// Atomicity (frontend/alloc_journal.h): the back-end records an allocation in the journal in the
// same request, so a writer killed right after it (the slab recorded, not yet used) leaves a block
// the recovery frees; and it clears the entry in the same request as the free, so a writer killed
// right after returning a slab leaves nothing the recovery could free twice. Neither leaves a
// leak. The structure recovers to its model.
TEST_F(OnlineReclaimTest, KillsAroundJournaledAllocationsAndFreesLeaveNoLeak) {
  const uint64_t fe = 730;
  CrashRound(
      Kind::kHashTable, false, 0, fe, 55, kOps + 1, be_->address(), path_, nullptr,
      [&](const std::string&, uint64_t id) { return Recovery(id, true); },
      RoundOptions().CrashAt("frontend.slab.journaled:3"));
  if (HasFatalFailure() || HasFailure()) return;
  {  // the round's recovery closed; one more restart reclaims what it left after its reclaim
    auto s = Recovery(fe, true);
    ASSERT_TRUE(s);
    RegisterReplays(*s);
    ASSERT_TRUE(s->Replay().ok());
  }
  auto leaks = Check();
  ASSERT_FALSE(leaks.is_null());
  EXPECT_TRUE(leaks["unallocated_reads"].empty()) << leaks.dump();
  EXPECT_EQ(leaks["leaked_blocks"].get<uint64_t>(), 0u) << leaks.dump();
  // Right after the first slab's return (entry cleared and block freed by one request): the
  // recovery frees the child's four other slabs, and never the returned one (the free would be
  // refused, and the reclaim would count it).
  const uint64_t fe2 = 740;
  const testing::ChildEnd end =
      testing::RunSelfAsChild({{"ASYMNVM_SLAB_CHILD", be_->address() + "|" + std::to_string(fe2)},
                               {"ASYMNVM_CRASH_AT", "frontend.slab.returned:1"}},
                              "slab-child");
  const int status = end.status;
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  {
    auto s = Recovery(fe2, true);
    ASSERT_TRUE(s);
    RegisterReplays(*s);
    EXPECT_EQ(s->InheritedExtents().size(), 4u);
    ASSERT_TRUE(s->Replay().ok());
    EXPECT_EQ(s->counters().reclaimed_blocks, 4u);
    EXPECT_EQ(s->counters().reclaim_refused, 0u);
  }
  leaks = Check();
  ASSERT_FALSE(leaks.is_null());
  EXPECT_EQ(leaks["leaked_blocks"].get<uint64_t>(), 0u) << leaks.dump();
}

int ReclaimCrashRounds() {
  const char* env = std::getenv("ASYMNVM_RECLAIM_CRASH_ROUNDS");
  return env ? std::max(1, std::atoi(env)) : 1;
}

// Values larger than a block, one large extent each: a writer SIGKILLed mid-run is replayed and
// every acknowledged operation is there, for every map kind; afterwards nothing is leaked. Found
// failing for the hash table and B+tree ("replay ...: free of A: not in any live allocation
// (double free?)"): the large extent of a replaced or deleted value was freed at the back-end at
// once while the transaction unlinking it was still in the front-end's unsent batch — after the
// kill the durable structure pointed at a free extent another front-end could be handed. Frees
// of extents and slabs now wait for a fence that covers the writes logged before them
// (doc/alloc.md §Frees after the unlink).
TEST_F(OnlineReclaimTest, LargeValuesSurviveSigkillAndLeakNothing) {
  constexpr uint32_t kValueBytes = 6000;
  std::mt19937_64 seeds(9300);
  uint64_t fe = 800;
  std::vector<uint64_t> ids;
  for (const Kind kind : {Kind::kHashTable, Kind::kBPlusTree, Kind::kBst, Kind::kSkipList,
                          Kind::kMvBst, Kind::kMvBPlusTree}) {
    for (int round = 0; round < 2; round++, fe++) {
      ids.push_back(fe);
      const uint64_t seed = seeds();
      const int64_t kill_after = 30 + static_cast<int64_t>(seeds() % 300);
      CrashRound(
          kind, false, round, fe, seed, kill_after, be_->address(), path_, nullptr,
          [&](const std::string&, uint64_t id) { return Recovery(id, true); },
          RoundOptions()
              .Name(std::string("large-") + KindName(kind) + "-" + std::to_string(fe))
              .ValueBytes(kValueBytes));
      if (HasFatalFailure() || HasFailure()) return;
    }
  }
  for (uint64_t id : ids) {
    auto s = Recovery(id, true);
    ASSERT_TRUE(s);
    RegisterReplays(*s);
    ASSERT_TRUE(s->Replay().ok());
  }
  const nlohmann::json leaks = Check();
  ASSERT_FALSE(leaks.is_null());
  EXPECT_TRUE(leaks["leaked"].empty()) << leaks.dump();
  EXPECT_EQ(leaks["blocks_used"].get<uint64_t>(), leaks["blocks_reachable"].get<uint64_t>() +
                                                      leaks["blocks_pending_free"].get<uint64_t>())
      << leaks.dump();
}

// A crash inside the recovery's online reclaim (doc/alloc.md §Reclaim at recovery). Per round: a
// writer child is SIGKILLed mid-workload (its journal names its slabs); a second child recovers
// the id (Replay, then the reclaim) armed with a reclaim crash point at its Nth extent (N seeded
// in 1..2) and dies there; CrashRound's in-process recovery then replays and reclaims again and
// must find exactly the acknowledged operations (plus possibly the in-flight one), Verify clean.
//  * structures.reclaim.before_free: the extents before the Nth freed, the Nth and the rest
//    still journaled and allocated;
//  * structures.reclaim.after_free: the Nth freed and its entry cleared (one request).
// Oracle besides the model: when the recovery opens the id, every entry its journal still holds
// names the start of a live extent (a crash inside the reclaim never leaves an entry naming a
// block that may be handed out again); its reclaim refuses nothing and does not fail; after one
// more restart of every id, check (no gc) finds no leak: used = reachable + pending deferred
// frees exactly. The entry is cleared and the block freed by one back-end request, so no
// front-end crash lands between them and not even one block may leak. A round whose recovering
// child had fewer unreached extents than N ends normally; each (point, kind) pair must have
// killed at least one. Hash table, B+tree, MV-B+tree; ASYMNVM_RECLAIM_CRASH_ROUNDS raises the
// minimum rounds per pair (default 1, at most 12 while none crashed).
TEST_F(OnlineReclaimTest, CrashInsideTheReclaimThenRecoverAgain) {
  // Values of 2000 bytes, two per 4 KiB slab: the puts of the writer's last transaction batch
  // (not yet sent at the kill) fill slabs no structure reaches once the replay re-executed them
  // with the recovery's own allocations. With the default 1..64-byte values the dead writer's
  // slabs are all partially live and the reclaim frees nothing. (Values larger than a block have
  // their own test, LargeValuesSurviveSigkillAndLeakNothing.)
  constexpr uint32_t kValueBytes = 2000;
  const char* const points[] = {"structures.reclaim.before_free", "structures.reclaim.after_free"};
  const Kind kinds[] = {Kind::kHashTable, Kind::kBPlusTree, Kind::kMvBPlusTree};
  std::mt19937_64 seeds(9100);
  uint64_t fe = 750;
  std::vector<uint64_t> ids;
  for (const char* point : points) {
    for (const Kind kind : kinds) {
      int crashed_rounds = 0;
      for (int round = 0; round < std::max(12, ReclaimCrashRounds()) &&
                          (crashed_rounds == 0 || round < ReclaimCrashRounds());
           round++, fe++) {
        ids.push_back(fe);
        const uint64_t seed = seeds();
        const int64_t kill_after = 50 + static_cast<int64_t>(seeds() % 1000);
        const std::string arm = std::string(point) + ":" + std::to_string(1 + seeds() % 2);
        bool crashed = false;
        frontend::Counters c;
        std::vector<uint64_t> dangling;  // journal entries naming no live extent's start
        size_t inherited = 0;
        auto open = [&](const std::string&, uint64_t id) {
          auto s = Recovery(id, true);
          if (!s) return s;
          std::set<uint64_t> starts;
          for (const auto& x : be_->Extents()) starts.insert(x.addr);
          inherited = s->InheritedExtents().size();
          for (uint64_t a : s->InheritedExtents()) {
            if (starts.count(a) == 0) dangling.push_back(a);
          }
          return s;
        };
        CrashRound(
            kind, false, round, fe, seed, kill_after, be_->address(), path_, nullptr, open,
            RoundOptions()
                .Name(std::string("reclaim-crash-") + KindName(kind) + "-" + std::to_string(fe))
                .ValueBytes(kValueBytes)
                .CrashRecoveryAt(arm, &crashed)
                .RecoveryCounters(&c));
        if (HasFatalFailure() || HasFailure()) return;
        std::printf(
            "%s %s round %d: recovering process %s at %s; then %zu journaled, reclaimed %llu "
            "block(s), refused %llu\n",
            point, KindName(kind), round, crashed ? "killed" : "finished before", arm.c_str(),
            inherited, static_cast<unsigned long long>(c.reclaimed_blocks),
            static_cast<unsigned long long>(c.reclaim_refused));
        EXPECT_TRUE(dangling.empty())
            << arm << ": " << dangling.size() << " journal entr(ies) name no live extent, e.g. "
            << dangling.front();
        EXPECT_EQ(c.reclaim_refused, 0u) << arm;
        EXPECT_EQ(c.reclaim_failures, 0u) << arm;
        EXPECT_EQ(c.reclaim_deferred, 0u) << arm;
        EXPECT_EQ(c.reclaim_runs, inherited > 0 ? 1u : 0u) << arm;
        if (HasFailure()) return;
        crashed_rounds += crashed ? 1 : 0;
      }
      EXPECT_GT(crashed_rounds, 0) << point << " " << KindName(kind)
                                   << ": no round killed its recovering process inside the "
                                      "reclaim: the test tested nothing";
    }
  }
  // The recoveries closed with their own empty slabs journaled: one more restart of each id
  // reclaims them, then nothing may be leaked.
  for (uint64_t id : ids) {
    auto s = Recovery(id, true);
    ASSERT_TRUE(s);
    RegisterReplays(*s);
    const Status r = s->Replay();
    ASSERT_TRUE(r.ok()) << r.ToString();
    EXPECT_EQ(s->counters().reclaim_refused, 0u) << id;
  }
  const auto leaks = Check();
  ASSERT_FALSE(leaks.is_null());
  EXPECT_TRUE(leaks["unallocated_reads"].empty()) << leaks.dump();
  EXPECT_TRUE(leaks["leaked"].empty()) << leaks.dump();
  EXPECT_EQ(leaks["blocks_used"].get<uint64_t>(), leaks["blocks_reachable"].get<uint64_t>() +
                                                      leaks["blocks_pending_free"].get<uint64_t>())
      << leaks.dump();
  std::printf("%zu ids: %llu blocks used = %llu reachable + %llu pending free\n", ids.size(),
              static_cast<unsigned long long>(leaks["blocks_used"].get<uint64_t>()),
              static_cast<unsigned long long>(leaks["blocks_reachable"].get<uint64_t>()),
              static_cast<unsigned long long>(leaks["blocks_pending_free"].get<uint64_t>()));
}

}  // namespace
}  // namespace asymnvm::structures

int main(int argc, char** argv) {
  if (const char* spec = std::getenv("ASYMNVM_CRASH_CHILD")) asymnvm::structures::RunChild(spec);
  if (const char* spec = std::getenv("ASYMNVM_CRASH_RECOVER")) {
    asymnvm::structures::RunRecoverChild(spec);
  }
  if (const char* spec = std::getenv("ASYMNVM_SLAB_CHILD")) {
    asymnvm::structures::RunSlabChild(spec);
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
