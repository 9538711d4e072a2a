// Transactions across structures (include/asymnvm/structures/transaction.h): atomic multi-table
// writes at every level, read-only transactions, lock order and clean aborts, isolation between
// front-ends (per-account ledgers), and SIGKILL of a front-end process (and of the back-end
// daemon with it): after recovery every acknowledged transaction is applied exactly once and the
// one in flight is applied whole or not at all.
#include "asymnvm/structures/transaction.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "structures/testing.h"
#include "workloads/driver/backend_process.h"

namespace asymnvm::structures {
namespace {

using frontend::Level;

constexpr uint64_t kAccounts = 24;
constexpr int64_t kStart = 100000;  // cents

DatabaseOptions BankOptions(uint32_t hold) {
  DatabaseOptions o;
  o.name = "bank";
  // Savings are keyed by byte strings ("sav:<n>"), checking by integers: every transaction's op
  // log carries both key encodings.
  o.tables = {{"bank.sav", Kind::kHashTable, 8, 1024, 12}, {"bank.chk", Kind::kBPlusTree, 8, 8}};
  o.hold_txns = hold;
  return o;
}

std::vector<uint8_t> Enc(int64_t v) {
  std::vector<uint8_t> b(8);
  std::memcpy(b.data(), &v, 8);
  return b;
}
// Account `a`'s key in `table`.
Key Acct(size_t table, uint64_t a) { return table == 0 ? Key("sav:" + std::to_string(a)) : Key(a); }

Result<int64_t> GetBal(Txn& t, size_t table, uint64_t key) {
  Value v;
  ASYMNVM_RETURN_IF_ERROR(t.Get(table, Acct(table, key), &v));
  if (v.size() != 8) return Status::Corruption("balance of " + std::to_string(v.size()) + " bytes");
  int64_t x;
  std::memcpy(&x, v.data(), 8);
  return x;
}

Status Load(Database& db) {
  ASYMNVM_RETURN_IF_ERROR(db.LockAll());
  for (size_t t = 0; t < 2; t++) {
    for (uint64_t a = 0; a < kAccounts; a++)
      ASYMNVM_RETURN_IF_ERROR(db.table(t).Put(Acct(t, a), Enc(kStart)));
  }
  return db.ReleaseLocks();
}

// Deltas of one transaction: (table, account) → cents.
using Deltas = std::map<std::pair<size_t, uint64_t>, int64_t>;

// Moves `amount` from sav[a0] to chk[a1] and deposits 1 cent into chk[a0]: three writes over two
// tables, money +1 per commit.
Result<Deltas> Transfer(Database& db, uint64_t a0, uint64_t a1, int64_t amount,
                        const std::function<void(const Deltas&)>& before_commit = {}) {
  ASYMNVM_ASSIGN_OR_RETURN(auto t, db.Begin({0, 1}));
  ASYMNVM_ASSIGN_OR_RETURN(int64_t s0, GetBal(*t, 0, a0));
  ASYMNVM_ASSIGN_OR_RETURN(int64_t c1, GetBal(*t, 1, a1));
  ASYMNVM_ASSIGN_OR_RETURN(int64_t c0, GetBal(*t, 1, a0));
  ASYMNVM_RETURN_IF_ERROR(t->Put(0, Acct(0, a0), Enc(s0 - amount)));
  ASYMNVM_RETURN_IF_ERROR(t->Put(1, a1, Enc(c1 + amount)));
  // a0 == a1 is not drawn; c0 re-read after the write above would differ only then.
  ASYMNVM_RETURN_IF_ERROR(t->Put(1, a0, Enc(c0 + 1)));
  Deltas d{{{0, a0}, -amount}, {{1, a1}, amount}};
  d[{1, a0}] += 1;
  if (before_commit) before_commit(d);
  ASYMNVM_RETURN_IF_ERROR(t->Commit());
  return d;
}

// Every balance, read in one read-only transaction.
Result<std::map<std::pair<size_t, uint64_t>, int64_t>> Snapshot(Database& db) {
  std::map<std::pair<size_t, uint64_t>, int64_t> out;
  Status st = db.Read({0, 1}, [&](Txn& t) -> Status {
    out.clear();
    for (size_t tb = 0; tb < 2; tb++) {
      for (uint64_t a = 0; a < kAccounts; a++) {
        ASYMNVM_ASSIGN_OR_RETURN(int64_t b, GetBal(t, tb, a));
        out[std::make_pair(tb, a)] = b;
      }
    }
    return Status::Ok();
  });
  if (!st.ok()) return st;
  return out;
}

class TxnTest : public testing::StructuresTest, public ::testing::WithParamInterface<Level> {};

TEST_P(TxnTest, MultiTableWritesCommitTogetherAndOthersSeeThem) {
  auto s1 = OpenSession(1, GetParam());
  ASSERT_TRUE(s1);
  auto db1 = Database::Open(*s1, BankOptions(8));
  ASSERT_TRUE(db1.ok()) << db1.status().ToString();
  ASSERT_TRUE(Load(**db1).ok());
  Deltas ledger;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 60; i++) {
    const uint64_t a0 = rng() % kAccounts, a1 = (a0 + 1 + rng() % (kAccounts - 1)) % kAccounts;
    auto d = Transfer(**db1, a0, a1, static_cast<int64_t>(rng() % 500));
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    for (auto& [k, v] : *d) ledger[k] += v;
  }
  // Read-only: through the held locks (direct) in this session; another front-end after release.
  auto mine = Snapshot(**db1);
  ASSERT_TRUE(mine.ok()) << mine.status().ToString();
  ASSERT_TRUE((*db1)->ReleaseLocks().ok());
  auto s2 = OpenSession(2, GetParam());
  auto db2 = Database::Open(*s2, BankOptions(8));
  ASSERT_TRUE(db2.ok()) << db2.status().ToString();
  auto theirs = Snapshot(**db2);
  ASSERT_TRUE(theirs.ok()) << theirs.status().ToString();
  int64_t total = 0;
  for (size_t tb = 0; tb < 2; tb++) {
    for (uint64_t a = 0; a < kAccounts; a++) {
      const int64_t want = kStart + ledger[{tb, a}];
      EXPECT_EQ((*mine)[std::make_pair(tb, a)], want) << tb << "/" << a;
      EXPECT_EQ((*theirs)[std::make_pair(tb, a)], want) << tb << "/" << a;
      total += (*theirs)[{tb, a}];
    }
  }
  EXPECT_EQ(total, 2 * static_cast<int64_t>(kAccounts) * kStart + 60);
  EXPECT_EQ((*db1)->counters().commits, 60u);
  db2->reset();
  db1->reset();
}

TEST_P(TxnTest, TwoFrontEndsKeepEveryLedger) {
  {
    auto s = OpenSession(1, GetParam());
    auto db = Database::Open(*s, BankOptions(4));
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(Load(**db).ok());
  }
  constexpr int kThreads = 2, kTxns = 80;
  std::vector<Deltas> ledgers(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<int> aborts(kThreads, 0);
  std::vector<std::thread> th;
  for (int i = 0; i < kThreads; i++) {
    th.emplace_back([&, i] {
      auto o = SessionOpts(static_cast<uint64_t>(10 + i), GetParam());
      o.lock_timeout = std::chrono::milliseconds(200);
      auto s = frontend::Session::Open(o);
      if (!s.ok()) {
        errors[i] = s.status().ToString();
        return;
      }
      auto db = Database::Open(**s, BankOptions(4));
      if (!db.ok()) {
        errors[i] = db.status().ToString();
        return;
      }
      std::mt19937_64 rng(100 + i);
      for (int k = 0; k < kTxns; k++) {
        const uint64_t a0 = rng() % kAccounts, a1 = (a0 + 1 + rng() % (kAccounts - 1)) % kAccounts;
        auto d = Transfer(**db, a0, a1, 1 + static_cast<int64_t>(rng() % 100));
        if (!d.ok()) {
          if (d.status().code() == StatusCode::kAborted) {
            aborts[i]++;
            continue;
          }
          errors[i] = d.status().ToString();
          return;
        }
        for (auto& [key, v] : *d) ledgers[i][key] += v;
      }
    });
  }
  for (auto& t : th) t.join();
  for (int i = 0; i < kThreads; i++) ASSERT_EQ(errors[i], "") << "front-end " << i;
  auto s = OpenSession(3, GetParam());
  auto db = Database::Open(*s, BankOptions(4));
  ASSERT_TRUE(db.ok());
  auto snap = Snapshot(**db);
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  for (size_t tb = 0; tb < 2; tb++) {
    for (uint64_t a = 0; a < kAccounts; a++) {
      int64_t want = kStart;
      for (auto& l : ledgers) want += l[{tb, a}];
      EXPECT_EQ((*snap)[std::make_pair(tb, a)], want) << tb << "/" << a;
    }
  }
  std::printf("aborts: %d %d\n", aborts[0], aborts[1]);
}

// Locks tried without waiting (transaction.h): a read-only transaction takes free locks and the
// next ones run through the cache with no round trip (rc, rcb); a lock sorting before a held one
// is taken without giving the held one up; a lock another front-end holds sends a read-only
// transaction to the seqlock (no wait) and a write transaction to release-and-wait in name order.
TEST_P(TxnTest, LocksTriedWithoutWaiting) {
  const Level level = GetParam();
  const bool cached = level == Level::kRc || level == Level::kRcb;
  auto o1 = SessionOpts(1, level);
  o1.lock_timeout = std::chrono::milliseconds(100);
  auto s1 = OpenSession(o1);
  ASSERT_TRUE(s1);
  auto db1 = Database::Open(*s1, BankOptions(0));
  ASSERT_TRUE(db1.ok()) << db1.status().ToString();
  ASSERT_TRUE(Load(**db1).ok());
  auto chk_lock = [&]() { return s1->ReadWord((*db1)->table(1).structure().lock_addr); };
  auto read_chk = [&](Database& db, uint64_t a) -> Result<int64_t> {
    int64_t v = 0;
    Status st = db.Read({1}, [&](Txn& t) -> Status {
      ASYMNVM_ASSIGN_OR_RETURN(v, GetBal(t, 1, a));
      return Status::Ok();
    });
    if (!st.ok()) return st;
    return v;
  };
  // A read-only transaction takes the free lock of bank.chk.
  auto v = read_chk(**db1, 3);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, kStart);
  EXPECT_EQ((*db1)->counters().try_locks, 1u);
  EXPECT_EQ((*db1)->counters().read_retries, 0u);
  auto held = chk_lock();
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(*held, 1u) << "the read-only transaction did not take the free lock";
  // The next read-only transactions: no new lock, and at rc/rcb no round trip at all.
  const auto c0 = s1->counters();
  for (uint64_t a = 0; a < 4; a++) {
    v = read_chk(**db1, 3);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(*v, kStart);
  }
  const auto c1 = s1->counters();
  EXPECT_EQ(c1.lock_acquires, c0.lock_acquires);
  if (cached) {
    EXPECT_EQ(c1.fabric.round_trips, c0.fabric.round_trips);
  }
  // Holding sav only, a write over {sav, chk}: chk sorts before the held sav, so it is tried —
  // and taken — with sav kept (one acquisition, not a release of sav and two acquisitions).
  ASSERT_TRUE((*db1)->ReleaseLocks().ok());
  auto& db = db1;
  {
    auto t = (*db)->Begin({0});  // sav only
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE((*t)->Put(0, Acct(0, 5), Enc(kStart + 1)).ok());
    ASSERT_TRUE((*t)->Commit().ok());
  }
  const uint64_t tries = (*db)->counters().try_locks;
  const auto c2 = s1->counters();
  {
    auto t = (*db)->Begin({0, 1});  // chk < sav: tried without giving sav up
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    auto b = GetBal(**t, 0, 5);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    EXPECT_EQ(*b, kStart + 1);
    ASSERT_TRUE((*t)->Commit().ok());
  }
  EXPECT_EQ((*db)->counters().try_locks, tries + 1);
  EXPECT_EQ(s1->counters().lock_acquires, c2.lock_acquires + 1) << "sav was released and retaken";
  // Front-end 2 takes chk (front-end 1 releases everything first).
  ASSERT_TRUE((*db)->ReleaseLocks().ok());
  auto s2 = OpenSession(2, level);
  auto db2 = Database::Open(*s2, BankOptions(0));
  ASSERT_TRUE(db2.ok());
  {
    auto t = (*db2)->Begin({1});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE((*t)->Put(1, 6, Enc(kStart + 2)).ok());
    ASSERT_TRUE((*t)->Commit().ok());
  }
  ASSERT_TRUE(s2->Fence().ok());  // others see a commit once it is applied (rcb batches it)
  // Front-end 1's read-only transaction finds chk held: no wait, the seqlock path, the committed
  // value; the next one does not try again.
  v = read_chk(**db, 6);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(*v, kStart + 2);
  EXPECT_EQ((*db)->counters().try_lock_misses, 1u);
  v = read_chk(**db, 6);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ((*db)->counters().try_lock_misses, 1u);
  // A write holding sav that wants chk (held by front-end 2): the try misses, sav is released,
  // the wait in name order times out: kAborted with nothing held.
  {
    auto t = (*db)->Begin({0});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE((*t)->Commit().ok());
  }
  auto t = (*db)->Begin({0, 1});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kAborted) << t.status().ToString();
  EXPECT_EQ((*db)->counters().try_lock_misses, 2u);
  auto sav_lock = s1->ReadWord((*db)->table(0).structure().lock_addr);
  ASSERT_TRUE(sav_lock.ok());
  EXPECT_EQ(*sav_lock, 0u) << "the aborted transaction kept sav";
  // Front-end 2 lets go: front-end 1 gets both and sees front-end 2's write.
  ASSERT_TRUE((*db2)->ReleaseLocks().ok());
  {
    auto t2 = (*db)->Begin({0, 1});
    ASSERT_TRUE(t2.ok()) << t2.status().ToString();
    auto b = GetBal(**t2, 1, 6);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(*b, kStart + 2);
    ASSERT_TRUE((*t2)->Commit().ok());
  }
  db2->reset();
  db1->reset();
}

