// Writer locks, replay and the take-over of dead writers of a Session (frontend/session_impl.h;
// doc/frontend.md §Dead writers, "Replay before the OPN moves").
#include "common/checksum.h"
#include "common/crash_point.h"
#include "frontend/session_impl.h"

namespace asymnvm::frontend {

// ---- concurrency ----

Result<uint64_t> Session::LockUntil(const Structure& s, Clock::time_point deadline) {
  Impl& m = *impl_;
  if (m.held_locks.count(s.lock_addr)) {
    return Status::FailedPrecondition("writer lock of '" + s.name + "' already held");
  }
  if (m.o.level != Level::kNaive) {
    uint8_t p[8];
    PutLe64(p, s.lock_addr);
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t seq, m.SendOpLog(s.id, kLockAheadOpType, p));
    m.opseq.Covered(seq);  // it has no memory logs: covered at once
  }
  Backoff backoff;
  while (true) {
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t old, m.Cas(s.lock_addr, 0, m.o.frontend_id));
    if (old == 0 || old == m.o.frontend_id) break;
    if (!m.o.coordinator.empty() && m.adopter && !m.adopting) {
      ASYMNVM_ASSIGN_OR_RETURN(bool adopted, AdoptDeadWriter(old, s));
      if (adopted) continue;  // its lock is free now: try again at once
    }
    m.c.lock_retries++;
    if (Clock::now() > deadline) return old;
    backoff.Wait();
  }
  m.held_locks.insert(s.lock_addr);
  m.c.lock_acquires++;
  // The previous holder fenced before unlocking, so what it committed is applied; our cached
  // pages may predate it.
  InvalidateCache();
  return uint64_t{0};
}

Status Session::WriterLock(const Structure& s) {
  return Guarded(false, [&]() -> Status {
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t holder, LockUntil(s, Clock::now() + impl_->o.lock_timeout));
    if (holder != 0) {
      return Status::TimedOut("writer lock of '" + s.name + "' held by front-end " +
                              std::to_string(holder));
    }
    return Status::Ok();
  });
}

Result<bool> Session::TryWriterLock(const Structure& s, std::chrono::milliseconds wait) {
  return Guarded(false, [&]() -> Result<bool> {
    if (impl_->held_locks.count(s.lock_addr)) return true;
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t holder, LockUntil(s, Clock::now() + wait));
    return holder == 0;
  });
}

bool Session::HoldsWriterLock(const Structure& s) const {
  return impl_->held_locks.count(s.lock_addr) != 0;
}

Status Session::WriterUnlock(const Structure& s) {
  return Guarded(false, [&]() -> Status {
    Impl& m = *impl_;
    if (!m.held_locks.count(s.lock_addr)) {
      return Status::FailedPrecondition("writer lock of '" + s.name + "' not held");
    }
    if (m.opseq.replay_pending()) {
      return Status::FailedPrecondition(
          "writer lock of '" + s.name + "' kept: front-end " + std::to_string(m.o.frontend_id) +
          " has op logs of an earlier session to replay first (Session::Replay); releasing the "
          "lock would let others write over a state those operations have not reached");
    }
    // Forgotten before the fence and the CAS, whatever they return: when the connection breaks
    // during them, the lock word may be free already (the CAS ran, its reply was lost) or still
    // name us. Either way our next acquisition's CAS takes it (it accepts a word naming us), and
    // nothing may take this entry as proof the lock is held: TryWriterLock trusted a stale entry
    // after a back-end restart and a transaction ran without the lock, and the next release
    // found the word free ("held by front-end 0").
    m.held_locks.erase(s.lock_addr);
    ASYMNVM_RETURN_IF_ERROR(Fence());
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t old, m.Cas(s.lock_addr, m.o.frontend_id, 0));
    if (old != m.o.frontend_id) {
      return Status::FailedPrecondition("writer lock of '" + s.name + "' was held by front-end " +
                                        std::to_string(old));
    }
    return Status::Ok();
  });
}

// ---- recovery ----

void Session::SetOpCloser(uint32_t structure_id, std::function<Status()> close) {
  if (close) {
    impl_->closers[structure_id] = std::move(close);
  } else {
    impl_->closers.erase(structure_id);
  }
}

