// Rowan and the rwrite/share/batch baselines behind LogWriter (baselines.h), over the soft NIC:
// every submitted entry is acknowledged, lands intact, and the landing observer sees the same
// requested bytes for every variant; the XPLine model separates one stream from many.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <unordered_map>

#include "asymnvm/fabric.h"
#include "asymnvm/pm.h"
#include "fabric/rowan/baselines.h"
#include "fabric/rowan/receiver.h"
#include "fabric/rowan/scanner.h"
#include "fabric/rowan/sender.h"

namespace asymnvm::rowan {
namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

struct Rig {
  std::unique_ptr<fabric::Fabric> rx_fabric, tx_fabric;
  std::unique_ptr<fabric::ProtectionDomain> rx_pd, tx_pd;
  std::unique_ptr<uint8_t, FreeDeleter> area;
  size_t area_size = 0;
  pm::XPLineModel model;
  std::unique_ptr<Receiver> receiver;
  std::unique_ptr<LogTarget> target;
  std::unique_ptr<fabric::CompletionQueue> cq;
  SharedCursor cursor;
  std::string address;
};

std::unique_ptr<Rig> MakeRig(LogVariant v, uint32_t streams) {
  auto r = std::make_unique<Rig>();
  r->rx_fabric = std::move(fabric::Fabric::Open({})).value();
  r->tx_fabric = std::move(fabric::Fabric::Open({})).value();
  r->rx_pd = std::move(r->rx_fabric->AllocPd()).value();
  r->tx_pd = std::move(r->tx_fabric->AllocPd()).value();
  r->area_size =
      v == LogVariant::kRowan || v == LogVariant::kShare ? (4u << 20) : size_t{streams} * 64 * 1024;
  r->area.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, r->area_size)));
  std::memset(r->area.get(), 0, r->area_size);
  if (v == LogVariant::kRowan) {
    ReceiverOptions o;
    o.fabric = r->rx_fabric.get();
    o.pd = r->rx_pd.get();
    o.area = r->area.get();
    o.area_size = r->area_size;
    o.persister = pm::DramPersister();
    o.landing_observer = &r->model;
    o.segment_size = 1u << 20;
    auto rx = Receiver::Open(o, true);
    EXPECT_TRUE(rx.ok()) << rx.status().ToString();
    r->receiver = std::move(rx).value();
    r->address = r->receiver->address();
  } else {
    LogTargetOptions o;
    o.fabric = r->rx_fabric.get();
    o.pd = r->rx_pd.get();
    o.area = r->area.get();
    o.area_size = r->area_size;
    o.persister = pm::DramPersister();
    o.landing_observer = &r->model;
    o.shared = v == LogVariant::kShare;
    o.log_bytes = 64 * 1024;
    auto t = LogTarget::Open(o);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    r->target = std::move(t).value();
    r->address = r->target->address();
  }
  r->cq = std::move(r->tx_fabric->CreateCq({.capacity = 4096})).value();
  return r;
}