INSTANTIATE_TEST_SUITE_P(Levels, TxnTest, ::testing::ValuesIn(testing::kAllLevels),
                         [](const auto& info) {
                           return std::string(frontend::LevelName(info.param));
                         });

class TxnLockTest : public testing::StructuresTest {};

TEST_F(TxnLockTest, LockTimeoutAbortsCleanlyAndReleasesWhatItTook) {
  auto s1 = OpenSession(1, Level::kR);
  auto db1 = Database::Open(*s1, BankOptions(0));
  ASSERT_TRUE(db1.ok());
  ASSERT_TRUE(Load(**db1).ok());
  // Front-end 1 holds "bank.sav" (the later name) through a committed transaction.
  {
    auto t = (*db1)->Begin({0});
    ASSERT_TRUE(t.ok());
    ASSERT_TRUE((*t)->Put(0, Acct(0, 3), Enc(5)).ok());
    ASSERT_TRUE((*t)->Commit().ok());
  }
  auto o = SessionOpts(2, Level::kR);
  o.lock_timeout = std::chrono::milliseconds(100);
  auto s2 = frontend::Session::Open(o);
  ASSERT_TRUE(s2.ok());
  auto db2 = Database::Open(**s2, BankOptions(0));
  ASSERT_TRUE(db2.ok());
  // "bank.chk" < "bank.sav": front-end 2 takes chk, then times out on sav.
  auto t2 = (*db2)->Begin({0, 1});
  ASSERT_FALSE(t2.ok());
  EXPECT_EQ(t2.status().code(), StatusCode::kAborted) << t2.status().ToString();
  EXPECT_EQ((*db2)->counters().lock_aborts, 1u);
  auto chk_lock = (*s2)->ReadWord((*db2)->table(1).structure().lock_addr);
  ASSERT_TRUE(chk_lock.ok());
  EXPECT_EQ(*chk_lock, 0u) << "the aborted transaction kept the lock it took";
  // Front-end 1 wants chk (before sav in name order): it releases sav first, then takes both.
  auto t1 = (*db1)->Begin({0, 1});
  ASSERT_TRUE(t1.ok()) << t1.status().ToString();
  ASSERT_TRUE((*t1)->Put(1, 3, Enc(7)).ok());
  ASSERT_TRUE((*t1)->Commit().ok());
  ASSERT_TRUE((*db1)->ReleaseLocks().ok());
  // Now front-end 2 gets both and sees both writes.
  auto t3 = (*db2)->Begin({0, 1});
  ASSERT_TRUE(t3.ok()) << t3.status().ToString();
  auto a = GetBal(**t3, 0, 3), b = GetBal(**t3, 1, 3);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, 5);
  EXPECT_EQ(*b, 7);
  EXPECT_TRUE((*t3)->Commit().ok());
  // Bad input.
  EXPECT_EQ((*db2)->Begin({7}).status().code(), StatusCode::kInvalidArgument);
  DatabaseOptions bad = BankOptions(0);
  bad.tables.push_back({"bank.q", Kind::kQueue});
  EXPECT_EQ(Database::Open(**s2, bad).status().code(), StatusCode::kInvalidArgument);
  // A key of the wrong kind for its table: refused, nothing logged, the database goes on.
  auto t4 = (*db2)->Begin({0, 1});
  ASSERT_TRUE(t4.ok()) << t4.status().ToString();
  Value v;
  EXPECT_EQ((*t4)->Get(0, 3, &v).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*t4)->Get(1, "sav:3", &v).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*t4)->Commit().ok());
}

