#include "backend/replication.h"

#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>

#include "backend/rpc.h"
#include "common/checksum.h"
#include "common/coding.h"
#include "common/crash_point.h"
#include "common/logging.h"
#include "common/thread_annotations.h"
#include "fabric/oq/oq.h"

namespace asymnvm::backend {
namespace {

constexpr uint64_t kChunk = 1u << 20;            // largest WRITE posted
constexpr uint64_t kCopyFlushEvery = 64u << 20;  // full copy: a barrier every 64 MiB
// Incremental catch-up: the granule of the ranges a mirror may miss (one bit each).
constexpr uint64_t kGranule = kMirrorGranule;

// A set of pool granules (bit i: [i × kGranule, (i + 1) × kGranule)).
class GranuleSet {
 public:
  void Resize(uint64_t pool_size) { bits_.assign((pool_size / kGranule + 64) / 64, 0); }
  void Add(uint64_t off, uint64_t len) {
    if (len == 0) return;
    for (uint64_t g = off / kGranule; g <= (off + len - 1) / kGranule && g / 64 < bits_.size();
         g++) {
      bits_[g / 64] |= uint64_t{1} << (g % 64);
    }
  }
  void Merge(GranuleSet& other) {  // this |= other; other = ∅
    for (size_t i = 0; i < bits_.size() && i < other.bits_.size(); i++) {
      bits_[i] |= other.bits_[i];
      other.bits_[i] = 0;
    }
  }
  void Clear() { std::fill(bits_.begin(), bits_.end(), 0); }
  // Calls f(offset, length) for every run of set granules, clipped to `limit`.
  template <class F>
  void ForEachRun(uint64_t limit, F&& f) const {
    const uint64_t n = bits_.size() * 64;
    for (uint64_t g = 0; g < n;) {
      if (!(bits_[g / 64] >> (g % 64) & 1)) {
        g++;
        continue;
      }
      uint64_t e = g;
      while (e < n && (bits_[e / 64] >> (e % 64) & 1)) e++;
      const uint64_t off = g * kGranule;
      if (off < limit) f(off, std::min(e * kGranule, limit) - off);
      g = e;
    }
  }

 private:
  std::vector<uint64_t> bits_;
};

enum class LinkState { kDown, kCopying, kInSync };

const char* StateName(LinkState s) {
  switch (s) {
    case LinkState::kDown:
      return "down";
    case LinkState::kCopying:
      return "copying";
    case LinkState::kInSync:
      return "in-sync";
  }
  return "?";
}

double MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

struct Replicator::Impl {
  ReplicationOptions o;
  pm::Pool* pool = nullptr;
  std::unique_ptr<fabric::Fabric> fabric;
  std::unique_ptr<fabric::ProtectionDomain> pd;
  std::unique_ptr<fabric::MemoryRegion> pool_mr;

  struct Link {
    std::string address;
    mutable Mutex mu;
    std::condition_variable cv;
    LinkState state ASYMNVM_GUARDED_BY(mu) = LinkState::kDown;
    bool failed ASYMNVM_GUARDED_BY(mu) = false;  // the connection failed; the link is being dropped
    bool dropping ASYMNVM_GUARDED_BY(mu) = false;
    bool flushing ASYMNVM_GUARDED_BY(mu) = false;  // one thread waits on cq at a time
    // writes posted / covered by an acknowledged FLUSH
    uint64_t posted ASYMNVM_GUARDED_BY(mu) = 0, acked ASYMNVM_GUARDED_BY(mu) = 0;
    std::unique_ptr<oq::Client> ctl;
    std::unique_ptr<fabric::CompletionQueue> cq;
    std::unique_ptr<fabric::Connection> conn;
    fabric::RegionDescriptor remote;
    MirrorLinkStats st ASYMNVM_GUARDED_BY(mu);
    // async lag tracking
    uint64_t pending_bytes ASYMNVM_GUARDED_BY(mu) = 0;
    std::chrono::steady_clock::time_point oldest ASYMNVM_GUARDED_BY(mu){};
    // Incremental catch-up [mu] (doc/mirror.md §Catch-up): what the mirror may not hold durably —
    // ranges posted since the FLUSH in flight (`unflushed`), those the FLUSH in flight covers
    // (`inflight`), and while the link is down everything forwarded (`missed`). `resumable`: the
    // mirror completed a copy of this primary's stream once, so a re-attach that finds its pool
    // still in sync with the stream sends only `missed`.
    GranuleSet unflushed ASYMNVM_GUARDED_BY(mu), inflight ASYMNVM_GUARDED_BY(mu),
        missed ASYMNVM_GUARDED_BY(mu);
    bool resumable ASYMNVM_GUARDED_BY(mu) = false;
  };
  // Links are only ever appended (AddMirror, at start or while serving) and never removed: a
  // fixed array published by an atomic count, so the data path (Forward, Sync) iterates without
  // a lock. A dropped mirror's link stays, down, and is re-attached by the manager.
  std::array<std::unique_ptr<Link>, kMaxMirrors> link_slots;
  std::atomic<size_t> nlinks{0};
  Mutex add_mu;  // serializes AddLink
  size_t LinkCount() const { return nlinks.load(std::memory_order_acquire); }
  Link& LinkAt(size_t i) const { return *link_slots[i]; }

