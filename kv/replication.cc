#include "kv/replication.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <thread>

#include "common/checksum.h"
#include "common/coding.h"
#include "common/logging.h"

namespace asymnvm::kv {

const char* ReplicationModeName(ReplicationMode m) {
  switch (m) {
    case ReplicationMode::kRowan:
      return "rowan";
    case ReplicationMode::kRpc:
      return "rpc";
    case ReplicationMode::kRWrite:
      return "rwrite";
    case ReplicationMode::kBatch:
      return "batch";
    case ReplicationMode::kShare:
      return "share";
  }
  return "?";
}

Result<ReplicationMode> ParseReplicationMode(std::string_view name) {
  for (auto m : {ReplicationMode::kRowan, ReplicationMode::kRpc, ReplicationMode::kRWrite,
                 ReplicationMode::kBatch, ReplicationMode::kShare}) {
    if (name == ReplicationModeName(m)) return m;
  }
  return Status::InvalidArgument("kv: unknown replication mode '" + std::string(name) +
                                 "' (rowan, rpc, rwrite, batch, share)");
}

namespace {

// An unsignaled inline SEND of a small control message (the message is copied at the post).
fabric::WorkRequest InlineSend(void* msg, uint32_t length) {
  fabric::WorkRequest wr;
  wr.opcode = fabric::Opcode::kSend;
  wr.signaled = false;
  wr.inline_data = true;
  wr.local_addr = msg;
  wr.length = length;
  return wr;
}

using namespace remotelog;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kPeerMagic = 0x474f4c522d564b41ull;    // "AKV-RLOG"
constexpr uint64_t kTargetMagic = 0x54474c522d564b41ull;  // "AKV-RLGT"
constexpr uint32_t kRecordMagic = 0x4c52564b;             // "KVRL"
constexpr uint32_t kRecEntry = 1, kRecWrap = 2;
constexpr uint32_t kKindRemote = 1, kKindRpc = 2;
constexpr uint32_t kShareThread = 0xffffffffu;
constexpr size_t kPeerData = 24 + 36;
constexpr size_t kAssignBytes = 48;
constexpr size_t kRpcBuffer = 8 + kMaxPayload;

uint64_t RandomNonce() {
  std::random_device rd;
  return (uint64_t{rd()} << 32 | rd()) | 1;
}

// Table entry: [head u64][generation u64][owner u64][nonce u64][kind u32]
uint64_t Owner(const std::string& uuid, uint32_t thread) {
  return KeyHash(uuid + "/" + std::to_string(thread)) | 1;
}

void EncodeRecord(uint8_t* at, uint64_t pos, uint64_t gen, uint32_t type,
                  std::span<const uint8_t> payload) {
  PutLe32(at + 4, kRecordMagic);
  PutLe64(at + 8, pos);
  PutLe64(at + 16, gen);
  PutLe32(at + 24, static_cast<uint32_t>(payload.size()));
  PutLe32(at + 28, type);
  if (!payload.empty()) std::memcpy(at + kRecordHeader, payload.data(), payload.size());
  PutLe32(at, Crc32c(at + 4, kRecordHeader - 4 + payload.size()));
}

// Whether `fp` bytes can go at the tail of a ring of `ring` bytes without overwriting a record not
// yet applied: they replace positions [tail - ring, tail + fp - ring), and only [head, tail) is
// live. (A record never straddles the ring's end: a wrap record moves it to the next lap first.)
bool Fits(uint64_t tail, uint64_t head, uint64_t fp, uint64_t ring) {
  return tail + fp <= ring || head + ring >= tail + fp;
}

// A record at `off` of a ring of `ring` bytes: type (0 = none), payload length.
uint32_t CheckRecord(const uint8_t* ring, size_t ring_bytes, size_t off, uint64_t gen,
                     uint64_t* pos, uint32_t* len) {
  const uint8_t* at = ring + off;
  if (GetLe32(at + 4) != kRecordMagic || GetLe64(at + 16) != gen) return 0;
  const uint32_t l = GetLe32(at + 24), type = GetLe32(at + 28);
  if ((type != kRecEntry && type != kRecWrap) || l > ring_bytes - off - kRecordHeader) return 0;
  if (GetLe32(at) != Crc32c(at + 4, kRecordHeader - 4 + l)) return 0;
  *pos = GetLe64(at + 8);
  *len = l;
  return type;
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// RemoteLogs (backup)

Result<std::unique_ptr<RemoteLogs>> RemoteLogs::Open(const RemoteLogsOptions& o) {
  if (o.fabric == nullptr || o.pd == nullptr || o.area == nullptr || o.persister == nullptr ||
      !o.apply || o.mode == ReplicationMode::kRowan) {
    return Status::InvalidArgument("kv remote logs: fabric, pd, area, persister, apply required");
  }
  std::unique_ptr<RemoteLogs> r(new RemoteLogs(o));
  ASYMNVM_RETURN_IF_ERROR(r->Init());
  return r;
}

Status RemoteLogs::Init() {
  const size_t n =
      std::min(kMaxSlots, (o_.area_size - std::min(o_.area_size, kTableBytes)) / ring_bytes_);
  const size_t need = o_.mode == ReplicationMode::kRpc ? std::max<size_t>(2, o_.rpc_threads) : 2;
  if (n < need) {
    return Status::InvalidArgument("kv remote logs: the area of " + std::to_string(o_.area_size) +
                                   " bytes holds " + std::to_string(n) + " rings; needs " +
                                   std::to_string(need) + " (raise --blog-size)");
  }
  fabric::MemoryRegionOptions mo;
  mo.access = fabric::kLocalWrite | fabric::kRemoteRead | fabric::kRemoteWrite;
  mo.persister = o_.persister;
  auto mr = o_.pd->RegisterMemory(o_.area, kTableBytes + n * ring_bytes_, mo);
  if (!mr.ok()) return mr.status().WithContext("kv remote logs: registering the area");
  mr_ = std::move(mr).value();
  MutexLock l(mu_);
  for (size_t i = 0; i < n; i++) {
    auto s = std::make_unique<Slot>();
    s->table = o_.area + i * kSlotBytes;
    s->ring = o_.area + kTableBytes + i * ring_bytes_;
    s->head = GetLe64(s->table);
    slots_.push_back(std::move(s));
  }
  // Recovery: whatever any ring holds at or after its head is applied; the writers of every
  // ring are gone (this process restarted), so each starts afresh under a new generation.
  for (auto& s : slots_) {
    const uint64_t owner = GetLe64(s->table + 16);
    if (owner == 0) continue;
    ScanAll(*s);
    ResetSlot(*s, owner, 0, GetLe32(s->table + 32));
  }
  if (o_.mode == ReplicationMode::kRpc) {
    for (uint32_t t = 0; t < o_.rpc_threads; t++) {
      auto th = std::make_unique<RpcThread>();
      const uint64_t owner = Owner("rpc", t);
      size_t pick = slots_.size();
      for (size_t i = 0; i < slots_.size() && pick == slots_.size(); i++) {
        if (GetLe64(slots_[i]->table + 16) == owner) pick = i;
      }
      for (size_t i = 0; i < slots_.size() && pick == slots_.size(); i++) {
        if (GetLe64(slots_[i]->table + 16) == 0) pick = i;
      }
      if (pick == slots_.size()) return Status::ResourceExhausted("kv remote logs: no free ring");
      ResetSlot(*slots_[pick], owner, 0, kKindRpc);
      th->slot = static_cast<uint32_t>(pick);
      auto cq = o_.fabric->CreateCq({.capacity = 4096});
      if (!cq.ok()) return cq.status();
      th->cq = std::move(cq).value();
      rpc_.push_back(std::move(th));
    }
  }
  auto cq = o_.fabric->CreateCq({.capacity = 256, .ring = true});
  if (!cq.ok()) return cq.status();
  accept_cq_ = std::move(cq).value();
  auto lis = o_.fabric->Listen(o_.pd, o_.listen_address);
  if (!lis.ok()) return lis.status().WithContext("kv remote logs: listen on " + o_.listen_address);
  listener_ = std::move(lis).value();
  for (auto& t : rpc_) {
    RpcThread* raw = t.get();
    t->thread = std::thread([this, raw] { RpcLoop(raw); });
  }
  acceptor_ = std::thread([this] { AcceptLoop(); });
  digester_ = std::thread([this] { DigestLoop(); });
  return Status::Ok();
}

RemoteLogs::~RemoteLogs() { Close(); }

void RemoteLogs::Close() {
  if (stop_.exchange(true)) return;
  wake_cv_.notify_all();
  for (auto* t : {&acceptor_, &digester_}) {
    if (t->joinable()) t->join();
  }
  for (auto& t : rpc_) {
    if (t->thread.joinable()) t->thread.join();
    MutexLock l(t->mu);
    for (auto& p : t->peers) p->conn->Close();
    t->peers.clear();
  }
  MutexLock l(mu_);
  for (auto& s : slots_) {
    for (auto& c : s->conns) c->Close();
    s->conns.clear();
  }
  listener_.reset();
}

std::string RemoteLogs::address() const { return listener_ ? listener_->address() : ""; }

void RemoteLogs::StoreHead(Slot& s) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(s.table), s.head, __ATOMIC_RELEASE);
  o_.persister->Persist(s.table, 8);
  s.shared_head.store(s.head, std::memory_order_release);
}

void RemoteLogs::ResetSlot(Slot& s, uint64_t owner, uint64_t nonce, uint32_t kind) {
  for (auto& c : s.conns) c->Close();
  s.conns.clear();
  PutLe64(s.table + 8, GetLe64(s.table + 8) + 1);  // records of the old generation are void
  PutLe64(s.table + 16, owner);
  PutLe64(s.table + 24, nonce);
  PutLe32(s.table + 32, kind);
  o_.persister->Persist(s.table + 8, kSlotBytes - 8);
  s.head = 0;
  StoreHead(s);
  s.assigned_seq = ++seq_;
}

bool RemoteLogs::DigestSlot(Slot& s) {
  const uint64_t gen = GetLe64(s.table + 8);
  const uint64_t start = s.head;
  for (;;) {
    const size_t off = s.head % ring_bytes_;
    uint64_t pos = 0;
    uint32_t len = 0;
    const uint32_t type = CheckRecord(s.ring, ring_bytes_, off, gen, &pos, &len);
    if (type == 0 || pos != s.head) break;
    if (type == kRecWrap) {
      s.head = (s.head / ring_bytes_ + 1) * ring_bytes_;
      continue;
    }
    Status st = o_.apply({s.ring + off + kRecordHeader, len});
    if (!st.ok()) LOG_WARN("kv", "remote-log digest: " << st.ToString());
    digested_++;
    s.head += RecordFootprint(len);
  }
  if (s.head == start) return false;
  StoreHead(s);  // after the entries before it are durable in the replica log (ApplyReplica)
  return true;
}

void RemoteLogs::ScanAll(Slot& s) {
  const uint64_t gen = GetLe64(s.table + 8);
  std::map<uint64_t, std::pair<size_t, uint32_t>> found;  // pos -> (offset, length)
  for (size_t off = 0; off + kRecordHeader <= ring_bytes_; off += 64) {
    uint64_t pos = 0;
    uint32_t len = 0;
    if (CheckRecord(s.ring, ring_bytes_, off, gen, &pos, &len) != kRecEntry) continue;
    if (pos < s.head || pos % ring_bytes_ != off) continue;
    found[pos] = {off, len};
  }
  for (auto& [pos, r] : found) {
    Status st = o_.apply({s.ring + r.first + kRecordHeader, r.second});
    if (!st.ok()) LOG_WARN("kv", "remote-log scan: " << st.ToString());
    digested_++;
  }
}

void RemoteLogs::DigestAll() {
  MutexLock l(mu_);
  for (auto& s : slots_) {
    if (GetLe64(s->table + 16) == 0) continue;
    DigestSlot(*s);
    ScanAll(*s);
  }
}

// Digest in batches, as Rowan's digest takes whole segments: a pass every 1 ms while records
// arrive, backing off to 10 ms when idle (an rpc thread waiting for room wakes it). Nothing waits
// for the digest but a sender whose ring is full; promotion scans the rings itself.
void RemoteLogs::DigestLoop() {
  uint32_t backoff_us = 1000;
  while (!stop_) {
    bool progress = false;
    {
      MutexLock l(mu_);
      for (auto& s : slots_) {
        if (GetLe64(s->table + 16) != 0) progress |= DigestSlot(*s);
      }
    }
    backoff_us = progress ? 1000 : std::min<uint32_t>(backoff_us * 2, 10000);
    MutexLock l(wake_mu_);
    wake_cv_.wait_for(l.native(), std::chrono::microseconds(backoff_us));
  }
}

void RemoteLogs::AcceptLoop() {
  fabric::ConnectionOptions co;
  co.max_send_wr = 64;
  co.max_recv_wr = 4;
  co.rnr_retry = 14;  // the sender posts its first buffer right after its Connect returns
  co.max_inline = 256;
  co.private_data.resize(8 + fabric::RegionDescriptor::kEncodedSize);
  PutLe64(co.private_data.data(), kTargetMagic);
  mr_->descriptor().EncodeTo(co.private_data.data() + 8);
  co.timeout = std::chrono::milliseconds(100);
  size_t next_rpc = 0;
  while (!stop_) {
    RpcThread* rt = rpc_.empty() ? nullptr : rpc_[next_rpc % rpc_.size()].get();
    co.send_cq = co.recv_cq = rt != nullptr ? rt->cq.get() : accept_cq_.get();
    auto c = listener_->Accept(co);
    if (!c.ok()) {
      if (c.status().code() != StatusCode::kTimedOut) {
        LOG_WARN("kv", "remote logs accept: " << c.status().ToString());
      }
      continue;
    }
    std::unique_ptr<fabric::Connection> conn = std::move(c).value();
    const auto& pd = conn->peer_private_data();
    if (pd.size() < kPeerData || GetLe64(pd.data()) != kPeerMagic ||
        GetLe32(pd.data() + 8) != static_cast<uint32_t>(o_.mode)) {
      LOG_WARN("kv", "remote logs: refused a connection from "
                         << conn->peer_address() << " (not a " << ReplicationModeName(o_.mode)
                         << " sender: every server of a cluster needs the same --replication)");
      conn->Close();
      continue;
    }
    if (rt != nullptr) {
      auto peer = std::make_unique<RpcPeer>();
      peer->buf.resize(2 * kRpcBuffer);
      auto mr = o_.pd->RegisterMemory(peer->buf.data(), peer->buf.size(),
                                      {.access = fabric::kLocalWrite});
      if (!mr.ok()) {
        conn->Close();
        continue;
      }
      peer->mr = std::move(mr).value();
      fabric::RecvRequest rr[2];
      for (int i = 0; i < 2; i++) {
        rr[i] = {static_cast<uint64_t>(i), peer->buf.data() + i * kRpcBuffer,
                 static_cast<uint32_t>(kRpcBuffer), peer->mr.get()};
      }
      // The receive buffers are posted: say so (the sender sends nothing before this).
      uint8_t hello[kAssignBytes] = {};
      PutLe64(hello, kTargetMagic);
      fabric::WorkRequest wr = InlineSend(hello, kAssignBytes);
      // Filed before anything can arrive: the thread looks its completions up here.
      MutexLock l(rt->mu);
      if (!conn->PostRecv(rr).ok() || !conn->Post({&wr, 1}).ok()) {
        conn->Close();
        continue;
      }
      peer->conn = std::move(conn);
      rt->peers.push_back(std::move(peer));
      next_rpc++;
      continue;
    }
    const uint32_t thread = GetLe32(pd.data() + 12);
    const uint64_t nonce = GetLe64(pd.data() + 16);
    const std::string uuid(reinterpret_cast<const char*>(pd.data() + 24), 36);
    const uint64_t owner = Owner(uuid, thread);
    uint8_t msg[kAssignBytes] = {};
    {
      MutexLock l(mu_);
      // Drop connections that died.
      for (auto& s : slots_) {
        std::erase_if(s->conns, [](const std::unique_ptr<fabric::Connection>& x) {
          return x->state() != fabric::ConnectionState::kConnected;
        });
      }
      Slot* slot = nullptr;
      for (auto& s : slots_) {
        if (GetLe64(s->table + 16) == owner) slot = s.get();
      }
      for (auto& s : slots_) {  // else a free ring
        if (slot == nullptr && GetLe64(s->table + 16) == 0) slot = s.get();
      }
      Slot* idle = nullptr;  // else the least recently assigned idle one
      for (auto& s : slots_) {
        if (slot != nullptr || GetLe32(s->table + 32) != kKindRemote || !s->conns.empty()) continue;
        if (idle == nullptr || s->assigned_seq < idle->assigned_seq) idle = s.get();
      }
      if (slot == nullptr) slot = idle;
      if (slot == nullptr) {
        LOG_WARN("kv", "remote logs: no free ring for " << uuid << " thread " << thread);
        conn->Close();
        continue;
      }
      if (GetLe64(slot->table + 16) != owner || GetLe64(slot->table + 24) != nonce) {
        // A new session of this sender (or a new owner): apply what the ring holds, then
        // start it over under a new generation.
        DigestSlot(*slot);
        ScanAll(*slot);
        ResetSlot(*slot, owner, nonce, kKindRemote);
      }
      PutLe64(msg, kTargetMagic);
      PutLe64(msg + 8, mr_->descriptor().addr + (slot->ring - o_.area));
      PutLe64(msg + 16, ring_bytes_);
      PutLe64(msg + 24, mr_->descriptor().addr + (slot->table - o_.area));
      PutLe64(msg + 32, GetLe64(slot->table + 8));
      PutLe64(msg + 40, slot->head);
      fabric::WorkRequest wr = InlineSend(msg, kAssignBytes);
      Status st = conn->Post({&wr, 1});
      if (!st.ok()) {
        conn->Close();
        continue;
      }
      slot->conns.push_back(std::move(conn));
    }
  }
}

Status RemoteLogs::WriteLocal(RpcThread* t, std::span<const uint8_t> payload) {
  Slot& s = *slots_[t->slot];
  const uint64_t gen = GetLe64(s.table + 8);  // fixed while this process runs (reset at start)
  const size_t fp = RecordFootprint(payload.size());
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  // Waits until `bytes` can go at the tail without overwriting a record not yet applied.
  auto wait_room = [&](uint64_t bytes) {
    uint32_t backoff_us = 20;
    while (!Fits(t->tail, s.shared_head.load(std::memory_order_acquire), bytes, ring_bytes_)) {
      if (Clock::now() > deadline || stop_) {
        return Status::ResourceExhausted("kv rpc backup: its log stayed full");
      }
      wake_cv_.notify_all();
      std::this_thread::sleep_for(std::chrono::microseconds(backoff_us));
      backoff_us = std::min<uint32_t>(backoff_us * 2, 1000);
    }
    return Status::Ok();
  };
  const size_t off = t->tail % ring_bytes_;
  if (off + fp > ring_bytes_) {
    // A wrap record ends the lap; the entry starts the next one once the digest has passed the
    // wrap record (the entry may cover it).
    ASYMNVM_RETURN_IF_ERROR(wait_room(64));
    EncodeRecord(s.ring + off, t->tail, gen, kRecWrap, {});
    o_.persister->Persist(s.ring + off, kRecordHeader);
    t->tail += ring_bytes_ - off;
  }
  ASYMNVM_RETURN_IF_ERROR(wait_room(fp));
  uint8_t* at = s.ring + t->tail % ring_bytes_;
  EncodeRecord(at, t->tail, gen, kRecEntry, payload);
  o_.persister->Persist(at, kRecordHeader + payload.size());
  t->tail += fp;
  return Status::Ok();
}

void RemoteLogs::RpcLoop(RpcThread* t) {
  fabric::Completion cs[32];
  while (!stop_) {
    auto n = t->cq->Wait(cs, std::chrono::milliseconds(100));
    if (!n.ok()) {
      LOG_WARN("kv", "rpc backup: " << n.status().ToString());
      continue;
    }
    for (size_t i = 0; i < *n; i++) {
      const fabric::Completion& c = cs[i];
      RpcPeer* peer = nullptr;
      {
        MutexLock l(t->mu);
        for (auto& p : t->peers) {
          if (p->conn->id() == c.connection_id) peer = p.get();
        }
        if (peer != nullptr && c.status != fabric::CompletionStatus::kSuccess) {
          std::erase_if(t->peers,
                        [&](const std::unique_ptr<RpcPeer>& p) { return p.get() == peer; });
          continue;
        }
      }
      if (peer == nullptr || c.opcode != fabric::Opcode::kRecv || c.wr_id > 1) continue;
      uint8_t* msg = peer->buf.data() + c.wr_id * kRpcBuffer + c.offset;
      uint8_t reply[16] = {};
      if (c.byte_len >= 8 + 48) {
        std::memcpy(reply, msg, 8);
        Status st = WriteLocal(t, {msg + 8, c.byte_len - 8});
        PutLe32(reply + 8, st.ok() ? 0 : 1);
      } else {
        PutLe32(reply + 8, 2);
      }
      fabric::RecvRequest rr{c.wr_id, peer->buf.data() + c.wr_id * kRpcBuffer,
                             static_cast<uint32_t>(kRpcBuffer), peer->mr.get()};
      fabric::WorkRequest wr = InlineSend(reply, static_cast<uint32_t>(sizeof(reply)));
      Status a = peer->conn->PostRecv({&rr, 1});
      Status b = peer->conn->Post({&wr, 1});
      if (!a.ok() || !b.ok()) {
        peer->conn->Close();
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// RemoteLogSender (primary)

Result<std::unique_ptr<RemoteLogSender>> RemoteLogSender::Connect(const RemoteLogSenderOptions& o) {
  if (o.fabric == nullptr || o.pd == nullptr || o.address.empty() || o.self_uuid.size() != 36 ||
      o.mode == ReplicationMode::kRowan || (o.mode == ReplicationMode::kShare && !o.shared)) {
    return Status::InvalidArgument("kv remote-log sender: bad options");
  }
  std::unique_ptr<RemoteLogSender> s(new RemoteLogSender(o));
  ASYMNVM_RETURN_IF_ERROR(s->Init());
  return s;
}

RemoteLogSender::~RemoteLogSender() {
  if (conn_) conn_->Close();
  conn_.reset();
}

Status RemoteLogSender::Init() {
  auto cq = o_.fabric->CreateCq({.capacity = 8192});
  if (!cq.ok()) return cq.status();
  cq_ = std::move(cq).value();
  small_.resize(128);
  auto smr = o_.pd->RegisterMemory(small_.data(), small_.size(), {.access = fabric::kLocalWrite});
  if (!smr.ok()) return smr.status();
  small_mr_ = std::move(smr).value();
  buf_.resize(o_.mode == ReplicationMode::kRpc ? kRpcBuffer : 2 * kMaxRecord + 4096);
  auto mr = o_.pd->RegisterMemory(buf_.data(), buf_.size(), {.access = fabric::kLocalWrite});
  if (!mr.ok()) return mr.status();
  mr_ = std::move(mr).value();
  fabric::ConnectionOptions co;
  co.send_cq = co.recv_cq = cq_.get();
  co.max_send_wr = 4096;
  co.max_recv_wr = 4;
  co.rnr_retry = 14;
  co.max_inline = 4096;
  co.timeout = o_.timeout;
  co.private_data.resize(kPeerData);
  PutLe64(co.private_data.data(), kPeerMagic);
  PutLe32(co.private_data.data() + 8, static_cast<uint32_t>(o_.mode));
  PutLe32(co.private_data.data() + 12,
          o_.mode == ReplicationMode::kShare ? kShareThread : o_.thread);
  PutLe64(co.private_data.data() + 16, o_.shared ? o_.shared->nonce : RandomNonce());
  std::memcpy(co.private_data.data() + 24, o_.self_uuid.data(), 36);
  auto c = o_.fabric->Connect(o_.pd, o_.address, co);
  if (!c.ok()) return c.status().WithContext("kv remote logs: connect " + o_.address);
  conn_ = std::move(c).value();
  fabric::RecvRequest rr{0, small_.data(), 64, small_mr_.get()};
  ASYMNVM_RETURN_IF_ERROR(conn_->PostRecv({&rr, 1}));
  const auto& pd = conn_->peer_private_data();
  if (pd.size() < 8 + fabric::RegionDescriptor::kEncodedSize ||
      GetLe64(pd.data()) != kTargetMagic) {
    return Status::ProtocolError("kv remote logs: " + o_.address + " is not a remote-log target");
  }
  ASYMNVM_ASSIGN_OR_RETURN(region_, fabric::RegionDescriptor::Decode(pd.data() + 8, pd.size() - 8));
  fabric::Completion c0;
  ASYMNVM_RETURN_IF_ERROR(WaitFor(0, fabric::Opcode::kRecv, Clock::now() + o_.timeout, &c0));
  if (c0.byte_len < kAssignBytes || GetLe64(small_.data()) != kTargetMagic) {
    return Status::ProtocolError("kv remote logs: bad ring assignment");
  }
  if (o_.mode == ReplicationMode::kRpc) {  // the backup's buffers are posted; ours takes replies
    return conn_->PostRecv({&rr, 1});
  }
  const uint64_t ring = GetLe64(small_.data() + 8), bytes = GetLe64(small_.data() + 16),
                 head = GetLe64(small_.data() + 24), gen = GetLe64(small_.data() + 32),
                 start = GetLe64(small_.data() + 40);
  if (o_.shared) {
    MutexLock l(o_.shared->mu);
    if (!o_.shared->assigned) {
      o_.shared->assigned = true;
      o_.shared->ring_addr = ring;
      o_.shared->ring_bytes = bytes;
      o_.shared->head_addr = head;
      o_.shared->generation = gen;
      o_.shared->tail = o_.shared->head = start;
    } else if (o_.shared->generation != gen) {
      o_.shared->broken = true;  // the backup restarted the ring under us
      return Status::ConnectionError("kv share: the backup reset the shared ring");
    }
  } else {
    ring_addr_ = ring;
    ring_bytes_ = bytes;
    head_addr_ = head;
    generation_ = gen;
    tail_ = head_ = start;
  }
  return Status::Ok();
}

Status RemoteLogSender::WaitFor(uint64_t wr_id, fabric::Opcode op, Clock::time_point deadline,
                                fabric::Completion* out) {
  fabric::Completion cs[16];
  for (;;) {
    const auto now = Clock::now();
    if (now >= deadline) return Status::TimedOut("kv replication: no acknowledgement in time");
    auto n = cq_->Wait(cs, std::chrono::duration_cast<std::chrono::microseconds>(deadline - now));
    if (!n.ok()) return n.status();
    bool hit = false;
    for (size_t i = 0; i < *n; i++) {
      if (cs[i].status != fabric::CompletionStatus::kSuccess) {
        return Status::ConnectionError(std::string("kv replication: ") +
                                       fabric::OpcodeName(cs[i].opcode) + " completed with " +
                                       fabric::CompletionStatusName(cs[i].status));
      }
      if (cs[i].opcode == op && (op == fabric::Opcode::kRecv || cs[i].wr_id == wr_id)) {
        *out = cs[i];
        hit = true;
      }
    }
    if (hit) return Status::Ok();
  }
}

Status RemoteLogSender::ReadHead(uint64_t head_addr, uint64_t* head, Clock::time_point dl) {
  fabric::WorkRequest wr;
  wr.wr_id = next_id_++;
  wr.opcode = fabric::Opcode::kRead;
  wr.local_addr = small_.data() + 64;
  wr.length = 8;
  wr.local_mr = small_mr_.get();
  wr.remote_addr = head_addr;
  wr.rkey = region_.rkey;
  ASYMNVM_RETURN_IF_ERROR(conn_->Post({&wr, 1}));
  fabric::Completion c;
  ASYMNVM_RETURN_IF_ERROR(WaitFor(wr.wr_id, fabric::Opcode::kRead, dl, &c));
  *head = GetLe64(small_.data() + 64);
  return Status::Ok();
}

Status RemoteLogSender::Stage(std::span<const uint8_t> payload, Clock::time_point deadline) {
  if (payload.size() > kMaxPayload) return Status::InvalidArgument("kv replication: entry too big");
  SharedRing* sh = o_.shared.get();
  if (sh == nullptr) {
    RingView v{&tail_, &head_, ring_addr_, ring_bytes_, head_addr_, generation_};
    return StageIn(v, payload, deadline);
  }
  MutexLock l(sh->mu);
  if (sh->broken) return Status::ConnectionError("kv share: the shared ring is broken");
  RingView v{&sh->tail, &sh->head, sh->ring_addr, sh->ring_bytes, sh->head_addr, sh->generation};
  Status st = StageIn(v, payload, deadline);
  if (!st.ok()) sh->broken = true;
  return st;
}

Status RemoteLogSender::StageIn(const RingView& v, std::span<const uint8_t> payload,
                                Clock::time_point deadline) {
  const size_t fp = RecordFootprint(payload.size());
  uint64_t* tail = v.tail;
  uint64_t* head = v.head;
  const uint64_t ring = v.ring_addr, bytes = v.ring_bytes, gen = v.generation;
  auto wait_room = [&](uint64_t need) {
    uint32_t backoff_us = 20;
    while (!Fits(*tail, *head, need, bytes)) {
      ASYMNVM_RETURN_IF_ERROR(ReadHead(v.head_addr, head, deadline));
      if (Fits(*tail, *head, need, bytes)) break;
      if (Clock::now() > deadline)
        return Status::TimedOut("kv replication: the backup's log is full");
      std::this_thread::sleep_for(std::chrono::microseconds(backoff_us));
      backoff_us = std::min<uint32_t>(backoff_us * 2, 1000);
    }
    return Status::Ok();
  };
  auto add_run = [&](uint64_t remote, size_t local, size_t length) {
    if (!runs_.empty()) {
      Run& last = runs_.back();
      const size_t padded = (last.length + 63) / 64 * 64;
      if (last.remote + padded == remote && last.local + padded == local) {
        last.length = padded + length;
        return;
      }
    }
    runs_.push_back({remote, local, length});
  };
  const size_t off = *tail % bytes;
  if (off + fp > bytes) {
    // A wrap record ends the lap. The entry may cover it at the next lap, so it goes out (lands)
    // now, and the entry waits until the digest has passed it.
    ASYMNVM_RETURN_IF_ERROR(wait_room(64));
    EncodeRecord(buf_.data() + used_, *tail, gen, kRecWrap, {});
    add_run(ring + off, used_, kRecordHeader);
    used_ += 64;
    *tail += bytes - off;
    ASYMNVM_RETURN_IF_ERROR(PostRuns(false));
  }
  ASYMNVM_RETURN_IF_ERROR(wait_room(fp));
  EncodeRecord(buf_.data() + used_, *tail, gen, kRecEntry, payload);
  add_run(ring + *tail % bytes, used_, kRecordHeader + payload.size());
  used_ += fp;
  staged_ += fp;
  *tail += fp;
  return Status::Ok();
}

Status RemoteLogSender::PostRuns(bool flush) {
  std::vector<fabric::WorkRequest> wrs;
  for (const Run& r : runs_) {
    fabric::WorkRequest wr;
    wr.opcode = fabric::Opcode::kWrite;
    wr.signaled = false;
    wr.inline_data = r.length <= 4096;
    wr.local_addr = buf_.data() + r.local;
    wr.length = static_cast<uint32_t>(r.length);
    wr.local_mr = mr_.get();
    wr.remote_addr = r.remote;
    wr.rkey = region_.rkey;
    wrs.push_back(wr);
  }
  runs_.clear();
  staged_ = 0;
  if (flush) {
    fabric::WorkRequest wr;
    wr.wr_id = next_id_++;
    wr.opcode = fabric::Opcode::kFlush;
    wr.remote_addr = region_.addr;
    wr.rkey = region_.rkey;
    wrs.push_back(wr);
    await_id_ = wr.wr_id;  // the FLUSH to await
    outstanding_ = true;
  }
  if (wrs.empty()) return Status::Ok();
  return conn_->Post(wrs);
}

Status RemoteLogSender::Post(std::span<const uint8_t> entry) {
  const auto deadline = Clock::now() + o_.timeout;
  switch (o_.mode) {
    case ReplicationMode::kRpc: {
      if (entry.size() > kMaxPayload) return Status::InvalidArgument("kv rpc: entry too big");
      await_id_ = next_id_++;
      PutLe64(buf_.data(), await_id_);
      std::memcpy(buf_.data() + 8, entry.data(), entry.size());
      fabric::WorkRequest wr;
      wr.opcode = fabric::Opcode::kSend;
      wr.signaled = false;
      wr.length = static_cast<uint32_t>(8 + entry.size());
      wr.inline_data = wr.length <= 4096;
      wr.local_addr = buf_.data();
      wr.local_mr = mr_.get();
      outstanding_ = true;
      return conn_->Post({&wr, 1});
    }
    case ReplicationMode::kBatch: {
      if (used_ + kMaxRecord + 64 > buf_.size()) ASYMNVM_RETURN_IF_ERROR(Await(deadline));
      ASYMNVM_RETURN_IF_ERROR(Stage(entry, deadline));
      // An XPLine staged: WRITE it now, with a FLUSH in the same doorbell (Await waits for the
      // last FLUSH posted; the earlier ones complete before it).
      return staged_ >= kBatchBytes ? PostRuns(true) : Status::Ok();
    }
    default:
      ASYMNVM_RETURN_IF_ERROR(Stage(entry, deadline));
      return PostRuns(true);
  }
}

Status RemoteLogSender::Await(Clock::time_point deadline) {
  if (o_.mode == ReplicationMode::kBatch && !runs_.empty()) ASYMNVM_RETURN_IF_ERROR(PostRuns(true));
  if (!outstanding_) return Status::Ok();
  fabric::Completion c;
  if (o_.mode == ReplicationMode::kRpc) {
    ASYMNVM_RETURN_IF_ERROR(WaitFor(0, fabric::Opcode::kRecv, deadline, &c));
    const uint64_t token = GetLe64(small_.data());
    const uint32_t code = GetLe32(small_.data() + 8);
    fabric::RecvRequest rr{0, small_.data(), 64, small_mr_.get()};
    ASYMNVM_RETURN_IF_ERROR(conn_->PostRecv({&rr, 1}));
    if (token != await_id_) return Status::ProtocolError("kv rpc: reply to another request");
    if (code != 0) return Status::ResourceExhausted("kv rpc: the backup could not log the entry");
  } else {
    Status st = WaitFor(await_id_, fabric::Opcode::kFlush, deadline, &c);
    if (!st.ok()) {
      if (o_.shared) {
        MutexLock l(o_.shared->mu);
        o_.shared->broken = true;
      }
      return st;
    }
    used_ = 0;
  }
  outstanding_ = false;
  return Status::Ok();
}

}  // namespace asymnvm::kv
