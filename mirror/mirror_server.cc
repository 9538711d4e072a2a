#include "mirror/mirror_server.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/replication.h"
#include "backend/rpc.h"
#include "common/checksum.h"
#include "common/logging.h"
#include "common/thread_annotations.h"
#include "fabric/oq/oq.h"

namespace asymnvm::mirror {
namespace {

std::string SidecarPath(const std::string& pool_path) { return pool_path + ".mirror"; }

Result<std::array<uint8_t, 16>> ParseUuid(const std::string& text) {
  std::array<uint8_t, 16> u{};
  std::string hex;
  for (char c : text) {
    if (c != '-') hex += c;
  }
  if (hex.size() != 32) return Status::Corruption("bad uuid '" + text + "'");
  for (size_t i = 0; i < 16; i++) {
    try {
      u[i] = static_cast<uint8_t>(std::stoul(hex.substr(2 * i, 2), nullptr, 16));
    } catch (...) {
      return Status::Corruption("bad uuid '" + text + "'");
    }
  }
  return u;
}

// Writes the sidecar atomically and durably (tmp, fsync, rename, fsync the directory).
Status WriteMirrorState(const std::string& pool_path, const MirrorState& s) {
  const std::string path = SidecarPath(pool_path);
  const std::string tmp = path + ".tmp";
  std::string text = "state " + s.state + "\nuuid " + (s.has_uuid ? pm::UuidToString(s.uuid) : "") +
                     "\nterm " + std::to_string(s.term) + "\nprimary " + s.primary + "\nstream " +
                     std::to_string(s.stream) + "\n";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError("create " + tmp, errno);
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()) &&
                  ::fsync(fd) == 0;
  const int e = errno;
  ::close(fd);
  if (!ok) return Status::IoError("write " + tmp, e);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return Status::IoError("rename " + tmp, errno);
  std::string dir =
      path.substr(0, path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/'));
  if (dir.empty()) dir = ".";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return Status::Ok();
}

}  // namespace

Result<MirrorState> ReadMirrorState(const std::string& pool_path) {
  MirrorState s;
  std::ifstream in(SidecarPath(pool_path));
  if (!in) return s;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("state ", 0) == 0) {
      s.state = line.substr(6);
    } else if (line.rfind("uuid ", 0) == 0 && line.size() > 5) {
      ASYMNVM_ASSIGN_OR_RETURN(s.uuid, ParseUuid(line.substr(5)));
      s.has_uuid = true;
    } else if (line.rfind("term ", 0) == 0) {
      try {
        s.term = std::stoull(line.substr(5));
      } catch (...) {
        return Status::Corruption(SidecarPath(pool_path) + ": bad term line");
      }
    } else if (line.rfind("primary ", 0) == 0) {
      s.primary = line.substr(8);
    } else if (line.rfind("stream ", 0) == 0) {
      try {
        s.stream = std::stoull(line.substr(7));
      } catch (...) {
        return Status::Corruption(SidecarPath(pool_path) + ": bad stream line");
      }
    }
  }
  if (s.state != "empty" && s.state != "syncing" && s.state != "in-sync") {
    return Status::Corruption(SidecarPath(pool_path) + ": unknown state '" + s.state + "'");
  }
  return s;
}

