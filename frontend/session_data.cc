// Naming, reads, writes and allocation of a Session (frontend/session_impl.h).
#include "frontend/session_impl.h"

namespace asymnvm::frontend {

// ---- naming ----

Result<Structure> Session::CreateRoot(const std::string& name, uint32_t type,
                                      const std::array<uint64_t, 4>& params, uint32_t page_size) {
  return Guarded(true, [&]() -> Result<Structure> {
    Impl& m = *impl_;
    if (name.empty() || name.size() > 63) {
      return Status::InvalidArgument("root name must be 1..63 bytes");
    }
    if (type == 0 || type == backend::kFrontendRecordType) {
      return Status::InvalidArgument("root type must be non-zero and not 0xFE");
    }
    if (page_size != 0 && !ValidPageSize(page_size)) {
      return Status::InvalidArgument("page_size must be a power of two in 64..1 MiB");
    }
    ASYMNVM_ASSIGN_OR_RETURN(auto reply, m.Call(backend::kNamingCreate,
                                                backend::EncodeNamingCreate(name, type, params)));
    ASYMNVM_ASSIGN_OR_RETURN(Structure s, DecodeEntry(reply));
    s.page_size = page_size;
    m.structures[s.id] = s;
    return s;
  });
}

Result<Structure> Session::OpenRoot(const std::string& name) {
  return Guarded(true, [&]() -> Result<Structure> {
    Impl& m = *impl_;
    std::vector<uint8_t> n(name.begin(), name.end());
    ASYMNVM_ASSIGN_OR_RETURN(auto reply, m.Call(backend::kNamingLookup, n));
    ASYMNVM_ASSIGN_OR_RETURN(Structure s, DecodeEntry(reply));
    if (auto it = m.structures.find(s.id); it != m.structures.end()) {
      s.page_size = it->second.page_size;
    }
    m.structures[s.id] = s;
    return s;
  });
}

Status Session::RemoveRoot(const std::string& name) {
  return Guarded(false, [&]() -> Status {
    std::vector<uint8_t> n(name.begin(), name.end());
    return impl_->Call(backend::kNamingRemove, n).status();
  });
}

// ---- reads ----

void Session::SetReadObserver(std::function<void(uint64_t addr, uint64_t len)> observer) {
  impl_->read_observer = std::move(observer);
}

Status Session::Read(uint64_t addr, std::span<uint8_t> out, uint32_t page_size) {
  if (impl_->read_observer) impl_->read_observer(addr, out.size());
  return Guarded(true, [&]() -> Status {
    Impl& m = *impl_;
    ASYMNVM_RETURN_IF_ERROR(m.MaybeTimer());
    ASYMNVM_RETURN_IF_ERROR(m.Target(addr, out.size()).status());
    const bool data = addr >= m.data_begin && addr < m.data_end;
    if (m.snap != nullptr && data && out.size() <= m.data_end - addr)
      return m.SnapshotRead(addr, out);
    if (!m.cache || m.bypass_cache || !data) return m.RemoteRead(addr, out);
    const uint32_t ps = m.PageSize(page_size);
    if (!ValidPageSize(ps)) return Status::InvalidArgument("page_size must be a power of two");
    // Pages are aligned relative to the data area's start.
    uint64_t pos = addr;
    const uint64_t end = addr + out.size();
    while (pos < end) {
      const uint64_t page = m.data_begin + (pos - m.data_begin) / ps * ps;
      const uint64_t page_len = std::min<uint64_t>(ps, m.data_end - page);
      uint8_t* p = m.cache->Lookup(ps, page);
      std::vector<uint8_t> tmp;
      if (p == nullptr) {
        tmp.resize(page_len);
        ASYMNVM_RETURN_IF_ERROR(m.RemoteRead(page, tmp));
        p = m.cache->Insert(ps, page, tmp);
        if (p == nullptr) p = tmp.data();
      }
      const uint64_t n = std::min(end, page + page_len) - pos;
      std::memcpy(out.data() + (pos - addr), p + (pos - page), n);
      pos += n;
    }
    return Status::Ok();
  });
}

Status Session::ReadRemote(uint64_t addr, std::span<uint8_t> out) {
  if (impl_->read_observer) impl_->read_observer(addr, out.size());
  return Guarded(true, [&]() -> Status {
    Impl& m = *impl_;
    ASYMNVM_RETURN_IF_ERROR(m.MaybeTimer());
    return m.RemoteRead(addr, out);
  });
}

Result<uint64_t> Session::ReadWord(uint64_t addr) {
  if (impl_->read_observer) impl_->read_observer(addr, 8);
  return Guarded(true, [&]() -> Result<uint64_t> {
    if (addr % 8 != 0) return Status::InvalidArgument("ReadWord: address not 8-byte aligned");
    uint8_t w[8];
    ASYMNVM_RETURN_IF_ERROR(impl_->RemoteRead(addr, w));
    return GetLe64(w);
  });
}

namespace {
// Errors of a reader body that a concurrent transaction can cause (torn data); transport
// errors are not among them.
bool IsRetryableBodyError(const Status& st) {
  switch (st.code()) {
    case StatusCode::kAborted:
    case StatusCode::kCorruption:
    case StatusCode::kNotFound:
    case StatusCode::kInvalidArgument:
      return true;
    default:
      return false;
  }
}
}  // namespace

Status Session::ReadConsistent(const Structure& s, const std::function<Status()>& body) {
  return Guarded(true, [&]() -> Status {
    Impl& m = *impl_;
    const auto deadline = Clock::now() + m.o.timeout;
    Backoff backoff;
    const bool saved = m.bypass_cache;
    m.bypass_cache = true;
    // Snapshots only where a cache is (rc/rcb), and not for a nested ReadConsistent.
    const bool snapshots = m.cache != nullptr && m.snap == nullptr && m.o.cache_bytes > 0;
    struct Unsnap {
      Impl& m;
      ~Unsnap() { m.snap = nullptr; }
    } unsnap{m};
    Status result = Status::Ok();
    while (true) {
      auto v1 = ReadWord(s.seq_addr);
      if (!v1.ok()) {
        result = v1.status();
        break;
      }
      if (*v1 % 2 == 0) {
        if (snapshots) {
          Impl::Snapshot& sn = m.snapshots[s.seq_addr];
          if (sn.seq != *v1) m.DropSnapshot(sn);  // written since: what it held may be stale
          m.snap = &sn;
          m.snap_fresh = sn.seq == *v1;
          m.snap_missed = false;
        }
        result = body();
        if (m.snap != nullptr) {
          m.snap = nullptr;
          // Every read came from a snapshot taken at this very word value: the body saw the
          // state at the moment the word was read, consistent without a second read.
          if (m.snap_fresh && !m.snap_missed) break;
        }
        auto v2 = ReadWord(s.seq_addr);
        if (!v2.ok()) {
          result = v2.status();
          break;
        }
        if (snapshots) {
          Impl::Snapshot& sn = m.snapshots[s.seq_addr];
          if (*v2 == *v1) {
            sn.seq = *v1;  // what the body read (and kept) is the state at v1
          } else {
            m.DropSnapshot(sn);
          }
        }
        // A body error is final only when the data did not change under it: a torn read may make
        // the body fail (bad pointer, bad magic), and that is a retry, not an error.
        if (*v2 == *v1) break;
        if (!result.ok() && !IsRetryableBodyError(result)) break;
      }
      m.c.reader_retries++;
      if (Clock::now() > deadline) {
        result = Status::TimedOut("reader: sequence word kept changing");
        break;
      }
      backoff.Wait();
    }
    m.bypass_cache = saved;
    return result;
  });
}

Result<uint64_t> Session::CompareSwap(uint64_t addr, uint64_t expected, uint64_t desired) {
  return Guarded(false, [&]() -> Result<uint64_t> {
    Impl& m = *impl_;
    if (addr % 8 != 0) return Status::InvalidArgument("CompareSwap: address not 8-byte aligned");
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t old, m.Cas(addr, expected, desired));
    if (old == expected && m.cache) {
      uint8_t w[8];
      PutLe64(w, desired);
      m.cache->Update(addr, w);
    }
    return old;
  });
}

