#include "backend/backend.h"

#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_map>

#include "alloc/backend_allocator.h"
#include "backend/applier.h"
#include "backend/log_format.h"
#include "backend/naming.h"
#include "backend/rpc.h"
#include "common/logging.h"
#include "fabric/oq/oq.h"
#include "fabric/rowan/receiver.h"
#include "fabric/rowan/scanner.h"

namespace asymnvm::backend {
namespace {

constexpr uint16_t kOpLogEntryType = kOpLogRowanType;

double ProcessCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

std::atomic_ref<uint64_t> Word(uint8_t* base, uint64_t offset) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(base + offset));
}


}  // namespace

struct Backend::Impl : public OpLogSource {
  BackendOptions o;
  std::unique_ptr<pm::Pool> pool;
  Layout layout;
  std::unique_ptr<NamingSpace> naming;
  std::unique_ptr<alloc::BackendAllocator> allocator;
  std::unique_ptr<fabric::Fabric> fabric;
  std::unique_ptr<fabric::ProtectionDomain> pd;
  std::unique_ptr<fabric::MemoryRegion> naming_mr, data_mr;
  std::unique_ptr<rowan::Receiver> receiver;
  std::unique_ptr<oq::Server> server;

  mutable std::mutex mu;  // front-end records, op-log index, pending segments, deferred frees
  std::unordered_map<uint64_t, NamingEntry> frontends;  // fe id → its record in the naming space
  std::map<std::pair<uint64_t, uint64_t>, std::vector<uint8_t>> op_logs;  // (fe, op_seq) → payload
  struct HeldSegment {
    uint32_t index;
    std::map<uint64_t, uint64_t> max_op_seq;  // fe → highest op_seq in the segment
  };
  std::deque<HeldSegment> held;
  std::deque<std::pair<std::chrono::steady_clock::time_point, uint64_t>> deferred;
  BackendStats counters;

  std::atomic<bool> stop{false};
  std::thread consumer;

  uint8_t* base() const { return pool->base(); }

  // OpLogSource: pointer entries of memory logs.
  Result<std::span<const uint8_t>> Payload(uint64_t fe, uint64_t op_seq) override {
    auto it = op_logs.find({fe, op_seq});  // called under mu (from ApplyTxnRequest)
    if (it == op_logs.end()) {
      return Status::NotFound("op log " + std::to_string(op_seq) + " of front-end " +
                              std::to_string(fe) + " has not been digested");
    }
    return std::span<const uint8_t>(it->second);
  }