// The mirror pool's persister in msync mode: one sync per primary FLUSH. A FLUSH covers every
// range the primary posted since the last one — op logs in the b-log, transactions in the OQ
// area, applied writes and LPN/OPN words in the data and naming areas, far apart — and the pool's
// own msync persister syncs each merged range with its own msync (one device flush each: about
// two per update where the primary, which syncs only its landings, makes one). Here Drain syncs
// the hull of the ranges its thread flushed with ONE msync instead (the soft NIC's worker stages
// every waiting connection's ranges, then drains once: a group commit across FLUSHes). That
// persists at least what was flushed; the other dirty pages in the hull are forwarded bytes that
// the next FLUSH would sync anyway (everything in a mirror's pool arrives as a forwarded range),
// and on a file mapping the kernel may write back any dirty page at any time in any case, so
// syncing them early promises nothing that msync mode did not already allow.
class HullPersister final : public pm::Persister {
 public:
  explicit HullPersister(pm::Persister* inner) : inner_(inner) {}
  void Flush(const void* addr, size_t length) override {
    if (length == 0) return;
    const auto lo = reinterpret_cast<uintptr_t>(addr), hi = lo + length;
    MutexLock lock(mu_);
    auto [it, fresh] = pending_.try_emplace(std::this_thread::get_id(), lo, hi);
    if (!fresh) {
      it->second.first = std::min(it->second.first, lo);
      it->second.second = std::max(it->second.second, hi);
    }
  }
  void Drain() override {
    std::pair<uintptr_t, uintptr_t> r{0, 0};
    {
      MutexLock lock(mu_);
      auto it = pending_.find(std::this_thread::get_id());
      if (it == pending_.end()) return;
      r = it->second;
      pending_.erase(it);
    }
    inner_->Flush(reinterpret_cast<const void*>(r.first), r.second - r.first);
    inner_->Drain();
  }

 private:
  pm::Persister* inner_;
  Mutex mu_;
  std::unordered_map<std::thread::id, std::pair<uintptr_t, uintptr_t>> pending_
      ASYMNVM_GUARDED_BY(mu_);
};

struct MirrorServer::Impl {
  MirrorOptions o;
  mutable Mutex mu;  // pool, mr, st
  std::unique_ptr<pm::Pool> pool ASYMNVM_GUARDED_BY(mu);
  std::unique_ptr<HullPersister> hull ASYMNVM_GUARDED_BY(mu);  // msync mode: the region's
  MirrorState st ASYMNVM_GUARDED_BY(mu);
  std::unique_ptr<fabric::Fabric> fabric;
  std::unique_ptr<fabric::ProtectionDomain> pd;
  std::unique_ptr<fabric::MemoryRegion> mr ASYMNVM_GUARDED_BY(mu);
  std::unique_ptr<fabric::CompletionQueue> cq;
  std::unique_ptr<fabric::Listener> listener;
  std::vector<std::unique_ptr<fabric::Connection>> conns ASYMNVM_GUARDED_BY(mu);
  std::unique_ptr<oq::Server> server;
  std::thread acceptor;
  std::atomic<bool> stop{false};
  uint64_t hellos = 0, syncs = 0;

  Status OpenPool(uint64_t size_if_new) ASYMNVM_REQUIRES(mu) {
    pm::PoolOptions po;
    po.mode = o.persist_mode;
    po.crash_sim = o.crash_sim;
    po.layout = "";  // a copy carries the primary's superblock (layout asymnvm-backend)
    if (::access(o.pool_path.c_str(), F_OK) == 0) {
      ASYMNVM_ASSIGN_OR_RETURN(pool, pm::Pool::Open(o.pool_path, po));
    } else {
      if (size_if_new == 0) return Status::Ok();  // created on the first hello
      po.layout = "asymnvm-backend";
      ASYMNVM_ASSIGN_OR_RETURN(pool, pm::Pool::Create(o.pool_path, size_if_new, po));
    }
    fabric::MemoryRegionOptions mo;
    mo.access = fabric::kLocalWrite | fabric::kRemoteWrite | fabric::kRemoteRead;
    mo.persister = pool->persister();
    if (pool->mode() == pm::PersistMode::kMsync && !o.crash_sim) {
      hull = std::make_unique<HullPersister>(pool->persister());
      mo.persister = hull.get();
    }
    ASYMNVM_ASSIGN_OR_RETURN(mr, pd->RegisterMemory(pool->base(), pool->size(), mo));
    return Status::Ok();
  }