// ---- writes ----

Status Session::Write(uint64_t addr, std::span<const uint8_t> data, const Structure* s) {
  return Guarded(true, [&]() -> Status {
    Impl& m = *impl_;
    if (!m.cur.empty()) {
      return Status::FailedPrecondition("Write inside an operation (MemLog before TxWrite)");
    }
    ASYMNVM_RETURN_IF_ERROR(m.CheckData(addr, data.size()));
    ASYMNVM_RETURN_IF_ERROR(m.FlushBatch());  // keep transaction order = program order
    backend::TxnBuilder b;
    b.Write(addr, data);
    m.c.mem_logs++;
    m.AddOverlay(addr, data, 0);
    m.batch_last_order = m.overlay_order;
    if (m.cache) m.cache->Update(addr, data);
    ASYMNVM_RETURN_IF_ERROR(m.SendTxn(&b, s ? s->seq_addr : 0, m.opseq.opn()));
    return m.Fence();
  });
}

Status Session::Impl::BufferWrite(uint64_t addr, std::span<const uint8_t> data, uint64_t op_seq,
                                  uint32_t op_offset) {
  ASYMNVM_RETURN_IF_ERROR(CheckData(addr, data.size()));
  const size_t fp = op_seq != 0 ? internal::kPointerEntryFootprint : EntryFootprint(data.size());
  if (cur_bytes + fp + backend::kTxnHeaderSize + backend::kTxnCommitSize > max_txn) {
    return Status::ResourceExhausted(
        "the operation's memory logs exceed the largest transaction (" + std::to_string(max_txn) +
        " bytes)");
  }
  cur.push_back({addr, std::vector<uint8_t>(data.begin(), data.end()), op_seq, op_offset});
  cur_bytes += fp;
  c.mem_logs++;
  if (op_seq != 0) c.pointer_mem_logs++;
  AddOverlay(addr, data, 0);
  if (cache) cache->Update(addr, data);
  return Status::Ok();
}