  Status AddLink(const std::string& address) {
    MutexLock g(add_mu);
    const size_t n = LinkCount();
    for (size_t i = 0; i < n; i++) {
      if (LinkAt(i).address == address) {
        return Status::AlreadyExists("mirror " + address + " is already attached");
      }
    }
    if (n == kMaxMirrors) {
      return Status::ResourceExhausted("mirror " + address + ": a primary forwards to at most " +
                                       std::to_string(kMaxMirrors) + " mirrors");
    }
    auto l = std::make_unique<Link>();
    {
      MutexLock lk(l->mu);  // not yet visible to any other thread
      l->unflushed.Resize(pool->size());
      l->inflight.Resize(pool->size());
      l->missed.Resize(pool->size());
      l->address = address;
      l->st.address = address;
      l->st.state = "down";
    }
    link_slots[n] = std::move(l);
    nlinks.store(n + 1, std::memory_order_release);
    mgr_cv.notify_all();
    return Status::Ok();
  }

  Mutex isr_mu;  // serializes in-sync set updates
  Mutex mgr_mu;
  std::condition_variable mgr_cv, async_cv;
  std::atomic<bool> stop{false};
  std::thread manager, async_flusher;
  std::atomic<uint64_t> forward_epoch{0};
  // This primary's stream (random, per process): a mirror that holds a complete copy of it can be
  // caught up incrementally; any other stream (a restarted or a new primary) needs a full copy.
  uint64_t stream_id = 0;

  // The owner decides what a fenced primary does (the daemons: exit 5, or rejoin as a mirror);
  // library code never ends the process. Start refuses on_insync without `fenced`, the only way
  // here.
  void Fenced(const Status& s) {
    LOG_ERROR("mirror", "this primary was fenced: " << s.ToString());
    o.fenced(s.WithSubCode(StatusSubCode::kFenced));
  }

  // Posts [off, off + len) to one link. Called with l.mu held.
  void PostLocked(Link& l, MutexLock& lk, uint64_t off, uint64_t len) ASYMNVM_REQUIRES(l.mu) {
    if (l.state == LinkState::kDown || l.failed || !l.conn) {
      if (l.resumable) l.missed.Add(off, len);
      return;
    }
    l.unflushed.Add(off, len);
    uint64_t done = 0;
    int full_retries = 0;
    while (done < len) {
      const uint64_t n = std::min(kChunk, len - done);
      fabric::WorkRequest w;
      w.opcode = fabric::Opcode::kWrite;
      w.signaled = false;
      w.local_addr = pool->base() + off + done;
      w.length = static_cast<uint32_t>(n);
      w.local_mr = pool_mr.get();
      w.remote_addr = l.remote.addr + off + done;
      w.rkey = l.remote.rkey;
      Status s = l.conn->Post({&w, 1});
      if (s.code() == StatusCode::kResourceExhausted && full_retries++ < 1000) {
        // The send ring is full of unacknowledged WRITEs: a barrier empties it.
        FlushLocked(l, lk, l.posted);
        if (l.failed) return;
        continue;
      }
      if (!s.ok()) {
        MarkFailedLocked(l, s);
        return;
      }
      done += n;
      l.posted++;
      l.st.writes++;
      l.st.bytes_forwarded += n;
      if (o.async && l.state == LinkState::kInSync) {  // the loss window (not the copy)
        if (l.pending_bytes == 0) l.oldest = std::chrono::steady_clock::now();
        l.pending_bytes += n;
      }
    }
  }

