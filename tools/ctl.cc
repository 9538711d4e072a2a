#include "tools/ctl.h"

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <map>
#include <memory>
#include <sstream>

#include "alloc/backend_allocator.h"
#include "asymnvm/fabric.h"
#include "asymnvm/pm.h"
#include "backend/layout.h"
#include "backend/log_format.h"
#include "backend/naming.h"
#include "backend/rpc.h"
#include "common/coding.h"
#include "fabric/oq/oq.h"
#include "fabric/rowan/receiver.h"

namespace asymnvm::tools {
namespace {

using Json = nlohmann::ordered_json;

constexpr const char* kBackendLayoutName = "asymnvm-backend";

std::string Hex(uint64_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

// A 4 KiB-aligned DRAM copy of a pool region (the validators need 64-byte alignment).
struct Copy {
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> buf;
  uint64_t size = 0;
  static Copy Of(const uint8_t* src, uint64_t size) {
    Copy c;
    const uint64_t alloc = (size + 4095) / 4096 * 4096;
    c.buf.reset(static_cast<uint8_t*>(std::aligned_alloc(4096, alloc == 0 ? 4096 : alloc)));
    std::memcpy(c.buf.get(), src, size);
    c.size = size;
    return c;
  }
};

Json RegionJson(const backend::Region& r) { return {{"offset", r.offset}, {"size", r.size}}; }

void ExamineNaming(const backend::Layout& layout, const uint8_t* base, PoolReport* r) {
  Copy naming = Copy::Of(base + layout.naming.offset, layout.naming.size);
  auto ns = backend::NamingSpace::Open(naming.buf.get(), 0, naming.size, pm::DramPersister(),
                                       /*format=*/false, /*strict=*/false);
  // "... slot N ..." → add the slot's pool offset.
  auto with_offset = [&](const std::string& p) {
    const size_t at = p.find("slot ");
    uint64_t slot = 0;
    if (at != std::string::npos && std::sscanf(p.c_str() + at, "slot %lu", &slot) == 1) {
      return p + " (pool offset " +
             std::to_string(layout.naming.offset + slot * backend::kNamingSlotSize) + ")";
    }
    return p;
  };
  if (!ns.ok()) {
    // Open refuses only what makes the table unusable (e.g. a slot state that is none of
    // free/live/tombstone); nothing else can be listed then.
    r->problems.push_back("naming @" + std::to_string(layout.naming.offset) + ": " +
                          with_offset(ns.status().message()));
    return;
  }
  for (const std::string& p : (*ns)->Check()) r->problems.push_back(with_offset(p));
  Json entries = Json::array(), frontends = Json::array();
  auto word = [&](uint64_t rel) { return GetLe64(naming.buf.get() + rel); };
  for (const auto& e : (*ns)->List()) {
    const uint64_t root = word(e.root_addr), lock = word(e.lock_addr), seq = word(e.seq_addr),
                   aux = word(e.aux_addr);
    if (e.type == backend::kFrontendRecordType && e.name.rfind("fe:", 0) == 0) {
      char* end = nullptr;
      const uint64_t id = std::strtoull(e.name.c_str() + 3, &end, 10);
      if (e.name.size() == 3 || *end != '\0') {
        r->problems.push_back("naming slot " + std::to_string(e.slot) +
                              ": front-end record name '" + e.name + "' has no numeric id");
        continue;
      }
      frontends.push_back({{"id", id},
                           {"slot", e.slot},
                           {"lpn", root},
                           {"opn", lock},
                           {"first_rejected_txn", seq},
                           {"highest_op_seq", aux}});
      continue;
    }
    if (root != 0 && (root < layout.data.offset || root >= layout.data.end())) {
      r->notes.push_back("naming slot " + std::to_string(e.slot) + " ('" + e.name +
                         "'): root word " + Hex(root) + " is outside the data area");
    }
    entries.push_back({{"slot", e.slot},
                       {"name", e.name},
                       {"type", e.type},
                       {"params", e.params},
                       {"root", root},
                       {"lock", lock},
                       {"seq", seq},
                       {"aux", aux},
                       {"root_addr", layout.naming.offset + e.root_addr}});
  }
  r->report["naming"] = {
      {"capacity", (*ns)->capacity()}, {"live", (*ns)->live()}, {"entries", entries}};
  r->report["frontends"] = frontends;
}

void ExamineBitmap(const backend::Layout& layout, const uint8_t* base, PoolReport* r) {
  Copy bitmap = Copy::Of(base + layout.bitmap.offset, layout.bitmap.size);
  alloc::BackendOptions ao;
  ao.data_begin = layout.data.offset;
  ao.data_size = layout.data.size;
  ao.block_size = layout.block_size;
  ao.bitmap = bitmap.buf.get();
  ao.bitmap_size = bitmap.size;
  ao.persister = pm::DramPersister();
  ao.format_if_empty = false;  // an unformatted bitmap in a formatted pool is corruption
  auto a = alloc::BackendAllocator::Open(ao);
  if (!a.ok()) {
    r->problems.push_back("bitmap @" + std::to_string(layout.bitmap.offset) + ": " +
                          a.status().ToString());
    return;
  }
  const alloc::BackendStats s = (*a)->stats();
  if (s.torn_copies_recovered > 0) {
    r->notes.push_back("bitmap: " + std::to_string(s.torn_copies_recovered) +
                       " torn chunk copies (the older copy is valid; the back-end repairs this)");
  }
  if (s.intents_recovered > 0) {
    r->notes.push_back("bitmap: an interrupted multi-chunk operation (the back-end finishes it)");
  }
  r->report["bitmap"] = {{"blocks_total", s.blocks_total},
                         {"blocks_used", s.blocks_used},
                         {"extents", s.extents_used},
                         {"largest_free_run_blocks", s.largest_free_run},
                         {"torn_copies_recovered", s.torn_copies_recovered},
                         {"intents_recovered", s.intents_recovered}};
}

// The Rowan b-log: every live segment's entries (rowan::CheckArea, the back-end's own scanner and
// the receiver's rules), each op log decoded with backend::DecodeOpLog.
void ExamineLog(const backend::Layout& layout, const uint8_t* base, PoolReport* r) {
  const uint64_t at = layout.rowan.offset;
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> per_fe;  // fe → (op logs, highest op_seq)
  uint64_t op_logs = 0, other = 0;
  auto c = rowan::CheckArea({base + at, layout.rowan.size}, [&](const rowan::AreaSegment& s,
                                                                const rowan::ScannedEntry& e) {
    if (e.meta.type != backend::kOpLogRowanType) {
      other++;
      return;
    }
    auto rec = backend::DecodeOpLog(e.payload);
    if (!rec.ok()) {  // the block's checksum held but the op log's own does not
      r->problems.push_back("b-log @" + std::to_string(at + s.offset + e.offset) + ": segment " +
                            std::to_string(s.index) + ": op log of front-end " +
                            std::to_string(e.meta.owner) + " version " +
                            std::to_string(e.meta.version) + ": " + rec.status().message());
      return;
    }
    op_logs++;
    auto& [n, top] = per_fe[rec->frontend_id];
    n++;
    top = std::max(top, rec->op_seq);
  });
  if (!c.ok()) {
    if (c.status().code() == StatusCode::kNotFound) {
      r->notes.push_back("b-log @" + std::to_string(at) +
                         ": not formatted yet (the back-end formats it when it starts)");
    } else {
      r->problems.push_back("b-log @" + std::to_string(at) + ": " + c.status().message());
    }
    return;
  }
  for (const rowan::AreaSegment& s : c->view.segments) {
    if (!s.meta_ok) {
      r->problems.push_back("b-log @" + std::to_string(at + c->view.meta_offset + 8ull * s.index) +
                            ": segment " + std::to_string(s.index) +
                            ": meta word fails its check (recovery scans the segment as used)");
    }
  }
  uint64_t corrupt = 0, unfinished = 0;
  for (const rowan::AreaBadLanding& b : c->bad) {
    std::string text =
        "b-log @" + std::to_string(at + b.offset) + ": segment " + std::to_string(b.segment) + ": ";
    std::string who;
    if (b.header_read) {
      who = " (front-end " + std::to_string(b.meta.owner) + ", version " +
            std::to_string(b.meta.version) + ", unverified)";
    }
    if (b.tail) {
      unfinished++;
      r->notes.push_back(text +
                         "unfinished landing at the end of what was landed (a crash cut it "
                         "short; never acknowledged, recovery ignores it): " +
                         b.what + who);
    } else {
      corrupt++;
      r->problems.push_back(text + "corrupt entry: " + b.what + who);
    }
  }
  for (const std::string& i : c->incomplete) {
    r->notes.push_back("b-log: " + i +
                       " (a sender died between the blocks of an entry; never "
                       "acknowledged)");
  }
  Json fes = Json::array();
  for (const auto& [fe, v] : per_fe) {
    fes.push_back({{"id", fe}, {"op_logs", v.first}, {"highest_op_seq", v.second}});
  }
  r->report["log"] = {{"segments", c->view.count},
                      {"segment_size", c->view.segment_size},
                      {"live_segments", c->live_segments},
                      {"entries", c->entries},
                      {"op_logs", op_logs},
                      {"other_entries", other},
                      {"corrupt", corrupt},
                      {"unfinished", unfinished},
                      {"incomplete", c->incomplete_entries},
                      {"frontends", fes}};
}

// The OQ durable area: header, worker words, and every request landed after ReqToExecute (what
// the back-end's recovery would execute), transactions decoded with backend::DecodeTxn.
void ExamineOq(const backend::Layout& layout, const uint8_t* base, PoolReport* r) {
  const uint64_t at = layout.oq.offset;
  auto d = oq::ScanDurableArea({base + at, layout.oq.size}, /*max_request=*/0);
  if (!d.ok()) {
    if (d.status().code() == StatusCode::kNotFound) {
      r->notes.push_back("oq @" + std::to_string(at) +
                         ": not formatted yet (the back-end formats it when it starts)");
    } else {
      r->problems.push_back("oq @" + std::to_string(at) + ": " + d.status().message());
    }
    return;
  }
  std::map<uint64_t, uint64_t> lpn;  // fe → LPN, from the naming space (ExamineNaming ran first)
  if (r->report.contains("frontends")) {
    for (const auto& f : r->report["frontends"]) {
      lpn[f["id"].get<uint64_t>()] = f["lpn"].get<uint64_t>();
    }
  }
  uint64_t pending_txns = 0, other = 0, corrupt = 0, unfinished = 0;
  for (const oq::LandedRequest& l : d->landed) {
    const std::string where = "oq @" + std::to_string(at + l.area_offset) + ": worker " +
                              std::to_string(l.worker) + ", buffer " + std::to_string(l.post_seq) +
                              ", offset " + std::to_string(l.offset);
    const auto payload = l.bytes.size() > oq::kRequestHeaderSize
                             ? l.bytes.subspan(oq::kRequestHeaderSize)
                             : std::span<const uint8_t>();
    if (l.valid) {
      if (l.header.type != backend::kTxn) {
        other++;
        continue;
      }
      auto txn = backend::DecodeTxn(payload);
      if (!txn.ok()) {  // the request's checksum held: the front-end sent a bad transaction
        r->problems.push_back(where +
                              ": landed transaction fails its own check (the back-end "
                              "rejects it): " +
                              txn.status().message());
        continue;
      }
      auto it = lpn.find(txn->header.frontend_id & 0xFFFFFFFF);
      if (it == lpn.end() || txn->header.txn_seq > it->second) pending_txns++;
      continue;
    }
    std::string who;
    if (auto h = backend::PeekTxnHeader(payload); h.ok()) {
      who = " (transaction txn_seq " + std::to_string(h->txn_seq) + " of front-end " +
            std::to_string(h->frontend_id & 0xFFFFFFFF) + ", unverified)";
    }
    if (l.tail) {
      unfinished++;
      r->notes.push_back(where +
                         ": unfinished landing at the end of what was landed (a crash cut "
                         "it short; never acknowledged, recovery ignores it): " +
                         l.error + who);
    } else {
      corrupt++;
      r->problems.push_back(where + ": corrupt request: " + l.error + who);
    }
  }
  if (pending_txns > 0) {
    r->notes.push_back("oq: " + std::to_string(pending_txns) +
                       " landed transaction(s) not yet applied (the back-end's recovery applies "
                       "them)");
  }
  Json workers = Json::array();
  for (uint32_t w = 0; w < d->workers; w++) {
    workers.push_back({{"req_to_execute", d->req_to_execute[w]}, {"srq_tail", d->srq_tail[w]}});
  }
  r->report["oq"] = {{"workers", workers},
                     {"buffers_per_worker", d->buffers_per_worker},
                     {"buffer_size", d->buffer_size},
                     {"pending_txns", pending_txns},
                     {"pending_other", other},
                     {"corrupt", corrupt},
                     {"unfinished", unfinished}};
}

}  // namespace

Result<PoolReport> ExaminePool(const std::string& pool_path) {
  PoolReport r;
  r.report["pool"] = pool_path;
  pm::PoolOptions po;
  po.layout = "";  // accept any, so a foreign layout gets our own message
  auto pool = pm::Pool::Open(pool_path, po);
  if (!pool.ok()) {
    const Status& s = pool.status();
    if (s.code() == StatusCode::kCorruption || s.code() == StatusCode::kNotSupported) {
      r.problems.push_back("superblock @0: " + s.message());
      r.report["problems"] = r.problems;
      return r;
    }
    if (s.code() == StatusCode::kFailedPrecondition) {
      return Status::FailedPrecondition(
          s.message() +
          " — inspect/check need the pool lock; while a back-end runs use "
          "`asymnvm-ctl status ADDR`");
    }
    return s;
  }
  pm::Pool& p = **pool;
  const pm::Superblock& sb = p.superblock();
  if (sb.layout != kBackendLayoutName) {
    return Status::InvalidArgument(pool_path + ": a pm pool of layout '" + sb.layout +
                                   "', not an AsymNVM back-end pool ('" + kBackendLayoutName +
                                   "')");
  }
  r.report["superblock"] = {{"layout", sb.layout},
                            {"layout_version", sb.layout_version},
                            {"pool_size", sb.pool_size},
                            {"uuid", pm::UuidToString(sb.uuid)},
                            {"create_time_ns", sb.create_time_ns}};
  auto layout = backend::DecodeLayout(p.base() + backend::kBackendHeaderOffset, p.size());
  if (!layout.ok()) {
    r.problems.push_back(
        "back-end header @" + std::to_string(backend::kBackendHeaderOffset) + ": " +
        (layout.status().code() == StatusCode::kNotFound
             ? std::string("not formatted (all zero; the back-end never finished formatting)")
             : layout.status().message()));
  } else {
    const backend::Layout& l = *layout;
    r.report["layout"] = {{"describe", l.Describe()},       {"block_size", l.block_size},
                          {"naming_slots", l.naming_slots}, {"log_segment", l.rowan_segment},
                          {"naming", RegionJson(l.naming)}, {"bitmap", RegionJson(l.bitmap)},
                          {"log", RegionJson(l.rowan)},     {"oq", RegionJson(l.oq)},
                          {"data", RegionJson(l.data)}};
    ExamineNaming(l, p.base(), &r);
    ExamineBitmap(l, p.base(), &r);
    ExamineLog(l, p.base(), &r);
    ExamineOq(l, p.base(), &r);
  }
  r.report["problems"] = r.problems;
  r.report["notes"] = r.notes;
  return r;
}

Result<std::string> FetchStatus(const std::string& address, std::chrono::milliseconds timeout,
                                const std::string& secret_file) {
  fabric::FabricOptions fo;
  fo.secret_file = secret_file;
  ASYMNVM_ASSIGN_OR_RETURN(auto fab, fabric::Fabric::Open(fo));
  ASYMNVM_ASSIGN_OR_RETURN(auto pd, fab->AllocPd());
  oq::ClientOptions co;
  co.fabric = fab.get();
  co.pd = pd.get();
  co.server_address = address;
  co.timeout = timeout;
  co.window = 1;
  ASYMNVM_ASSIGN_OR_RETURN(auto client, oq::Client::Connect(co));
  std::vector<uint8_t> response;
  ASYMNVM_RETURN_IF_ERROR(client->Call(0, backend::kStatus, {}, &response));
  std::string text(response.begin(), response.end());
  if (!nlohmann::json::accept(text)) {
    return Status::ProtocolError(address + ": status reply is not JSON (" +
                                 std::to_string(text.size()) + " bytes)");
  }
  return text;
}

void PrintStatus(const nlohmann::json& j, std::ostream& out) {
  auto get = [&](const char* k) { return j.contains(k) ? j[k].dump() : std::string("?"); };
  auto str = [&](const char* k) {
    return j.contains(k) && j[k].is_string() ? j[k].get<std::string>() : std::string("?");
  };
  if (str("role") == "mirror") {
    out << "mirror:      " << str("name") << "  state " << str("state") << ", term " << get("term")
        << ", group " << str("uuid") << ", primary " << str("primary") << "\n";
    out << str("pool") << "\n";
    out << "address:     " << str("address") << "  (stream: " << str("data_address") << ")\n";
    out << "received:    " << get("remote_ops_served") << " remote ops, " << get("bytes_in")
        << " bytes; pm syncs " << get("pm_syncs") << "\n";
    return;
  }
  out << str("pool") << "\n";  // "pool PATH: size, DAX, mode, layout, uuid"
  out << "layout:      " << str("layout") << "\n";
  out << "address:     " << str("address") << "  (op logs: " << str("log_address") << ")\n";
  const auto& fes = j.contains("frontends") ? j["frontends"] : nlohmann::json::array();
  out << "front-ends:  " << fes.size() << "\n";
  for (const auto& f : fes) {
    out << "  fe " << f.value("id", 0ull) << "  LPN " << f.value("lpn", 0ull) << "  OPN "
        << f.value("opn", 0ull) << "  first rejected txn " << f.value("first_rejected_txn", 0ull)
        << "\n";
  }
  out << "txns:        applied " << get("txns_applied") << ", skipped " << get("txns_skipped")
      << ", rejected " << get("txns_rejected") << "\n";
  out << "op logs:     seen " << get("op_logs_seen") << "; log segments digested "
      << get("log_segments_digested") << ", recycled " << get("log_segments_recycled")
      << ", pinned " << get("log_segments_pinned") << " of " << get("log_segments")
      << " (by op logs not yet replayed)\n";
  out << "corrupt:     b-log entries " << get("log_corrupt_entries") << ", OQ records "
      << get("oq_corrupt_records") << "  (found at start; doc/backend.md)\n";
  out << "requests:    " << get("requests") << "  (back-end CPU " << get("cpu_seconds") << " s)\n";
  if (j.contains("pm_syncs")) {
    out << "durability:  " << str("durability") << "; pm syncs " << get("pm_syncs") << " ("
        << get("pm_sync_bytes") << " bytes), checkpoints " << get("checkpoints") << " ("
        << get("checkpoint_bytes") << " bytes applied)\n";
  }
  if (j.contains("mirrors") && j["mirrors"].is_array()) {
    out << "mirrors:     " << get("mirrors_in_sync") << " of " << get("mirrors_configured")
        << " in sync (" << str("mirror_mode") << ")"
        << (j.value("mirrors_in_sync", 0ull) < j.value("mirrors_configured", 0ull)
                ? "  REDUCED REPLICATION"
                : "")
        << "\n";
    for (const auto& m : j["mirrors"]) {
      out << "  " << m.value("address", "") << " " << m.value("name", "") << "  "
          << m.value("state", "") << ", forwarded " << m.value("bytes_forwarded", 0ull)
          << " bytes, copies " << m.value("copies", 0ull) << ", drops " << m.value("drops", 0ull);
      if (!m.value("last_error", std::string()).empty()) {
        out << ", last error: " << m.value("last_error", std::string());
      }
      out << "\n";
    }
  }
  if (j.contains("alloc") && j["alloc"].is_object()) {
    const uint64_t total = j["alloc"].value("blocks_total", 0ull);
    const uint64_t used = j["alloc"].value("blocks_used", 0ull);
    out << "data blocks: " << used << " / " << total << " used";
    if (total > 0)
      out << " (" << std::fixed << std::setprecision(1) << 100.0 * used / total << "%)";
    out << "\n";
  }
}

void PrintPoolReport(const PoolReport& r, std::ostream& out) {
  const Json& j = r.report;
  out << "pool: " << j.value("pool", "") << "\n";
  if (j.contains("superblock")) {
    const Json& sb = j["superblock"];
    out << "superblock: layout " << sb["layout"].get<std::string>() << " v"
        << sb["layout_version"].get<uint32_t>() << ", " << sb["pool_size"].get<uint64_t>()
        << " bytes, uuid " << sb["uuid"].get<std::string>() << "\n";
  }
  if (j.contains("layout")) out << "layout: " << j["layout"]["describe"].get<std::string>() << "\n";
  if (j.contains("naming")) {
    const Json& n = j["naming"];
    out << "naming: " << n["live"].get<uint32_t>() << " live of " << n["capacity"].get<uint32_t>()
        << " slots\n";
    for (const auto& e : n["entries"]) {
      out << "  [" << e["slot"].get<uint32_t>() << "] " << e["name"].get<std::string>() << "  type "
          << e["type"].get<uint32_t>() << "  params " << e["params"].dump() << "  root "
          << Hex(e["root"].get<uint64_t>()) << " lock " << Hex(e["lock"].get<uint64_t>()) << " seq "
          << e["seq"].get<uint64_t>() << " aux " << e["aux"].get<uint64_t>() << "\n";
    }
  }
  if (j.contains("frontends")) {
    out << "front-ends: " << j["frontends"].size() << "\n";
    for (const auto& f : j["frontends"]) {
      out << "  fe " << f["id"].get<uint64_t>() << "  LPN " << f["lpn"].get<uint64_t>() << "  OPN "
          << f["opn"].get<uint64_t>() << "  first rejected txn "
          << f["first_rejected_txn"].get<uint64_t>() << "  highest op_seq "
          << f["highest_op_seq"].get<uint64_t>() << "\n";
    }
  }
  if (j.contains("bitmap")) {
    const Json& b = j["bitmap"];
    out << "bitmap: " << b["blocks_used"].get<uint64_t>() << " / "
        << b["blocks_total"].get<uint64_t>() << " blocks used in " << b["extents"].get<uint64_t>()
        << " extents, largest free run " << b["largest_free_run_blocks"].get<uint64_t>()
        << " blocks\n";
  }
  if (j.contains("log")) {
    const Json& l = j["log"];
    out << "b-log: " << l["live_segments"].get<uint32_t>() << " live of "
        << l["segments"].get<uint32_t>() << " segments, " << l["op_logs"].get<uint64_t>()
        << " op logs";
    for (const auto& f : l["frontends"]) {
      out << "; fe " << f["id"].get<uint64_t>() << ": " << f["op_logs"].get<uint64_t>()
          << " (highest op_seq " << f["highest_op_seq"].get<uint64_t>() << ")";
    }
    out << "\n";
  }
  if (j.contains("oq")) {
    const Json& q = j["oq"];
    out << "oq: " << q["pending_txns"].get<uint64_t>() << " landed transactions not applied, "
        << q["pending_other"].get<uint64_t>() << " other requests after ReqToExecute\n";
  }
  for (const auto& n : r.notes) out << "note: " << n << "\n";
  for (const auto& p : r.problems) out << "PROBLEM: " << p << "\n";
}

namespace {

// asymnvm-ctl gc: refuses a pool with problems, a failed walk, or reads of unallocated blocks.
int RunGc(const std::string& pool_path, const PoolReport& examined, LeakOptions lo,
          const std::string& pm_mode, bool dry_run, bool json, std::ostream& out,
          std::ostream& err) {
  if (!examined.problems.empty()) {
    for (const auto& p : examined.problems) out << "PROBLEM: " << p << "\n";
    err << "asymnvm-ctl gc " << pool_path << ": refused: " << examined.problems.size()
        << " problem(s) (asymnvm-ctl check); nothing freed\n";
    return kCtlRefused;
  }
  auto mode = pm::ParsePersistMode(pm_mode);
  if (!mode.ok()) {
    err << "asymnvm-ctl gc: " << mode.status().ToString() << "\n";
    return kCtlUsage;
  }
  lo.persist_mode = *mode;
  lo.free = !dry_run;
  auto l = FindLeaks(pool_path, lo);
  if (!l.ok()) {
    err << "asymnvm-ctl gc " << pool_path << ": " << l.status().ToString() << "\n";
    return kCtlFailed;
  }
  if (json) out << LeakJson(*l).dump(2) << "\n";
  if (!l->walk_error.empty()) {
    err << "asymnvm-ctl gc " << pool_path << ": refused: the structure walk failed ("
        << l->walk_error << "); nothing freed\n";
    return kCtlRefused;
  }
  if (!l->unallocated_reads.empty()) {
    err << "asymnvm-ctl gc " << pool_path << ": refused: structures reach "
        << l->unallocated_reads.size()
        << " unallocated range(s) (asymnvm-ctl check names them); nothing freed\n";
    return kCtlRefused;
  }
  if (!json) {
    PrintLeaks(*l, out);
    uint64_t blocks = 0;
    for (const auto& x : l->freed) blocks += x.bytes / l->block_size;
    out << "gc: " << (dry_run ? "would free " : "freed ")
        << (dry_run ? l->leaked.size() : l->freed.size()) << " extent(s), "
        << (dry_run ? l->leaked_blocks : blocks) << " block(s) in " << l->seconds << " s\n";
  }
  return kCtlOk;
}

}  // namespace

int RunCtl(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  if (!args.empty() && args[0] == "coord") {
    return RunCtlCoord(std::vector<std::string>(args.begin() + 1, args.end()), out, err);
  }
  if (!args.empty() && args[0] == "cluster") {
    return RunCtlCluster(std::vector<std::string>(args.begin() + 1, args.end()), out, err);
  }
  CLI::App app{
      "asymnvm-ctl: inspect and check AsymNVM back-ends and pools (and: asymnvm-ctl coord --help, "
      "asymnvm-ctl cluster --help)"};
  app.require_subcommand(1);
  std::string address, pool_path, secret_file;
  bool json = false;
  int timeout_ms = 3000;
  auto* status = app.add_subcommand("status", "Status of a running back-end (kStatus over the OQ)");
  status->add_option("ADDR", address, "OQ address printed by asymnvm-backend (listening ...)")
      ->required();
  status->add_flag("--json", json, "Print the raw JSON");
  status->add_option("--timeout-ms", timeout_ms, "Connect / call timeout")
      ->check(CLI::Range(1, 600000));
  status->add_option("--secret-file", secret_file,
                     "file holding the cluster secret (default: ASYMNVM_SECRET_FILE, "
                     "ASYMNVM_SECRET, or the built-in one)");
  auto* inspect = app.add_subcommand("inspect", "Dump a pool (read-only; takes the pool lock)");
  inspect->add_option("POOL", pool_path, "Pool file")->required();
  inspect->add_flag("--json", json, "Print JSON");
  auto* check = app.add_subcommand("check", "Validate a pool (read-only; exit 3 on corruption)");
  check->add_option("POOL", pool_path, "Pool file")->required();
  check->add_flag("--json", json, "Print JSON");

  bool dry_run = false;
  std::string pm_mode = "auto";
  auto* gc = app.add_subcommand(
      "gc", "Free the blocks no structure reaches (the pool must not be in use; exit 6: refused)");
  gc->add_option("POOL", pool_path, "Pool file")->required();
  gc->add_flag("--json", json, "Print JSON");
  gc->add_flag("--dry-run", dry_run, "Report what would be freed, free nothing");
  gc->add_option("--pm-mode", pm_mode, "PM persistence mode of the pool (as asymnvm-backend)")
      ->check(CLI::IsMember({"auto", "msync", "flush"}));

  std::string pool_b;
  auto* diff = app.add_subcommand("diff", "Compare two stopped pools (a primary and its mirror)");
  diff->add_option("POOL_A", pool_path, "First pool file (its back-end header gives the regions)")
      ->required();
  diff->add_option("POOL_B", pool_b, "Second pool file")->required();
  diff->add_flag("--json", json, "Print JSON");

  std::vector<std::string> rev(args.rbegin(), args.rend());
  try {
    app.parse(rev);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e, out, err);
    return rc == 0 ? kCtlOk : kCtlUsage;
  }

