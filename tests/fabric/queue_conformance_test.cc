// Conformance: shared receive queues (arrival order, multi-packet placement and roll-over),
// receive-not-ready, completion queues (ring and overrun), posting limits.
#include <map>

#include "tests/fabric/conformance.h"

namespace asymnvm::fabric::conformance {
namespace {

uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
void Store64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

// Message header used by the SRQ tests: (conn, seq, len), then a pattern derived from them.
void MakeMessage(uint8_t* p, uint32_t len, uint64_t conn, uint64_t seq) {
  for (uint32_t i = 0; i < len; i++) p[i] = static_cast<uint8_t>(conn * 31 + seq * 7 + i);
  if (len >= 24) {
    Store64(p, conn);
    Store64(p + 8, seq);
    Store64(p + 16, len);
  }
}
bool CheckMessage(const uint8_t* p, uint32_t len, uint64_t* conn, uint64_t* seq) {
  if (len < 24) return false;
  *conn = Load64(p);
  *seq = Load64(p + 8);
  if (Load64(p + 16) != len) return false;
  for (uint32_t i = 24; i < len; i++) {
    if (p[i] != static_cast<uint8_t>(*conn * 31 + *seq * 7 + i)) return false;
  }
  return true;
}

TEST_P(FabricConformance, Srq_SeveralConnections_PerConnectionOrderAndBuffersInPostingOrder) {
  constexpr int kConns = 4, kMsgs = 50, kBuf = 128;
  SrqOptions so;
  so.max_wr = kConns * kMsgs;
  auto srq_r = target_->CreateSrq(target_pd_.get(), so);
  ASSERT_TRUE(srq_r.ok()) << srq_r.status().ToString();
  auto srq = std::move(srq_r).value();
  auto rbufs = Region(target_pd_.get(), kConns * kMsgs * kBuf, kLocalWrite);
  std::vector<RecvRequest> rrs;
  for (int i = 0; i < kConns * kMsgs; i++) {
    rrs.push_back(RecvRequest{uint64_t(i), rbufs->data + i * kBuf, kBuf, rbufs->mr.get()});
  }
  ASSERT_TRUE(srq->PostRecv(rrs).ok());
  EXPECT_EQ(srq->posted(), uint32_t(kConns * kMsgs));
  auto local = LocalRegion(kConns * kMsgs * kBuf);
  std::vector<Pair> pairs;
  for (int i = 0; i < kConns; i++) {
    pairs.push_back(
        ConnectPair(Opts(init_cq_.get()), Opts(target_cq_.get(), target_cq_.get(), srq.get())));
    ASSERT_TRUE(pairs.back().init);
  }
  std::mt19937_64 rng(seed());
  std::vector<uint32_t> lens(kConns * kMsgs);
  for (auto& l : lens) l = 24 + rng() % (kBuf - 24 + 1);
  std::vector<std::thread> senders;
  std::atomic<int> failures{0};
  for (int ci = 0; ci < kConns; ci++) {
    senders.emplace_back([&, ci] {
      for (int s = 0; s < kMsgs; s += 5) {  // lists of 5 sends
        std::vector<WorkRequest> wrs;
        for (int k = s; k < s + 5; k++) {
          const size_t slot = (ci * kMsgs + k) * kBuf;
          MakeMessage(local->data + slot, lens[ci * kMsgs + k], ci, k);
          wrs.push_back(Send(ci * kMsgs + k, *local, slot, lens[ci * kMsgs + k]));
        }
        if (!pairs[ci].init->Post(wrs).ok()) failures++;
      }
    });
  }
  for (auto& t : senders) t.join();
  ASSERT_EQ(failures.load(), 0);
  auto sc = WaitFor(init_cq_.get(), kConns * kMsgs);
  ASSERT_EQ(sc.size(), size_t(kConns * kMsgs));
  for (auto& c : sc) EXPECT_EQ(c.status, CompletionStatus::kSuccess);
  auto rc = WaitFor(target_cq_.get(), kConns * kMsgs);
  ASSERT_EQ(rc.size(), size_t(kConns * kMsgs));
  std::map<uint64_t, uint64_t> conn_of_id;  // completion connection_id -> sender conn
  std::vector<int64_t> last_seq(kConns, -1);
  for (size_t i = 0; i < rc.size(); i++) {
    ASSERT_EQ(rc[i].opcode, Opcode::kRecv);
    ASSERT_EQ(rc[i].status, CompletionStatus::kSuccess);
    ASSERT_EQ(rc[i].wr_id, i) << "SRQ buffers not consumed in posting order";
    uint64_t conn, seq;
    ASSERT_TRUE(CheckMessage(rbufs->data + i * kBuf, rc[i].byte_len, &conn, &seq))
        << "message " << i << " corrupt or wrong byte_len " << rc[i].byte_len;
    ASSERT_LT(conn, uint64_t(kConns));
    ASSERT_EQ(rc[i].byte_len, lens[conn * kMsgs + seq]);
    auto [it, inserted] = conn_of_id.emplace(rc[i].connection_id, conn);
    ASSERT_EQ(it->second, conn) << "connection_id does not identify the sender";
    ASSERT_EQ(int64_t(seq), last_seq[conn] + 1) << "connection " << conn << " out of order";
    last_seq[conn] = seq;
  }
  EXPECT_EQ(conn_of_id.size(), size_t(kConns));
  for (auto& p : pairs) {
    EXPECT_EQ(conn_of_id.count(p.target->id()), 1u) << "RECV names the accepted connection";
  }
  EXPECT_EQ(srq->posted(), 0u);
  std::string where;
  EXPECT_TRUE(rbufs->GuardsIntact(&where)) << where;
}

// Multi-packet placement model: messages at stride-aligned offsets, roll-over to the next buffer.
struct Placement {
  uint64_t buffer;
  uint32_t offset;
};

class MultiPacketModel {
 public:
  MultiPacketModel(uint32_t buffer_size, uint32_t stride) : size_(buffer_size), stride_(stride) {}
  Placement Place(uint32_t len) {
    if (off_ + len > size_) {
      buf_++;
      off_ = 0;
    }
    Placement p{buf_, off_};
    off_ = (off_ + len + stride_ - 1) / stride_ * stride_;
    return p;
  }
  bool current_full() const { return off_ >= size_; }