void Session::SetReconnectHook(std::function<Status()> hook) {
  impl_->reconnect_hook = std::move(hook);
}

void Session::RegisterReplay(uint32_t structure_type, ReplayFn fn) {
  impl_->replay[structure_type] = std::move(fn);
}

void Session::SetAdopter(AdoptFn adopt) { impl_->adopter = std::move(adopt); }

Result<bool> Session::AdoptDeadWriter(uint64_t holder, const Structure& target) {
  Impl& m = *impl_;
  const std::string who = "front-end " + std::to_string(m.o.frontend_id) + ": taking over '" +
                          target.name + "' from dead front-end " + std::to_string(holder);
  if (holder > 0xFFFF) {
    return Status::Corruption("writer lock of '" + target.name + "' holds " +
                              std::to_string(holder) + ", not a front-end id");
  }
  // Claiming the id is the liveness check: it fails with kAlreadyExists while the holder (or
  // another front-end adopting it) holds its lease, and keeps the holder from coming back while
  // its op logs are replayed.
  auto claim = FrontendIdentity::Claim(m.o.coordinator, holder, m.o.timeout);
  if (!claim.ok()) {
    if (claim.status().code() == StatusCode::kAlreadyExists) return false;
    return claim.status().WithContext(who);
  }
  const auto start = Clock::now();
  SessionOptions ro = m.o;
  ro.coordinator.clear();  // the id is held by `claim`
  ro.frontend_id = holder;
  ro.backends = {backend_address()};
  ro.reconnect_deadline = std::chrono::milliseconds(0);
  // Registered with the claim's epoch: from now on the back-end refuses the dead writer's
  // registrations (lower epoch) and transactions (older incarnation).
  auto connected = Connect(ro, (*claim)->epoch());
  if (!connected.ok()) return connected.status().WithContext(who);
  Result<std::unique_ptr<Session>> opened =
      std::unique_ptr<Session>(new Session(std::move(connected).value()));
  Session& r = **opened;
  Impl& rm = *r.impl_;
  rm.replay = m.replay;
  rm.adopting = true;
  // The structures the dead writer's unreplayed op logs name (naming slots), and the target.
  BackendFetcher f(rm.oq.get(), rm.opseq.first());
  ASYMNVM_ASSIGN_OR_RETURN(auto ops, f.Fetch(holder, rm.opseq.registered_opn()));
  std::vector<Structure> named;
  std::set<uint32_t> seen;
  {
    auto t = r.OpenRoot(target.name);
    if (!t.ok()) return t.status().WithContext(who);
    named.push_back(*t);
    seen.insert(t->id);
  }
  // And every other structure whose lock it holds (nothing of it to replay, but the lock is as
  // stale): one take-over frees them all.
  std::vector<uint32_t> slots;
  for (const RecoveredOp& op : ops) slots.push_back(op.structure_id);
  {
    backend::PayloadWriter w;
    w.U64(holder);
    auto reply = rm.Call(backend::kLockedBy, w.bytes());
    if (!reply.ok()) return reply.status().WithContext(who + ": the structures it locked");
    backend::PayloadReader in(*reply, "locked by");
    const uint32_t n = in.U32();
    for (uint32_t i = 0; i < n && in.status().ok(); i++) slots.push_back(in.U32());
    ASYMNVM_RETURN_IF_ERROR(in.status().WithContext(who));
  }
  for (uint32_t slot : slots) {
    if (!seen.insert(slot).second) continue;
    backend::PayloadWriter w;
    w.U32(slot);
    auto reply = rm.Call(backend::kNamingAt, w.bytes());
    if (!reply.ok())
      return reply.status().WithContext(who + ": structure in naming slot " + std::to_string(slot));
    ASYMNVM_ASSIGN_OR_RETURN(Structure st, DecodeEntry(*reply));
    rm.structures[st.id] = st;
    named.push_back(st);
  }
  ASYMNVM_RETURN_IF_ERROR(m.adopter(r, named).WithContext(who));
  // The adopter released the locks of what it opened; a lock of the dead writer still on the
  // target (nothing of it to replay, or the adopter could not open it) is released here.
  if (rm.opseq.replay_pending()) {
    return Status::FailedPrecondition(who + ": its op logs were not replayed; its locks stay held");
  }
  ASYMNVM_ASSIGN_OR_RETURN(uint64_t word, r.ReadWord(target.lock_addr));
  if (word == holder) {
    ASYMNVM_RETURN_IF_ERROR(r.Fence());
    ASYMNVM_RETURN_IF_ERROR(rm.Cas(target.lock_addr, holder, 0).status());
  }
  const uint64_t replayed = rm.c.replayed_ops;
  opened->reset();  // closes the recovery session before the id is released
  m.c.takeovers++;
  LOG_WARN(
      "frontend",
      who << ": replayed " << replayed << " operation(s) on " << named.size() << " structure(s) in "
          << std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count()
          << " ms");
  return true;
}