  void MarkFailedLocked(Link& l, const Status& s) ASYMNVM_REQUIRES(l.mu) {
    // Nothing not acknowledged durable by a FLUSH is known to be on the mirror.
    l.missed.Merge(l.unflushed);
    l.missed.Merge(l.inflight);
    if (!l.failed) {
      l.failed = true;
      l.st.last_error = s.ToString();
      LOG_WARN("mirror",
               "mirror " << l.address << " (" << l.st.name << ") failed: " << s.ToString());
    }
    l.cv.notify_all();
  }

  // One FLUSH in flight per link: posts it (the caller then waits with AwaitFlush, unlocked).
  // Returns false (nothing posted) when another thread's FLUSH is in flight or the link failed.
  bool StartFlushLocked(Link& l, uint64_t* upto, uint64_t* bytes,
                        std::chrono::steady_clock::time_point* oldest, Status* posted)
      ASYMNVM_REQUIRES(l.mu) {
    if (l.flushing || l.failed || !l.conn) return false;
    l.flushing = true;
    l.inflight.Merge(l.unflushed);
    *upto = l.posted;
    *bytes = l.pending_bytes;
    *oldest = l.oldest;
    l.pending_bytes = 0;
    fabric::WorkRequest f;
    f.opcode = fabric::Opcode::kFlush;
    f.signaled = true;
    f.wr_id = *upto;
    f.remote_addr = l.remote.addr;
    f.rkey = l.remote.rkey;
    *posted = l.conn->Post({&f, 1});
    return true;
  }

  // Waits (l.mu NOT held) for the FLUSH `upto` posted by StartFlushLocked.
  Status AwaitFlush(Link& l, uint64_t upto, Status s) ASYMNVM_EXCLUDES(l.mu) {
    fabric::CompletionQueue* cq = l.cq.get();  // stable while flushing (CloseLink waits)
    const auto deadline = std::chrono::steady_clock::now() + o.timeout;
    bool done = false;
    while (s.ok() && !done) {
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        return Status::TimedOut("mirror FLUSH not acknowledged within " +
                                std::to_string(o.timeout.count()) + " ms");
      }
      fabric::Completion c[16];
      auto n = cq->Wait(c, std::chrono::duration_cast<std::chrono::microseconds>(deadline - now));
      if (!n.ok()) return n.status();
      for (size_t i = 0; i < *n; i++) {
        if (c[i].status != fabric::CompletionStatus::kSuccess) {
          return Status::ConnectionError(std::string("mirror ") + fabric::OpcodeName(c[i].opcode) +
                                         ": " + fabric::CompletionStatusName(c[i].status));
        }
        if (c[i].opcode == fabric::Opcode::kFlush && c[i].wr_id == upto) done = true;
      }
    }
    return s;
  }