  if (status->parsed()) {
    auto text = FetchStatus(address, std::chrono::milliseconds(timeout_ms), secret_file);
    if (!text.ok()) {
      err << "asymnvm-ctl status " << address << ": " << text.status().ToString() << "\n";
      return kCtlFailed;
    }
    if (json) {
      out << *text << "\n";
    } else {
      PrintStatus(nlohmann::json::parse(*text), out);
    }
    return kCtlOk;
  }
  if (diff->parsed()) return RunDiff(pool_path, pool_b, json, out, err);
  auto r = ExaminePool(pool_path);
  if (!r.ok()) {
    err << "asymnvm-ctl: " << r.status().ToString() << "\n";
    return kCtlFailed;
  }
  LeakOptions lo;
  if (r->report.contains("oq")) {
    lo.oq_buffers = r->report["oq"].value("buffers_per_worker", lo.oq_buffers);
    lo.oq_buffer_size = r->report["oq"].value("buffer_size", lo.oq_buffer_size);
  }
  if (gc->parsed()) return RunGc(pool_path, *r, lo, pm_mode, dry_run, json, out, err);
  bool leaks = false;
  if (check->parsed() && r->problems.empty() && r->report.contains("layout")) {
    auto l = FindLeaksInCopy(pool_path, lo);
    if (!l.ok()) {
      r->notes.push_back("leaks: not computed: " + l.status().ToString());
    } else if (!l->walk_error.empty()) {
      // A note even for a structure that fails Verify: a raw root (Session::CreateRoot) may
      // carry a structure kind's type without being one. gc refuses either way.
      r->notes.push_back("leaks: not computed: the structure walk failed: " + l->walk_error);
    } else {
      for (const auto& [a, n] : l->unallocated_reads) {
        r->problems.push_back("data @" + std::to_string(a) + ": " + std::to_string(n) +
                              " byte(s) a structure reaches are not allocated");
      }
      leaks = !l->leaked.empty();
    }
    if (l.ok()) r->report["leaks"] = LeakJson(*l);
    r->report["problems"] = r->problems;
    r->report["notes"] = r->notes;
    if (!json && l.ok() && l->walk_error.empty()) PrintLeaks(*l, out);
  }
  if (json) {
    out << r->report.dump(2) << "\n";
  } else if (inspect->parsed()) {
    PrintPoolReport(*r, out);
  } else {
    for (const auto& n : r->notes) out << "note: " << n << "\n";
    for (const auto& p : r->problems) out << "PROBLEM: " << p << "\n";
    out << pool_path << ": "
        << (!r->problems.empty() ? std::to_string(r->problems.size()) + " problem(s) found"
            : leaks              ? "no corruption; leaked blocks (asymnvm-ctl gc reclaims them)"
                                 : "clean")
        << "\n";
  }
  if (check->parsed()) return !r->problems.empty() ? kCtlCorrupt : leaks ? kCtlLeaks : kCtlOk;
  return kCtlOk;
}

}  // namespace asymnvm::tools