 private:
  uint32_t size_, stride_;
  uint64_t buf_ = 0;
  uint32_t off_ = 0;
};

TEST_P(FabricConformance, MultiPacketSrq_VariedSizes_StrideOffsetsRollOverAndBufferDone) {
  constexpr uint32_t kBufSize = 4096, kBuffers = 16, kStride = 64;
  SrqOptions so;
  so.multi_packet = true;
  so.stride = kStride;
  so.max_wr = kBuffers;
  auto srq_r = target_->CreateSrq(target_pd_.get(), so);
  ASSERT_TRUE(srq_r.ok()) << srq_r.status().ToString();
  auto srq = std::move(srq_r).value();
  if (!srq->multi_packet_native()) {
    GTEST_SKIP() << "provider emulates multi-packet SRQ with fixed slots (multi_packet_native() "
                    "== false); placement at stride offsets is not offered";
  }
  auto rbufs = Region(target_pd_.get(), kBufSize * kBuffers, kLocalWrite);
  std::vector<RecvRequest> rrs;
  for (uint32_t i = 0; i < kBuffers; i++) {
    rrs.push_back(RecvRequest{i, rbufs->data + i * kBufSize, kBufSize, rbufs->mr.get()});
  }
  ASSERT_TRUE(srq->PostRecv(rrs).ok());
  auto local = LocalRegion(64 * 4096);
  Pair p = ConnectPair(Opts(init_cq_.get()), Opts(target_cq_.get(), target_cq_.get(), srq.get()));
  ASSERT_TRUE(p.init);
  std::mt19937_64 rng(seed());
  MultiPacketModel model(kBufSize, kStride);
  std::vector<uint32_t> lens;
  std::vector<Placement> expect;
  uint64_t last_buffer = 0;
  bool last_full = false;  // the buffer in use ends exactly at its end: it may be retired too
  // Sizes: mostly small, some that exactly fill, some that force a roll-over with a big remainder.
  while (true) {
    uint32_t len = rng() % 4 == 0 ? 1000 + rng() % 3000 : 24 + rng() % 400;
    Placement pl = model.Place(len);
    if (pl.buffer >= kBuffers - 1) break;  // keep the last buffer unused
    lens.push_back(len);
    expect.push_back(pl);
    last_buffer = pl.buffer;
    last_full = model.current_full();
  }
  ASSERT_GE(last_buffer, 3u) << "workload too small to roll over";
  std::vector<WorkRequest> wrs;
  for (size_t i = 0; i < lens.size(); i++) {
    MakeMessage(local->data + (i % 64) * 4096, lens[i], 0, i);
    wrs.push_back(Send(i, *local, (i % 64) * 4096, lens[i]));
    if (wrs.size() == 64 || i + 1 == lens.size()) {  // the local slots are reused per 64 messages
      ASSERT_TRUE(p.init->Post(wrs).ok());
      auto sc = WaitFor(init_cq_.get(), wrs.size());
      ASSERT_EQ(sc.size(), wrs.size());
      for (auto& c : sc) ASSERT_EQ(c.status, CompletionStatus::kSuccess);
      wrs.clear();
    }
  }
  // Message completions in order; buffer_done may ride on a message or come as a 0-byte notice.
  std::vector<bool> done(kBuffers, false);
  size_t next = 0;
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (next < lens.size() && std::chrono::steady_clock::now() < deadline) {
    Completion c;
    auto r = target_cq_->Wait(std::span<Completion>(&c, 1), milliseconds(100));
    ASSERT_TRUE(r.ok());
    if (*r == 0) continue;
    ASSERT_EQ(c.opcode, Opcode::kRecv);
    ASSERT_EQ(c.status, CompletionStatus::kSuccess);
    ASSERT_LT(c.wr_id, kBuffers);
    ASSERT_FALSE(done[c.wr_id]) << "completion for buffer " << c.wr_id << " after buffer_done";
    if (c.byte_len == 0) {
      ASSERT_TRUE(c.buffer_done) << "0-byte completion that is not a buffer_done notice";
      done[c.wr_id] = true;
      continue;
    }
    EXPECT_EQ(c.connection_id, p.target->id());
    ASSERT_EQ(c.byte_len, lens[next]) << "message " << next;
    ASSERT_EQ(c.wr_id, expect[next].buffer) << "message " << next << " len " << lens[next];
    ASSERT_EQ(c.offset, expect[next].offset) << "message " << next << " len " << lens[next];
    ASSERT_EQ(c.offset % kStride, 0u);
    uint64_t conn, seq;
    ASSERT_TRUE(CheckMessage(rbufs->data + c.wr_id * kBufSize + c.offset, c.byte_len, &conn, &seq))
        << "message " << next << " corrupt at its offset";
    ASSERT_EQ(seq, next);
    if (c.buffer_done) done[c.wr_id] = true;
    next++;
  }
  ASSERT_EQ(next, lens.size()) << "timed out";
  // Every buffer before the one in use was reported done (possibly by a trailing notice).
  for (uint64_t b = 0; b < last_buffer; b++) {
    if (done[b]) continue;
    auto r = WaitFor(target_cq_.get(), 1, milliseconds(2000));
    ASSERT_EQ(r.size(), 1u) << "buffer " << b << " never reported buffer_done";
    ASSERT_TRUE(r[0].buffer_done && r[0].wr_id < kBuffers);
    done[r[0].wr_id] = true;
    b = uint64_t(-1);  // rescan
  }
  if (last_full) {
    EXPECT_GE(srq->posted(), kBuffers - last_buffer - 1);
    EXPECT_LE(srq->posted(), kBuffers - last_buffer);
  } else {
    EXPECT_EQ(srq->posted(), kBuffers - last_buffer);
  }
  std::string where;
  EXPECT_TRUE(rbufs->GuardsIntact(&where)) << where;
}

TEST_P(FabricConformance, MultiPacketSrq_FourMiBBuffer_TwoSendersPackedBackToBack) {
  constexpr uint32_t kBig = 4u << 20, kStride = 64;
  const uint32_t max_message = init_->capabilities().max_message;
  SrqOptions so;
  so.multi_packet = true;
  so.stride = kStride;
  auto srq_r = target_->CreateSrq(target_pd_.get(), so);
  ASSERT_TRUE(srq_r.ok()) << srq_r.status().ToString();
  auto srq = std::move(srq_r).value();
  if (!srq->multi_packet_native()) GTEST_SKIP() << "multi-packet SRQ emulated (fixed slots)";
  auto rbuf = Region(target_pd_.get(), kBig, kLocalWrite);
  RecvRequest rr{0, rbuf->data, kBig, rbuf->mr.get()};
  ASSERT_TRUE(srq->PostRecv(std::span<const RecvRequest>(&rr, 1)).ok());
  constexpr int kConns = 2, kMsgs = 400;
  const uint32_t max_len = std::min<uint32_t>(4096, max_message ? max_message : 4096);
  auto local = LocalRegion(kConns * kMsgs * 4096);
  std::vector<Pair> pairs;
  for (int i = 0; i < kConns; i++) {
    ConnectionOptions io = Opts(init_cq_.get());
    io.max_send_wr = kMsgs;
    pairs.push_back(ConnectPair(io, Opts(target_cq_.get(), target_cq_.get(), srq.get())));
    ASSERT_TRUE(pairs.back().init);
  }
  std::mt19937_64 rng(seed());
  std::vector<std::thread> senders;
  std::atomic<int> failures{0};
  std::vector<uint32_t> lens(kConns * kMsgs);
  for (auto& l : lens) l = 24 + rng() % (max_len - 24 + 1);
  for (int ci = 0; ci < kConns; ci++) {
    senders.emplace_back([&, ci] {
      for (int k = 0; k < kMsgs; k += 16) {
        std::vector<WorkRequest> wrs;
        for (int j = k; j < std::min(kMsgs, k + 16); j++) {
          const size_t slot = size_t(ci * kMsgs + j) * 4096;
          MakeMessage(local->data + slot, lens[ci * kMsgs + j], ci, j);
          wrs.push_back(Send(j, *local, slot, lens[ci * kMsgs + j]));
        }
        Status st = pairs[ci].init->Post(wrs);
        if (!st.ok()) {
          ADD_FAILURE() << st.ToString();
          failures++;
        }
      }
    });
  }
  for (auto& t : senders) t.join();
  ASSERT_EQ(failures.load(), 0);
  auto sc = WaitFor(init_cq_.get(), kConns * kMsgs);
  ASSERT_EQ(sc.size(), size_t(kConns * kMsgs));
  auto rc = WaitFor(target_cq_.get(), kConns * kMsgs);
  ASSERT_EQ(rc.size(), size_t(kConns * kMsgs));
  uint32_t off = 0;
  std::vector<int64_t> last(kConns, -1);
  for (size_t i = 0; i < rc.size(); i++) {
    ASSERT_EQ(rc[i].status, CompletionStatus::kSuccess);
    ASSERT_EQ(rc[i].wr_id, 0u);
    ASSERT_EQ(rc[i].offset, off) << "message " << i << " not at the next stride offset";
    uint64_t conn, seq;
    ASSERT_TRUE(CheckMessage(rbuf->data + off, rc[i].byte_len, &conn, &seq)) << i;
    ASSERT_EQ(int64_t(seq), last[conn] + 1);
    last[conn] = seq;
    off = (off + rc[i].byte_len + kStride - 1) / kStride * kStride;
  }
  std::string where;
  EXPECT_TRUE(rbuf->GuardsIntact(&where)) << where;
}

TEST_P(FabricConformance, Rnr_NoReceiveBuffer_FailsWithRnrRetryExceededAndFlushesRest) {
  auto local = LocalRegion(256);
  auto rbuf = Region(target_pd_.get(), 256, kLocalWrite);
  ConnectionOptions io = Opts(init_cq_.get());
  io.rnr_retry = 3;
  io.rnr_backoff = microseconds(100);
  Pair p = ConnectPair(io, Opts(target_cq_.get(), target_cq_.get()));
  ASSERT_TRUE(p.init);
  ASSERT_TRUE(p.init->Post(std::vector{Send(1, *local, 0, 64), Send(2, *local, 64, 64)}).ok());
  auto c = WaitFor(init_cq_.get(), 2);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].wr_id, 1u);
  EXPECT_EQ(c[0].status, CompletionStatus::kRnrRetryExceeded) << CompletionStatusName(c[0].status);
  EXPECT_EQ(c[1].status, CompletionStatus::kFlushed) << CompletionStatusName(c[1].status);
  EXPECT_EQ(p.init->state(), ConnectionState::kError);
  EXPECT_GT(p.init->counters().rnr_events, 0u);
  EXPECT_GT(p.target->counters().rnr_events, 0u);
  EXPECT_GE(p.init->counters().errors, 1u);
  // The failed message is not delivered late into a buffer posted afterwards.
  RecvRequest rr{5, rbuf->data, 256, rbuf->mr.get()};
  (void)p.target->PostRecv(std::span<const RecvRequest>(&rr, 1));
  ExpectQuiet(target_cq_.get());
}