  // Records the outcome of a FLUSH (l.mu held).
  void FinishFlushLocked(Link& l, uint64_t upto, uint64_t bytes,
                         std::chrono::steady_clock::time_point oldest, const Status& s)
      ASYMNVM_REQUIRES(l.mu) {
    l.flushing = false;
    if (s.ok()) {
      l.inflight.Clear();
      l.acked = std::max(l.acked, upto);
      l.st.flushes++;
      if (o.async && bytes > 0) {
        l.st.max_lag_bytes = std::max(l.st.max_lag_bytes, bytes);
        l.st.max_lag_us =
            std::max(l.st.max_lag_us,
                     static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                               std::chrono::steady_clock::now() - oldest)
                                               .count()));
      }
    } else {
      MarkFailedLocked(l, s);
    }
    l.cv.notify_all();
  }

  // Waits until every write up to `target` is acknowledged durable by the mirror (one FLUSH in
  // flight per link; others wait for it). Returns with l.mu held. On a timeout or an error the
  // link is marked failed.
  // `lk` is the caller's guard of l.mu; the wait below drops l.mu through l.mu itself (the guard
  // owns it again on return).
  void FlushLocked(Link& l, MutexLock& lk, uint64_t target) ASYMNVM_REQUIRES(l.mu) {
    while (!l.failed && l.acked < target && l.conn) {
      uint64_t upto = 0, bytes = 0;
      std::chrono::steady_clock::time_point oldest;
      Status posted;
      if (!StartFlushLocked(l, &upto, &bytes, &oldest, &posted)) {
        l.cv.wait_for(lk.native(), std::chrono::milliseconds(100));
        continue;
      }
      l.mu.unlock();
      Status s = AwaitFlush(l, upto, posted);
      l.mu.lock();
      FinishFlushLocked(l, upto, bytes, oldest, s);
    }
  }

  // Removes a failed in-sync link from the group's in-sync set (the callback) and marks it down.
  // Every caller returns only after the set no longer names it.
  void EnsureDropped(Link& l) {
    MutexLock lk(l.mu);
    if (l.state == LinkState::kDown) return;
    if (l.dropping) {
      l.cv.wait(lk.native(), [&]() ASYMNVM_REQUIRES(l.mu) { return l.state == LinkState::kDown; });
      return;
    }
    l.dropping = true;
    const bool was_insync = l.state == LinkState::kInSync;
    lk.unlock();
    if (was_insync) UpdateIsr();
    lk.lock();
    l.state = LinkState::kDown;
    l.dropping = false;
    l.st.drops++;
    l.st.state = StateName(l.state);
    l.cv.notify_all();
    LOG_WARN("mirror", "mirror " << l.address << " (" << l.st.name
                                 << ") dropped; the primary goes on without it (re-attach every "
                                 << o.retry.count() << " ms)");
  }

  void UpdateIsr() {
    MutexLock g(isr_mu);
    std::vector<std::string> names;
    for (size_t i = 0, n = LinkCount(); i < n; i++) {
      Link& l = LinkAt(i);
      MutexLock lk(l.mu);
      if (l.state == LinkState::kInSync && !l.failed && !l.dropping) names.push_back(l.st.name);
    }
    if (!o.on_insync) return;
    Status s = o.on_insync(pool->superblock().uuid, names);
    if (!s.ok()) Fenced(s);
  }

  void CloseLink(Link& l) {
    std::unique_ptr<fabric::Connection> conn;
    std::unique_ptr<fabric::CompletionQueue> cq;
    std::unique_ptr<oq::Client> ctl;
    {
      MutexLock lk(l.mu);
      l.cv.wait(lk.native(), [&]() ASYMNVM_REQUIRES(l.mu) { return !l.flushing; });
      conn = std::move(l.conn);
      ctl = std::move(l.ctl);
      cq = std::move(l.cq);
    }
    conn.reset();
    ctl.reset();
    cq.reset();
  }

  Status Attach(Link& l) {
    CloseLink(l);
    oq::ClientOptions co;
    co.fabric = fabric.get();
    co.pd = pd.get();
    co.server_address = l.address;
    co.window = 1;
    co.timeout = std::max(o.timeout, std::chrono::milliseconds(1000));
    ASYMNVM_ASSIGN_OR_RETURN(auto ctl, oq::Client::Connect(co));
    PayloadWriter w;
    w.U64(pool->size());
    w.Bytes(pool->superblock().uuid);
    w.U64(o.term);
    w.U32(static_cast<uint32_t>(o.name.size()));
    w.Str(o.name);
    w.U64(stream_id);
    std::vector<uint8_t> reply;
    ASYMNVM_RETURN_IF_ERROR(ctl->Call(0, kMirrorHello, w.bytes(), &reply));
    PayloadReader r(reply, "mirror hello reply");
    auto desc_bytes = r.Bytes(fabric::RegionDescriptor::kEncodedSize);
    const uint32_t alen = r.U32();
    auto addr = r.Bytes(alen);
    const uint32_t nlen = r.U32();
    auto name = r.Bytes(nlen);
    // The mirror's pool holds a complete copy of this stream up to its last acknowledged FLUSH
    // (absent from older mirrors: a full copy).
    const bool mirror_resumable = r.remaining() >= 1 && r.U8() == 1;
    ASYMNVM_RETURN_IF_ERROR(r.status());
    ASYMNVM_ASSIGN_OR_RETURN(
        auto desc, fabric::RegionDescriptor::Decode(desc_bytes.data(), desc_bytes.size()));
    if (desc.length != pool->size()) {
      return Status::FailedPrecondition("mirror region is " + std::to_string(desc.length) +
                                        " bytes, the pool " + std::to_string(pool->size()));
    }
    fabric::CompletionQueueOptions cqo;
    cqo.capacity = 1024;
    ASYMNVM_ASSIGN_OR_RETURN(auto cq, fabric->CreateCq(cqo));
    fabric::ConnectionOptions cno;
    cno.send_cq = cq.get();
    cno.recv_cq = cq.get();
    cno.max_send_wr = 1024;
    cno.max_recv_wr = 1;
    cno.timeout = co.timeout;
    ASYMNVM_ASSIGN_OR_RETURN(auto conn,
                             fabric->Connect(pd.get(), std::string(addr.begin(), addr.end()), cno));
    const auto start = std::chrono::steady_clock::now();
    // The mirror's digests, while nothing is forwarded to it (unless the stream resumes).
    Result<std::vector<uint64_t>> mirror_digests = Status::NotFound("not asked");
    bool resumable = false;
    {
      MutexLock lk(l.mu);
      resumable = mirror_resumable && l.resumable;
    }
    if (!resumable) mirror_digests = FetchDigests(*ctl);
    GranuleSet todo;
    todo.Resize(pool->size());
    bool incremental = false;
    {
      MutexLock lk(l.mu);
      // Incremental when both sides say the mirror holds this stream's copy; the ranges it may
      // miss are taken at the moment forwarding to it resumes (any change after is forwarded).
      incremental = mirror_resumable && l.resumable;
      l.missed.Merge(l.unflushed);
      l.missed.Merge(l.inflight);
      if (incremental) todo.Merge(l.missed);
      l.missed.Clear();
      l.ctl = std::move(ctl);
      l.cq = std::move(cq);
      l.conn = std::move(conn);
      l.remote = desc;
      l.posted = l.acked = 0;
      l.failed = false;
      l.pending_bytes = 0;
      l.st.name = std::string(name.begin(), name.end());
      l.state = LinkState::kCopying;  // from now on every forwarded range goes to it too
      l.st.state = StateName(l.state);
    }
    const char* how = incremental ? "incremental catch-up" : "full copy";
    if (!incremental) {
      // Another stream (this process restarted, a promotion, a rejoining old primary) or a copy
      // that did not finish: compare digests granule by granule and copy those that differ. The
      // mirror's digests were taken before forwarding resumed (nothing writes its pool between
      // the hello and now), ours are taken after: a granule equal then holds, on the mirror, our
      // bytes as of our digest plus every change forwarded since (doc/mirror.md).
      if (mirror_digests.ok()) {
        incremental = true;
        how = "catch-up by digests";
        const uint64_t granules = (pool->size() + kGranule - 1) / kGranule;
        for (uint64_t g = 0; g < granules; g++) {
          const uint64_t off = g * kGranule, len = std::min(kGranule, pool->size() - off);
          if (Hash64(pool->base() + off, len) != (*mirror_digests)[g]) todo.Add(off, len);
        }
      } else {
        LOG_INFO("mirror", "mirror " << l.address << ": no digests ("
                                     << mirror_digests.status().ToString() << "): full copy");
        todo.Add(0, pool->size());
      }
    }
    uint64_t copy_bytes = 0;
    todo.ForEachRun(pool->size(), [&](uint64_t, uint64_t len) { copy_bytes += len; });
    {
      MutexLock lk(l.mu);  // st.name
      LOG_INFO("mirror", "mirror " << l.address << " (" << l.st.name << "): " << how << " of "
                                   << copy_bytes << " of " << pool->size() << " bytes");
    }
    // The copy, chunk by chunk under the link's lock: a chunk holds the bytes as they are when
    // posted; any later change of them is flushed later and so forwarded after it.
    Status copied = Status::Ok();
    uint64_t since_flush = 0;
    todo.ForEachRun(pool->size(), [&](uint64_t run_off, uint64_t run_len) {
      for (uint64_t off = run_off; off < run_off + run_len && copied.ok(); off += kChunk) {
        if (stop.load()) {
          copied = Status::Aborted("stopping");
          return;
        }
        const uint64_t n = std::min(kChunk, run_off + run_len - off);
        MutexLock lk(l.mu);
        PostLocked(l, lk, off, n);
        since_flush += n;
        if (since_flush >= kCopyFlushEvery) {
          FlushLocked(l, lk, l.posted);
          since_flush = 0;
        }
        if (l.failed) copied = Status::ConnectionError("during the copy: " + l.st.last_error);
      }
    });
    ASYMNVM_RETURN_IF_ERROR(copied);
    {
      MutexLock lk(l.mu);
      FlushLocked(l, lk, l.posted);
      if (l.failed) return Status::ConnectionError("ending the full copy: " + l.st.last_error);
      // In sync from here: barriers wait for it. Then one more barrier covers whatever was
      // acknowledged while it was still copying, and only then it joins the in-sync set.
      l.state = LinkState::kInSync;
      l.st.state = StateName(l.state);
      FlushLocked(l, lk, l.posted);
      if (l.failed) return Status::ConnectionError("ending the full copy: " + l.st.last_error);
      l.st.copies++;
      if (incremental) l.st.incremental_copies++;
      l.st.copy_bytes += copy_bytes;
      l.st.last_copy_bytes = copy_bytes;
      l.st.last_copy_ms = MsSince(start);
      l.resumable = true;
    }
    UpdateIsr();
    PayloadWriter sw;
    sw.U64(o.term);
    std::vector<uint8_t> ignored;
    Status s = l.ctl->Call(0, kMirrorSynced, sw.bytes(), &ignored);
    if (!s.ok()) {
      MutexLock lk(l.mu);
      MarkFailedLocked(l, s);
      return s;
    }
    {
      MutexLock lk(l.mu);  // st
      LOG_INFO("mirror", "mirror " << l.address << " (" << l.st.name << ") in sync after "
                                   << l.st.last_copy_ms << " ms");
    }
    mgr_cv.notify_all();
    return Status::Ok();
  }

  // Every granule digest of the mirror's pool (kMirrorDigests, in calls of kMaxDigestsPerCall).
  // An older mirror refuses the request type: the caller copies everything.
  Result<std::vector<uint64_t>> FetchDigests(oq::Client& ctl) {
    const uint64_t granules = (pool->size() + kGranule - 1) / kGranule;
    std::vector<uint64_t> out;
    out.reserve(granules);
    for (uint64_t first = 0; first < granules; first += kMaxDigestsPerCall) {
      const auto count =
          static_cast<uint32_t>(std::min<uint64_t>(kMaxDigestsPerCall, granules - first));
      PayloadWriter w;
      w.U64(first);
      w.U32(count);
      std::vector<uint8_t> reply;
      ASYMNVM_RETURN_IF_ERROR(ctl.Call(0, kMirrorDigests, w.bytes(), &reply));
      if (reply.size() != size_t{count} * 8) {
        return Status::ProtocolError("mirror digests: " + std::to_string(reply.size()) +
                                     " bytes for " + std::to_string(count) + " granules");
      }
      for (uint32_t i = 0; i < count; i++) out.push_back(GetLe64(reply.data() + 8 * i));
    }
    return out;
  }

  void ManagerLoop() {
    std::array<std::string, kMaxMirrors> last_err;
    while (!stop.load()) {
      for (size_t i = 0; i < LinkCount() && !stop.load(); i++) {
        Link& l = LinkAt(i);
        LinkState state;
        bool failed;
        {
          MutexLock lk(l.mu);
          if (l.state != LinkState::kDown && l.conn &&
              l.conn->state() != fabric::ConnectionState::kConnected) {
            MarkFailedLocked(l, l.conn->error());
          }
          state = l.state;
          failed = l.failed;
        }
        if (state != LinkState::kDown && failed) {
          EnsureDropped(l);
          state = LinkState::kDown;
        }
        if (state == LinkState::kDown) {
          Status s = Attach(l);
          if (!s.ok()) {
            {
              MutexLock lk(l.mu);
              l.st.last_error = s.ToString();
              if (l.state == LinkState::kCopying) {
                l.failed = true;
                l.state = LinkState::kDown;  // never in the in-sync set
                l.st.state = StateName(l.state);
              }
            }
            if (s.ToString() != last_err[i]) {
              LOG_WARN("mirror", "attaching mirror " << l.address << ": " << s.ToString()
                                                     << " (retrying every " << o.retry.count()
                                                     << " ms)");
              last_err[i] = s.ToString();
            }
          } else {
            last_err[i].clear();
          }
        }
      }
      MutexLock lk(mgr_mu);
      mgr_cv.wait_for(lk.native(), o.retry, [&] { return stop.load(); });
    }
  }

  // Async mode: keeps one FLUSH in flight per link while anything is unacknowledged.
  void AsyncLoop() {
    while (!stop.load()) {
      {
        MutexLock lk(mgr_mu);
        async_cv.wait_for(lk.native(), std::chrono::milliseconds(100));
      }
      bool more = true;
      while (more && !stop.load()) {
        more = false;
        for (size_t i = 0, n = LinkCount(); i < n; i++) {
          Link& l = LinkAt(i);
          MutexLock lk(l.mu);
          if (l.state != LinkState::kInSync || l.failed) continue;
          if (l.acked < l.posted) {
            FlushLocked(l, lk, l.posted);
            more = more || l.acked < l.posted;
          }
        }
      }
    }
  }

  // A barrier over every in-sync link: their FLUSHes are posted first and then awaited, so the
  // mirrors acknowledge in parallel.
  std::atomic<uint64_t> barriers{0}, barrier_local_us{0}, barrier_wait_us{0};

  void BeginSync(MirrorSyncTicket* t) {
    t->begun = std::chrono::steady_clock::now();
    t->n = LinkCount();  // a link added later is not in sync yet
    for (size_t i = 0; i < t->n; i++) {
      Link& l = LinkAt(i);
      MirrorSyncTicket::PerLink& m = t->links[i];
      MutexLock lk(l.mu);
      if (l.state != LinkState::kInSync) continue;
      m.insync = true;
      m.target = l.posted;
      if (l.acked < l.posted) m.posted = StartFlushLocked(l, &m.upto, &m.bytes, &m.oldest, &m.st);
    }
  }

  void EndSync(MirrorSyncTicket* t) {
    const auto ended = std::chrono::steady_clock::now();
    bool waited = false;
    for (size_t i = 0; i < t->n; i++) {
      Link& l = LinkAt(i);
      MirrorSyncTicket::PerLink& m = t->links[i];
      bool drop = false;
      if (m.posted) {
        Status s = AwaitFlush(l, m.upto, m.st);
        MutexLock lk(l.mu);
        FinishFlushLocked(l, m.upto, m.bytes, m.oldest, s);
      }
      if (!m.insync) continue;
      waited = true;
      {
        MutexLock lk(l.mu);
        if (l.state != LinkState::kInSync) continue;
        FlushLocked(l, lk, m.target);
        drop = l.failed;
      }
      if (drop) EnsureDropped(l);
    }
    if (waited) {
      auto us = [](auto d) {
        return static_cast<uint64_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(d).count());
      };
      barriers.fetch_add(1, std::memory_order_relaxed);
      barrier_local_us.fetch_add(us(ended - t->begun), std::memory_order_relaxed);
      barrier_wait_us.fetch_add(us(std::chrono::steady_clock::now() - ended),
                                std::memory_order_relaxed);
    }
  }

  void Forward(uint64_t off, uint64_t len) {
    for (size_t i = 0, n = LinkCount(); i < n; i++) {
      Link& l = LinkAt(i);
      MutexLock lk(l.mu);
      PostLocked(l, lk, off, len);
    }
    if (o.async) async_cv.notify_one();
  }
};