Status Session::Replay() {
  if (!impl_->o.op_log_address.empty()) {
    return Status::FailedPrecondition(
        "replay: this session's op logs go to " + impl_->o.op_log_address +
        " (SessionOptions::op_log_address), not to the data back-end; replay them with a fetcher "
        "for that back-end");
  }
  return Guarded(false, [&]() -> Status {
    BackendFetcher f(impl_->oq.get(), impl_->opseq.first());
    ASYMNVM_RETURN_IF_ERROR(ReplayWith(&f));
    Impl& m = *impl_;
    if (m.reclaim_pending && m.reclaimer && m.o.reclaim_on_recovery) {
      // After the replay and its fence: the structures hold every acknowledged operation.
      Status r = m.reclaimer(*this);
      if (!r.ok()) {
        impl_->c.reclaim_failures++;
        LOG_WARN("frontend", "front-end " << impl_->o.frontend_id
                                          << ": online reclaim failed, nothing freed ("
                                          << r.ToString() << "); asymnvm-ctl gc frees leaks");
      }
    }
    return Status::Ok();
  });
}

// ---- online reclamation ----

std::vector<uint64_t> Session::InheritedExtents() const {
  return impl_->journal ? impl_->journal->inherited() : std::vector<uint64_t>{};
}
bool Session::reclaim_pending() const { return impl_->reclaim_pending; }
void Session::MarkReclaimed() { impl_->reclaim_pending = false; }
void Session::SetReclaimer(std::function<Status(Session&)> reclaimer) {
  impl_->reclaimer = std::move(reclaimer);
}
const SessionOptions& Session::options() const { return impl_->o; }
void Session::CountReclaim(uint64_t blocks, bool deferred, uint64_t refused, uint64_t walk_us) {
  Counters& c = impl_->c;
  c.reclaim_runs++;
  c.reclaimed_blocks += blocks;
  c.reclaim_deferred += deferred ? 1 : 0;
  c.reclaim_refused += refused;
  c.reclaim_walk_us += walk_us;
}

Status Session::ReleaseInherited(uint64_t addr, uint64_t bytes, bool free) {
  return Guarded(false, [&]() -> Status {
    Impl& m = *impl_;
    const auto inh = m.journal->inherited();
    if (!std::binary_search(inh.begin(), inh.end(), addr)) {
      return Status::NotFound("ownership journal: " + std::to_string(addr) +
                              " is not an inherited extent");
    }
    if (!free) return m.journal->Remove(addr);  // dropped from the journal, not freed
    // Recorded first: from now on this session never carves in it and drops stale frees into it.
    m.slabs->AddReclaimed(addr, std::max<uint64_t>(bytes, 1));
    // Unrecorded and freed by the back-end in one request: a crash leaves both or neither.
    return m.journal->Remove(addr, [&](uint64_t entry, uint64_t expected) {
      return m.slabs->RawFree(addr, entry, expected);
    });
  });
}

Result<std::pair<uint64_t, uint64_t>> Session::ExtentOf(uint64_t addr) {
  return Guarded(true, [&]() { return impl_->slabs->ExtentOf(addr); });
}