TEST_P(FabricConformance, Rnr_BufferPostedDuringBackoff_SendSucceeds) {
  auto local = LocalRegion(256);
  std::memset(local->data, 0x4D, 256);
  auto rbuf = Region(target_pd_.get(), 256, kLocalWrite);
  ConnectionOptions io = Opts(init_cq_.get());
  io.rnr_retry = 7;
  io.rnr_backoff = milliseconds(10);  // ~2.5 s of retries in total
  Pair p = ConnectPair(io, Opts(target_cq_.get(), target_cq_.get()));
  ASSERT_TRUE(p.init);
  ASSERT_TRUE(p.init->Post(std::vector{Send(1, *local, 0, 100)}).ok());
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (p.init->counters().rnr_events == 0 && p.target->counters().rnr_events == 0) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no RNR event observed";
    std::this_thread::yield();
  }
  RecvRequest rr{9, rbuf->data, 256, rbuf->mr.get()};
  ASSERT_TRUE(p.target->PostRecv(std::span<const RecvRequest>(&rr, 1)).ok());
  auto c = WaitFor(init_cq_.get(), 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, CompletionStatus::kSuccess) << CompletionStatusName(c[0].status);
  auto r = WaitFor(target_cq_.get(), 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].wr_id, 9u);
  EXPECT_EQ(r[0].byte_len, 100u);
  for (int i = 0; i < 100; i++) ASSERT_EQ(rbuf->data[i], 0x4D);
  EXPECT_EQ(p.init->state(), ConnectionState::kConnected);
}