void ForwardingPersister::Flush(const void* addr, size_t length) {
  inner_->Flush(addr, length);
  ForwardOnly(addr, length);
}

void ForwardingPersister::ForwardOnly(const void* addr, size_t length) {
  Replicator* r = repl_.load(std::memory_order_acquire);
  if (r == nullptr || length == 0) return;
  const auto* p = static_cast<const uint8_t*>(addr);
  if (p < base_ || p + length > base_ + size_) return;
  // Named crash points of the forwarding path (doc/mirror.md §Crash points): a range persisted
  // here and not yet posted to any mirror; posted, not yet covered by a FLUSH.
  ASYMNVM_CRASH_POINT("mirror.forward.before_post");
  r->Forward(static_cast<uint64_t>(p - base_), length);
  ASYMNVM_CRASH_POINT("mirror.forward.after_post");
}

// The barrier overlaps the local persist with the mirrors' (doc/mirror.md §Overlapped barrier):
// the FLUSH to every in-sync mirror is posted first (it covers every range forwarded so far,
// which includes every range this barrier must make durable: Flush forwards before it returns),
// then the pool persists locally, then the barrier waits for the mirrors' acknowledgements. It
// returns only when both hold, as before; a crash in between leaves ranges flushed and not yet
// drained on one side or both, which the crash contract already allows.
void ForwardingPersister::Drain() {
  Replicator* r = wait_on_drain_ ? repl_.load(std::memory_order_acquire) : nullptr;
  if (r == nullptr) {
    inner_->Drain();
    return;
  }
  ASYMNVM_CRASH_POINT("mirror.sync.before_flush");  // the mirrors' FLUSH not sent
  MirrorSyncTicket t;
  r->BeginSync(&t);
  ASYMNVM_CRASH_POINT("mirror.sync.after_post");  // the mirrors' FLUSH posted, local not durable
  inner_->Drain();
  ASYMNVM_CRASH_POINT("mirror.sync.after_local");  // durable here, the mirrors' ack not awaited
  r->EndSync(&t);
  ASYMNVM_CRASH_POINT("mirror.sync.after_ack");  // on every mirror, not yet acknowledged upward
}