Result<std::vector<Structure>> Session::ListStructures() {
  return Guarded(true, [&]() -> Result<std::vector<Structure>> {
    Impl& m = *impl_;
    std::vector<uint8_t> area(m.naming_end - m.naming_begin);
    ASYMNVM_RETURN_IF_ERROR(m.RemoteReadRaw(m.naming_begin, area));
    std::vector<Structure> out;
    for (size_t off = 0; off + backend::kNamingSlotSize <= area.size();
         off += backend::kNamingSlotSize) {
      const uint8_t* p = area.data() + off;
      if (GetLe32(p + 4) != 1) continue;  // not live
      if (GetLe32(p) != Crc32c(p + 8, 120)) continue;
      Structure st;
      st.id = static_cast<uint32_t>(off / backend::kNamingSlotSize);
      st.type = GetLe32(p + 8);
      const uint32_t len = GetLe32(p + 12);
      if (st.type == backend::kFrontendRecordType || len == 0 || len > backend::kMaxNameLength) {
        continue;
      }
      st.name.assign(reinterpret_cast<const char*>(p + 16), len);
      for (size_t k = 0; k < 4; k++) st.params[k] = GetLe64(p + 80 + 8 * k);
      const uint64_t slot = m.naming_begin + off;
      st.root_addr = slot + backend::kRootWordOffset;
      st.lock_addr = slot + backend::kLockWordOffset;
      st.seq_addr = slot + backend::kSeqWordOffset;
      st.aux_addr = slot + backend::kAuxWordOffset;
      out.push_back(std::move(st));
    }
    return out;
  });
}

Status Session::Replay(OpLogFetcher* fetcher) {
  return Guarded(false, [&]() -> Status { return ReplayWith(fetcher); });
}

Status Session::ReplayWith(OpLogFetcher* fetcher) {
  Impl& m = *impl_;
  if (fetcher == nullptr) return Status::InvalidArgument("replay: no fetcher");
  ASYMNVM_ASSIGN_OR_RETURN(auto ops, fetcher->Fetch(m.o.frontend_id, m.opseq.registered_opn()));
  std::sort(ops.begin(), ops.end(),
            [](const RecoveredOp& a, const RecoveredOp& b) { return a.op_seq < b.op_seq; });
  // Every op to replay is open until re-executed: a transaction sent meanwhile never carries an
  // OPN past one (a crash during replay replays the rest again).
  size_t replayed = 0;
  uint64_t last = 0;
  for (const RecoveredOp* next : m.opseq.BeginReplay(ops)) {
    const RecoveredOp& op = *next;
    m.opseq.Replaying(op.op_seq);
    if (op.op_type == kLockAheadOpType) {
      m.opseq.Replayed(op.op_seq);
      continue;
    }
    auto st = m.structures.find(op.structure_id);
    if (st == m.structures.end()) {
      return Status::FailedPrecondition("replay: op " + std::to_string(op.op_seq) +
                                        " names structure " + std::to_string(op.structure_id) +
                                        ", not opened in this session");
    }
    auto fn = m.replay.find(st->second.type);
    if (fn == m.replay.end()) {
      return Status::FailedPrecondition("replay: no replay function for structure type " +
                                        std::to_string(st->second.type));
    }
    m.replaying = true;
    m.replay_seq = op.op_seq;
    Status s = fn->second(*this, st->second, op);
    m.replaying = false;
    if (!s.ok()) return s.WithContext("replay of op " + std::to_string(op.op_seq));
    if (!m.cur.empty()) {
      m.replaying = true;  // TxWrite closes ops of this structure up to replay_seq only
      Status t = TxWrite(st->second);
      m.replaying = false;
      ASYMNVM_RETURN_IF_ERROR(t);
    }
    m.opseq.Replayed(op.op_seq);
    m.c.replayed_ops++;
    replayed++;
    last = op.op_seq;
    ASYMNVM_CRASH_POINT("frontend.replay.after_op");  // a crash during recovery: replay again
  }
  // Everything of the earlier sessions is re-executed (its transactions are in the batch).
  m.opseq.EndReplay();
  if (replayed > 0 || !ops.empty()) {
    LOG_INFO("frontend", "front-end "
                             << m.o.frontend_id << ": replayed " << replayed << " of " << ops.size()
                             << " fetched op log(s) after OPN "
                             << backend::OpSeqString(m.opseq.registered_opn())
                             << (replayed > 0 ? ", up to " + backend::OpSeqString(last) : ""));
  }
  return Fence();
}

}  // namespace asymnvm::frontend