// ---- crash: a child process runs transfers and is SIGKILLed ----

// Child records: "P <n> <table> <acct> <delta> ..." before Commit, "C" after it returned.
[[noreturn]] void RunChild(const char* spec) {
  std::istringstream in(spec);
  std::string address, file;
  uint64_t fe, seed;
  int level;
  in >> address >> fe >> seed >> level >> file;
  frontend::SessionOptions o;
  o.backends = {address};
  o.frontend_id = fe;
  o.level = static_cast<Level>(level);
  o.batch_ops = 16;
  o.batch_timeout = std::chrono::hours(1);
  auto s = frontend::Session::Open(o);
  if (!s.ok()) _exit(92);
  auto db = Database::Open(**s, BankOptions(32));
  if (!db.ok()) _exit(93);
  const int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) _exit(94);
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 100000; i++) {
    const uint64_t a0 = rng() % kAccounts, a1 = (a0 + 1 + rng() % (kAccounts - 1)) % kAccounts;
    auto d = Transfer(**db, a0, a1, 1 + static_cast<int64_t>(rng() % 1000), [&](const Deltas& d) {
      std::string line = "P " + std::to_string(d.size());
      for (auto& [k, v] : d)
        line += " " + std::to_string(k.first) + " " + std::to_string(k.second) + " " +
                std::to_string(v);
      line += "\n";
      if (write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(95);
    });
    if (!d.ok()) _exit(96);
    if (write(fd, "C\n", 2) != 2) _exit(97);
  }
  _exit(0);
}