Result<std::unique_ptr<Replicator>> Replicator::Start(const ReplicationOptions& options,
                                                      const fabric::FabricOptions& fabric_options,
                                                      pm::Pool* pool) {
  if (options.on_insync && !options.fenced) {
    return Status::InvalidArgument(
        "replication: on_insync is set without `fenced` (what this process does once a mirror "
        "was promoted: it must acknowledge nothing more)");
  }
  auto impl = std::make_unique<Impl>();
  impl->o = options;
  impl->pool = pool;
  fabric::FabricOptions fo = fabric_options;
  fo.nic_threads = 1;
  ASYMNVM_ASSIGN_OR_RETURN(impl->fabric, fabric::Fabric::Open(fo));
  ASYMNVM_ASSIGN_OR_RETURN(impl->pd, impl->fabric->AllocPd());
  fabric::MemoryRegionOptions mo;
  mo.access = fabric::kLocalWrite;
  ASYMNVM_ASSIGN_OR_RETURN(impl->pool_mr, impl->pd->RegisterMemory(pool->base(), pool->size(), mo));
  std::random_device rd;
  while (impl->stream_id == 0) impl->stream_id = (uint64_t{rd()} << 32) | rd();
  for (const auto& a : options.mirrors) {
    Status s = impl->AddLink(a);
    if (s.code() == StatusCode::kAlreadyExists) continue;  // named twice
    ASYMNVM_RETURN_IF_ERROR(s);
  }
  Impl* p = impl.get();
  impl->manager = std::thread([p] { p->ManagerLoop(); });
  if (options.async) impl->async_flusher = std::thread([p] { p->AsyncLoop(); });
  return std::unique_ptr<Replicator>(new Replicator(std::move(impl)));
}

