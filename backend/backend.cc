// The back-end's lifecycle: format or open a pool, check what landed before a crash, start the
// fabric, the OQ server, the receiver, the consumer and mirroring; status and stop; the public
// Backend methods (file map: backend/backend_internal.h).
#include <sys/resource.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/backend_internal.h"
#include "common/crash_point.h"
#include "common/logging.h"
#include "common/zero.h"
#include "fabric/oq/wire.h"
#include "fabric/rowan/scanner.h"

namespace asymnvm::backend {
namespace {

double ProcessCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

}  // namespace

Status Backend::Impl::JournalSwap(uint64_t entry, uint64_t expected, uint64_t desired) {
  if (entry % 8 != 0 || entry < layout.data.offset || entry + 8 > layout.data.end()) {
    return Status::InvalidArgument("journal entry " + std::to_string(entry) +
                                   " is not an aligned word of the data area");
  }
  uint64_t seen = expected;
  if (!Word(base(), entry).compare_exchange_strong(seen, desired)) {
    return Status::FailedPrecondition("fenced: ownership journal entry " + std::to_string(entry) +
                                      " holds " + std::to_string(seen) + ", expected " +
                                      std::to_string(expected) +
                                      " (a later incarnation of this id wrote it)");
  }
  persister()->Persist(base() + entry, 8);
  return Status::Ok();
}

LayoutParams Backend::Impl::Params() const {
  LayoutParams lp;
  lp.naming_slots = o.naming_slots;
  lp.block_size = o.block_size;
  lp.rowan_bytes = o.log_bytes;
  lp.rowan_segment = o.log_segment;
  lp.oq_bytes = oq::DurableAreaSize(1, o.oq_buffers, o.oq_buffer_size);
  lp.bitmap_bytes = [](uint64_t data, uint32_t block) {
    return alloc::BackendAllocator::BitmapBytes(data, block);
  };
  return lp;
}

Status Backend::Impl::Format() {
  ASYMNVM_ASSIGN_OR_RETURN(layout, PlanLayout(pool->size(), Params()));
  // Regions may hold bytes of an interrupted earlier format: start them from zero.
  for (const Region* r : {&layout.naming, &layout.bitmap, &layout.rowan, &layout.oq}) {
    ZeroPages(base() + r->offset, r->size);  // a fresh (sparse) file: nothing to write
    persister()->Persist(base() + r->offset, r->size);
  }
  LOG_INFO("backend", "formatting " << pool->path() << ": " << layout.Describe());
  return Status::Ok();
}

Status Backend::Impl::Open() {
  if (::access(o.pool_path.c_str(), F_OK) != 0) {
    // Refuse an impossible geometry before creating a file that would be refused next time too.
    auto plan = PlanLayout(o.pool_size, Params());
    if (!plan.ok())
      return Status(plan.status().code(), o.pool_path + ": " + plan.status().message());
  }
  pm::PoolOptions po;
  po.mode = o.persist_mode;
  po.layout = "asymnvm-backend";
  po.crash_sim = o.crash_sim;
  ASYMNVM_ASSIGN_OR_RETURN(pool, pm::Pool::OpenOrCreate(o.pool_path, o.pool_size, po));
  fwd = std::make_unique<ForwardingPersister>(pool->persister(), pool->base(), pool->size());
  uint8_t* header = base() + kBackendHeaderOffset;
  auto decoded = DecodeLayout(header, pool->size());
  bool fresh = false;
  if (decoded.ok()) {
    layout = *decoded;
  } else if (decoded.status().code() == StatusCode::kNotFound) {
    ASYMNVM_RETURN_IF_ERROR(Format());
    fresh = true;
  } else {
    return Status(decoded.status().code(), o.pool_path + ": " + decoded.status().message());
  }
  ASYMNVM_ASSIGN_OR_RETURN(naming, NamingSpace::Open(base(), layout.naming.offset,
                                                     layout.naming.size, persister(), fresh));
  alloc::BackendOptions ao;
  ao.data_begin = layout.data.offset;
  ao.data_size = layout.data.size;
  ao.block_size = layout.block_size;
  ao.bitmap = base() + layout.bitmap.offset;
  ao.bitmap_size = layout.bitmap.size;
  ao.persister = persister();
  ao.format_if_empty = fresh;
  ASYMNVM_ASSIGN_OR_RETURN(allocator, alloc::BackendAllocator::Open(ao));
  LoadDeferredFrees();
  if (fresh) {
    // The header goes last: a crash before this line leaves a pool that is formatted again.
    EncodeLayout(layout, header);
    persister()->Persist(header, kBackendHeaderSize);
  }
  for (const auto& e : naming->List()) {
    if (e.type == kFrontendRecordType && e.name.rfind("fe:", 0) == 0) {
      MutexLock lock(mu);  // uncontended: nothing else runs yet
      frontends[std::stoull(e.name.substr(3))] = e;
    }
  }
  redo = pool->mode() == pm::PersistMode::kMsync;
  deferred_writes = std::make_unique<DeferredPersister>(base());
  fwd_deferred =
      std::make_unique<ForwardingPersister>(deferred_writes.get(), pool->base(), pool->size(),
                                            /*wait_on_drain=*/false);
  one_sided = std::make_unique<OneSidedPersister>(persister(), [this] { CheckpointIfTxnsSince(); });
  ASYMNVM_RETURN_IF_ERROR(RestoreCheckpoint());
  if (!fresh) CheckLanded();
  return Status::Ok();
}

void Backend::Impl::CheckLanded() ASYMNVM_NO_THREAD_SAFETY_ANALYSIS {
  auto blog = rowan::CheckArea({base() + layout.rowan.offset, layout.rowan.size}, {});
  if (blog.ok()) {
    for (const std::string& p : blog->meta_problems) LOG_WARN("backend", "b-log: " << p);
    for (const rowan::AreaBadLanding& b : blog->bad) {
      std::ostringstream what;
      what << "pool offset " << layout.rowan.offset + b.offset << " (segment " << b.segment;
      if (b.header_read) what << ", owner " << b.meta.owner << ", version " << b.meta.version;
      what << "): " << b.what;
      if (b.tail) {
        LOG_INFO("backend",
                 "b-log: unfinished landing at " << what.str() << " (never acknowledged; ignored)");
        continue;
      }
      counters.log_corrupt_entries++;
      LOG_WARN("backend", "b-log: corrupt entry at " << what.str()
                                                     << "; skipped, its operation cannot be "
                                                        "replayed");
    }
  } else if (blog.status().code() != StatusCode::kNotFound) {
    LOG_WARN("backend", "b-log: " << blog.status().ToString());  // Receiver::Open decides
  }
  auto area = oq::ScanDurableArea({base() + layout.oq.offset, layout.oq.size},
                                  OqMaxRequest(o.oq_buffer_size));
  if (!area.ok()) {
    if (area.status().code() != StatusCode::kNotFound) {
      LOG_WARN("backend", "oq area: " << area.status().ToString());  // Server::Start decides
    }
    return;
  }
  for (const oq::LandedRequest& l : area->landed) {
    if (l.valid) continue;  // recovery re-executes it; a transaction is validated when applied
    const std::string where = "pool offset " + std::to_string(layout.oq.offset + l.area_offset) +
                              " (worker " + std::to_string(l.worker) + ", buffer " +
                              std::to_string(l.post_seq) + ", offset " + std::to_string(l.offset) +
                              ")";
    if (l.tail) {
      LOG_INFO("backend", "oq: unfinished landing at " << where << ": " << l.error
                                                       << " (never acknowledged; ignored)");
      continue;
    }
    counters.oq_corrupt_records++;
    auto txn = l.bytes.size() > oq::kRequestHeaderSize
                   ? PeekTxnHeader(l.bytes.subspan(oq::kRequestHeaderSize))
                   : Result<TxnHeader>(Status::Corruption("short"));
    if (!txn.ok()) {
      LOG_WARN("backend",
               "oq: corrupt request at " << where << ": " << l.error << "; never executed");
      continue;
    }
    LOG_WARN("backend", "oq: corrupt transaction at " << where << " (txn_seq " << txn->txn_seq
                                                      << " of front-end " << txn->frontend_id
                                                      << ", unverified): " << l.error
                                                      << "; never applied");
    // The fields are unverified: record them only where they are plausible — a registered
    // front-end whose LPN has not passed the txn (one at or below the LPN was applied before
    // the crash, only ReqToExecute had not moved) — as its first rejected txn_seq, which the
    // front-end reads on registration; an earlier rejection stays first.
    auto it = frontends.find(txn->frontend_id & 0xFFFFFFFF);
    if (it == frontends.end()) continue;
    if (txn->txn_seq <= Word(base(), it->second.root_addr).load()) continue;
    counters.txns_rejected++;
    auto rejected = Word(base(), it->second.seq_addr);
    if (rejected.load() == 0) {
      rejected.store(txn->txn_seq, std::memory_order_release);
      persister()->Persist(base() + it->second.seq_addr, 8);
    }
  }
}

Status Backend::Impl::StartFabric() {
  fabric::FabricOptions fo = o.fabric;
  // Redo mode: a FLUSH waits for an msync. With one soft-NIC thread the FLUSHes of all
  // connections would wait one after another; with several, those that arrive together share
  // one group commit (pm: MsyncPersister). The threads block when idle (no spinning on 2 cores).
  if (redo) fo.nic_threads = std::max<uint32_t>(fo.nic_threads, kRedoNicThreads);
  ASYMNVM_ASSIGN_OR_RETURN(fabric, fabric::Fabric::Open(fo));
  ASYMNVM_ASSIGN_OR_RETURN(pd, fabric->AllocPd());
  fabric::MemoryRegionOptions mo;
  mo.access = fabric::kAllRemote;
  mo.persister = persister();
  ASYMNVM_ASSIGN_OR_RETURN(
      naming_mr, pd->RegisterMemory(base() + layout.naming.offset, layout.naming.size, mo));
  if (redo) mo.persister = one_sided.get();
  ASYMNVM_ASSIGN_OR_RETURN(data_mr,
                           pd->RegisterMemory(base() + layout.data.offset, layout.data.size, mo));
  rowan::ReceiverOptions ro;
  ro.fabric = fabric.get();
  ro.pd = pd.get();
  ro.area = base() + layout.rowan.offset;
  ro.area_size = layout.rowan.size;
  ro.persister = persister();
  ro.listen_address = o.log_listen_address;
  ro.segment_size = layout.rowan_segment;
  if (o.TEST_index_landings) ro.landing_observer = &landing_indexer;
  rowan_mtu = ro.mtu;
  ASYMNVM_ASSIGN_OR_RETURN(receiver, rowan::Receiver::Open(ro));
  consumer = std::thread([this] { ConsumeLog(); });
  oq::ServerOptions so;
  so.fabric = fabric.get();
  so.pd = pd.get();
  so.listen_address = o.listen_address;
  so.workers = 1;
  so.buffer_size = o.oq_buffer_size;
  so.buffers_per_worker = o.oq_buffers;
  so.max_request = OqMaxRequest(o.oq_buffer_size);
  so.max_response = 64 * 1024;
  so.durable = true;
  so.pm_area = base() + layout.oq.offset;
  so.pm_area_size = layout.oq.size;
  so.persister = persister();
  so.stride = kOqStride;
  if (redo) so.rte_persister = fwd_deferred.get();
  so.before_recycle = [this](uint32_t, uint64_t rte) { BeforeRecycle(rte); };
  ASYMNVM_ASSIGN_OR_RETURN(server, oq::Server::Start(so, [this](const oq::RequestContext& ctx,
                                                                std::span<const uint8_t> payload,
                                                                std::vector<uint8_t>* response) {
                             return Handle(ctx, payload, response);
                           }));
  return Status::Ok();
}

std::string Backend::Impl::StatusJson() const {
  nlohmann::ordered_json j;
  BackendStats s = Stats();
  j["pool"] = pool->Describe();
  j["layout"] = layout.Describe();
  j["address"] = server ? server->address() : "";
  j["log_address"] = receiver ? receiver->address() : "";
  j["frontends"] = nlohmann::ordered_json::array();
  {
    MutexLock lock(mu);
    for (const auto& [fe, rec] : frontends) {
      j["frontends"].push_back({{"id", fe},
                                {"lpn", Word(base(), rec.root_addr).load()},
                                {"opn", Word(base(), rec.lock_addr).load()},
                                {"first_rejected_txn", Word(base(), rec.seq_addr).load()},
                                {"incarnation", Word(base(), rec.aux_addr).load() >> 32}});
    }
  }
  j["txns_applied"] = s.txns_applied;
  j["txns_skipped"] = s.txns_skipped;
  j["txns_rejected"] = s.txns_rejected;
  j["txns_fenced"] = s.txns_fenced;
  j["registers_fenced"] = s.registers_fenced;
  j["op_logs_seen"] = s.op_logs_seen;
  j["op_log_scans"] = s.op_log_scans;
  j["log_segments_digested"] = s.log_segments_digested;
  j["log_segments_recycled"] = s.log_segments_recycled;
  j["log_segments_pinned"] = s.log_segments_pinned;
  j["log_segments"] = receiver ? receiver->stats().segments : 0;
  j["log_corrupt_entries"] = s.log_corrupt_entries;
  j["oq_corrupt_records"] = s.oq_corrupt_records;
  j["requests"] = s.requests;
  j["deferred_frees_pending"] = s.deferred_frees_pending;
  j["deferred_frees_done"] = s.deferred_frees_done;
  j["deferred_frees_failed"] = s.deferred_frees_failed;
  j["deferred_frees_rearmed"] = s.deferred_frees_rearmed;
  j["cpu_seconds"] = s.cpu_seconds;
  j["durability"] = redo ? "redo-log" : "direct";
  j["pm_syncs"] = s.pm_syncs;
  j["pm_sync_bytes"] = s.pm_sync_bytes;
  j["checkpoints"] = s.checkpoints;
  j["checkpoint_bytes"] = s.checkpoint_bytes;
  {
    MutexLock lock(mu);
    j["checkpoint_lag_txns"] = redo ? s.txns_applied - std::min(s.txns_applied, ckpt_txns) : 0;
  }
  if (server) {
    const oq::ServerStats q = server->stats();
    j["oq"] = {{"connections", q.connections}, {"executed", q.executed}, {"rnr_seen", q.rnr_seen}};
  }
  if (repl) {
    j["mirror_mode"] = repl->async() ? "async" : "sync";
    j["mirrors"] = nlohmann::ordered_json::array();
    uint64_t insync = 0;
    for (const MirrorLinkStats& m : repl->stats()) {
      if (m.state == "in-sync") insync++;
      j["mirrors"].push_back({{"address", m.address},
                              {"name", m.name},
                              {"state", m.state},
                              {"bytes_forwarded", m.bytes_forwarded},
                              {"writes", m.writes},
                              {"flushes", m.flushes},
                              {"copies", m.copies},
                              {"copy_bytes", m.copy_bytes},
                              {"last_copy_bytes", m.last_copy_bytes},
                              {"incremental_copies", m.incremental_copies},
                              {"last_copy_ms", m.last_copy_ms},
                              {"drops", m.drops},
                              {"max_lag_bytes", m.max_lag_bytes},
                              {"max_lag_us", m.max_lag_us},
                              {"last_error", m.last_error}});
    }
    j["mirrors_in_sync"] = insync;
    const BarrierStats b = repl->barrier_stats();
    j["mirror_barriers"] = {
        {"barriers", b.barriers}, {"local_us", b.local_us}, {"mirror_wait_us", b.mirror_wait_us}};
    j["mirrors_configured"] = repl->stats().size();
  }
  auto as = allocator->stats();
  j["alloc"] = {{"blocks_total", as.blocks_total}, {"blocks_used", as.blocks_used}};
  return j.dump();
}

BackendStats Backend::Impl::Stats() const {
  MutexLock lock(mu);
  BackendStats s = counters;
  s.frontends = frontends.size();
  s.deferred_frees_pending = deferred.size();
  s.cpu_seconds = ProcessCpuSeconds();
  const pm::SyncStats ss = pool->sync_stats();
  s.pm_syncs = ss.syncs;
  s.pm_sync_bytes = ss.bytes;
  s.redo = redo;
  return s;
}

void Backend::Impl::Stop() {
  if (stop.exchange(true)) return;
  if (server) server->Stop();
  if (consumer.joinable()) consumer.join();
  ckpt_cv.notify_all();
  if (checkpointer.joinable()) checkpointer.join();
  if (redo && pool && deferred_writes && !skip_final_checkpoint) {
    // A clean stop leaves nothing to replay. (A crash instead replays from the last one.)
    Status s = Checkpoint(0);
    if (!s.ok()) LOG_ERROR("backend", "final checkpoint: " << s.ToString());
  }
  if (receiver) receiver->Close();
  if (repl) {  // last: the final checkpoint and the receiver's close were forwarded
    fwd->set_replicator(nullptr);
    fwd_deferred->set_replicator(nullptr);
    repl->Stop();
  }
}

Status Backend::Impl::StartReplication() {
  const ReplicationOptions& ro = o.replication;
  if (ro.mirrors.empty() && !ro.joinable) return Status::Ok();
  ASYMNVM_ASSIGN_OR_RETURN(repl, Replicator::Start(ro, o.fabric, pool.get()));
  fwd->set_replicator(repl.get());
  fwd_deferred->set_replicator(repl.get());
  const size_t n = repl->WaitInSync(o.mirror_wait);
  LOG_INFO("backend", n << " of " << ro.mirrors.size() << " mirror(s) in sync ("
                        << (ro.async ? "async" : "sync") << ")");
  return Status::Ok();
}

Result<std::unique_ptr<Backend>> Backend::Start(const BackendOptions& options) {
  if (options.pool_path.empty()) return Status::InvalidArgument("backend: --pool is required");
  if (options.oq_buffers < 2 || options.oq_buffer_size < 4096 ||
      options.oq_buffer_size % 4096 != 0) {
    return Status::InvalidArgument("backend: OQ needs >= 2 buffers of a multiple of 4 KiB");
  }
  auto impl = std::make_unique<Impl>();
  impl->o = options;
  ASYMNVM_RETURN_IF_ERROR(impl->Open());
  Status s = impl->StartReplication();
  if (s.ok()) s = impl->StartFabric();
  if (!s.ok()) {
    impl->Stop();
    return s;
  }
  if (impl->redo) {
    Impl* p = impl.get();
    impl->checkpointer = std::thread([p] { p->CheckpointLoop(); });
  }
  return std::unique_ptr<Backend>(new Backend(std::move(impl)));
}

Backend::Backend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Backend::~Backend() { Stop(); }
std::string Backend::address() const { return impl_->server->address(); }
std::string Backend::log_address() const { return impl_->receiver->address(); }
const Layout& Backend::layout() const { return impl_->layout; }
BackendStats Backend::stats() const { return impl_->Stats(); }
std::string Backend::StatusJson() const { return impl_->StatusJson(); }
const metrics::RequestMetrics& Backend::request_metrics() const { return impl_->request_metrics; }
void Backend::Stop() { impl_->Stop(); }
Status Backend::AddMirror(const std::string& address) {
  if (!impl_->repl) {
    return Status::FailedPrecondition("mirror " + address +
                                      ": this back-end was started without replication");
  }
  return impl_->repl->AddMirror(address);
}

std::vector<NamingEntry> Backend::NamingEntries() const { return impl_->naming->List(); }
std::vector<alloc::Extent> Backend::Extents() const { return impl_->allocator->Extents(); }
std::vector<uint64_t> Backend::PendingDeferredFrees() const {
  MutexLock dl(impl_->dfree_mu);
  std::vector<uint64_t> out;
  for (const auto& [addr, slot] : impl_->dfree_pending) out.push_back(addr);
  return out;
}
Status Backend::ForgetFrontend(uint64_t fe) {
  {
    MutexLock lock(impl_->mu);
    if (impl_->frontends.erase(fe) == 0) return Status::NotFound("front-end " + std::to_string(fe));
    impl_->epochs.erase(fe);
  }
  return impl_->naming->Remove("fe:" + std::to_string(fe));
}
Status Backend::FreeExtent(uint64_t addr) {
  MutexLock dl(impl_->dfree_mu);
  if (impl_->dfree_pending.count(addr) != 0) {
    return Status::FailedPrecondition("free of " + std::to_string(addr) +
                                      ": a deferred free of it is pending");
  }
  return impl_->allocator->Free(addr);
}

Status Backend::TEST_CrashAndClose(uint64_t seed, double keep, uint64_t* dropped_lines) {
  if (!impl_->pool || !impl_->pool->crash_sim()) {
    return Status::FailedPrecondition("backend: TEST_CrashAndClose needs a crash-simulation pool");
  }
  impl_->skip_final_checkpoint = true;
  impl_->Stop();
  Status s = impl_->pool->SimulateCrash(seed, keep, dropped_lines, nullptr);
  impl_->data_mr.reset();
  impl_->naming_mr.reset();
  impl_->server.reset();
  impl_->receiver.reset();
  impl_->pool.reset();  // writes the crashed state (copy == media now) to the file
  return s;
}

}  // namespace asymnvm::backend