int CommittedLines(const std::string& file) {
  std::ifstream in(file);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) n += line == "C";
  return n;
}

// Committed ledger and the pending (logged, not acknowledged) transaction's deltas, if any.
void ReadLedger(const std::string& file, Deltas* committed, Deltas* pending) {
  std::ifstream in(file);
  std::string line;
  Deltas cur;
  bool open = false;
  while (std::getline(in, line)) {
    if (line == "C") {
      for (auto& [k, v] : cur) (*committed)[k] += v;
      cur.clear();
      open = false;
      continue;
    }
    std::istringstream l(line);
    std::string tag;
    size_t n = 0;
    l >> tag >> n;
    if (tag != "P" || !l) break;  // a torn last line: that transaction may be pending
    cur.clear();
    for (size_t i = 0; i < n; i++) {
      size_t t;
      uint64_t a;
      int64_t v;
      if (!(l >> t >> a >> v)) break;
      cur[{t, a}] += v;
    }
    open = true;
  }
  if (open) *pending = cur;
}

void CrashRound(const std::string& address, uint64_t fe, Level level, uint64_t seed, int kill_after,
                const std::function<std::string()>& also_kill,
                const std::function<std::unique_ptr<frontend::Session>(const std::string&)>& open) {
  const std::string file =
      "/tmp/asymnvm-txn-crash-" + std::to_string(getpid()) + "-" + std::to_string(fe);
  std::remove(file.c_str());
  {
    auto s = open(address);
    ASSERT_TRUE(s);
    auto db = Database::Open(*s, BankOptions(32));
    ASSERT_TRUE(db.ok()) << db.status().ToString();
    ASSERT_TRUE(Load(**db).ok());
  }
  const std::string spec = address + " " + std::to_string(fe) + " " + std::to_string(seed) + " " +
                           std::to_string(static_cast<int>(level)) + " " + file;
  // Wait for observable progress (acknowledged transactions), with a generous deadline.
  const testing::ChildEnd child = testing::RunSelfAsChild(
      {{"ASYMNVM_TXN_CHILD", spec}}, "txn-child",
      [&] { return CommittedLines(file) >= kill_after; }, std::chrono::seconds(60));
  ASSERT_FALSE(child.exited) << "child exited early: status " << child.status;
  ASSERT_GE(CommittedLines(file), kill_after) << "child made no progress";
  const std::string addr2 = also_kill ? also_kill() : address;
  ASSERT_FALSE(addr2.empty());
  Deltas committed, pending;
  ReadLedger(file, &committed, &pending);
  auto s = open(addr2);
  ASSERT_TRUE(s);
  // The crashed front-end's id: replay, then check. (A checker session of another id first
  // would wait on the crashed session's locks.)
  auto db = Database::Open(*s, BankOptions(32));
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  ASSERT_TRUE((*db)->Recover().ok());
  auto snap = Snapshot(**db);
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  auto matches = [&](bool with_pending) {
    for (size_t tb = 0; tb < 2; tb++) {
      for (uint64_t a = 0; a < kAccounts; a++) {
        int64_t want = kStart + committed[{tb, a}] + (with_pending ? pending[{tb, a}] : 0);
        if ((*snap)[{tb, a}] != want) return false;
      }
    }
    return true;
  };
  const bool without = matches(false), with = !pending.empty() && matches(true);
  EXPECT_TRUE(without || with)
      << "state is neither the acknowledged transactions nor those plus the one in flight";
  std::printf("killed after %d acknowledged transactions: in-flight one %s, replayed %llu\n",
              CommittedLines(file), with ? "applied" : "not applied",
              static_cast<unsigned long long>((*db)->counters().replayed));
  // The database is usable again by the same front-end.
  auto d = Transfer(**db, 1, 2, 3);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  std::remove(file.c_str());
}