Replicator::Replicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Replicator::~Replicator() { Stop(); }

size_t Replicator::WaitInSync(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    size_t n = 0;
    const size_t total = impl_->LinkCount();
    for (size_t i = 0; i < total; i++) {
      Impl::Link& l = impl_->LinkAt(i);
      MutexLock lk(l.mu);
      if (l.state == LinkState::kInSync && !l.failed) n++;
    }
    if (n == total || std::chrono::steady_clock::now() >= deadline) return n;
    MutexLock lk(impl_->mgr_mu);
    impl_->mgr_cv.wait_for(lk.native(), std::chrono::milliseconds(50));
  }
}

void Replicator::Forward(uint64_t offset, uint64_t length) { impl_->Forward(offset, length); }

Status Replicator::AddMirror(const std::string& address) {
  if (impl_->stop.load()) return Status::FailedPrecondition("mirror " + address + ": stopping");
  return impl_->AddLink(address);
}

void Replicator::Sync() {
  MirrorSyncTicket t;
  BeginSync(&t);
  EndSync(&t);
}

void Replicator::BeginSync(MirrorSyncTicket* t) {
  t->n = 0;
  if (impl_->o.async || impl_->o.TEST_skip_mirror_flush) return;
  impl_->BeginSync(t);
}

void Replicator::EndSync(MirrorSyncTicket* t) { impl_->EndSync(t); }