// Appends `per_stream` entries of `entry_size` encoded bytes on each of `streams` writers, one in
// flight per writer (round-robin, as the bench drives them), and waits for every acknowledgment.
void Drive(Rig* rig, LogVariant v, uint32_t streams, uint32_t per_stream, size_t entry_size,
           std::vector<std::unique_ptr<LogWriter>>* out = nullptr) {
  std::vector<std::unique_ptr<LogWriter>> writers;
  std::unordered_map<uint64_t, size_t> by_conn;
  for (uint32_t s = 0; s < streams; s++) {
    WriterOptions wo;
    wo.fabric = rig->tx_fabric.get();
    wo.pd = rig->tx_pd.get();
    wo.address = rig->address;
    wo.cq = rig->cq.get();
    wo.max_outstanding = 1;
    wo.cursor = &rig->cursor;
    auto w = ConnectWriter(v, wo);
    ASSERT_TRUE(w.ok()) << w.status().ToString();
    by_conn[(*w)->connection_id()] = writers.size();
    writers.push_back(std::move(w).value());
  }
  std::vector<uint32_t> sent(streams, 0), done(streams, 0);
  std::vector<uint8_t> payload(entry_size - kBlockHeaderSize);
  auto submit = [&](uint32_t s) {
    sent[s]++;
    for (size_t i = 0; i < payload.size(); i++) payload[i] = static_cast<uint8_t>(s + sent[s] + i);
    EntryMeta m{.type = 3, .owner = static_cast<uint16_t>(s + 1), .version = sent[s]};
    Status st = writers[s]->Submit(m, payload, sent[s]);
    ASSERT_TRUE(st.ok()) << st.ToString();
  };
  for (uint32_t s = 0; s < streams; s++) submit(s);
  uint64_t remaining = uint64_t{streams} * per_stream;
  fabric::Completion c[64];
  std::vector<uint64_t> durable;
  while (remaining > 0) {
    auto n = rig->cq->Wait(c, std::chrono::microseconds(2000));
    ASSERT_TRUE(n.ok());
    for (size_t i = 0; i < *n; i++) {
      size_t s = by_conn.at(c[i].connection_id);
      durable.clear();
      Status st = writers[s]->OnCompletion(c[i], &durable);
      ASSERT_TRUE(st.ok()) << st.ToString();
      for (uint64_t tok : durable) {
        ASSERT_EQ(tok, done[s] + 1u) << "acknowledged out of order";
        done[s]++;
        remaining--;
        if (sent[s] < per_stream) submit(static_cast<uint32_t>(s));
      }
    }
    for (auto& w : writers) ASSERT_TRUE(w->Tick(std::chrono::steady_clock::now()).ok());
  }
  if (out) *out = std::move(writers);
}

class LogVariants : public testing::TestWithParam<LogVariant> {};

TEST_P(LogVariants, EveryEntryAcknowledgedAndRequestedBytesAreTheSame) {
  const LogVariant v = GetParam();
  auto rig = MakeRig(v, 8);
  std::vector<std::unique_ptr<LogWriter>> writers;
  Drive(rig.get(), v, 8, 50, 128, &writers);
  // Same bytes requested per entry for every variant: one 128 B block each.
  EXPECT_EQ(rig->model.requested_bytes(), 8u * 50u * 128u);
  if (v == LogVariant::kRowan) return;  // the b-log's content is the receiver tests' business
  // Baseline logs hold every entry intact (no wrap at this size): scan the whole area.
  Scanner scanner;
  std::map<uint16_t, std::set<uint64_t>> found;
  scanner.ScanSegment({rig->area.get(), rig->area_size}, 0,
                      [&](const ScannedEntry& e) { found[e.meta.owner].insert(e.meta.version); });
  EXPECT_EQ(scanner.report().corrupt_runs, 0u);
  ASSERT_EQ(found.size(), 8u);
  for (auto& [owner, versions] : found) EXPECT_EQ(versions.size(), 50u) << "owner " << owner;
}

INSTANTIATE_TEST_SUITE_P(All, LogVariants,
                         testing::Values(LogVariant::kRowan, LogVariant::kRWrite,
                                         LogVariant::kShare, LogVariant::kBatch),
                         [](const auto& info) { return std::string(LogVariantName(info.param)); });

TEST(LogVariantsDlwa, RowanStaysSequentialWhereRWriteExceedsTheBuffer) {
  // 128 streams of 64 B entries: more open 256 B lines than the 16 KiB buffer's 64.
  auto rowan = MakeRig(LogVariant::kRowan, 128);
  Drive(rowan.get(), LogVariant::kRowan, 128, 8, 64);
  rowan->model.Finish();
  EXPECT_LE(rowan->model.dlwa(), 1.03);
  auto rwrite = MakeRig(LogVariant::kRWrite, 128);
  Drive(rwrite.get(), LogVariant::kRWrite, 128, 8, 64);
  rwrite->model.Finish();
  EXPECT_GE(rwrite->model.dlwa(), 3.0);
  // Few streams fit the buffer: rwrite is sequential enough.
  auto few = MakeRig(LogVariant::kRWrite, 8);
  Drive(few.get(), LogVariant::kRWrite, 8, 64, 64);
  few->model.Finish();
  EXPECT_LE(few->model.dlwa(), 1.03);
}