class TxnCrashTest : public testing::StructuresTest, public ::testing::WithParamInterface<Level> {};

TEST_P(TxnCrashTest, SigkilledFrontEndRecoversAllOrNothingExactlyOnce) {
  std::mt19937_64 rng(static_cast<uint64_t>(GetParam()) + 11);
  const char* env = std::getenv("ASYMNVM_TXN_CRASH_ROUNDS");
  const int rounds = env ? std::atoi(env) : 1;
  for (int round = 0; round < rounds; round++) {
    CrashRound(be_->address(), 40 + static_cast<uint64_t>(round), GetParam(), rng(),
               20 + static_cast<int>(rng() % 200), nullptr,
               [&](const std::string& a) -> std::unique_ptr<frontend::Session> {
                 auto o = SessionOpts(40 + static_cast<uint64_t>(round), GetParam());
                 o.backends = {a};
                 auto s = frontend::Session::Open(o);
                 EXPECT_TRUE(s.ok()) << s.status().ToString();
                 return s.ok() ? std::move(*s) : nullptr;
               });
    if (HasFailure()) break;
  }
}

// The front-end child and the back-end daemon are SIGKILLed together; the daemon restarts on its
// pool (landed transactions are applied at its recovery) and the front-end replays the rest.
TEST_P(TxnCrashTest, SigkilledFrontEndAndBackEndRecover) {
  const std::string pool = path_ + ".daemon";
  std::remove(pool.c_str());
  auto start = [&]() -> std::unique_ptr<driver::BackendProcess> {
    auto d = driver::BackendProcess::Start(ASYMNVM_BACKEND_BIN, pool, "64M", {}, "warn");
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? std::move(*d) : nullptr;
  };
  auto daemon = start();
  ASSERT_TRUE(daemon);
  std::mt19937_64 rng(static_cast<uint64_t>(GetParam()) + 23);
  CrashRound(
      daemon->address(), 60, GetParam(), rng(), 20 + static_cast<int>(rng() % 200),
      [&]() -> std::string {
        daemon->Kill();
        daemon = start();
        return daemon ? daemon->address() : std::string();
      },
      [&](const std::string& a) -> std::unique_ptr<frontend::Session> {
        auto o = SessionOpts(60, GetParam());
        o.backends = {a};
        // A just restarted daemon may refuse the first connection (observed: "bootstrap:
        // write: Broken pipe"); retry connection errors within a generous deadline.
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        auto s = frontend::Session::Open(o);
        while (!s.ok() && s.status().code() == StatusCode::kConnectionError &&
               std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          s = frontend::Session::Open(o);
        }
        EXPECT_TRUE(s.ok()) << s.status().ToString();
        return s.ok() ? std::move(*s) : nullptr;
      });
  daemon.reset();
  std::remove(pool.c_str());
  std::remove((pool + ".backend.log").c_str());
}

