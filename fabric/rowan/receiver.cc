#include "fabric/rowan/receiver.h"

#include <algorithm>
#include <cstring>

#include "common/checksum.h"
#include "common/coding.h"
#include "common/logging.h"
#include "common/thread_annotations.h"
#include "common/zero.h"
#include "fabric/rowan/entry.h"

namespace asymnvm::rowan {
namespace {

constexpr char kMagic[8] = {'R', 'O', 'W', 'A', 'N', 'B', 'L', '1'};
constexpr size_t kHeaderBytes = 4096;
constexpr size_t kMetaEntry = 8;
constexpr size_t kPage = 4096;

size_t RoundUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

// Meta entry: one 8-byte word, stored with a single aligned store so it can never be torn:
// [state u8][check u8][owner u8][reserved u8][post_seq u32], check = low byte of CRC32C of the
// other seven bytes.
uint64_t EncodeMeta(SegmentState s, uint8_t owner, uint32_t post_seq) {
  uint8_t b[8] = {static_cast<uint8_t>(s), 0, owner, 0};
  PutLe32(b + 4, post_seq);
  uint8_t tmp[7] = {b[0], b[2], b[3], b[4], b[5], b[6], b[7]};
  b[1] = static_cast<uint8_t>(Crc32c(tmp, 7));
  return GetLe64(b);
}

bool DecodeMeta(uint64_t word, SegmentState* s, uint32_t* post_seq) {
  uint8_t b[8];
  PutLe64(b, word);
  uint8_t tmp[7] = {b[0], b[2], b[3], b[4], b[5], b[6], b[7]};
  if (b[1] != static_cast<uint8_t>(Crc32c(tmp, 7)) || b[0] > 3) return false;
  *s = static_cast<SegmentState>(b[0]);
  *post_seq = GetLe32(b + 4);
  return true;
}

}  // namespace

Result<AreaView> ReadArea(std::span<const uint8_t> area) {
  if (area.size() < kHeaderBytes) {
    return Status::Corruption("rowan b-log: area of " + std::to_string(area.size()) +
                              " bytes holds no header");
  }
  const uint8_t* h = area.data();
  if (std::all_of(h, h + 32, [](uint8_t b) { return b == 0; })) {
    return Status::NotFound("rowan b-log: not formatted (blank header)");
  }
  if (std::memcmp(h, kMagic, 8) != 0 || GetLe32(h + 28) != Crc32c(h, 28)) {
    return Status::Corruption("rowan b-log: header is corrupt (bad magic or checksum)");
  }
  AreaView v;
  v.segment_size = GetLe64(h + 8);
  v.count = GetLe32(h + 16);
  v.mtu = GetLe32(h + 20);
  v.meta_offset = kHeaderBytes;
  const uint64_t seg_begin = kHeaderBytes + RoundUp(size_t{v.count} * kMetaEntry, kPage);
  if (v.segment_size == 0 || v.segment_size % kPage != 0 || v.count < 2 ||
      v.mtu <= kBlockHeaderSize || v.mtu % kStride != 0 || v.mtu > v.segment_size ||
      seg_begin > area.size() || v.count > (area.size() - seg_begin) / v.segment_size) {
    return Status::Corruption("rowan b-log: header geometry (segment size " +
                              std::to_string(v.segment_size) + ", " + std::to_string(v.count) +
                              " segments, mtu " + std::to_string(v.mtu) + ") does not fit the " +
                              std::to_string(area.size()) + "-byte area");
  }
  for (uint32_t i = 0; i < v.count; i++) {
    AreaSegment s;
    s.index = i;
    s.meta_ok =
        DecodeMeta(GetLe64(h + kHeaderBytes + size_t{i} * kMetaEntry), &s.state, &s.post_seq);
    if (!s.meta_ok) {  // as recovery: scanned as used, after every readable one
      s.state = SegmentState::kUsed;
      s.post_seq = UINT32_MAX;
    }
    s.offset = seg_begin + size_t{i} * v.segment_size;
    s.bytes = area.subspan(s.offset, v.segment_size);
    v.segments.push_back(s);
  }
  return v;
}

Result<AreaCheck> CheckArea(
    std::span<const uint8_t> area,
    const std::function<void(const AreaSegment&, const ScannedEntry&)>& sink) {
  AreaCheck c;
  ASYMNVM_ASSIGN_OR_RETURN(c.view, ReadArea(area));
  std::vector<const AreaSegment*> live;
  for (const AreaSegment& s : c.view.segments) {
    if (!s.meta_ok) {
      c.meta_problems.push_back("segment " + std::to_string(s.index) +
                                ": meta word fails its check (recovery scans it as used)");
    }
    if (s.state == SegmentState::kUsing || s.state == SegmentState::kUsed) live.push_back(&s);
  }
  std::sort(live.begin(), live.end(), [](const AreaSegment* a, const AreaSegment* b) {
    return a->post_seq != b->post_seq ? a->post_seq < b->post_seq : a->index < b->index;
  });
  c.live_segments = static_cast<uint32_t>(live.size());
  // Whether the NIC had moved on past segment k: the segment posted right after it (post_seq + 1)
  // holds landed bytes — the control thread's own "used" signal. A segment posted before a crash
  // stays live (and empty) behind k until k is committed, so a landing cut short by a crash is
  // never followed by a landed next segment, even after later restarts posted more segments.
  auto next_landed = [&](const AreaSegment& k) {
    for (const AreaSegment* n : live) {
      if (n->meta_ok && n->post_seq == uint64_t{k.post_seq} + 1) {
        return GetLe64(n->bytes.data()) != 0;
      }
    }
    return false;
  };
  Scanner scanner(c.view.mtu);
  std::vector<BadBlock> bad;
  scanner.set_bad_sink([&](const BadBlock& b) { bad.push_back(b); });
  for (const AreaSegment* s : live) {
    bad.clear();
    scanner.ScanSegment(s->bytes, s->index, [&](const ScannedEntry& e) {
      c.entries++;
      if (sink) sink(*s, e);
    });
    const bool moved_on = s->meta_ok && next_landed(*s);
    for (const BadBlock& b : bad) {
      AreaBadLanding l;
      l.segment = s->index;
      l.offset = s->offset + b.offset;
      l.what = b.what;
      l.header_read = b.header_read;
      l.meta = b.meta;
      // Landings into one segment are sequential (one SRQ buffer), so a landing cut short by a
      // crash is the last one in its segment; one followed by a valid block was complete.
      l.tail = !b.checksum_ok && b.offset >= scanner.last_block_end() && !moved_on;
      c.bad.push_back(std::move(l));
    }
  }
  scanner.Finish();
  const ScanReport& r = scanner.report();
  c.incomplete_entries = r.incomplete_entries;
  for (const std::string& p : r.problems) {
    if (p.rfind("entry owner ", 0) == 0) c.incomplete.push_back(p);
  }
  return c;
}

Result<std::unique_ptr<Receiver>> Receiver::Open(const ReceiverOptions& o, bool format) {
  if (o.fabric == nullptr || o.pd == nullptr || o.area == nullptr || o.persister == nullptr) {
    return Status::InvalidArgument("rowan receiver: fabric, pd, area and persister are required");
  }
  if (reinterpret_cast<uintptr_t>(o.area) % kPage != 0 || o.segment_size % kPage != 0 ||
      o.segment_size == 0) {
    return Status::InvalidArgument("rowan receiver: area and segment size must be 4 KiB aligned");
  }
  if (o.mtu <= kBlockHeaderSize || o.mtu % kStride != 0 || o.mtu > o.segment_size) {
    return Status::InvalidArgument("rowan receiver: mtu must be a multiple of 64 within a segment");
  }
  if (o.min_posted < 2 || o.post_batch == 0) {
    return Status::InvalidArgument("rowan receiver: min_posted >= 2 and post_batch >= 1 required");
  }
  std::unique_ptr<Receiver> r(new Receiver(o));
  ASYMNVM_RETURN_IF_ERROR(r->Init(format));
  return r;
}

Status Receiver::Init(bool format) {
  // Geometry: header | meta table (page aligned) | segments.
  if (o_.area_size < kHeaderBytes + 2 * (o_.segment_size + kPage)) {
    return Status::InvalidArgument("rowan receiver: area of " + std::to_string(o_.area_size) +
                                   " bytes holds fewer than two segments");
  }
  uint32_t count = static_cast<uint32_t>((o_.area_size - kHeaderBytes) / o_.segment_size);
  while (count > 0 &&
         kHeaderBytes + RoundUp(count * kMetaEntry, kPage) + size_t{count} * o_.segment_size >
             o_.area_size) {
    count--;
  }
  if (count < 2) return Status::InvalidArgument("rowan receiver: area too small");
  count_ = count;
  meta_ = o_.area + kHeaderBytes;
  segments_ = meta_ + RoundUp(count * kMetaEntry, kPage);

  uint8_t* h = o_.area;
  bool valid = std::memcmp(h, kMagic, 8) == 0 && GetLe32(h + 28) == Crc32c(h, 28);
  bool same_geometry = valid && GetLe64(h + 8) == o_.segment_size && GetLe32(h + 16) == count_ &&
                       GetLe32(h + 20) == o_.mtu;
  bool blank = std::all_of(h, h + 32, [](uint8_t b) { return b == 0; });
  if (valid && !same_geometry && !format) {
    return Status::InvalidArgument(
        "rowan receiver: area holds a b-log of another geometry (segment size / count / mtu); "
        "refusing to reformat it");
  }
  if (!valid && !blank && !format) {
    return Status::Corruption("rowan receiver: b-log header is corrupt (bad magic or checksum)");
  }
  state_.assign(count_, SegmentState::kFree);
  post_seq_.assign(count_, 0);
  if (!valid || !same_geometry) {
    // Fresh b-log: zero meta and segments, then write the header last.
    ZeroPages(meta_, segments_ - meta_ + size_t{count_} * o_.segment_size);
    o_.persister->Persist(meta_, segments_ - meta_ + size_t{count_} * o_.segment_size);
    std::memset(h, 0, kHeaderBytes);
    std::memcpy(h, kMagic, 8);
    PutLe64(h + 8, o_.segment_size);
    PutLe32(h + 16, count_);
    PutLe32(h + 20, static_cast<uint32_t>(o_.mtu));
    PutLe32(h + 28, Crc32c(h, 28));
    o_.persister->Persist(h, 32);
    for (uint32_t i = 0; i < count_; i++) SetState(i, SegmentState::kFree, 0);
  } else {
    // Recovery: using/used segments go to the consumer first, in posting order; committed ones
    // are recycled; unreadable meta entries are scanned (conservative) and reported.
    std::vector<std::pair<uint64_t, uint32_t>> pending;
    for (uint32_t i = 0; i < count_; i++) {
      SegmentState s;
      uint32_t seq;
      uint64_t word = GetLe64(meta_ + i * kMetaEntry);
      if (!DecodeMeta(word, &s, &seq)) {
        LOG_WARN("rowan", "segment " << i << ": corrupt meta entry; scanning it as used");
        s = SegmentState::kUsed;
        seq = UINT32_MAX;
      }
      next_post_seq_ = std::max<uint64_t>(next_post_seq_, uint64_t{seq} + 1);
      state_[i] = s;
      post_seq_[i] = seq;
      if (s == SegmentState::kUsing || s == SegmentState::kUsed) pending.emplace_back(seq, i);
      if (s == SegmentState::kCommitted) to_recycle_.push_back(i);
    }
    if (next_post_seq_ > UINT32_MAX) next_post_seq_ = 1;  // only after a corrupt entry
    std::sort(pending.begin(), pending.end());
    for (auto& [seq, i] : pending) {
      SetState(i, SegmentState::kUsed, seq);
      used_.push_back(i);
    }
    counters_.recovered_segments = pending.size();
  }

  // Fabric objects: one MR over the segments (PM), a ring CQ for receives, one multi-packet SRQ.
  landing_ = std::make_unique<LandingPersister>(o_.persister, o_.landing_observer, o_.area,
                                                [this](uint64_t off) { OnLanding(off); });
  ASYMNVM_ASSIGN_OR_RETURN(
      mr_, o_.pd->RegisterMemory(segments_, size_t{count_} * o_.segment_size,
                                 {.access = fabric::kLocalWrite, .persister = landing_.get()}));
  flush_target_.assign(64, 0);
  ASYMNVM_ASSIGN_OR_RETURN(
      flush_mr_, o_.pd->RegisterMemory(flush_target_.data(), flush_target_.size(),
                                       {.access = fabric::kLocalWrite | fabric::kRemoteRead}));
  ASYMNVM_ASSIGN_OR_RETURN(ring_, o_.fabric->CreateCq({.capacity = 1024, .ring = true}));
  ASYMNVM_ASSIGN_OR_RETURN(send_cq_, o_.fabric->CreateCq({.capacity = 1024, .ring = true}));
  ASYMNVM_ASSIGN_OR_RETURN(
      srq_, o_.fabric->CreateSrq(o_.pd, {.max_wr = count_, .multi_packet = true, .stride = 64}));
  ASYMNVM_ASSIGN_OR_RETURN(listener_, o_.fabric->Listen(o_.pd, o_.listen_address));
  {
    MutexLock lock(mu_);
    ASYMNVM_RETURN_IF_ERROR(PostFree(std::max(o_.min_posted, o_.post_batch)));
  }
  control_ = std::thread([this] { ControlLoop(); });
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return Status::Ok();
}

Receiver::~Receiver() { Close(); }

void Receiver::Close() {
  if (stop_.exchange(true)) return;
  used_cv_.notify_all();
  Wake();
  if (acceptor_.joinable()) acceptor_.join();
  if (control_.joinable()) control_.join();
  MutexLock lock(mu_);
  for (auto& c : conns_) c->Close();
  conns_.clear();
  // Release the address and the NIC resources so the b-log can be reopened (e.g. after restart).
  listener_.reset();
  srq_.reset();
  ring_.reset();
  send_cq_.reset();
  flush_mr_.reset();
  mr_.reset();
}

std::string Receiver::address() const {
  MutexLock lock(mu_);
  return listener_ ? listener_->address() : "";
}

void Receiver::SetState(uint32_t index, SegmentState s, uint64_t post_seq) {
  uint64_t word = EncodeMeta(s, 0, static_cast<uint32_t>(post_seq));
  // One aligned 8-byte store: failure-atomic on x86 persistence domains.
  __atomic_store_n(reinterpret_cast<uint64_t*>(meta_ + index * kMetaEntry), word, __ATOMIC_RELEASE);
  o_.persister->Persist(meta_ + index * kMetaEntry, kMetaEntry);
  state_[index] = s;
  post_seq_[index] = post_seq;
}

Status Receiver::PostFree(uint32_t n) {
  std::vector<fabric::RecvRequest> reqs;
  for (uint32_t i = 0; i < count_ && reqs.size() < n; i++) {
    if (state_[i] != SegmentState::kFree) continue;
    // Free segments are entirely zero (zeroed at format or recycle), so the scanner and the
    // used-segment detector see nothing stale.
    SetState(i, SegmentState::kUsing, next_post_seq_++);
    reqs.push_back({.wr_id = i,
                    .addr = Segment(i),
                    .length = static_cast<uint32_t>(o_.segment_size),
                    .mr = mr_.get()});
  }
  if (reqs.empty()) return Status::Ok();
  Status st = srq_->PostRecv(reqs);
  if (!st.ok()) return st.WithContext("rowan receiver: posting segments");
  for (auto& r : reqs) posted_.push_back(static_cast<uint32_t>(r.wr_id));
  return Status::Ok();
}

void Receiver::Wake() {
  if (wake_.exchange(true)) return;  // already pending: the control thread will look
  MutexLock lock(wake_mu_);
  control_cv_.notify_one();
}

void Receiver::OnLanding(uint64_t offset) {
  const uint64_t seg_begin = static_cast<uint64_t>(segments_ - o_.area);
  if (offset < seg_begin) return;
  const uint64_t index = (offset - seg_begin) / o_.segment_size;
  // Landings into the first posted segment are the common case and need nobody; one into a
  // later segment means the NIC moved on: the ones before it are (after `grace`) used.
  if (index != front_.load(std::memory_order_relaxed)) Wake();
}

void Receiver::ControlLoop() {
  auto idle_wait = o_.poll_interval;
  while (!stop_.load()) {
    bool progressed = false;
    MutexLock lock(mu_);
    while (!to_recycle_.empty()) {
      uint32_t i = to_recycle_.front();
      to_recycle_.pop_front();
      lock.unlock();
      // Only the pieces the NIC wrote are dirtied (an unfilled tail stays clean and costs the
      // msync nothing); the persist still covers the whole segment.
      ZeroPages(Segment(i), o_.segment_size);
      o_.persister->Persist(Segment(i), o_.segment_size);
      lock.lock();
      SetState(i, SegmentState::kFree, 0);
      counters_.segments_recycled++;
      progressed = true;
    }
    if (posted_.size() < o_.min_posted) {
      Status st = PostFree(o_.post_batch);
      if (!st.ok()) LOG_ERROR("rowan", st.ToString());
    }
    // The NIC fills posted segments in order; once segment k has data, every segment before it
    // has been entered and only in-flight landings can still reach it: wait `grace`, then hand
    // them over.
    size_t upto = 0;
    for (size_t k = posted_.size(); k-- > 1;) {
      if (__atomic_load_n(reinterpret_cast<const uint64_t*>(Segment(posted_[k])),
                          __ATOMIC_ACQUIRE) != 0) {
        upto = k;
        break;
      }
    }
    auto now = std::chrono::steady_clock::now();
    std::chrono::microseconds wait = idle_wait;
    if (upto > 0) {
      if (!candidate_) {
        candidate_ = true;
        candidate_since_ = now;
      }
      if (now - candidate_since_ >= o_.grace) {
        for (size_t k = 0; k < upto; k++) {
          uint32_t i = posted_.front();
          posted_.pop_front();
          SetState(i, SegmentState::kUsed, post_seq_[i]);
          used_.push_back(i);
        }
        candidate_ = false;
        used_cv_.notify_all();
        progressed = true;
      } else {
        wait = std::min(wait, std::chrono::ceil<std::chrono::microseconds>(
                                  o_.grace - (now - candidate_since_)));
      }
    }
    front_.store(posted_.empty() ? UINT32_MAX : posted_.front(), std::memory_order_relaxed);
    const bool more = progressed && (!to_recycle_.empty() || posted_.size() < o_.min_posted);
    lock.unlock();
    if (progressed) {
      idle_wait = o_.poll_interval;
      if (more) continue;
    }
    MutexLock wl(wake_mu_);
    control_cv_.wait_for(wl.native(), wait, [&] { return wake_.load() || stop_.load(); });
    wake_.store(false);
    if (!progressed) idle_wait = std::min(idle_wait * 2, o_.max_poll_interval);
  }
}

void Receiver::AcceptLoop() {
  uint8_t pd[fabric::RegionDescriptor::kEncodedSize + 12];
  flush_mr_->descriptor().EncodeTo(pd);
  PutLe32(pd + 32, static_cast<uint32_t>(o_.mtu));
  PutLe64(pd + 36, o_.segment_size);
  while (!stop_.load()) {
    fabric::ConnectionOptions co;
    co.send_cq = send_cq_.get();
    co.recv_cq = ring_.get();
    co.srq = srq_.get();
    co.private_data.assign(pd, pd + sizeof(pd));
    co.timeout = std::chrono::milliseconds(100);
    auto c = listener_->Accept(co);
    if (!c.ok()) {
      if (c.status().code() != StatusCode::kTimedOut) {
        LOG_WARN("rowan", "accept: " << c.status().ToString());
      }
      continue;
    }
    MutexLock lock(mu_);
    counters_.connections++;
    // Drop connections that died so a long-running receiver does not accumulate them.
    std::erase_if(conns_,
                  [](const auto& x) { return x->state() != fabric::ConnectionState::kConnected; });
    conns_.push_back(std::move(c).value());
  }
}

Result<SegmentView> Receiver::NextUsed(std::chrono::milliseconds timeout) {
  MutexLock lock(mu_);
  if (!used_cv_.wait_for(lock.native(), timeout,
                         [&]() ASYMNVM_REQUIRES(mu_) { return !used_.empty() || stop_.load(); }) ||
      used_.empty()) {
    return Status::TimedOut("rowan receiver: no used segment");
  }
  uint32_t i = used_.front();
  used_.pop_front();
  counters_.segments_handed_over++;
  return SegmentView{i, post_seq_[i], {Segment(i), o_.segment_size}};
}

std::vector<SegmentView> Receiver::LiveSegments() const {
  MutexLock lock(mu_);
  std::vector<SegmentView> v;
  for (uint32_t i = 0; i < count_; i++) {
    if (state_[i] == SegmentState::kUsing || state_[i] == SegmentState::kUsed) {
      v.push_back(SegmentView{i, post_seq_[i], {Segment(i), o_.segment_size}});
    }
  }
  std::sort(v.begin(), v.end(),
            [](const SegmentView& a, const SegmentView& b) { return a.post_seq < b.post_seq; });
  return v;
}

Status Receiver::Commit(uint32_t index) {
  MutexLock lock(mu_);
  if (index >= count_ || state_[index] != SegmentState::kUsed) {
    return Status::FailedPrecondition("rowan receiver: segment " + std::to_string(index) +
                                      " is not a used segment");
  }
  SetState(index, SegmentState::kCommitted, post_seq_[index]);
  to_recycle_.push_back(index);
  Wake();
  return Status::Ok();
}

ReceiverStats Receiver::stats() const {
  MutexLock lock(mu_);
  ReceiverStats s = counters_;
  s.segments = count_;
  for (auto st : state_) {
    switch (st) {
      case SegmentState::kFree:
        s.free++;
        break;
      case SegmentState::kUsing:
        s.using_++;
        break;
      case SegmentState::kUsed:
        s.used++;
        break;
      case SegmentState::kCommitted:
        s.committed++;
        break;
    }
  }
  s.posted = static_cast<uint32_t>(posted_.size());
  s.ring_overwritten = ring_ ? ring_->overwritten() : 0;
  return s;
}

}  // namespace asymnvm::rowan
