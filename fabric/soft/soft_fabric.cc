// The soft provider: a software RDMA NIC (doc/fabric.md).
//
// Structure: SoftFabric owns the region table and the NIC workers (one epoll thread each). A
// connection's state lives in a ConnCore shared by the user-facing SoftConnection and the worker
// that serves it. Initiator side (Post, under sq_mu_): validate, encode all request packets into
// one buffer, write it to the channel (inline doorbell), remember the outstanding WRs in a fixed
// ring. Worker side: read the channel, parse packets; requests are executed against registered
// memory (target role), responses retire outstanding WRs into the send CQ (initiator role).
// Files: fabric/soft/soft_internal.h.
#include "common/thread_annotations.h"
#include "fabric/soft/soft_internal.h"
#include "fabric/soft/soft_worker.h"
#include "fabric/soft/tls_channel.h"

namespace asymnvm::fabric::soft {
namespace internal {

// ---------------------------------------------------------------------------------------------
// Fabric

class SoftFabric final : public Fabric {
 public:
  SoftFabric(const FabricOptions& o, std::shared_ptr<Extension> ext)
      : options_(o), ext_(std::move(ext)) {}
  ~SoftFabric() override {
    for (auto& w : workers_) w->Stop();
  }

  Status Start() {
    ASYMNVM_ASSIGN_OR_RETURN(tls_, TlsConfig::FromOptions(options_));  // doc/fabric.md §TLS
    for (uint32_t i = 0; i < options_.nic_threads; i++) {
      workers_.push_back(std::make_unique<Worker>(&regions_, options_.spin));
      ASYMNVM_RETURN_IF_ERROR(workers_.back()->Start());
    }
    return Status::Ok();
  }

  std::string provider() const override { return ext_ ? ext_->provider() : "soft"; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.multi_packet_srq_native = true;
    c.atomics = true;
    c.max_inline = kMaxInline;
    c.max_message = kMaxMessage;
    c.transports = {"tcp", "unix", "inproc"};
    return c;
  }
  Result<std::unique_ptr<ProtectionDomain>> AllocPd() override;
  Result<std::unique_ptr<CompletionQueue>> CreateCq(const CompletionQueueOptions& o) override {
    if (o.capacity == 0) return Status::InvalidArgument("CreateCq: capacity 0");
    return std::unique_ptr<CompletionQueue>(new SoftCq(o, options_.spin));
  }
  Result<std::unique_ptr<SharedReceiveQueue>> CreateSrq(ProtectionDomain* pd,
                                                        const SrqOptions& o) override {
    if (pd == nullptr) return Status::InvalidArgument("CreateSrq: null pd");
    if (o.max_wr == 0) return Status::InvalidArgument("CreateSrq: max_wr 0");
    if (o.multi_packet && (o.stride == 0 || (o.stride & (o.stride - 1)) != 0)) {
      return Status::InvalidArgument("CreateSrq: stride must be a power of two");
    }
    return std::unique_ptr<SharedReceiveQueue>(new SoftSrq(this, o));
  }
  Result<std::unique_ptr<Listener>> Listen(ProtectionDomain* pd,
                                           const std::string& address) override;
  Result<std::unique_ptr<Connection>> Connect(ProtectionDomain* pd, const std::string& address,
                                              const ConnectionOptions& options) override;
  Counters counters() const override {
    MutexLock lock(conns_mu_);
    Counters c = retired_;
    for (auto* core : live_) c += core->ctr_.Snapshot();
    return c;
  }

  // Internals.
  Result<uint32_t> NewKey() {
    MutexLock lock(key_mu_);
    for (;;) {
      uint32_t k = static_cast<uint32_t>(rng_());
      if (k != 0 && used_keys_.insert(k).second) return k;
    }
  }
  RegionTable* regions() { return &regions_; }
  Extension* extension() const { return ext_.get(); }
  const FabricOptions& options() const { return options_; }
  // TLS for tcp:// connections (null: off).
  std::shared_ptr<const TlsConfig> tls_for(const Endpoint& ep) const {
    return ep.kind == Endpoint::Kind::kTcp ? tls_ : nullptr;
  }
  uint64_t NewConnId() { return next_conn_id_.fetch_add(1) + 1; }
  uint64_t NewPdId() { return next_pd_id_.fetch_add(1) + 1; }
  void WakeHeld() {
    for (auto& w : workers_) w->Wake();
  }

