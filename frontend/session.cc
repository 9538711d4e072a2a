// The front-end Session (include/asymnvm/frontend.h; design in doc/frontend.md): open,
// registration, reconnection, close and introspection. The rest by concern:
// frontend/session_impl.h.
#include "backend/registration.h"
#include "frontend/session_impl.h"

namespace asymnvm::frontend {

const char* LevelName(Level level) {
  switch (level) {
    case Level::kNaive:
      return "naive";
    case Level::kR:
      return "r";
    case Level::kRc:
      return "rc";
    case Level::kRcb:
      return "rcb";
  }
  return "?";
}

Result<Level> ParseLevel(const std::string& name) {
  for (Level l : {Level::kNaive, Level::kR, Level::kRc, Level::kRcb}) {
    if (name == LevelName(l)) return l;
  }
  return Status::InvalidArgument("unknown optimization level '" + name + "' (naive, r, rc or rcb)");
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

std::string BackendGroupPrimaryPath(const std::array<uint8_t, 16>& pool_uuid) {
  return "/asymnvm/groups/" + pm::UuidToString(pool_uuid) + "/primary";
}

Status Session::Reconnect(const Status& cause) {
  Impl& old = *impl_;
  if (!old.identity) return cause;
  guard_depth_++;
  struct Undo {
    int& d;
    ~Undo() { d--; }
  } undo{guard_depth_};
  coord::Coordinator& c = old.identity->coordinator();
  const std::string path = BackendGroupPrimaryPath(old.pool_uuid);
  const auto start = coord::Clock::now();
  const auto deadline = start + old.o.reconnect_deadline;
  LOG_WARN("frontend", "front-end " << old.o.frontend_id << ": lost back-end " << old.o.backends[0]
                                    << " (" << cause.ToString() << "); waiting up to "
                                    << old.o.reconnect_deadline.count() << " ms for pool "
                                    << pm::UuidToString(old.pool_uuid) << " to register at "
                                    << path);
  Status last = cause;
  auto pause = std::chrono::milliseconds(20);
  for (;;) {
    int64_t known = coord::Coordinator::kNoNode;
    bool absent = false;
    auto node = c.Get(path);
    if (node.ok()) {
      known = node->version;
      const std::string address = backend::RegistrationField(node->data, "address");
      if (address.empty()) {
        last = Status::ProtocolError(path + " holds no address");
      } else {
        SessionOptions so = old.o;
        so.backends = {address};
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - coord::Clock::now());
        so.timeout = std::max(std::chrono::milliseconds(1), std::min(so.timeout, left));
        if (Status lease = old.identity->CheckLease(); !lease.ok()) return lease;
        auto fresh = Connect(so, old.identity->epoch(), backend::RegistrationTerm(node->data));
        if (fresh.ok() && (*fresh)->pool_uuid != old.pool_uuid) {
          fresh = Status::FailedPrecondition(address + " serves pool " +
                                             pm::UuidToString((*fresh)->pool_uuid) + ", not " +
                                             pm::UuidToString(old.pool_uuid));
        }
        if (fresh.ok()) {
          Impl& n = **fresh;
          // Ops a structure held open in DRAM (stack/queue annulment, multi-version publishing)
          // and ops whose transactions were lost with the old connection (an unsent batch, or
          // sent but not durable on the back-end that answers now) are all past the new OPN: the
          // replay re-executes them in op order, after the structures dropped their DRAM state
          // (the reconnect hook). Carrying open ops over instead let a structure's closer commit
          // them from a DRAM view that still held the lost transactions' effects (a queue lost
          // an element after a promotion; doc/mirror.md).
          n.o.timeout = old.o.timeout;
          n.identity = std::move(old.identity);
          // Watch the registration we connected through: a change from now on is a move.
          n.group_watch = GroupWatch::Start(c, path, node->data);
          n.structures = std::move(old.structures);
          n.replay = std::move(old.replay);
          n.adopter = std::move(old.adopter);
          n.closers = std::move(old.closers);
          n.reconnect_hook = std::move(old.reconnect_hook);
          n.reclaimer = std::move(old.reclaimer);
          // Stale frees into blocks an earlier reclaim freed stay recognizable.
          for (const auto& [a, e] : old.slabs->reclaimed()) n.slabs->AddReclaimed(a, e - a);
          n.held_locks = std::move(old.held_locks);  // the lock words name our id; still ours
          n.group_writes = old.group_writes;
          n.bypass_cache = old.bypass_cache;
          n.c.replayed_ops = old.c.replayed_ops;
          std::unique_ptr<Impl> dead = std::move(impl_);
          impl_ = std::move(fresh).value();
          dead.reset();
          reconnects_++;
          LOG_INFO("frontend", "front-end "
                                   << impl_->o.frontend_id << ": reconnected to " << address
                                   << " after "
                                   << std::chrono::duration_cast<std::chrono::milliseconds>(
                                          coord::Clock::now() - start)
                                          .count()
                                   << " ms; replaying");
          Status r = impl_->reconnect_hook ? impl_->reconnect_hook() : Status::Ok();
          if (r.ok()) {
            BackendFetcher f(impl_->oq.get(), impl_->opseq.first());
            r = ReplayWith(&f).WithContext("reconnect: replay at " + address);
          } else {
            r = r.WithContext("reconnect: structures re-reading their state at " + address);
          }
          if (!r.ok()) {
            // Not recovered: the next call starts the reconnection over (a new registration,
            // the hook, the whole replay) rather than running on a state missing the replay.
            impl_->lost = true;
            impl_->lost_cause = r;
          }
          return r;
        }
        last = fresh.status().WithContext("reconnect to " + address);
      }
    } else if (node.status().code() == StatusCode::kNotFound) {
      absent = true;
    } else {
      last = node.status();
    }
    const auto now = coord::Clock::now();
    if (now >= deadline) {
      return Status::Unavailable(
          "back-end of pool " + pm::UuidToString(old.pool_uuid) + " (was " + old.o.backends[0] +
          ") did not come back within reconnect_deadline " +
          std::to_string(old.o.reconnect_deadline.count()) + " ms; last: " + last.ToString());
    }
    // Wake on a change of the registration; re-try a registered address with backoff (it may be
    // a dead holder's node that has not vanished yet, or a daemon still starting).
    auto until = std::min(deadline, now + pause);
    if (absent) until = deadline;  // nothing to try until a back-end registers
    auto w = c.WaitForChange(path, known, until);
    if (!w.ok() && w.status().code() != StatusCode::kTimedOut) last = w.status();
    pause = std::min(pause * 2, std::chrono::milliseconds(1000));
  }
}

Result<std::unique_ptr<Session>> Session::Open(const SessionOptions& given) {
  SessionOptions options = given;  // frontend_id may come from the coordinator (identity.h)
  if (options.backends.empty()) return Status::InvalidArgument("session: no back-end address");
  if (options.backends.size() > 1) {
    return Status::InvalidArgument(
        "session: one back-end per Session; use frontend::Cluster for several "
        "(include/asymnvm/cluster.h)");
  }
  // A shared identity (SessionOptions::identity) is not claimed again; m.o does not keep it.
  std::shared_ptr<FrontendIdentity> shared = std::move(options.identity);
  options.identity.reset();
  if (shared) {
    if (options.frontend_id != 0 && options.frontend_id != shared->id()) {
      return Status::InvalidArgument("session: frontend_id differs from the shared identity's id");
    }
    options.frontend_id = shared->id();
  }
  if ((options.frontend_id == 0 && options.coordinator.empty()) || options.frontend_id > 0xFFFF) {
    return Status::InvalidArgument("session: frontend_id must be in 1..65535");
  }
  if (!ValidPageSize(options.page_size)) {
    return Status::InvalidArgument("session: page_size must be a power of two in 64..1 MiB");
  }
  if (options.batch_ops == 0) return Status::InvalidArgument("session: batch_ops must be > 0");
  std::shared_ptr<FrontendIdentity> identity = std::move(shared);
  if (!identity) {
    ASYMNVM_ASSIGN_OR_RETURN(identity, ClaimSessionIdentity(&options));
  }
  ASYMNVM_ASSIGN_OR_RETURN(auto impl, Connect(options, identity ? identity->epoch() : 0));
  if (identity) {
    impl->group_watch =
        GroupWatch::Start(identity->coordinator(), BackendGroupPrimaryPath(impl->pool_uuid));
  }
  impl->identity = std::move(identity);
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

// Connects to options.backends[0] and registers options.frontend_id (already claimed): the part of
// Open a reconnection repeats (Session::Reconnect).
Result<std::unique_ptr<Session::Impl>> Session::Connect(const SessionOptions& options,
                                                        uint64_t epoch, uint64_t term) {
  auto impl = std::make_unique<Impl>();
  Impl& m = *impl;
  m.o = options;
  const std::string ctx = "session " + options.backends[0];
  ASYMNVM_ASSIGN_OR_RETURN(m.fabric, options.open_fabric ? options.open_fabric(options.fabric)
                                                         : fabric::Fabric::Open(options.fabric));
  ASYMNVM_ASSIGN_OR_RETURN(m.pd, m.fabric->AllocPd());
  oq::ClientOptions co;
  co.fabric = m.fabric.get();
  co.pd = m.pd.get();
  co.server_address = options.backends[0];
  co.timeout = options.timeout;
  co.client_id = options.frontend_id;
  auto cl = oq::Client::Connect(co);
  if (!cl.ok()) return cl.status().WithContext(ctx);
  m.oq = std::move(cl).value();
  m.max_txn = m.oq->server().max_request - oq::kRequestHeaderSize;
  m.batch_limit =
      options.batch_bytes == 0 ? m.max_txn : std::min<size_t>(options.batch_bytes, m.max_txn);

  // Register.
  backend::PayloadWriter w;
  w.U64(options.frontend_id);
  if (epoch != 0 || term != 0) w.U64(epoch);
  if (term != 0) w.U64(term);
  auto reply = m.Call(backend::kRegister, w.bytes());
  if (!reply.ok()) return reply.status().WithContext(ctx + ": register");
  ASYMNVM_ASSIGN_OR_RETURN(backend::RegisterReply reg, backend::DecodeRegisterReply(*reply));
  const uint64_t lpn = reg.lpn, opn = reg.opn, rejected = reg.rejected;
  m.lpn_addr = reg.lpn_addr;
  m.naming_begin = reg.naming_begin;
  m.data_begin = reg.data_begin;
  m.data_end = reg.data_end;
  m.block_size = reg.block_size;
  m.incarnation = reg.incarnation;
  m.pool_uuid = reg.pool_uuid;
  m.naming_desc = reg.naming_region;
  m.data_desc = reg.data_region;
  m.naming_end = m.naming_begin + m.naming_desc.length;
  m.known_lpn = lpn;
  m.next_txn = lpn + 1;
  m.first_txn = lpn + 1;
  if (rejected != 0) {
    LOG_WARN("frontend", "front-end " << options.frontend_id
                                      << ": the back-end recorded rejected transaction " << rejected
                                      << " (an earlier session)");
  }

  // Rowan sender for op logs (to the data back-end's b-log, or to op_log_address: the symmetric
  // baseline); a plain connection to the data back-end's listener for one-sided operations.
  rowan::SenderOptions so;
  so.fabric = m.fabric.get();
  so.pd = m.pd.get();
  so.address = options.op_log_address.empty() ? reg.log_address : options.op_log_address;
  so.timeout = options.timeout;
  so.rnr_retry = options.log_rnr_retry;
  if (options.async_op_logs) {
    // PostAppend sends blocks inline; an op log must fit the provider's inline limit.
    ASYMNVM_ASSIGN_OR_RETURN(m.log_cq, m.fabric->CreateCq({.capacity = 1024}));
    so.cq = m.log_cq.get();
    const uint32_t cap = m.fabric->capabilities().max_inline;
    so.max_inline = std::min<uint32_t>(cap == 0 ? so.max_inline : cap,
                                       static_cast<uint32_t>(rowan::kDefaultMtu));
  }
  auto snd = rowan::Sender::Connect(so);
  if (!snd.ok()) {
    return snd.status().WithContext(
        options.op_log_address.empty() ? ctx : "session: op log target " + options.op_log_address);
  }
  m.sender = std::move(snd).value();
  ASYMNVM_ASSIGN_OR_RETURN(m.cq, m.fabric->CreateCq({.capacity = 1024}));
  fabric::ConnectionOptions cop;
  cop.send_cq = m.cq.get();
  cop.recv_cq = m.cq.get();
  cop.timeout = options.timeout;
  auto conn = m.fabric->Connect(m.pd.get(), reg.log_address, cop);
  if (!conn.ok()) return conn.status().WithContext(ctx + ": one-sided connection");
  m.conn = std::move(conn).value();
  m.max_message = m.fabric->capabilities().max_message;
  if (m.max_message == 0) m.max_message = kScratchBytes;
  m.scratch.resize(kScratchBytes);
  ASYMNVM_ASSIGN_OR_RETURN(
      m.scratch_mr, m.pd->RegisterMemory(m.scratch.data(), m.scratch.size(),
                                         {.access = fabric::kLocalWrite, .persister = nullptr}));

  // op_seq continues after everything the back-end has seen (OPN, and aux = highest op_seq).
  uint64_t l2, o2, rej2, aux;
  ASYMNVM_RETURN_IF_ERROR(m.ReadRecord(&l2, &o2, &rej2, &aux));
  const uint64_t first_op = std::max(opn, aux) + 1;
  bool to_replay = false;
  if (options.op_log_address.empty()) {
    // Anything of this id's earlier sessions still to replay? (One page of kFetchOpLogs; op logs
    // kept elsewhere, SessionOptions::op_log_address, are the caller's to replay.)
    auto any = BackendFetcher(m.oq.get(), first_op).Any(options.frontend_id, opn);
    if (!any.ok()) return any.status().WithContext(ctx + ": op logs to replay");
    to_replay = *any;
  }
  m.opseq.Registered(opn, aux, to_replay);

  m.slabs = std::make_unique<RpcSlabSource>(m.oq.get(), m.block_size, m.data_begin, m.data_end);
  {
    // The ownership journal of this id (frontend/alloc_journal.h): what earlier incarnations
    // recorded is inherited; this session's slabs are recorded in the same journal.
    Impl* mp = &m;
    OwnershipJournal::Io io;
    io.read = [mp](uint64_t a, std::span<uint8_t> out) { return mp->RemoteReadUncounted(a, out); };
    io.write = [mp](uint64_t a, std::span<const uint8_t> d) {
      return mp->RemoteWriteDurable(a, d);
    };
    io.cas = [mp](uint64_t a, uint64_t e, uint64_t d) { return mp->Cas(a, e, d); };
    io.alloc = [mp](uint64_t b) { return mp->slabs->RawAlloc(b); };
    io.free = [mp](uint64_t a) { return mp->slabs->RawFree(a); };
    m.journal = std::make_unique<OwnershipJournal>(std::move(io), options.frontend_id,
                                                   m.lpn_addr + kJournalWordFromRoot, m.block_size,
                                                   m.data_begin, m.data_end, m.incarnation);
    Status jl = m.journal->Load();
    if (!jl.ok()) return jl.WithContext(ctx);
    // After a clean close the inherited entries are extents that session held alive: no walk.
    m.reclaim_pending = !m.journal->inherited().empty() && !m.journal->previous_closed_cleanly();
    m.slabs->SetJournal(m.journal.get());
    // A free waits until the writes logged before it (its unlink) are applied (Fence).
    m.slabs->SetFreeGate([mp] { return mp->overlay_order; });
  }
  alloc::FrontendOptions fo;
  fo.source = m.slabs.get();
  ASYMNVM_ASSIGN_OR_RETURN(m.allocator, alloc::FrontendAllocator::Open(fo));
  if (options.level == Level::kRc || options.level == Level::kRcb) {
    m.cache = std::make_unique<PageCache>(options.cache_bytes, options.seed);
  }
  return impl;
}

Session::~Session() {
  if (!impl_) return;
  Impl& m = *impl_;
  // Clean: everything fenced, nothing of an earlier incarnation left to replay or reclaim, and
  // no object freed in a block an earlier incarnation carved (that block may be dead now).
  bool clean = false, fenced = false;
  if (m.broken.ok()) {
    Status s = m.Fence();
    if (!s.ok()) LOG_WARN("frontend", "session close: " << s.ToString());
    fenced = s.ok();
    clean =
        s.ok() && !m.opseq.replay_pending() && !m.reclaim_pending && m.journaled_orphan_frees == 0;
    if (m.opseq.replay_pending() && !m.held_locks.empty()) {
      LOG_WARN("frontend", "session close: front-end " << m.o.frontend_id << " keeps "
                                                       << m.held_locks.size()
                                                       << " writer lock(s): op logs of an earlier "
                                                          "session were not replayed");
    }
    if (!m.opseq.replay_pending()) {
      for (uint64_t lock : m.held_locks) {
        auto old = m.Cas(lock, m.o.frontend_id, 0);
        if (!old.ok()) LOG_WARN("frontend", "session close: unlock: " << old.status().ToString());
      }
    }
  }
  if (m.allocator) (void)m.allocator->Trim();
  if (m.slabs && m.broken.ok()) (void)m.slabs->ReleaseQuarantine();
  if (m.slabs && m.broken.ok() && fenced) {
    // Everything written is applied: the frees still queued (the trimmed slabs') may go.
    Status s = m.slabs->IssueFrees(UINT64_MAX);
    if (!s.ok()) LOG_WARN("frontend", "session close: " << s.ToString());
  }
  if (clean && m.journal && m.broken.ok()) {
    // The next incarnation of this id need not walk for what the journal names (alloc_journal.h).
    Status s = m.journal->MarkClosedCleanly();
    if (!s.ok()) LOG_WARN("frontend", "session close: clean-close mark: " << s.ToString());
  }
  m.allocator.reset();
  m.slabs.reset();
  m.sender.reset();
  m.log_cq.reset();
  m.conn.reset();
  m.scratch_mr.reset();
  m.cq.reset();
  m.oq.reset();
  m.pd.reset();
  m.fabric.reset();
}

// ---- introspection ----

Counters Session::counters() const {
  Counters c = impl_->c;
  if (impl_->journal) c.journal_writes = impl_->journal->writes();
  c.fabric = impl_->fabric->counters();
  if (impl_->cache) {
    c.cache_hits = impl_->cache->hits();
    c.cache_misses = impl_->cache->misses();
    c.cache_evictions = impl_->cache->evictions();
  }
  return c;
}

void Session::InvalidateCache() {
  if (impl_->cache) impl_->cache->Clear();
}
uint64_t Session::frontend_id() const { return impl_->o.frontend_id; }
uint64_t Session::applied_lpn() const { return impl_->known_lpn; }
uint64_t Session::recovered_opn() const { return impl_->opseq.registered_opn(); }
uint64_t Session::next_op_seq() const { return impl_->opseq.next(); }
uint64_t Session::data_begin() const { return impl_->data_begin; }
uint64_t Session::data_end() const { return impl_->data_end; }
uint32_t Session::block_size() const { return impl_->block_size; }
size_t Session::max_transaction_bytes() const { return impl_->max_txn; }
Level Session::level() const { return impl_->o.level; }
const std::array<uint8_t, 16>& Session::pool_uuid() const { return impl_->pool_uuid; }
const std::string& Session::backend_address() const { return impl_->o.backends[0]; }
uint64_t Session::reconnects() const { return reconnects_; }
bool Session::reconnect_pending() const { return impl_->lost; }

}  // namespace asymnvm::frontend