  Status Hello(std::span<const uint8_t> payload, std::vector<uint8_t>* response) {
    backend::PayloadReader r(payload, "mirror hello");
    const uint64_t size = r.U64();
    auto uuid_bytes = r.Bytes(16);
    const uint64_t term = r.U64();
    const uint32_t nlen = r.U32();
    auto name = r.Bytes(nlen);
    const uint64_t stream = r.remaining() >= 8 ? r.U64() : 0;  // absent from older primaries
    ASYMNVM_RETURN_IF_ERROR(r.status());
    if (size < pm::kMinPoolSize || size % pm::kSuperblockSize != 0 || size > (uint64_t{1} << 44)) {
      return Status::InvalidArgument("mirror hello: impossible pool size " + std::to_string(size));
    }
    std::array<uint8_t, 16> uuid{};
    std::memcpy(uuid.data(), uuid_bytes.data(), 16);
    MutexLock lock(mu);
    if (st.has_uuid && st.uuid != uuid) {
      return Status::FailedPrecondition(
          "mirror " + o.pool_path + " belongs to group " + pm::UuidToString(st.uuid) + ", not " +
          pm::UuidToString(uuid) + " (remove its pool and " + o.pool_path + ".mirror to reuse it)");
    }
    if (!pool) ASYMNVM_RETURN_IF_ERROR(OpenPool(size));
    if (!pool) return Status::Internal("mirror: no pool after opening " + o.pool_path);
    if (pool->size() != size) {
      return Status::FailedPrecondition("mirror pool " + o.pool_path + " is " +
                                        std::to_string(pool->size()) + " bytes, the primary's " +
                                        std::to_string(size));
    }
    // This pool holds that stream's copy (as of its last acknowledged FLUSH): the primary may send
    // only what it missed. Anything else (another stream, a copy that did not finish) needs all.
    const bool resumable = stream != 0 && st.state == "in-sync" && st.stream == stream &&
                           st.has_uuid && st.uuid == uuid;
    // The data connections of an earlier primary (or an earlier attach of this one) are closed
    // first: none of their WRITEs lands after the digests or the copy that follow.
    conns.clear();
    // Durably "syncing" before the primary may write a byte: a torn copy is never promoted.
    MirrorState next = st;
    next.stream = stream;
    next.state = "syncing";
    next.uuid = uuid;
    next.has_uuid = true;
    next.term = term;
    next.primary = std::string(name.begin(), name.end());
    ASYMNVM_RETURN_IF_ERROR(WriteMirrorState(o.pool_path, next));
    st = next;
    hellos++;
    backend::PayloadWriter w;
    uint8_t desc[fabric::RegionDescriptor::kEncodedSize];
    mr->descriptor().EncodeTo(desc);
    w.Bytes(desc);
    const std::string a = listener->address();
    w.U32(static_cast<uint32_t>(a.size()));
    w.Str(a);
    w.U32(static_cast<uint32_t>(o.name.size()));
    w.Str(o.name);
    w.U8(resumable ? 1 : 0);
    *response = std::move(w.bytes());
    LOG_INFO("mirror", "primary " << st.primary << " (term " << term << ") starts "
                                  << (resumable ? "an incremental catch-up" : "a full copy")
                                  << " of a " << size << "-byte pool, group "
                                  << pm::UuidToString(uuid));
    return Status::Ok();
  }

  // kMirrorDigests: XXH3-64 of granules [first, first + count) of the pool. Only while
  // syncing (between a hello and the copy's end: nothing is forwarded to the pool before the
  // primary has its digests).
  Status Digests(std::span<const uint8_t> payload, std::vector<uint8_t>* response) {
    backend::PayloadReader r(payload, "mirror digests");
    const uint64_t first = r.U64();
    const uint32_t count = r.U32();
    ASYMNVM_RETURN_IF_ERROR(r.status());
    MutexLock lock(mu);
    if (!pool || st.state != "syncing") {
      return Status::FailedPrecondition("mirror digests: no hello in progress (state " + st.state +
                                        ")");
    }
    const uint64_t granules =
        (pool->size() + backend::kMirrorGranule - 1) / backend::kMirrorGranule;
    if (count == 0 || count > backend::kMaxDigestsPerCall || first >= granules ||
        count > granules - first) {
      return Status::InvalidArgument("mirror digests: granules [" + std::to_string(first) + ", +" +
                                     std::to_string(count) + ") of " + std::to_string(granules));
    }
    backend::PayloadWriter w;
    for (uint64_t g = first; g < first + count; g++) {
      const uint64_t off = g * backend::kMirrorGranule;
      w.U64(Hash64(pool->base() + off, std::min(backend::kMirrorGranule, pool->size() - off)));
    }
    *response = std::move(w.bytes());
    return Status::Ok();
  }