  Result<std::unique_ptr<Connection>> MakeConnection(uint64_t pd_id, std::unique_ptr<Channel> ch,
                                                     const ConnectionOptions& o,
                                                     std::span<const uint8_t> peer_blob,
                                                     const std::string& peer_address);
  void Retire(ConnCore* core) {
    MutexLock lock(conns_mu_);
    if (live_.erase(core)) retired_ += core->ctr_.Snapshot();
  }

 private:
  FabricOptions options_;
  std::shared_ptr<Extension> ext_;  // the direct path (shm provider), or null
  std::shared_ptr<const TlsConfig> tls_;
  RegionTable regions_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<uint32_t> next_worker_{0};
  std::atomic<uint64_t> next_conn_id_{0};
  std::atomic<uint64_t> next_pd_id_{0};
  Mutex key_mu_;
  std::mt19937_64 rng_{std::random_device{}()};
  std::unordered_set<uint32_t> used_keys_;
  mutable Mutex conns_mu_;
  std::unordered_set<ConnCore*> live_;
  Counters retired_;
};

Status SoftSrq::PostRecv(std::span<const RecvRequest> buffers) {
  ASYMNVM_RETURN_IF_ERROR(rq_.PostRecv(buffers));
  fabric_->WakeHeld();
  return Status::Ok();
}

class SoftPd final : public ProtectionDomain {
 public:
  SoftPd(SoftFabric* f, uint64_t id) : fabric_(f), id_(id) {}
  Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                       const MemoryRegionOptions& o) override {
    if (addr == nullptr || length == 0) {
      return Status::InvalidArgument("RegisterMemory: null address or zero length");
    }
    if ((o.access & ~static_cast<uint32_t>(kAllRemote)) != 0) {
      return Status::InvalidArgument("RegisterMemory: unknown access bits");
    }
    if (reinterpret_cast<uintptr_t>(addr) + length < reinterpret_cast<uintptr_t>(addr)) {
      return Status::InvalidArgument("RegisterMemory: range wraps");
    }
    ASYMNVM_ASSIGN_OR_RETURN(uint32_t key, fabric_->NewKey());
    auto mr = std::make_unique<SoftMr>(fabric_->regions(), addr, length, o.access, key, o.persister,
                                       fabric_->extension());
    fabric_->regions()->Insert(
        key, RegionEntry{static_cast<uint8_t*>(addr), length, o.access, id_, o.persister});
    if (fabric_->extension() != nullptr) {
      fabric_->extension()->OnRegister(id_, key, addr, length, o.access, o.persister);
    }
    return std::unique_ptr<MemoryRegion>(std::move(mr));
  }
  uint64_t id() const { return id_; }

 private:
  SoftFabric* fabric_;
  uint64_t id_;
};

Result<std::unique_ptr<ProtectionDomain>> SoftFabric::AllocPd() {
  return std::unique_ptr<ProtectionDomain>(new SoftPd(this, NewPdId()));
}

class SoftConnection final : public Connection {
 public:
  explicit SoftConnection(std::shared_ptr<ConnCore> core) : core_(std::move(core)) {}
  ~SoftConnection() override {
    Close();
    core_->fabric_->Retire(core_.get());
  }
  Status Post(std::span<const WorkRequest> wrs) override { return core_->Post(wrs); }
  Status PostRecv(std::span<const RecvRequest> buffers) override {
    ASYMNVM_RETURN_IF_ERROR(core_->PostRecv(buffers));
    core_->fabric_->WakeHeld();
    return Status::Ok();
  }
  ConnectionState state() const override { return core_->state(); }
  Status error() const override { return core_->error(); }
  uint64_t id() const override { return core_->id_; }
  const std::vector<uint8_t>& peer_private_data() const override {
    return core_->peer_private_data();
  }
  std::string peer_address() const override { return core_->peer_address(); }
  Counters counters() const override { return core_->ctr_.Snapshot(); }
  void Close() override {
    if (closed_) return;
    closed_ = true;
    core_->worker_->Remove(core_.get());
    core_->MarkClosed();
  }