TEST(LogVariantsErrors, BadInputGetsAClearStatus) {
  EXPECT_EQ(ParseLogVariant("farm").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseLogVariant("share").value(), LogVariant::kShare);
  EXPECT_EQ(ConnectWriter(LogVariant::kRWrite, {}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(LogTarget::Open({}).status().code(), StatusCode::kInvalidArgument);

  // Share without a cursor; a target whose logs are all taken.
  auto rig = MakeRig(LogVariant::kRWrite, 1);  // one 64 KiB log
  WriterOptions wo;
  wo.fabric = rig->tx_fabric.get();
  wo.pd = rig->tx_pd.get();
  wo.address = rig->address;
  wo.cq = rig->cq.get();
  wo.max_outstanding = 1;
  EXPECT_EQ(ConnectWriter(LogVariant::kShare, wo).status().code(), StatusCode::kInvalidArgument);
  auto first = ConnectWriter(LogVariant::kRWrite, wo);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(ConnectWriter(LogVariant::kRWrite, wo).status().code(), StatusCode::kResourceExhausted);
  // Entries: type 0, too large for the inline path, window full.
  std::vector<uint8_t> big(LogWriter::kMaxEntryBytes);
  EXPECT_EQ((*first)->Submit({.type = 0, .owner = 1, .version = 1}, {}, 1).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*first)->Submit({.type = 1, .owner = 1, .version = 1}, big, 1).code(),
            StatusCode::kInvalidArgument);
  std::vector<uint8_t> small(32);
  EXPECT_TRUE((*first)->Submit({.type = 1, .owner = 1, .version = 1}, small, 1).ok());
  EXPECT_EQ((*first)->Submit({.type = 1, .owner = 1, .version = 2}, small, 2).code(),
            StatusCode::kResourceExhausted);
  // A rowan writer against a log target is refused as a protocol error, and vice versa.
  EXPECT_EQ(ConnectWriter(LogVariant::kRowan, wo).status().code(), StatusCode::kProtocolError);
}

TEST(RowanSender, PostAppendAndAppendPreconditions) {
  auto rig = MakeRig(LogVariant::kRowan, 1);
  SenderOptions so;
  so.fabric = rig->tx_fabric.get();
  so.pd = rig->tx_pd.get();
  so.address = rig->address;
  so.cq = rig->cq.get();
  so.max_inline = 128;
  auto s = Sender::Connect(so);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::vector<uint8_t> p(64);
  EXPECT_EQ((*s)->Append({.type = 1, .owner = 1, .version = 1}, p).code(),
            StatusCode::kFailedPrecondition);
  std::vector<uint8_t> big(200);  // 232 B block > max_inline 128
  EXPECT_EQ((*s)->PostAppend({.type = 1, .owner = 1, .version = 1}, big, 9).code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE((*s)->PostAppend({.type = 1, .owner = 1, .version = 1}, p, 9).ok());
  fabric::Completion c[4];
  bool acked = false;
  for (int i = 0; i < 100 && !acked; i++) {
    auto n = rig->cq->Wait(c, std::chrono::milliseconds(50));
    ASSERT_TRUE(n.ok());
    for (size_t k = 0; k < *n; k++) acked |= (*s)->IsAck(c[k], 9);
  }
  EXPECT_TRUE(acked);
  EXPECT_EQ(rig->model.requested_bytes(), 96u);  // 32 B header + 64 B payload, as landed
}

}  // namespace
}  // namespace asymnvm::rowan
