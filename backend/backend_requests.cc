// The Ordered Queue requests (doc/backend.md §Requests): Handle (metrics, the queue position a
// checkpoint covers), the dispatch on the request type, one handler per request type, front-end
// registration and memory-log transactions (file map: backend/backend_internal.h).
#include "backend/backend_internal.h"
#include "common/crash_point.h"
#include "common/logging.h"
#include "fabric/oq/wire.h"

namespace asymnvm::backend {

Status Backend::Impl::Handle(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                             std::vector<uint8_t>* response) {
  const auto t0 = std::chrono::steady_clock::now();
  Status st = HandleRequest(ctx, payload, response);
  request_metrics.Record(
      ctx.type,
      static_cast<uint64_t>(
          std::chrono::nanoseconds(std::chrono::steady_clock::now() - t0).count()),
      payload.size(), response->size(), st.ok());
  // The queue position after this request (what the OQ worker's ReqToExecute becomes): a
  // checkpoint taken from now on covers it.
  const uint64_t end =
      uint64_t{ctx.position & 0xFFFF} * kOqStride + oq::kRequestHeaderSize + payload.size();
  const uint64_t after = oq::wire::Position(
      ctx.position >> 16, static_cast<uint32_t>((end + kOqStride - 1) / kOqStride));
  MutexLock lock(mu);
  applied_rte = std::max(applied_rte, after);
  return st;
}

Status Backend::Impl::HandleRequest(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                                    std::vector<uint8_t>* response) {
  {
    MutexLock lock(mu);
    counters.requests++;
  }
  switch (ctx.type) {
    case kRegister:
      return HandleRegister(ctx, payload, response);
    case kNamingCreate:
      return HandleNamingCreate(ctx, payload, response);
    case kClearRejected:
      return HandleClearRejected(ctx, payload, response);
    case kNamingLookup:
      return HandleNamingLookup(ctx, payload, response);
    case kNamingAt:
      return HandleNamingAt(ctx, payload, response);
    case kLockedBy:
      return HandleLockedBy(ctx, payload, response);
    case kNamingRemove:
      return HandleNamingRemove(ctx, payload, response);
    case kAllocSlab:
    case kAllocLarge:
      return HandleAlloc(ctx, payload, response);
    case kFree:
      return HandleFree(ctx, payload, response);
    case kFetchOpLogs:
      return HandleFetchOpLogs(ctx, payload, response);
    case kExtentOf:
      return HandleExtentOf(ctx, payload, response);
    case kFreeDeferred:
      return HandleFreeDeferred(ctx, payload, response);
    case kTxn:
      return ApplyTxnRequest(payload, ctx.recovering);
    case kStatus:
      return HandleStatus(ctx, payload, response);
    default:
      return Status::InvalidArgument("backend: unknown request type " + std::to_string(ctx.type));
  }
}

Status Backend::Impl::HandleRegister(const oq::RequestContext& /*ctx*/,
                                     std::span<const uint8_t> payload,
                                     std::vector<uint8_t>* response) {
  PayloadReader r(payload, "register");
  const uint64_t fe = r.U64();
  // The coordinator epoch of the claim (0: the front-end has no coordinator). A lower epoch
  // than one this back-end has seen for the id is a holder whose lease lapsed and whose id
  // was claimed again since: fenced.
  const uint64_t epoch = r.remaining() >= 8 ? r.U64() : 0;
  // The group term the front-end learned from the coordinator (0: none). A higher one than
  // this replica serves means a mirror may have been promoted since (doc/mirror.md §Terms).
  const uint64_t term = r.remaining() >= 8 ? r.U64() : 0;
  ASYMNVM_RETURN_IF_ERROR(r.status());
  if (term > o.replication.term) {
    Status t =
        o.check_term
            ? o.check_term(term)
            : Status::FailedPrecondition("register: the front-end is at group term " +
                                         std::to_string(term) + ", this replica serves term " +
                                         std::to_string(o.replication.term) + " (stale replica)");
    if (!t.ok()) {
      MutexLock lock(mu);
      counters.registers_fenced++;
      LOG_WARN("backend", "refused a registration of front-end " << fe << " at group term " << term
                                                                 << ": " << t.ToString());
      return t;
    }
  }
  if (epoch != 0) {
    MutexLock lock(mu);
    uint64_t& highest = epochs[fe];
    if (epoch < highest) {
      counters.registers_fenced++;
      LOG_WARN("backend", "refused a registration of front-end " << fe << " at epoch " << epoch
                                                                 << ": epoch " << highest
                                                                 << " registered since");
      return Status::FailedPrecondition("register: fenced: front-end id " + std::to_string(fe) +
                                        " epoch " + std::to_string(epoch) + " is stale (epoch " +
                                        std::to_string(highest) +
                                        " registered since: the id was taken over)");
    }
    highest = epoch;
  }
  ASYMNVM_ASSIGN_OR_RETURN(NamingEntry rec, Register(fe));
  uint32_t incarnation = 0;
  {
    // A new incarnation: op_seq numbers of this session start above 2^32 × incarnation, so
    // they never repeat an op log of an earlier session still in the b-log (the scanner
    // identifies entries by (owner, version)).
    auto aux = Word(base(), rec.aux_addr);
    incarnation = static_cast<uint32_t>((aux.load() >> 32) + 1);
    aux.store(uint64_t{incarnation} << 32, std::memory_order_release);
    persister()->Persist(base() + rec.aux_addr, 8);
  }
  RegisterReply reply;
  reply.lpn = Word(base(), rec.root_addr).load();
  reply.opn = Word(base(), rec.lock_addr).load();
  reply.rejected = Word(base(), rec.seq_addr).load();
  LOG_INFO("backend", "front-end " << fe << " registered: incarnation " << incarnation << ", LPN "
                                   << reply.lpn << ", OPN " << OpSeqString(reply.opn));
  reply.lpn_addr = rec.root_addr;
  reply.opn_addr = rec.lock_addr;
  reply.rejected_addr = rec.seq_addr;
  reply.naming_begin = layout.naming.offset;
  reply.data_begin = layout.data.offset;
  reply.data_end = layout.data.end();
  reply.block_size = layout.block_size;
  reply.incarnation = incarnation;
  reply.naming_region = naming_mr->descriptor();
  reply.data_region = data_mr->descriptor();
  reply.log_address = receiver->address();
  reply.pool_uuid = pool->superblock().uuid;
  *response = EncodeRegisterReply(reply);
  return Status::Ok();
}

Status Backend::Impl::HandleNamingCreate(const oq::RequestContext& /*ctx*/,
                                         std::span<const uint8_t> payload,
                                         std::vector<uint8_t>* response) {
  PayloadWriter w;
  ASYMNVM_ASSIGN_OR_RETURN(NamingCreateRequest q, DecodeNamingCreate(payload));
  const uint32_t type = q.type;
  if (type == kFrontendRecordType) {
    return Status::InvalidArgument("naming create: type 0xFE is reserved for front-ends");
  }
  NamingEntry existing;
  auto e = naming->Create(q.name, type, q.params, &existing);
  if (e.ok()) {
    EncodeNamingEntry(*e, &w);
  } else if (e.status().code() == StatusCode::kAlreadyExists && existing.type == type) {
    EncodeNamingEntry(existing, &w);  // create-or-open: same type is fine
  } else if (e.status().code() == StatusCode::kAlreadyExists) {
    return Status::AlreadyExists(e.status().message() + " with type " +
                                 std::to_string(existing.type) + ", not " + std::to_string(type));
  } else {
    return e.status();
  }
  *response = std::move(w.bytes());
  return Status::Ok();
}

Status Backend::Impl::HandleClearRejected(const oq::RequestContext& /*ctx*/,
                                          std::span<const uint8_t> payload,
                                          std::vector<uint8_t>* response) {
  PayloadReader r(payload, "clear rejected");
  const uint64_t fe = r.U64();
  ASYMNVM_RETURN_IF_ERROR(r.status());
  MutexLock lock(mu);
  auto it = frontends.find(fe);
  if (it == frontends.end()) {
    return Status::NotFound("clear rejected: front-end " + std::to_string(fe) +
                            " is not registered");
  }
  Word(base(), it->second.seq_addr).store(0, std::memory_order_release);
  persister()->Persist(base() + it->second.seq_addr, 8);
  response->clear();
  return Status::Ok();
}

Status Backend::Impl::HandleNamingLookup(const oq::RequestContext& /*ctx*/,
                                         std::span<const uint8_t> payload,
                                         std::vector<uint8_t>* response) {
  PayloadWriter w;
  ASYMNVM_ASSIGN_OR_RETURN(NamingEntry e,
                           naming->Lookup(std::string(payload.begin(), payload.end())));
  EncodeNamingEntry(e, &w);
  *response = std::move(w.bytes());
  return Status::Ok();
}

Status Backend::Impl::HandleNamingAt(const oq::RequestContext& /*ctx*/,
                                     std::span<const uint8_t> payload,
                                     std::vector<uint8_t>* response) {
  PayloadWriter w;
  PayloadReader r(payload, "naming at");
  const uint32_t slot = r.U32();
  ASYMNVM_RETURN_IF_ERROR(r.status());
  ASYMNVM_ASSIGN_OR_RETURN(NamingEntry e, naming->At(slot));
  if (e.type == kFrontendRecordType) {
    return Status::NotFound("naming at: slot " + std::to_string(slot) +
                            " holds a front-end record, not a structure");
  }
  EncodeNamingEntry(e, &w);
  *response = std::move(w.bytes());
  return Status::Ok();
}

Status Backend::Impl::HandleLockedBy(const oq::RequestContext& /*ctx*/,
                                     std::span<const uint8_t> payload,
                                     std::vector<uint8_t>* response) {
  PayloadWriter w;
  // A dead writer's take-over releases every lock it holds, also of structures none of its
  // unreplayed op logs names (Session::AdoptDeadWriter).
  PayloadReader r(payload, "locked by");
  const uint64_t fe = r.U64();
  ASYMNVM_RETURN_IF_ERROR(r.status());
  if (fe == 0) return Status::InvalidArgument("locked by: front-end id 0");
  std::vector<uint32_t> slots;
  for (const NamingEntry& e : naming->List()) {
    if (e.type != kFrontendRecordType && Word(base(), e.lock_addr).load() == fe)
      slots.push_back(e.slot);
  }
  w.U32(static_cast<uint32_t>(slots.size()));
  for (uint32_t slot : slots) w.U32(slot);
  *response = std::move(w.bytes());
  return Status::Ok();
}

Status Backend::Impl::HandleNamingRemove(const oq::RequestContext& /*ctx*/,
                                         std::span<const uint8_t> payload,
                                         std::vector<uint8_t>* response) {
  ASYMNVM_RETURN_IF_ERROR(naming->Remove(std::string(payload.begin(), payload.end())));
  response->clear();
  return Status::Ok();
}

Status Backend::Impl::HandleAlloc(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                                  std::vector<uint8_t>* response) {
  PayloadWriter w;
  // Optional trailer: the caller's ownership-journal entry (address, tag), written with
  // the allocation (doc/alloc.md §Reclaim at recovery).
  PayloadReader r(payload, ctx.type == kAllocSlab ? "alloc slab" : "alloc large");
  const uint64_t bytes = ctx.type == kAllocLarge ? r.U64() : 0;
  const bool journaled = r.remaining() > 0;
  const uint64_t entry = journaled ? r.U64() : 0, tag = journaled ? r.U64() : 0;
  ASYMNVM_RETURN_IF_ERROR(r.status());
  if (r.remaining() != 0) return Status::InvalidArgument("allocation: trailing bytes");
  if (journaled && tag > 63) {
    return Status::InvalidArgument("allocation: journal tag " + std::to_string(tag));
  }
  MutexLock dl(dfree_mu);
  ASYMNVM_ASSIGN_OR_RETURN(
      uint64_t a, ctx.type == kAllocSlab ? allocator->AllocSlab() : allocator->AllocLarge(bytes));
  if (journaled) {
    Status st = JournalSwap(entry, 0, a | tag);
    if (!st.ok()) {
      Status f = allocator->Free(a);
      if (!f.ok()) LOG_WARN("backend", "undoing an allocation: " << f.ToString());
      return st;
    }
  }
  w.U64(a);
  *response = std::move(w.bytes());
  return Status::Ok();
}

Status Backend::Impl::HandleFree(const oq::RequestContext& /*ctx*/,
                                 std::span<const uint8_t> payload, std::vector<uint8_t>* response) {
  // Optional trailer: the caller's ownership-journal entry (address, expected value),
  // cleared durably before the free.
  PayloadReader r(payload, "free");
  const uint64_t addr = r.U64();
  const bool journaled = r.remaining() > 0;
  const uint64_t entry = journaled ? r.U64() : 0, expected = journaled ? r.U64() : 0;
  ASYMNVM_RETURN_IF_ERROR(r.status());
  if (r.remaining() != 0) return Status::InvalidArgument("free: trailing bytes");
  MutexLock dl(dfree_mu);
  if (dfree_pending.count(addr) != 0) {
    return Status::FailedPrecondition("free of " + std::to_string(addr) +
                                      ": a deferred free of it is pending");
  }
  if (journaled) {
    if ((expected & ~uint64_t{63}) != addr) {
      return Status::InvalidArgument("free of " + std::to_string(addr) +
                                     ": the journal entry expected names " +
                                     std::to_string(expected & ~uint64_t{63}));
    }
    ASYMNVM_RETURN_IF_ERROR(JournalSwap(entry, expected, 0));
  }
  ASYMNVM_RETURN_IF_ERROR(allocator->Free(addr));
  response->clear();
  return Status::Ok();
}

Status Backend::Impl::HandleFetchOpLogs(const oq::RequestContext& /*ctx*/,
                                        std::span<const uint8_t> payload,
                                        std::vector<uint8_t>* response) {
  PayloadWriter w;
  PayloadReader r(payload, "fetch op logs");
  const uint64_t fe = r.U64(), after = r.U64(), before = r.U64();
  ASYMNVM_RETURN_IF_ERROR(r.status());
  bool more = false;
  auto ops = FetchOpLogs(fe, after, before, &more);
  LOG_INFO("backend", "front-end " << fe << " fetched " << ops.size() << " op log(s) after "
                                   << OpSeqString(after)
                                   << (ops.empty() ? std::string()
                                                   : " (" + OpSeqString(ops.front().op_seq) + ".." +
                                                         OpSeqString(ops.back().op_seq) + ")")
                                   << (more ? ", more" : ""));
  w.Bytes(EncodeFetchedOps(ops, more));
  *response = std::move(w.bytes());
  return Status::Ok();
}

Status Backend::Impl::HandleExtentOf(const oq::RequestContext& /*ctx*/,
                                     std::span<const uint8_t> payload,
                                     std::vector<uint8_t>* response) {
  PayloadWriter w;
  PayloadReader r(payload, "extent of");
  const uint64_t addr = r.U64();
  ASYMNVM_RETURN_IF_ERROR(r.status());
  uint64_t start = 0, bytes = 0;
  for (const auto& e : allocator->Extents()) {
    if (addr >= e.addr && addr < e.addr + e.bytes) {
      start = e.addr;
      bytes = e.bytes;
      break;
    }
    if (e.addr > addr) break;
  }
  w.U64(start);
  w.U64(bytes);
  *response = std::move(w.bytes());
  return Status::Ok();
}

Status Backend::Impl::HandleFreeDeferred(const oq::RequestContext& ctx,
                                         std::span<const uint8_t> payload,
                                         std::vector<uint8_t>* response) {
  PayloadReader r(payload, "deferred free");
  const uint64_t addr = r.U64();
  ASYMNVM_RETURN_IF_ERROR(r.status());
  ASYMNVM_RETURN_IF_ERROR(RecordDeferredFree(addr, ctx.recovering));
  response->clear();
  return Status::Ok();
}

Status Backend::Impl::HandleStatus(const oq::RequestContext& /*ctx*/,
                                   std::span<const uint8_t> /*payload*/,
                                   std::vector<uint8_t>* response) {
  PayloadWriter w;
  const std::string s = StatusJson();
  w.Str(s);
  *response = std::move(w.bytes());
  return Status::Ok();
}

Result<NamingEntry> Backend::Impl::Register(uint64_t fe) {
  if (fe == 0) return Status::InvalidArgument("register: front-end id 0 is reserved");
  {
    MutexLock lock(mu);
    if (auto it = frontends.find(fe); it != frontends.end()) return it->second;
  }
  ASYMNVM_ASSIGN_OR_RETURN(NamingEntry e,
                           naming->Create("fe:" + std::to_string(fe), kFrontendRecordType, {}));
  MutexLock lock(mu);
  frontends[fe] = e;
  return e;
}

Status Backend::Impl::ApplyTxnRequest(std::span<const uint8_t> payload, bool recovering) {
  auto decoded = DecodeTxn(payload);
  MutexLock lock(mu);
  if (!decoded.ok()) {
    counters.txns_rejected++;
    LOG_WARN("backend", "rejected a transaction: " << decoded.status().ToString());
    return decoded.status();
  }
  const TxnView& txn = *decoded;
  const uint64_t fe = txn.header.frontend_id & 0xFFFFFFFF;
  const uint64_t sender_incarnation = txn.header.frontend_id >> 32;
  auto it = frontends.find(fe);
  if (it == frontends.end()) {
    counters.txns_rejected++;
    return Status::FailedPrecondition("txn from unregistered front-end " + std::to_string(fe));
  }
  const NamingEntry& rec = it->second;
  if (sender_incarnation != 0 && !recovering) {
    const uint64_t current = Word(base(), rec.aux_addr).load() >> 32;
    if (sender_incarnation != current) {
      counters.txns_fenced++;
      LOG_WARN("backend", "refused txn " << txn.header.txn_seq << " of front-end " << fe
                                         << " incarnation " << sender_incarnation
                                         << ": incarnation " << current
                                         << " registered since (fenced)");
      return Status::FailedPrecondition(
          "txn " + std::to_string(txn.header.txn_seq) + " of front-end " + std::to_string(fe) +
          ": fenced (incarnation " + std::to_string(sender_incarnation) +
          ", the id was registered again as " + std::to_string(current) + ")");
    }
  }
  auto lpn = Word(base(), rec.root_addr);
  const uint64_t applied = lpn.load(std::memory_order_acquire);
  if (txn.header.txn_seq <= applied) {  // re-executed by OQ recovery: already applied
    counters.txns_skipped++;
    return Status::Ok();
  }
  Status s;
  if (txn.header.txn_seq != applied + 1) {
    s = Status::FailedPrecondition("txn " + std::to_string(txn.header.txn_seq) + " of front-end " +
                                   std::to_string(fe) + " does not follow LPN " +
                                   std::to_string(applied));
  } else {
    ApplyTarget t{base(), pool->size(), layout.data.offset, layout.data.end(), apply_persister()};
    auto st = ApplyTxn(txn, t, this);
    if (st.ok()) {
      counters.txns_applied++;
      counters.txn_bytes_applied += st->bytes;
      auto opn = Word(base(), rec.lock_addr);
      if (txn.header.opn > opn.load()) opn.store(txn.header.opn, std::memory_order_release);
      lpn.store(txn.header.txn_seq, std::memory_order_release);
      apply_persister()->Persist(base() + rec.root_addr, 16);
      return Status::Ok();
    }
    s = st.status();
  }
  // Rejected: never applied; the front-end finds the first rejected txn_seq in its record.
  counters.txns_rejected++;
  auto rejected = Word(base(), rec.seq_addr);
  if (rejected.load() == 0) {
    rejected.store(txn.header.txn_seq, std::memory_order_release);
    persister()->Persist(base() + rec.seq_addr, 8);
  }
  LOG_WARN("backend", "rejected " << s.ToString());
  return s;
}
}  // namespace asymnvm::backend