TEST_P(FabricConformance, RingCq_MoreCompletionsThanCapacity_NeverBlocksAndCountsOverwritten) {
  constexpr int kOps = 400;
  CompletionQueueOptions co;
  co.capacity = 16;
  co.ring = true;
  auto ring_r = init_->CreateCq(co);
  ASSERT_TRUE(ring_r.ok()) << ring_r.status().ToString();
  auto ring = std::move(ring_r).value();
  EXPECT_EQ(ring->capacity(), 16u);
  auto remote = TargetRegion(4096);
  auto local = LocalRegion(4096);
  ConnectionOptions io = Opts(ring.get());
  io.max_send_wr = kOps;
  Pair p = ConnectPair(io, Opts(target_cq_.get()));
  ASSERT_TRUE(p.init);
  const uint64_t served0 = target_->counters().remote_ops_served;
  for (int i = 0; i < kOps; i += 40) {
    std::vector<WorkRequest> wrs;
    for (int k = i; k < i + 40; k++) wrs.push_back(Write(k, *local, 0, *remote, (k % 64) * 64, 64));
    ASSERT_TRUE(p.init->Post(wrs).ok());
  }
  // Let the target execute everything before polling at all (on shm the initiator executed them
  // inside Post: the target's NIC serves none).
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  const uint64_t expect_served = inst_.provider == "shm" ? 0 : uint64_t(kOps);
  while (target_->counters().remote_ops_served - served0 < expect_served) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "target did not serve all writes";
    std::this_thread::yield();
  }
  // The target having served a write does not mean its acknowledgement has reached the initiator
  // yet; wait (without polling) until every completion has landed in the ring, so the ring must
  // have wrapped: capacity entries kept, the rest overwritten.
  while (ring->overwritten() < uint64_t(kOps) - ring->capacity()) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "completions did not arrive; overwritten=" << ring->overwritten();
    std::this_thread::sleep_for(milliseconds(1));
  }
  // Drain until the last completion shows up; ids must be increasing.
  size_t seen = 0;
  uint64_t last = 0;
  bool got_last = false;
  while (!got_last && std::chrono::steady_clock::now() < deadline) {
    Completion c[8];
    auto r = ring->Wait(c, milliseconds(100));
    ASSERT_TRUE(r.ok()) << "ring CQ reported " << r.status().ToString();
    for (size_t i = 0; i < *r; i++) {
      ASSERT_EQ(c[i].status, CompletionStatus::kSuccess);
      if (seen > 0) {
        ASSERT_GT(c[i].wr_id, last);
      }
      last = c[i].wr_id;
      seen++;
      got_last |= c[i].wr_id == uint64_t(kOps - 1);
    }
  }
  ASSERT_TRUE(got_last) << "newest completion missing from the ring";
  EXPECT_EQ(seen + ring->overwritten(), size_t(kOps));
  EXPECT_GT(ring->overwritten(), 0u);
  EXPECT_EQ(p.init->state(), ConnectionState::kConnected);
  ASSERT_TRUE(p.init->Post(std::vector{Read(1000, *local, 0, *remote, 0, 64)}).ok());
  auto c = WaitFor(ring.get(), 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].wr_id, 1000u);
}