 private:
  std::shared_ptr<ConnCore> core_;
  bool closed_ = false;
};

Result<std::unique_ptr<Connection>> SoftFabric::MakeConnection(uint64_t pd_id,
                                                               std::unique_ptr<Channel> ch,
                                                               const ConnectionOptions& o,
                                                               std::span<const uint8_t> peer_blob,
                                                               const std::string& peer_address) {
  ASYMNVM_ASSIGN_OR_RETURN(ConnParams peer, ConnParams::Decode(peer_blob));
  std::unique_ptr<DirectConn> direct;
  if (ext_ != nullptr) direct = ext_->Connect(peer.offer);
  auto core = std::make_shared<ConnCore>(this, NewConnId(), pd_id, std::move(ch), o,
                                         std::move(peer), peer_address);
  core->direct_ = std::move(direct);
  {
    MutexLock lock(conns_mu_);
    live_.insert(core.get());
  }
  auto conn = std::make_unique<SoftConnection>(core);
  workers_[next_worker_.fetch_add(1) % workers_.size()]->Add(core);
  return std::unique_ptr<Connection>(std::move(conn));
}

Status ValidateConnOptions(const ConnectionOptions& o) {
  if (o.send_cq == nullptr) return Status::InvalidArgument("connection: send_cq is required");
  if (dynamic_cast<SoftCq*>(o.send_cq) == nullptr ||
      (o.recv_cq && dynamic_cast<SoftCq*>(o.recv_cq) == nullptr)) {
    return Status::InvalidArgument("connection: CQ not created by the soft provider");
  }
  if (o.srq && dynamic_cast<SoftSrq*>(o.srq) == nullptr) {
    return Status::InvalidArgument("connection: SRQ not created by the soft provider");
  }
  if (o.private_data.size() > 1024) {
    return Status::InvalidArgument("connection: private_data longer than 1024 bytes");
  }
  if (o.max_inline > kMaxInline) {
    return Status::InvalidArgument("connection: max_inline above the provider limit");
  }
  if (o.max_send_wr == 0) return Status::InvalidArgument("connection: max_send_wr 0");
  return Status::Ok();
}

std::vector<uint8_t> MyBlob(const ConnectionOptions& o, SoftFabric* f, uint64_t pd_id) {
  ConnParams p;
  if (f->extension() != nullptr) p.offer = f->extension()->Offer(pd_id);
  p.rnr_retry = o.rnr_retry;
  p.rnr_backoff_us = static_cast<uint32_t>(std::max<int64_t>(0, o.rnr_backoff.count()));
  p.max_message = kMaxMessage;
  p.private_data = o.private_data;
  return p.Encode();
}

// Handshakes run concurrently in the listener's HandshakeAcceptor (doc/fabric.md §Handshake): a
// silent, garbage-sending or slow peer costs one pending slot until its own deadline, never the
// accept loop's time.
class SocketListener final : public Listener {
 public:
  SocketListener(SoftFabric* f, uint64_t pd_id, int fd, std::string address,
                 std::shared_ptr<const TlsConfig> tls)
      : fabric_(f),
        pd_id_(pd_id),
        fd_(fd),
        address_(std::move(address)),
        acceptor_(fd_, f->options().cluster_secret, "listener " + address_,
                  HandshakeLimits{.deadline = f->options().handshake_timeout,
                                  .max_pending = f->options().max_pending_handshakes,
                                  .log_lines_per_second = f->options().handshake_log_per_second},
                  std::move(tls)) {}
  ~SocketListener() override {
    ::close(fd_);
    if (address_.rfind("unix://", 0) == 0) ::unlink(address_.substr(7).c_str());
  }
  std::string address() const override { return address_; }
  Result<std::unique_ptr<Connection>> Accept(const ConnectionOptions& o) override {
    ASYMNVM_RETURN_IF_ERROR(ValidateConnOptions(o));
    auto deadline = Clock::now() + o.timeout;
    auto blob = MyBlob(o, fabric_, pd_id_);
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return Status::TimedOut("Accept " + address_ + ": no peer in time");
      auto peer = acceptor_.Accept(blob, left);
      if (!peer.ok()) {
        if (peer.status().code() == StatusCode::kTimedOut) {
          return Status::TimedOut("Accept " + address_ + ": no peer in time");
        }
        return peer.status().WithContext("Accept " + address_);
      }
      auto params = ConnParams::Decode(peer->blob);
      if (params.ok()) {
        return fabric_->MakeConnection(pd_id_, MakeStreamChannel(peer->fd, std::move(peer->tls)), o,
                                       peer->blob, address_);
      }
      LOG_WARN(kLog, "Accept " << address_ << ": refused peer " << peer->address << ": "
                               << params.status().ToString());
      ::close(peer->fd);
    }
  }
  HandshakeAcceptorStats handshake_stats() const { return acceptor_.stats(); }

 private:
  SoftFabric* fabric_;
  uint64_t pd_id_;
  int fd_;
  std::string address_;
  HandshakeAcceptor acceptor_;
};