  Status Synced(std::span<const uint8_t> payload) {
    backend::PayloadReader r(payload, "mirror synced");
    const uint64_t term = r.U64();
    ASYMNVM_RETURN_IF_ERROR(r.status());
    std::array<uint8_t, 16> uuid;
    std::string primary;
    {
      MutexLock lock(mu);
      if (st.state != "syncing") {
        return Status::FailedPrecondition("mirror: synced without a hello (state " + st.state +
                                          ")");
      }
      MirrorState next = st;
      next.state = "in-sync";
      next.term = term;
      ASYMNVM_RETURN_IF_ERROR(WriteMirrorState(o.pool_path, next));
      st = next;
      uuid = st.uuid;
      primary = st.primary;
      syncs++;
    }
    LOG_INFO("mirror", "in sync with " << primary << " (term " << term << ")");
    if (o.on_synced) o.on_synced(uuid, term);
    return Status::Ok();
  }

  std::string StatusJson() const {
    nlohmann::ordered_json j;
    MutexLock lock(mu);
    j["role"] = "mirror";
    j["pool"] = pool ? pool->Describe() : o.pool_path + " (created on the first primary's hello)";
    j["layout"] = "mirror of " + (st.has_uuid ? pm::UuidToString(st.uuid) : std::string("-"));
    j["address"] = server ? server->address() : "";
    j["log_address"] = listener ? listener->address() : "";
    j["data_address"] = listener ? listener->address() : "";
    j["name"] = o.name;
    j["state"] = st.state;
    j["uuid"] = st.has_uuid ? pm::UuidToString(st.uuid) : "";
    j["term"] = st.term;
    j["primary"] = st.primary;
    j["hellos"] = hellos;
    j["syncs"] = syncs;
    j["frontends"] = nlohmann::ordered_json::array();
    const fabric::Counters c = fabric ? fabric->counters() : fabric::Counters{};
    j["remote_ops_served"] = c.remote_ops_served;
    j["bytes_in"] = c.bytes_in;
    if (pool) {
      j["pm_syncs"] = pool->sync_stats().syncs;
      j["pm_sync_bytes"] = pool->sync_stats().bytes;
      j["durability"] = pm::PersistModeName(pool->mode());
    }
    return j.dump();
  }

  void AcceptLoop() {
    while (!stop.load()) {
      fabric::ConnectionOptions co;
      co.send_cq = cq.get();
      co.recv_cq = cq.get();
      co.max_recv_wr = 1;
      co.timeout = std::chrono::milliseconds(200);
      auto c = listener->Accept(co);
      MutexLock lock(mu);
      // Forget closed connections (a primary that died or re-attached).
      std::erase_if(
          conns, [](const auto& x) { return x->state() != fabric::ConnectionState::kConnected; });
      if (c.ok()) conns.push_back(std::move(c).value());
    }
  }

  void Stop() { (void)Close(nullptr); }

  // Tests (crash_sim): a power loss instead of a clean close.
  struct PowerFailure {
    uint64_t seed;
    double keep;
    uint64_t* dropped;
  };

  Status PowerLoss(uint64_t seed, double keep, uint64_t* dropped) {
    if (!o.crash_sim) return Status::FailedPrecondition("mirror: not started with crash_sim");
    PowerFailure f{seed, keep, dropped};
    return Close(&f);
  }