TEST_P(FabricConformance, Cq_OverrunWithoutRing_ResourceExhaustedAndConnectionError) {
  CompletionQueueOptions co;
  co.capacity = 4;
  auto small_r = init_->CreateCq(co);
  ASSERT_TRUE(small_r.ok()) << small_r.status().ToString();
  auto small = std::move(small_r).value();
  auto remote = TargetRegion(4096);
  auto local = LocalRegion(4096);
  Pair p = ConnectPair(Opts(small.get()), Opts(target_cq_.get()));
  ASSERT_TRUE(p.init);
  std::vector<WorkRequest> wrs;
  for (int k = 0; k < 16; k++) wrs.push_back(Write(k, *local, 0, *remote, k * 64, 64));
  ASSERT_TRUE(p.init->Post(wrs).ok());
  const auto deadline = std::chrono::steady_clock::now() + kWait;
  while (p.init->state() == ConnectionState::kConnected) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "overrun did not error the connection";
    std::this_thread::yield();
  }
  EXPECT_EQ(p.init->state(), ConnectionState::kError);
  // The entries stored before the overrun may be handed out first; then Poll reports it.
  Completion out[16];
  size_t drained = 0;
  Result<size_t> r = size_t{0};
  for (int i = 0; i < 20 && (r = small->Poll(out)).ok(); i++) drained += *r;
  EXPECT_LE(drained, small->capacity());
  ASSERT_FALSE(r.ok()) << "Poll never reported the overrun";
  EXPECT_EQ(r.status().code(), StatusCode::kResourceExhausted) << r.status().ToString();
}