// The back-end daemon is SIGKILLed and restarted on its pool at a new address in the middle of a
// run, right before a commit (the first failed commit once made the Database unusable — every
// later Begin failed with the sticky "transaction commit" error — so an application had to reopen
// it after any back-end restart). The same Session and Database go on: the failed commit's outcome
// is unknown (its deltas are "in doubt"), the session reconnects through the coordinator and
// replays, and afterwards every balance equals the start plus the committed deltas plus all or
// none of each in-doubt transaction's.
TEST(TxnReconnectTest, BackEndRestartedMidRunTheSameDatabaseGoesOn) {
  char tmpl[] = "/tmp/asymnvm-txn-reconnect-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl, pool = dir + "/pool", coord = "dir:" + dir + "/coord";
  auto start = [&]() -> std::unique_ptr<driver::BackendProcess> {
    auto d = driver::BackendProcess::Start(ASYMNVM_BACKEND_BIN, pool, "64M", {}, "warn");
    EXPECT_TRUE(d.ok()) << d.status().ToString();
    return d.ok() ? std::move(*d) : nullptr;
  };
  auto daemon = start();
  ASSERT_TRUE(daemon);
  frontend::SessionOptions o;
  o.backends = {daemon->address()};
  o.coordinator = coord;
  o.level = Level::kRcb;
  o.reconnect_deadline = std::chrono::seconds(60);
  auto s = frontend::Session::Open(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  auto db = Database::Open(**s, BankOptions(16));
  ASSERT_TRUE(db.ok()) << db.status().ToString();
  ASSERT_TRUE(Load(**db).ok());
  Deltas committed;
  std::vector<Deltas> in_doubt;
  std::mt19937_64 rng(5);
  int failures = 0;
  for (int i = 0; i < 90; i++) {
    const uint64_t a0 = rng() % kAccounts;
    uint64_t a1 = rng() % kAccounts;
    if (a1 == a0) a1 = (a1 + 1) % kAccounts;
    Deltas pending;
    const bool kill = i == 30 || i == 61;
    auto d = Transfer(**db, a0, a1, 1 + static_cast<int64_t>(rng() % 50), [&](const Deltas& x) {
      pending = x;
      if (!kill) return;
      daemon->Kill();  // SIGKILL right before the commit's op log
      daemon = start();
    });
    if (d.ok()) {
      for (const auto& [k, v] : *d) committed[k] += v;
      continue;
    }
    failures++;
    EXPECT_TRUE(kill) << "txn " << i << " failed without a kill: " << d.status().ToString();
    if (!pending.empty()) in_doubt.push_back(pending);
  }
  EXPECT_LE(failures, 2);
  EXPECT_GE((*s)->reconnects(), 2u);
  ASSERT_LE(in_doubt.size(), 2u);
  auto snap = Snapshot(**db);
  ASSERT_TRUE(snap.ok()) << snap.status().ToString();
  bool matched = false;
  for (uint32_t mask = 0; mask < (1u << in_doubt.size()) && !matched; mask++) {
    Deltas want = committed;
    for (size_t j = 0; j < in_doubt.size(); j++) {
      if (mask & (1u << j)) {
        for (const auto& [k, v] : in_doubt[j]) want[k] += v;
      }
    }
    bool ok = true;
    for (const auto& [k, bal] : *snap) {
      auto it = want.find(k);
      ok = ok && bal == kStart + (it == want.end() ? 0 : it->second);
    }
    matched = ok;
  }
  EXPECT_TRUE(matched) << "balances match no outcome of the " << in_doubt.size()
                       << " in-doubt transactions";
  db->reset();
  s->reset();
  daemon.reset();
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

INSTANTIATE_TEST_SUITE_P(Levels, TxnCrashTest, ::testing::ValuesIn(testing::kAllLevels),
                         [](const auto& info) {
                           return std::string(frontend::LevelName(info.param));
                         });

}  // namespace
}  // namespace asymnvm::structures

int main(int argc, char** argv) {
  if (const char* spec = std::getenv("ASYMNVM_TXN_CHILD")) asymnvm::structures::RunChild(spec);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