Status Session::MemLog(uint64_t addr, std::span<const uint8_t> data) {
  return Guarded(false, [&]() -> Status {
    Impl& m = *impl_;
    if (m.o.level == Level::kNaive && !m.group_writes) return Write(addr, data);
    return m.BufferWrite(addr, data, 0, 0);
  });
}

Status Session::MemLogFromOp(uint64_t addr, std::span<const uint8_t> data, uint64_t op_seq,
                             uint32_t op_offset) {
  Impl& m = *impl_;
  // naive logs no operation (OpLog returned 0): plain memory logs.
  if (m.o.level == Level::kNaive) return MemLog(addr, data);
  if (!m.opseq.IsOpen(op_seq)) {
    return Status::FailedPrecondition("MemLogFromOp: op " + backend::OpSeqString(op_seq) +
                                      " is not an open operation of this session");
  }
  // Inline where a pointer cannot be resolved (async op logs: the op log may land after the
  // transaction; op logs at another back-end) or does not pay (a pointer body is 16 bytes).
  if (m.o.async_op_logs || !m.o.pointer_mem_logs || !m.o.op_log_address.empty() ||
      EntryFootprint(data.size()) <= internal::kPointerEntryFootprint) {
    return MemLog(addr, data);
  }
  return Guarded(false, [&]() -> Status { return m.BufferWrite(addr, data, op_seq, op_offset); });
}

Result<uint64_t> Session::OpLog(const Structure& s, uint16_t op_type,
                                std::span<const uint8_t> params) {
  return Guarded(false, [&]() -> Result<uint64_t> {
    Impl& m = *impl_;
    if (op_type >= 0xFF00) return Status::InvalidArgument("op types 0xFF00.. are reserved");
    if (m.o.level == Level::kNaive) return uint64_t{0};
    if (m.replaying) return m.replay_seq;  // already in open_ops (Replay put it there)
    ASYMNVM_RETURN_IF_ERROR(m.MaybeTimer());
    ASYMNVM_RETURN_IF_ERROR(m.CloseOthers(s.id));
    ASYMNVM_ASSIGN_OR_RETURN(uint64_t seq, m.SendOpLog(s.id, op_type, params));
    m.opseq.Opened(seq, s.id);
    // The op log is durable; it counts as acknowledged only while the lease holds.
    ASYMNVM_RETURN_IF_ERROR(m.CheckFenced().WithContext("op " + std::to_string(seq) +
                                                        " was logged but is not acknowledged"));
    return seq;
  });
}

Status Session::TxWrite(const Structure& s) { return EndWrites(s, /*close=*/true); }

Status Session::TxWritePart(const Structure& s) { return EndWrites(s, /*close=*/false); }