TEST_P(FabricConformance, Post_MoreThanMaxSendWr_ResourceExhaustedNothingSent) {
  auto remote = TargetRegion(4096);
  auto local = LocalRegion(4096);
  std::memset(local->data, 0x21, 4096);
  ConnectionOptions io = Opts(init_cq_.get());
  io.max_send_wr = 8;
  Pair p = ConnectPair(io, Opts(target_cq_.get()));
  ASSERT_TRUE(p.init);
  std::vector<WorkRequest> wrs;
  for (int k = 0; k < 9; k++) wrs.push_back(Write(k, *local, 0, *remote, k * 64, 64));
  const Counters before = p.init->counters();
  Status st = p.init->Post(wrs);
  EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.ToString();
  EXPECT_EQ((p.init->counters() - before).round_trips, 0u);
  ExpectQuiet(init_cq_.get());
  for (int i = 0; i < 4096; i++) ASSERT_EQ(remote->data[i], 0) << i;
  wrs.pop_back();
  ASSERT_TRUE(p.init->Post(wrs).ok());
  EXPECT_EQ(WaitFor(init_cq_.get(), 8).size(), 8u);
}

TEST_P(FabricConformance, Close_OutstandingRequests_CompleteSuccessOrFlushed) {
  auto remote = TargetRegion(64 * 1024);
  auto local = LocalRegion(64 * 1024);
  Pair p = ConnectPair();
  ASSERT_TRUE(p.init);
  for (int i = 0; i < 32; i++) {
    ASSERT_TRUE(p.init->Post(std::vector{Write(i, *local, 0, *remote, 0, 64 * 1024)}).ok());
  }
  p.init->Close();
  EXPECT_NE(p.init->state(), ConnectionState::kConnected);
  auto c = WaitFor(init_cq_.get(), 32);
  ASSERT_EQ(c.size(), 32u);
  bool flushed = false;
  for (int i = 0; i < 32; i++) {
    EXPECT_EQ(c[i].wr_id, uint64_t(i));
    if (flushed) {
      EXPECT_NE(c[i].status, CompletionStatus::kSuccess) << "success after a flushed request";
    }
    EXPECT_TRUE(c[i].status == CompletionStatus::kSuccess ||
                c[i].status == CompletionStatus::kFlushed)
        << CompletionStatusName(c[i].status);
    flushed |= c[i].status != CompletionStatus::kSuccess;
  }
  EXPECT_FALSE(p.init->Post(std::vector{Write(99, *local, 0, *remote, 0, 8)}).ok());
}

}  // namespace
}  // namespace asymnvm::fabric::conformance