class InprocListener final : public Listener {
 public:
  InprocListener(SoftFabric* f, uint64_t pd_id, std::string name,
                 std::shared_ptr<InprocListenerState> st)
      : fabric_(f), pd_id_(pd_id), name_(std::move(name)), st_(std::move(st)) {}
  ~InprocListener() override {
    UnregisterInproc(name_);
    MutexLock lock(st_->mu);
    st_->closed = true;
    for (auto& p : st_->pending) {
      MutexLock l2(p->mu);
      if (p->state == InprocPending::State::kWaiting) p->state = InprocPending::State::kRefused;
      p->cv.notify_all();
    }
  }
  std::string address() const override { return "inproc://" + name_; }
  Result<std::unique_ptr<Connection>> Accept(const ConnectionOptions& o) override {
    ASYMNVM_RETURN_IF_ERROR(ValidateConnOptions(o));
    auto deadline = Clock::now() + o.timeout;
    for (;;) {
      std::shared_ptr<InprocPending> p;
      {
        MutexLock lock(st_->mu);
        if (!st_->cv.wait_until(lock.native(), deadline, [&]() ASYMNVM_REQUIRES(st_->mu) {
              return !st_->pending.empty();
            })) {
          return Status::TimedOut("Accept " + address() + ": no peer in time");
        }
        p = st_->pending.front();
        st_->pending.pop_front();
      }
      MutexLock lock(p->mu);
      if (p->state != InprocPending::State::kWaiting) continue;  // the client gave up
      auto params = ConnParams::Decode(p->client_blob);
      if (!SecretsEqual(p->secret, fabric_->options().cluster_secret) || !params.ok()) {
        LOG_WARN(kLog, "Accept " << address() << ": refused a peer with a wrong cluster secret");
        p->state = InprocPending::State::kRefused;
        p->cv.notify_all();
        continue;
      }
      p->server_blob = MyBlob(o, fabric_, pd_id_);
      auto conn = fabric_->MakeConnection(pd_id_, MakeInprocChannel(p->c2s, p->s2c), o,
                                          p->client_blob, address());
      p->state = conn.ok() ? InprocPending::State::kAccepted : InprocPending::State::kRefused;
      p->cv.notify_all();
      return conn;
    }
  }

 private:
  SoftFabric* fabric_;
  uint64_t pd_id_;
  std::string name_;
  std::shared_ptr<InprocListenerState> st_;
};

Result<std::unique_ptr<Listener>> SoftFabric::Listen(ProtectionDomain* pd,
                                                     const std::string& address) {
  auto* spd = dynamic_cast<SoftPd*>(pd);
  if (spd == nullptr) return Status::InvalidArgument("Listen: pd not from the soft provider");
  ASYMNVM_ASSIGN_OR_RETURN(Endpoint ep, ParseAddress(address));
  if (ep.kind == Endpoint::Kind::kInproc) {
    auto st = std::make_shared<InprocListenerState>();
    ASYMNVM_RETURN_IF_ERROR(RegisterInproc(ep.path, st));
    return std::unique_ptr<Listener>(new InprocListener(this, spd->id(), ep.path, st));
  }
  ASYMNVM_RETURN_IF_ERROR(CheckListenSecret(address, options_.cluster_secret));
  Endpoint bound;
  ASYMNVM_ASSIGN_OR_RETURN(int fd, ListenSocket(ep, &bound));
  return std::unique_ptr<Listener>(
      new SocketListener(this, spd->id(), fd, FormatAddress(bound), tls_for(ep)));
}