  // Nothing lands or is acknowledged any more: the control server, the stream connections and
  // the region go first (the NIC no longer writes into the pool); then the pool is closed —
  // persisted whole, or, with `power`, as a power failure leaves it.
  Status Close(const PowerFailure* power) {
    if (stop.exchange(true)) return Status::FailedPrecondition("mirror: already stopped");
    if (server) server->Stop();
    if (acceptor.joinable()) acceptor.join();
    MutexLock lock(mu);
    conns.clear();
    listener.reset();
    server.reset();
    mr.reset();
    cq.reset();
    Status s;
    if (pool && power == nullptr) pool->persister()->Persist(pool->base(), pool->size());
    // After SimulateCrash the copy is reloaded from media: closing writes back the same bytes.
    if (pool && power != nullptr)
      s = pool->SimulateCrash(power->seed, power->keep, power->dropped, nullptr);
    pool.reset();
    pd.reset();
    fabric.reset();
    return s;
  }
};

Result<std::unique_ptr<MirrorServer>> MirrorServer::Start(const MirrorOptions& options) {
  if (options.pool_path.empty()) return Status::InvalidArgument("mirror: --pool is required");
  auto impl = std::make_unique<Impl>();
  impl->o = options;
  {
    MutexLock lock(impl->mu);  // uncontended: nothing serves yet
    ASYMNVM_ASSIGN_OR_RETURN(impl->st, ReadMirrorState(options.pool_path));
  }
  ASYMNVM_ASSIGN_OR_RETURN(impl->fabric, fabric::Fabric::Open(options.fabric));
  ASYMNVM_ASSIGN_OR_RETURN(impl->pd, impl->fabric->AllocPd());
  {
    MutexLock lock(impl->mu);
    Status s = impl->OpenPool(0);
    if (!s.ok()) return Status(s.code(), options.pool_path + ": " + s.message());
  }
  ASYMNVM_ASSIGN_OR_RETURN(impl->cq, impl->fabric->CreateCq({}));
  ASYMNVM_ASSIGN_OR_RETURN(impl->listener,
                           impl->fabric->Listen(impl->pd.get(), options.data_listen_address));
  oq::ServerOptions so;
  so.fabric = impl->fabric.get();
  so.pd = impl->pd.get();
  so.listen_address = options.listen_address;
  so.workers = 1;
  so.buffer_size = 64 * 1024;
  so.buffers_per_worker = 4;
  so.max_request = 8 * 1024;
  so.max_response = 64 * 1024;
  Impl* p = impl.get();
  ASYMNVM_ASSIGN_OR_RETURN(
      impl->server,
      oq::Server::Start(so,
                        [p](const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                            std::vector<uint8_t>* response) -> Status {
                          switch (ctx.type) {
                            case backend::kMirrorHello:
                              return p->Hello(payload, response);
                            case backend::kMirrorSynced:
                              return p->Synced(payload);
                            case backend::kMirrorDigests:
                              return p->Digests(payload, response);
                            case backend::kStatus: {
                              const std::string s = p->StatusJson();
                              response->assign(s.begin(), s.end());
                              return Status::Ok();
                            }
                            default:
                              return Status::InvalidArgument(
                                  "mirror: unknown request type " + std::to_string(ctx.type) +
                                  " (this is a mirror; front-ends talk to the primary)");
                          }
                        }));
  impl->acceptor = std::thread([p] { p->AcceptLoop(); });
  return std::unique_ptr<MirrorServer>(new MirrorServer(std::move(impl)));
}

MirrorServer::MirrorServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
MirrorServer::~MirrorServer() { Stop(); }
std::string MirrorServer::address() const { return impl_->server->address(); }
std::string MirrorServer::data_address() const { return impl_->listener->address(); }
MirrorState MirrorServer::state() const {
  MutexLock lock(impl_->mu);
  return impl_->st;
}
std::string MirrorServer::StatusJson() const { return impl_->StatusJson(); }
void MirrorServer::Stop() { impl_->Stop(); }
Status MirrorServer::TEST_PowerLoss(uint64_t seed, double keep, uint64_t* dropped_lines) {
  return impl_->PowerLoss(seed, keep, dropped_lines);
}

}  // namespace asymnvm::mirror