  LayoutParams Params() const {
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

  Status Format() {
    ASYMNVM_ASSIGN_OR_RETURN(layout, PlanLayout(pool->size(), Params()));
    // Regions may hold bytes of an interrupted earlier format: start them from zero.
    for (const Region* r : {&layout.naming, &layout.bitmap, &layout.rowan, &layout.oq}) {
      std::memset(base() + r->offset, 0, r->size);
      pool->persister()->Persist(base() + r->offset, r->size);
    }
    LOG_INFO("backend", "formatting " << pool->path() << ": " << layout.Describe());
    return Status::Ok();
  }

  Status Open() {
    if (::access(o.pool_path.c_str(), F_OK) != 0) {
      // Refuse an impossible geometry before creating a file that would be refused next time too.
      auto plan = PlanLayout(o.pool_size, Params());
      if (!plan.ok()) return Status(plan.status().code(), o.pool_path + ": " + plan.status().message());
    }
    pm::PoolOptions po;
    po.mode = o.persist_mode;
    po.layout = "asymnvm-backend";
    ASYMNVM_ASSIGN_OR_RETURN(pool, pm::Pool::OpenOrCreate(o.pool_path, o.pool_size, po));
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
    ASYMNVM_ASSIGN_OR_RETURN(naming,
                             NamingSpace::Open(base(), layout.naming.offset, layout.naming.size,
                                               pool->persister(), fresh));
    alloc::BackendOptions ao;
    ao.data_begin = layout.data.offset;
    ao.data_size = layout.data.size;
    ao.block_size = layout.block_size;
    ao.bitmap = base() + layout.bitmap.offset;
    ao.bitmap_size = layout.bitmap.size;
    ao.persister = pool->persister();
    ao.format_if_empty = fresh;
    ASYMNVM_ASSIGN_OR_RETURN(allocator, alloc::BackendAllocator::Open(ao));
    if (fresh) {
      // The header goes last: a crash before this line leaves a pool that is formatted again.
      EncodeLayout(layout, header);
      pool->persister()->Persist(header, kBackendHeaderSize);
    }
    for (const auto& e : naming->List()) {
      if (e.type == kFrontendRecordType && e.name.rfind("fe:", 0) == 0) {
        frontends[std::stoull(e.name.substr(3))] = e;
      }
    }
    if (!fresh) CheckLanded();
    return Status::Ok();
  }

  // Runs before the receiver and the OQ server recover (OQ recovery zeroes its buffers, and it
  // skips a request that fails its checksum without a word): every landed record that fails
  // validation is logged and counted; a corrupt transaction is recorded as rejected for its
  // front-end. Unfinished landings (a crash cut them short; never acknowledged) are only noted.
  void CheckLanded() {
    auto blog = rowan::CheckArea({base() + layout.rowan.offset, layout.rowan.size}, {});
    if (blog.ok()) {
      for (const std::string& p : blog->meta_problems) LOG_WARN("backend", "b-log: " << p);
      for (const rowan::AreaBadLanding& b : blog->bad) {
        std::ostringstream what;
        what << "pool offset " << layout.rowan.offset + b.offset << " (segment " << b.segment;
        if (b.header_read) what << ", owner " << b.meta.owner << ", version " << b.meta.version;
        what << "): " << b.what;
        if (b.tail) {
          LOG_INFO("backend", "b-log: unfinished landing at " << what.str()
                                                              << " (never acknowledged; ignored)");
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
                                std::to_string(l.post_seq) + ", offset " +
                                std::to_string(l.offset) + ")";
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
        LOG_WARN("backend", "oq: corrupt request at " << where << ": " << l.error
                                                      << "; never executed");
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
      auto it = frontends.find(txn->frontend_id);
      if (it == frontends.end()) continue;
      if (txn->txn_seq <= Word(base(), it->second.root_addr).load()) continue;
      counters.txns_rejected++;
      auto rejected = Word(base(), it->second.seq_addr);
      if (rejected.load() == 0) {
        rejected.store(txn->txn_seq, std::memory_order_release);
        pool->persister()->Persist(base() + it->second.seq_addr, 8);
      }
    }
  }

  Status StartFabric() {
    ASYMNVM_ASSIGN_OR_RETURN(fabric, fabric::Fabric::Open(o.fabric));
    ASYMNVM_ASSIGN_OR_RETURN(pd, fabric->AllocPd());
    fabric::MemoryRegionOptions mo;
    mo.access = fabric::kAllRemote;
    mo.persister = pool->persister();
    ASYMNVM_ASSIGN_OR_RETURN(
        naming_mr, pd->RegisterMemory(base() + layout.naming.offset, layout.naming.size, mo));
    ASYMNVM_ASSIGN_OR_RETURN(
        data_mr, pd->RegisterMemory(base() + layout.data.offset, layout.data.size, mo));
    rowan::ReceiverOptions ro;
    ro.fabric = fabric.get();
    ro.pd = pd.get();
    ro.area = base() + layout.rowan.offset;
    ro.area_size = layout.rowan.size;
    ro.persister = pool->persister();
    ro.listen_address = o.log_listen_address;
    ro.segment_size = layout.rowan_segment;
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
    so.persister = pool->persister();
    ASYMNVM_ASSIGN_OR_RETURN(
        server, oq::Server::Start(so, [this](const oq::RequestContext& ctx,
                                             std::span<const uint8_t> payload,
                                             std::vector<uint8_t>* response) {
          return Handle(ctx, payload, response);
        }));
    return Status::Ok();
  }

  // ---- requests (one OQ worker: calls are sequential, in queue order) ----

  Status Handle(const oq::RequestContext& ctx, std::span<const uint8_t> payload,
                std::vector<uint8_t>* response) {
    {
      std::lock_guard<std::mutex> lock(mu);
      counters.requests++;
    }
    PayloadWriter w;
    switch (ctx.type) {
      case kRegister: {
        PayloadReader r(payload, "register");
        const uint64_t fe = r.U64();
        ASYMNVM_RETURN_IF_ERROR(r.status());
        ASYMNVM_ASSIGN_OR_RETURN(NamingEntry rec, Register(fe));
        {
          // A new incarnation: op_seq numbers of this session start above 2^32 × incarnation, so
          // they never repeat an op log of an earlier session still in the b-log (the scanner
          // identifies entries by (owner, version)).
          auto aux = Word(base(), rec.aux_addr);
          aux.store(((aux.load() >> 32) + 1) << 32, std::memory_order_release);
          pool->persister()->Persist(base() + rec.aux_addr, 8);
        }
        RegisterReply reply;
        reply.lpn = Word(base(), rec.root_addr).load();
        reply.opn = Word(base(), rec.lock_addr).load();
        reply.rejected = Word(base(), rec.seq_addr).load();
        reply.lpn_addr = rec.root_addr;
        reply.opn_addr = rec.lock_addr;
        reply.rejected_addr = rec.seq_addr;
        reply.naming_begin = layout.naming.offset;
        reply.data_begin = layout.data.offset;
        reply.data_end = layout.data.end();
        reply.block_size = layout.block_size;
        reply.naming_region = naming_mr->descriptor();
        reply.data_region = data_mr->descriptor();
        reply.log_address = receiver->address();
        reply.pool_uuid = pool->superblock().uuid;
        *response = EncodeRegisterReply(reply);
        return Status::Ok();
        break;
      }
      case kNamingCreate: {
        PayloadReader r(payload, "naming create");
        const uint32_t type = r.U32();
        const uint32_t len = r.U32();
        std::array<uint64_t, kNamingParams> params{};
        for (auto& p : params) p = r.U64();
        auto name = r.Bytes(len);
        ASYMNVM_RETURN_IF_ERROR(r.status());
        if (type == kFrontendRecordType) {
          return Status::InvalidArgument("naming create: type 0xFE is reserved for front-ends");
        }
        NamingEntry existing;
        auto e = naming->Create(std::string(name.begin(), name.end()), type, params, &existing);
        if (e.ok()) {
          EncodeNamingEntry(*e, &w);
        } else if (e.status().code() == StatusCode::kAlreadyExists && existing.type == type) {
          EncodeNamingEntry(existing, &w);  // create-or-open: same type is fine
        } else if (e.status().code() == StatusCode::kAlreadyExists) {
          return Status::AlreadyExists(e.status().message() + " with type " +
                                       std::to_string(existing.type) + ", not " +
                                       std::to_string(type));
        } else {
          return e.status();
        }
        break;
      }
      case kClearRejected: {
        PayloadReader r(payload, "clear rejected");
        const uint64_t fe = r.U64();
        ASYMNVM_RETURN_IF_ERROR(r.status());
        std::lock_guard<std::mutex> lock(mu);
        auto it = frontends.find(fe);
        if (it == frontends.end()) {
          return Status::NotFound("clear rejected: front-end " + std::to_string(fe) +
                                  " is not registered");
        }
        Word(base(), it->second.seq_addr).store(0, std::memory_order_release);
        pool->persister()->Persist(base() + it->second.seq_addr, 8);
        break;
      }
      case kNamingLookup: {
        ASYMNVM_ASSIGN_OR_RETURN(NamingEntry e, naming->Lookup(std::string(payload.begin(),
                                                                          payload.end())));
        EncodeNamingEntry(e, &w);
        break;
      }
      case kNamingRemove:
        ASYMNVM_RETURN_IF_ERROR(naming->Remove(std::string(payload.begin(), payload.end())));
        break;
      case kAllocSlab: {
        ASYMNVM_ASSIGN_OR_RETURN(uint64_t a, allocator->AllocSlab());
        w.U64(a);
        break;
      }
      case kAllocLarge: {
        PayloadReader r(payload, "alloc large");
        const uint64_t bytes = r.U64();
        ASYMNVM_RETURN_IF_ERROR(r.status());
        ASYMNVM_ASSIGN_OR_RETURN(uint64_t a, allocator->AllocLarge(bytes));
        w.U64(a);
        break;
      }
      case kFree: {
        PayloadReader r(payload, "free");
        const uint64_t addr = r.U64();
        ASYMNVM_RETURN_IF_ERROR(r.status());
        ASYMNVM_RETURN_IF_ERROR(allocator->Free(addr));
        break;
      }
      case kFetchOpLogs: {
        PayloadReader r(payload, "fetch op logs");
        const uint64_t fe = r.U64(), after = r.U64(), before = r.U64();
        ASYMNVM_RETURN_IF_ERROR(r.status());
        bool more = false;
        auto ops = FetchOpLogs(fe, after, before, &more);
        w.Bytes(EncodeFetchedOps(ops, more));
        break;
      }
      case kExtentOf: {
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
        break;
      }
      case kFreeDeferred: {
        PayloadReader r(payload, "deferred free");
        const uint64_t addr = r.U64();
        ASYMNVM_RETURN_IF_ERROR(r.status());
        ASYMNVM_RETURN_IF_ERROR(allocator->ExtentBytes(addr).status());  // validate now
        std::lock_guard<std::mutex> lock(mu);
        deferred.emplace_back(std::chrono::steady_clock::now() + o.reclaim_delay, addr);
        break;
      }
      case kTxn:
        return ApplyTxnRequest(payload);
      case kStatus: {
        const std::string s = StatusJson();
        w.Str(s);
        break;
      }
      default:
        return Status::InvalidArgument("backend: unknown request type " +
                                       std::to_string(ctx.type));
    }
    *response = std::move(w.bytes());
    return Status::Ok();
  }

  Result<NamingEntry> Register(uint64_t fe) {
    if (fe == 0) return Status::InvalidArgument("register: front-end id 0 is reserved");
    {
      std::lock_guard<std::mutex> lock(mu);
      if (auto it = frontends.find(fe); it != frontends.end()) return it->second;
    }
    ASYMNVM_ASSIGN_OR_RETURN(NamingEntry e,
                             naming->Create("fe:" + std::to_string(fe), kFrontendRecordType, {}));
    std::lock_guard<std::mutex> lock(mu);
    frontends[fe] = e;
    return e;
  }

  Status ApplyTxnRequest(std::span<const uint8_t> payload) {
    auto decoded = DecodeTxn(payload);
    std::lock_guard<std::mutex> lock(mu);
    if (!decoded.ok()) {
      counters.txns_rejected++;
      LOG_WARN("backend", "rejected a transaction: " << decoded.status().ToString());
      return decoded.status();
    }
    const TxnView& txn = *decoded;
    auto it = frontends.find(txn.header.frontend_id);
    if (it == frontends.end()) {
      counters.txns_rejected++;
      return Status::FailedPrecondition("txn from unregistered front-end " +
                                        std::to_string(txn.header.frontend_id));
    }
    const NamingEntry& rec = it->second;
    auto lpn = Word(base(), rec.root_addr);
    const uint64_t applied = lpn.load(std::memory_order_acquire);
    if (txn.header.txn_seq <= applied) {  // re-executed by OQ recovery: already applied
      counters.txns_skipped++;
      return Status::Ok();
    }
    Status s;
    if (txn.header.txn_seq != applied + 1) {
      s = Status::FailedPrecondition("txn " + std::to_string(txn.header.txn_seq) +
                                     " of front-end " + std::to_string(txn.header.frontend_id) +
                                     " does not follow LPN " + std::to_string(applied));
    } else {
      ApplyTarget t{base(), pool->size(), layout.data.offset, layout.data.end(),
                    pool->persister()};
      auto st = ApplyTxn(txn, t, this);
      if (st.ok()) {
        counters.txns_applied++;
        counters.txn_bytes_applied += st->bytes;
        auto opn = Word(base(), rec.lock_addr);
        if (txn.header.opn > opn.load()) opn.store(txn.header.opn, std::memory_order_release);
        lpn.store(txn.header.txn_seq, std::memory_order_release);
        pool->persister()->Persist(base() + rec.root_addr, 16);
        return Status::Ok();
      }
      s = st.status();
    }
    // Rejected: never applied; the front-end finds the first rejected txn_seq in its record.
    counters.txns_rejected++;
    auto rejected = Word(base(), rec.seq_addr);
    if (rejected.load() == 0) {
      rejected.store(txn.header.txn_seq, std::memory_order_release);
      pool->persister()->Persist(base() + rec.seq_addr, 8);
    }
    LOG_WARN("backend", "rejected " << s.ToString());
    return s;
  }

  // The op logs of `fe` with after < op_seq < before still in the b-log (every segment not yet
  // committed holds all op logs not covered by an OPN), for recovery of a crashed front-end.
  // Segments being filled are copied first; entries still landing fail their checksums and are
  // not returned (they were never acknowledged).
  std::vector<FetchedOp> FetchOpLogs(uint64_t fe, uint64_t after, uint64_t before, bool* more) {
    std::map<uint64_t, FetchedOp> found;
    rowan::Scanner scanner;
    std::vector<uint8_t> copy;
    for (const rowan::SegmentView& v : receiver->LiveSegments()) {
      copy.assign(v.bytes.begin(), v.bytes.end());
      scanner.ScanSegment(copy, v.post_seq, [&](const rowan::ScannedEntry& e) {
        if (e.meta.type != kOpLogEntryType || e.meta.owner != (fe & 0xFFFF)) return;
        auto rec = DecodeOpLog(e.payload);
        if (!rec.ok() || rec->frontend_id != fe || rec->op_seq <= after || rec->op_seq >= before) {
          return;
        }
        FetchedOp op;
        op.op_seq = rec->op_seq;
        op.structure_id = rec->structure_id;
        op.op_type = rec->op_type;
        op.payload.assign(rec->payload.begin(), rec->payload.end());
        found[op.op_seq] = std::move(op);
      });
    }
    std::vector<FetchedOp> out;
    size_t bytes = 8;
    const size_t budget = 60 * 1024;
    *more = false;
    for (auto& [seq, op] : found) {
      const size_t n = 20 + op.payload.size();
      if (!out.empty() && bytes + n > budget) {
        *more = true;
        break;
      }
      bytes += n;
      out.push_back(std::move(op));
    }
    return out;
  }

  // ---- the b-log consumer: digests used segments, recycles covered ones, reclaims lazily ----

  void ConsumeLog() {
    rowan::Scanner scanner;
    while (!stop.load()) {
      auto seg = receiver->NextUsed(std::chrono::milliseconds(50));
      if (seg.ok()) {
        HeldSegment h{seg->index, {}};
        scanner.ScanSegment(seg->bytes, seg->post_seq, [&](const rowan::ScannedEntry& e) {
          if (e.meta.type != kOpLogEntryType) return;
          auto rec = DecodeOpLog(e.payload);
          std::lock_guard<std::mutex> lock(mu);
          if (!rec.ok()) {
            LOG_WARN("backend", "b-log entry (owner " << e.meta.owner << ", version "
                                                       << e.meta.version
                                                       << "): " << rec.status().ToString());
            return;
          }
          counters.op_logs_seen++;
          op_logs[{rec->frontend_id, rec->op_seq}].assign(rec->payload.begin(),
                                                          rec->payload.end());
          auto& m = h.max_op_seq[rec->frontend_id];
          m = std::max(m, rec->op_seq);
        });
        std::lock_guard<std::mutex> lock(mu);
        counters.log_segments_digested++;
        held.push_back(std::move(h));
      }
      RecycleCovered();
      ReclaimDue();
    }
  }

  void RecycleCovered() {
    std::vector<uint32_t> done;
    {
      std::lock_guard<std::mutex> lock(mu);
      while (!held.empty()) {
        bool covered = true;
        for (const auto& [fe, max_seq] : held.front().max_op_seq) {
          auto it = frontends.find(fe);
          const uint64_t opn = it == frontends.end() ? 0 : Word(base(), it->second.lock_addr).load();
          if (max_seq > opn) covered = false;
        }
        if (!covered) break;
        for (const auto& [fe, max_seq] : held.front().max_op_seq) {
          op_logs.erase(op_logs.lower_bound({fe, 0}), op_logs.upper_bound({fe, max_seq}));
        }
        done.push_back(held.front().index);
        held.pop_front();
      }
    }
    for (uint32_t i : done) {
      Status s = receiver->Commit(i);
      if (!s.ok()) LOG_WARN("backend", "committing b-log segment " << i << ": " << s.ToString());
      std::lock_guard<std::mutex> lock(mu);
      counters.log_segments_recycled++;
    }
  }

  void ReclaimDue() {
    const auto now = std::chrono::steady_clock::now();
    std::vector<uint64_t> due;
    {
      std::lock_guard<std::mutex> lock(mu);
      while (!deferred.empty() && deferred.front().first <= now) {
        due.push_back(deferred.front().second);
        deferred.pop_front();
      }
    }
    for (uint64_t a : due) {
      Status s = allocator->Free(a);
      if (!s.ok()) LOG_WARN("backend", "deferred free of " << a << ": " << s.ToString());
      std::lock_guard<std::mutex> lock(mu);
      counters.deferred_frees_done++;
    }
  }

  std::string StatusJson() const {
    nlohmann::ordered_json j;
    BackendStats s = Stats();
    j["pool"] = pool->Describe();
    j["layout"] = layout.Describe();
    j["address"] = server ? server->address() : "";
    j["log_address"] = receiver ? receiver->address() : "";
    j["frontends"] = nlohmann::ordered_json::array();
    {
      std::lock_guard<std::mutex> lock(mu);
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
    j["op_logs_seen"] = s.op_logs_seen;
    j["log_segments_digested"] = s.log_segments_digested;
    j["log_segments_recycled"] = s.log_segments_recycled;
    j["log_corrupt_entries"] = s.log_corrupt_entries;
    j["oq_corrupt_records"] = s.oq_corrupt_records;
    j["requests"] = s.requests;
    j["cpu_seconds"] = s.cpu_seconds;
    auto as = allocator->stats();
    j["alloc"] = {{"blocks_total", as.blocks_total}, {"blocks_used", as.blocks_used}};
    return j.dump();
  }

  BackendStats Stats() const {
    std::lock_guard<std::mutex> lock(mu);
    BackendStats s = counters;
    s.frontends = frontends.size();
    s.deferred_frees_pending = deferred.size();
    s.cpu_seconds = ProcessCpuSeconds();
    return s;
  }

  void Stop() {
    if (stop.exchange(true)) return;
    if (server) server->Stop();
    if (consumer.joinable()) consumer.join();
    if (receiver) receiver->Close();
  }
};

Result<std::unique_ptr<Backend>> Backend::Start(const BackendOptions& options) {
  if (options.pool_path.empty()) return Status::InvalidArgument("backend: --pool is required");
  if (options.oq_buffers < 2 || options.oq_buffer_size < 4096 ||
      options.oq_buffer_size % 4096 != 0) {
    return Status::InvalidArgument("backend: OQ needs >= 2 buffers of a multiple of 4 KiB");
  }
  auto impl = std::make_unique<Impl>();
  impl->o = options;
  ASYMNVM_RETURN_IF_ERROR(impl->Open());
  Status s = impl->StartFabric();
  if (!s.ok()) {
    impl->Stop();
    return s;
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
void Backend::Stop() { impl_->Stop(); }

}  // namespace asymnvm::backend