Result<std::unique_ptr<Connection>> SoftFabric::Connect(ProtectionDomain* pd,
                                                        const std::string& address,
                                                        const ConnectionOptions& o) {
  auto* spd = dynamic_cast<SoftPd*>(pd);
  if (spd == nullptr) return Status::InvalidArgument("Connect: pd not from the soft provider");
  ASYMNVM_RETURN_IF_ERROR(ValidateConnOptions(o));
  ASYMNVM_ASSIGN_OR_RETURN(Endpoint ep, ParseAddress(address));
  auto blob = MyBlob(o, this, spd->id());
  if (ep.kind == Endpoint::Kind::kInproc) {
    auto st = FindInproc(ep.path);
    if (!st) return Status::ConnectionError("Connect " + address + ": no listener");
    auto p = std::make_shared<InprocPending>();
    p->secret = options_.cluster_secret;
    p->client_blob = blob;
    {
      MutexLock lock(st->mu);
      if (st->closed) return Status::ConnectionError("Connect " + address + ": listener closed");
      st->pending.push_back(p);
      st->cv.notify_all();
    }
    MutexLock lock(p->mu);
    p->cv.wait_for(lock.native(), o.timeout, [&]() ASYMNVM_REQUIRES(p->mu) {
      return p->state != InprocPending::State::kWaiting;
    });
    switch (p->state) {
      case InprocPending::State::kWaiting:
        p->state = InprocPending::State::kCancelled;
        return Status::TimedOut("Connect " + address + ": not accepted in time");
      case InprocPending::State::kRefused:
        return Status::PermissionDenied("Connect " + address +
                                        ": refused (cluster secret mismatch or listener closed)");
      default:
        break;
    }
    auto server_blob = p->server_blob;
    lock.unlock();
    return MakeConnection(spd->id(), MakeInprocChannel(p->s2c, p->c2s), o, server_blob, address);
  }
  ASYMNVM_ASSIGN_OR_RETURN(int fd, ConnectSocket(ep, o.timeout));
  std::unique_ptr<TlsStream> tls;
  if (auto cfg = tls_for(ep)) {
    auto t = TlsStream::Connect(*cfg, fd);
    if (!t.ok()) {
      ::close(fd);
      return t.status().WithContext("Connect " + address);
    }
    tls = std::move(t).value();
  }
  std::vector<uint8_t> peer;
  Status st = HandshakeClient(fd, options_.cluster_secret, blob, &peer, o.timeout, tls.get());
  if (!st.ok()) {
    tls.reset();
    ::close(fd);
    return st.WithContext("Connect " + address);
  }
  return MakeConnection(spd->id(), MakeStreamChannel(fd, std::move(tls)), o, peer, address);
}

}  // namespace internal

using namespace internal;

std::vector<uint8_t> ConnParams::Encode() const {
  std::vector<uint8_t> out(20 + private_data.size() + (offer.empty() ? 0 : 4 + offer.size()));
  StoreLe32(out.data(), kMagic);
  StoreLe32(out.data() + 4, rnr_retry);
  StoreLe32(out.data() + 8, rnr_backoff_us);
  StoreLe32(out.data() + 12, max_message);
  StoreLe32(out.data() + 16, static_cast<uint32_t>(private_data.size()));
  if (!private_data.empty()) std::memcpy(out.data() + 20, private_data.data(), private_data.size());
  if (!offer.empty()) {
    uint8_t* o = out.data() + 20 + private_data.size();
    StoreLe32(o, static_cast<uint32_t>(offer.size()));
    std::memcpy(o + 4, offer.data(), offer.size());
  }
  return out;
}

Result<ConnParams> ConnParams::Decode(std::span<const uint8_t> blob) {
  if (blob.size() < 20) return Status::ProtocolError("soft connection parameters: truncated");
  if (LoadLe32(blob.data()) != kMagic) {
    return Status::ProtocolError("soft connection parameters: bad magic (not a soft NIC peer)");
  }
  ConnParams p;
  p.rnr_retry = LoadLe32(blob.data() + 4);
  p.rnr_backoff_us = LoadLe32(blob.data() + 8);
  p.max_message = LoadLe32(blob.data() + 12);
  uint32_t n = LoadLe32(blob.data() + 16);
  if (n > 1024 || blob.size() < 20 + size_t{n}) {
    return Status::ProtocolError("soft connection parameters: bad private data length");
  }
  p.private_data.assign(blob.begin() + 20, blob.begin() + 20 + n);
  size_t rest = blob.size() - 20 - n;
  if (rest != 0) {
    const uint8_t* o = blob.data() + 20 + n;
    uint32_t m = rest >= 4 ? LoadLe32(o) : 0;
    if (rest < 4 || m == 0 || m > kMaxOffer || rest != 4 + size_t{m}) {
      return Status::ProtocolError("soft connection parameters: bad private data length");
    }
    p.offer.assign(o + 4, o + 4 + m);
  }
  return p;
}

Result<std::unique_ptr<Fabric>> OpenSoftFabric(const FabricOptions& options) {
  return OpenSoftFabric(options, nullptr);
}

Result<std::unique_ptr<Fabric>> OpenSoftFabric(const FabricOptions& options,
                                               std::shared_ptr<Extension> extension) {
  if (options.nic_threads == 0 || options.nic_threads > 64) {
    return Status::InvalidArgument("soft fabric: nic_threads must be 1..64");
  }
  FabricOptions resolved = options;  // idempotent after Fabric::Open; tests open it directly
  ASYMNVM_ASSIGN_OR_RETURN(resolved.cluster_secret, ResolveClusterSecret(options));
  resolved.secret_file.clear();
  auto f = std::make_unique<SoftFabric>(resolved, std::move(extension));
  ASYMNVM_RETURN_IF_ERROR(f->Start());
  return std::unique_ptr<Fabric>(std::move(f));
}

}  // namespace asymnvm::fabric::soft