bool Replicator::async() const { return impl_->o.async; }

BarrierStats Replicator::barrier_stats() const {
  BarrierStats b;
  b.barriers = impl_->barriers.load(std::memory_order_relaxed);
  b.local_us = impl_->barrier_local_us.load(std::memory_order_relaxed);
  b.mirror_wait_us = impl_->barrier_wait_us.load(std::memory_order_relaxed);
  return b;
}

std::vector<MirrorLinkStats> Replicator::stats() const {
  std::vector<MirrorLinkStats> out;
  for (size_t i = 0, n = impl_->LinkCount(); i < n; i++) {
    Impl::Link& l = impl_->LinkAt(i);
    MutexLock lk(l.mu);
    MirrorLinkStats s = l.st;
    s.state = StateName(l.state);
    if (l.failed && l.state != LinkState::kDown) s.state = "failed";
    out.push_back(s);
  }
  return out;
}

void Replicator::Stop() {
  if (impl_->stop.exchange(true)) return;
  impl_->mgr_cv.notify_all();
  impl_->async_cv.notify_all();
  if (impl_->manager.joinable()) impl_->manager.join();
  if (impl_->async_flusher.joinable()) impl_->async_flusher.join();
  for (size_t i = 0, n = impl_->LinkCount(); i < n; i++) {
    Impl::Link& l = impl_->LinkAt(i);
    {
      MutexLock lk(l.mu);
      if (l.state != LinkState::kDown) impl_->FlushLocked(l, lk, l.posted);
      l.state = LinkState::kDown;
    }
    impl_->CloseLink(l);
  }
  impl_->pool_mr.reset();
  impl_->pd.reset();
  impl_->fabric.reset();
}

}  // namespace asymnvm::backend