namespace asymnvm::fabric::conformance {
namespace {

TEST_P(FabricConformance, MultiPacketSrq_NativeFlag_MatchesCapabilities) {
  SrqOptions so;
  so.multi_packet = true;
  auto srq = target_->CreateSrq(target_pd_.get(), so);
  ASSERT_TRUE(srq.ok()) << srq.status().ToString();
  // soft places natively; the verbs fallback carves fixed slots and must say so.
  EXPECT_EQ((*srq)->multi_packet_native(), target_->capabilities().multi_packet_srq_native);
  if (inst_.provider == "soft") {
    EXPECT_TRUE((*srq)->multi_packet_native());
  }
  auto buf = Region(target_pd_.get(), 32, kLocalWrite);
  RecvRequest rr{1, buf->data, 32, buf->mr.get()};  // shorter than the stride
  EXPECT_EQ((*srq)->PostRecv(std::span<const RecvRequest>(&rr, 1)).code(),
            StatusCode::kInvalidArgument);
  RecvRequest outside{2, buf->data, 4096, buf->mr.get()};  // beyond its MR
  EXPECT_EQ((*srq)->PostRecv(std::span<const RecvRequest>(&outside, 1)).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*srq)->posted(), 0u);
}

}  // namespace
}  // namespace asymnvm::fabric::conformance