Status Session::EndWrites(const Structure& s, bool close) {
  return Guarded(false, [&]() -> Status {
    Impl& m = *impl_;
    const bool naive = m.o.level == Level::kNaive;
    if (naive && m.cur.empty()) return Status::Ok();
    ASYMNVM_RETURN_IF_ERROR(m.broken);
    // A batch brackets one sequence word, and has a size limit.
    if (m.batch_ops > 0 &&
        (m.batch_seq_addr != s.seq_addr || m.batch.encoded_size() + m.cur_bytes > m.batch_limit)) {
      ASYMNVM_RETURN_IF_ERROR(m.FlushBatch());
    }
    if (m.batch_ops == 0) m.batch_start = Clock::now();
    for (auto& w : m.cur) {
      if (!m.batch_keys.insert({w.addr, static_cast<uint32_t>(w.data.size())}).second) {
        m.c.coalesced++;
      }
      if (w.op_seq != 0) {
        m.batch.WritePointer(w.addr, static_cast<uint32_t>(w.data.size()), w.op_seq, w.op_offset);
      } else {
        m.batch.Write(w.addr, w.data);
      }
    }
    m.cur.clear();
    m.cur_bytes = 0;
    m.batch_ops++;
    m.batch_seq_addr = s.seq_addr;
    // A part (TxWritePart) leaves the operation open: the OPN does not pass its op log yet.
    if (close) m.opseq.Close(s.id, m.replaying ? m.replay_seq : m.opseq.max_logged());
    m.batch_last_order = m.overlay_order;
    const bool send = m.o.level != Level::kRcb || m.batch_ops >= m.o.batch_ops ||
                      m.batch.encoded_size() >= m.batch_limit;
    if (send) ASYMNVM_RETURN_IF_ERROR(m.FlushBatch());
    if (naive || m.overlay_size > m.o.overlay_bytes) return m.Fence();  // naive: grouped writes
    return m.MaybeTimer();
  });
}

Status Session::Flush() {
  return Guarded(true, [&]() -> Status {
    Impl& m = *impl_;
    if (!m.cur.empty()) {
      return Status::FailedPrecondition("Flush inside an operation (MemLog before TxWrite)");
    }
    return m.FlushBatch();
  });
}

Status Session::Fence() {
  return Guarded(true, [&]() -> Status {
    Impl& m = *impl_;
    if (!m.cur.empty()) {
      return Status::FailedPrecondition("Fence inside an operation (MemLog before TxWrite)");
    }
    return m.Fence();
  });
}

void Session::SetGroupWrites(bool on) { impl_->group_writes = on; }

Status Session::Poll() {
  return Guarded(true, [&]() -> Status {
    ASYMNVM_RETURN_IF_ERROR(impl_->CollectLogAcks(false, 0));
    return impl_->MaybeTimer();
  });
}

// ---- allocation ----

Result<uint64_t> Session::Malloc(uint64_t size) {
  return Guarded(false, [&]() -> Result<uint64_t> { return impl_->allocator->Malloc(size); });
}
Status Session::Free(uint64_t addr) {
  return Guarded(false, [&]() -> Status {
    Impl& m = *impl_;
    if (m.slabs->Reclaimed(addr)) {
      // In a block this session's online reclaim freed: a stale free (see ReleaseInherited).
      m.c.orphan_frees++;
      return Status::Ok();
    }
    Status st = m.allocator->Free(addr);
    if (st.code() != StatusCode::kInvalidArgument || addr < m.data_begin || addr >= m.data_end ||
        m.OwnsMemoryAt(addr)) {
      return st;
    }
    // Not this session's: ask the back-end what lives there.
    ASYMNVM_ASSIGN_OR_RETURN(auto ext, m.slabs->ExtentOf(addr));
    const auto [start, bytes] = ext;
    if (bytes == 0) {
      return Status::FailedPrecondition("free of " + std::to_string(addr) +
                                        ": not in any live allocation (double free?)");
    }
    if (bytes > m.block_size) {  // a large extent of an earlier session: the back-end frees it
      if (addr != start) {
        return Status::InvalidArgument("free of " + std::to_string(addr) +
                                       ": points into the middle of a large allocation");
      }
      // Only an earlier incarnation's (still in this id's ownership journal): removed from the
      // journal, then freed. Another front-end's large extent stays allocated (an orphan): its
      // journal still names it, and freeing it here would let that front-end's recovery free
      // the block again once it is reallocated (doc/alloc.md §Leaks across crashes). Its
      // recovery, or gc, frees it.
      if (m.journal->recorded(addr)) return m.slabs->Free(addr);
    }
    m.c.orphan_frees++;  // an object in a slab of an earlier session: stays allocated
    if (m.journal->recorded(start)) m.journaled_orphan_frees++;
    return Status::Ok();
  });
}

}  // namespace asymnvm::frontend
