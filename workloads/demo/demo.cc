#include "workloads/demo/demo.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "asymnvm/fabric.h"
#include "asymnvm/pm.h"
#include "common/checksum.h"
#include "common/logging.h"

namespace asymnvm::demo {
namespace {

using fabric::Completion;
using fabric::CompletionStatus;
using fabric::Connection;
using fabric::ConnectionOptions;
using fabric::Counters;
using fabric::Fabric;
using fabric::MemoryRegion;
using fabric::Opcode;
using fabric::RecvRequest;
using fabric::WorkRequest;

constexpr char kLayout[] = "asymnvm-demo";
constexpr char kPoolFile[] = "asymnvm-demo.pool";

constexpr uint64_t kHeaderOffset = 0;
constexpr uint64_t kCountersOffset = 4096;
constexpr uint64_t kCountersBytes = 4096;
constexpr uint64_t kLogOffset = 64 * 1024;
constexpr uint64_t kSegmentBytes = 256 * 1024;
constexpr uint32_t kStride = 64;

// Counters-area words.
constexpr uint32_t kWordRunRecords = 0;  // FAA +1 per record, this run
constexpr uint32_t kWordFinisher = 1;    // CAS 0 → sender+1: the first sender to finish
constexpr uint32_t kWordAllRecords = 2;  // FAA +1 per record, all runs (never reset)
constexpr uint32_t kWordProgress = 8;    // + sender: WRITE of the last sequence number sent

constexpr uint32_t kMinRecord = 64;
constexpr uint32_t kMaxRecord = 256;

// Demo header (persisted at user offset 0).
struct DemoHeader {
  char magic[8];  // "ASYMDEMO"
  uint64_t runs;
  uint64_t last_epoch_records;  // records the last completed run landed
  uint32_t last_segments;       // log segments the last run used
  uint32_t crc;                 // CRC32C of the bytes before it
};
constexpr char kHeaderMagic[8] = {'A', 'S', 'Y', 'M', 'D', 'E', 'M', 'O'};

// A demo record ("demo record" in workloads/README.md), little-endian on x86.
struct RecordHeader {
  uint32_t magic;  // kRecordMagic
  uint16_t sender;
  uint16_t length;  // whole record, header included (64..256)
  uint32_t epoch;   // the run that wrote it
  uint32_t crc;     // CRC32C of the whole record with this field zero
  uint64_t seq;     // per sender, from 0
};
static_assert(sizeof(RecordHeader) == 24);
constexpr uint32_t kRecordMagic = 0x43524441;  // "ADRC"

uint32_t RecordCrc(const uint8_t* rec, size_t len) {
  RecordHeader h;
  std::memcpy(&h, rec, sizeof(h));
  h.crc = 0;
  uint32_t c = Crc32c(&h, sizeof(h));
  return Crc32c(rec + sizeof(h), len - sizeof(h), c);
}

// Validates a record in PM at `p` with `avail` readable bytes. Returns false if not a valid one.
bool ValidRecord(const uint8_t* p, size_t avail, RecordHeader* out) {
  if (avail < sizeof(RecordHeader)) return false;
  RecordHeader h;
  std::memcpy(&h, p, sizeof(h));
  if (h.magic != kRecordMagic || h.length < sizeof(RecordHeader) || h.length > avail ||
      h.length > kMaxRecord) {
    return false;
  }
  if (RecordCrc(p, h.length) != h.crc) return false;
  *out = h;
  return true;
}

uint64_t RoundUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

struct Landing {
  uint32_t segment;
  uint32_t offset;
  uint32_t length;
  uint64_t connection_id;
};

std::string Hex(uint64_t v, int width = 6) {
  std::ostringstream os;
  os << "0x" << std::hex << std::setw(width) << std::setfill('0') << v;
  return os.str();
}

void PrintCounters(std::ostream& out, const char* who, const Counters& c) {
  out << "  " << std::left << std::setw(22) << who << std::right << " round trips " << std::setw(6)
      << c.round_trips << " | WRITE " << c.writes << "  READ " << c.reads << "  CAS "
      << c.compare_swaps << "  FAA " << c.fetch_adds << "  SEND " << c.sends << "  flush "
      << c.flushes << "  RECV " << c.recvs << "\n"
      << "  " << std::setw(22) << ""
      << " bytes out " << c.bytes_out << "  in " << c.bytes_in << "  payload " << c.payload_bytes
      << "  RNR " << c.rnr_events << "  errors " << c.errors << "  served " << c.remote_ops_served
      << "\n";
}

// Scans `segments` log segments for valid records of `epoch`; returns their count.
uint64_t ScanLog(const uint8_t* log, uint32_t segments, uint32_t epoch, uint64_t* other_epochs) {
  uint64_t found = 0;
  for (uint32_t s = 0; s < segments; s++) {
    const uint8_t* seg = log + uint64_t{s} * kSegmentBytes;
    for (uint64_t off = 0; off + sizeof(RecordHeader) <= kSegmentBytes;) {
      RecordHeader h;
      if (ValidRecord(seg + off, kSegmentBytes - off, &h)) {
        if (h.epoch == epoch) {
          found++;
        } else if (other_epochs != nullptr) {
          (*other_epochs)++;
        }
        off += RoundUp(h.length, kStride);
      } else {
        off += kStride;
      }
    }
  }
  return found;
}

class Demo {
 public:
  Demo(const DemoOptions& o, std::ostream& out) : o_(o), out_(out) {}

  Status Run() {
    ASYMNVM_RETURN_IF_ERROR(Validate());
    ASYMNVM_RETURN_IF_ERROR(OpenFabrics());  // fail (e.g. no RDMA device) before touching the pool
    ASYMNVM_RETURN_IF_ERROR(OpenPool());
    ASYMNVM_RETURN_IF_ERROR(StartTarget());
    ASYMNVM_RETURN_IF_ERROR(StartFrontEnd());
    ASYMNVM_RETURN_IF_ERROR(Drive());
    Status checks = Report();
    Shutdown();
    ASYMNVM_RETURN_IF_ERROR(checks);
    return FinishPool();
  }

  ~Demo() { Shutdown(); }

 private:
  Status Validate() {
    if (o_.senders == 0 || o_.senders > 64) {
      return Status::InvalidArgument("--senders must be 1..64");
    }
    if (o_.records == 0) return Status::InvalidArgument("--records must be > 0");
    if (o_.transport != "tcp" && o_.transport != "unix" && o_.transport != "inproc") {
      return Status::InvalidArgument("--transport must be tcp, unix or inproc");
    }
    return Status::Ok();
  }

  Status OpenFabrics() {
    fabric::FabricOptions fo;
    fo.provider = o_.fabric;
    auto t = Fabric::Open(fo);
    if (!t.ok()) return t.status().WithContext("--fabric " + o_.fabric);
    target_ = std::move(t).value();
    auto f = Fabric::Open(fo);
    if (!f.ok()) return f.status().WithContext("--fabric " + o_.fabric);
    front_ = std::move(f).value();
    return Status::Ok();
  }

  void WriteHeader(uint64_t runs, uint64_t last_records, uint32_t last_segments) {
    DemoHeader h{};
    std::memcpy(h.magic, kHeaderMagic, 8);
    h.runs = runs;
    h.last_epoch_records = last_records;
    h.last_segments = last_segments;
    h.crc = Crc32c(&h, offsetof(DemoHeader, crc));
    std::memcpy(user_ + kHeaderOffset, &h, sizeof(h));
    pool_->persister()->Persist(user_ + kHeaderOffset, sizeof(h));
  }

  // ---- PM pool --------------------------------------------------------------------------------
  Status OpenPool() {
    std::error_code ec;
    std::filesystem::create_directories(o_.data_dir, ec);
    if (ec) {
      return Status::IoError("data dir " + o_.data_dir + ": " + ec.message(), ec.value());
    }
    path_ = (std::filesystem::path(o_.data_dir) / kPoolFile).string();
    existed_ = std::filesystem::exists(path_);
    ASYMNVM_ASSIGN_OR_RETURN(pm::PersistMode mode, pm::ParsePersistMode(o_.persist_mode));
    pm::PoolOptions po;
    po.mode = mode;
    po.layout = kLayout;
    po.observer = &xpline_;
    auto pool = pm::Pool::OpenOrCreate(path_, o_.pool_size, po);
    if (!pool.ok()) return pool.status().WithContext("pool " + path_);
    pool_ = std::move(pool).value();
    user_ = pool_->user_base();

    uint64_t needed = uint64_t{o_.senders} * o_.records * kMaxRecord;
    segments_ = static_cast<uint32_t>(needed / kSegmentBytes + 2);
    uint64_t log_room = pool_->user_size() > kLogOffset ? pool_->user_size() - kLogOffset : 0;
    uint32_t max_segments = static_cast<uint32_t>(log_room / kSegmentBytes);
    if (segments_ > max_segments) {
      return Status::InvalidArgument(
          "pool " + path_ + " holds " + std::to_string(max_segments) + " log segments of " +
          std::to_string(kSegmentBytes / 1024) + " KiB; --records " + std::to_string(o_.records) +
          " x --senders " + std::to_string(o_.senders) + " needs up to " +
          std::to_string(segments_) + " (use fewer records or a new --data-dir with --pool-size)");
    }

    DemoHeader h;
    std::memcpy(&h, user_ + kHeaderOffset, sizeof(h));
    bool header_ok = std::memcmp(h.magic, kHeaderMagic, 8) == 0 &&
                     Crc32c(&h, offsetof(DemoHeader, crc)) == h.crc;
    out_ << "== AsymNVM demo: software-NIC back-end on a PM pool, " << o_.senders
         << " front-end senders ==\n";
    out_ << "pool: " << (existed_ ? "opened existing pool " : "created new pool ") << path_
         << "\n      " << pool_->Describe() << "\n"
         << "      DAX: " << (pool_->is_dax() ? "yes" : "no (ordinary file; libpmem ")
         << (pool_->is_dax() ? "" : std::string(pm::PersistModeName(pool_->mode())) + " mode)")
         << "\n";
    if (existed_ && header_ok && h.last_segments == 0) {
      out_ << "      previous runs: " << h.runs << "; run #" << h.runs + 1
           << " started but did not finish (its log was discarded)\n";
      runs_before_ = h.runs;
    } else if (existed_ && header_ok) {
      uint64_t other = 0;
      uint32_t prev_segments = std::min<uint32_t>(h.last_segments, max_segments);
      uint64_t prev =
          ScanLog(user_ + kLogOffset, prev_segments, static_cast<uint32_t>(h.runs), &other);
      out_ << "      previous runs: " << h.runs << "; run #" << h.runs << " landed "
           << h.last_epoch_records << " records, and a scan of its " << prev_segments
           << " log segments on PM finds " << prev << " valid (survived the restart)\n";
      if (prev != h.last_epoch_records) {
        failures_.push_back("previous run's records on PM: found " + std::to_string(prev) +
                            ", header says " + std::to_string(h.last_epoch_records));
      }
      runs_before_ = h.runs;
    } else if (existed_) {
      out_ << "      (no demo header yet: the previous run did not finish)\n";
    }
    epoch_ = static_cast<uint32_t>(runs_before_ + 1);
    if (existed_) {
      all_time_before_ = reinterpret_cast<uint64_t*>(user_ + kCountersOffset)[kWordAllRecords];
    }

    // Mark this run in progress before the previous run's log is recycled, so that a run that
    // fails from here on leaves a header that no longer promises the old records.
    WriteHeader(runs_before_, 0, 0);
    // Fresh log segments and per-run counters (recycled segments must hold no stale records,
    // doc/rowan.md).
    std::memset(user_ + kLogOffset, 0, uint64_t{segments_} * kSegmentBytes);
    pool_->persister()->Persist(user_ + kLogOffset, uint64_t{segments_} * kSegmentBytes);
    uint64_t* words = reinterpret_cast<uint64_t*>(user_ + kCountersOffset);
    uint64_t keep = words[kWordAllRecords];
    std::memset(words, 0, kCountersBytes);
    words[kWordAllRecords] = keep;
    pool_->persister()->Persist(words, kCountersBytes);
    xpline_.Reset();  // measure the run's traffic only
    return Status::Ok();
  }

  Status FinishPool() {
    WriteHeader(epoch_, landed_valid_, segments_);
    out_ << "run #" << epoch_ << " recorded in the pool header; run me again to reopen the pool.\n";
    out_ << "OK\n";
    return Status::Ok();
  }

  // ---- Back-end NIC ---------------------------------------------------------------------------
  Status StartTarget() {
    ASYMNVM_ASSIGN_OR_RETURN(target_pd_, target_->AllocPd());
    fabric::MemoryRegionOptions mo;
    mo.access = fabric::kAllRemote;
    mo.persister = pool_->persister();
    ASYMNVM_ASSIGN_OR_RETURN(target_mr_, target_pd_->RegisterMemory(user_, pool_->user_size(), mo));
    fabric::CompletionQueueOptions cqo;
    cqo.capacity = 16384;
    ASYMNVM_ASSIGN_OR_RETURN(target_recv_cq_, target_->CreateCq(cqo));
    ASYMNVM_ASSIGN_OR_RETURN(target_send_cq_, target_->CreateCq({}));
    fabric::SrqOptions so;
    so.multi_packet = true;
    so.stride = kStride;
    so.max_wr = 64;
    so.fallback_slot_size = kMaxRecord;
    ASYMNVM_ASSIGN_OR_RETURN(srq_, target_->CreateSrq(target_pd_.get(), so));
    multi_packet_native_ = srq_->multi_packet_native();
    std::string listen;
    if (o_.transport == "tcp") {
      listen = "tcp://127.0.0.1:0";
    } else if (o_.transport == "unix") {
      std::error_code ec;
      std::filesystem::path abs = std::filesystem::absolute(o_.data_dir, ec);
      listen = "unix://" + (abs / "asymnvm-demo.sock").string();
    } else {
      listen = "inproc://asymnvm-demo";
    }
    auto l = target_->Listen(target_pd_.get(), listen);
    if (!l.ok()) return l.status().WithContext("listen " + listen);
    listener_ = std::move(l).value();
    ASYMNVM_RETURN_IF_ERROR(PostSegments(4));
    out_ << "back-end NIC: " << target_->provider() << " on " << listener_->address()
         << "; PM region " << (pool_->user_size() >> 20) << " MiB (rkey " << target_mr_->rkey()
         << "); SRQ "
         << (multi_packet_native_ ? "multi-packet, 64 B stride"
                                  : "multi-packet EMULATED with 256 B slots")
         << ", " << segments_ << " log segments of " << kSegmentBytes / 1024 << " KiB\n";
    control_ = std::thread([this] { ControlLoop(); });
    return Status::Ok();
  }

  // Keeps the SRQ stocked with free segments in increasing address order.
  Status PostSegments(uint32_t ahead) {
    std::vector<RecvRequest> reqs;
    while (next_segment_ < segments_ && next_segment_ < highest_segment_ + 1 + ahead) {
      reqs.push_back({next_segment_, user_ + kLogOffset + uint64_t{next_segment_} * kSegmentBytes,
                      static_cast<uint32_t>(kSegmentBytes), target_mr_.get()});
      next_segment_++;
    }
    if (reqs.empty()) return Status::Ok();
    return srq_->PostRecv(reqs).WithContext("post log segments");
  }

  // The back-end's control thread: records where each message landed and replenishes segments.
  void ControlLoop() {
    Completion comps[128];
    while (!stop_control_.load()) {
      auto n = target_recv_cq_->Wait(comps, std::chrono::milliseconds(20));
      if (!n.ok()) {
        std::lock_guard<std::mutex> lk(mu_);
        control_error_ = n.status().ToString();
        cv_.notify_all();
        return;
      }
      if (*n == 0) continue;
      std::lock_guard<std::mutex> lk(mu_);
      for (size_t i = 0; i < *n; i++) {
        const Completion& c = comps[i];
        if (c.status != CompletionStatus::kSuccess) {
          recv_errors_++;
          LOG_WARN("demo", "RECV completion " << CompletionStatusName(c.status));
          continue;
        }
        uint32_t seg = static_cast<uint32_t>(c.wr_id);
        highest_segment_ = std::max(highest_segment_, seg);
        if (c.byte_len == 0 && c.buffer_done) {
          retired_segments_++;  // the NIC retired a partly used segment: nothing landed
          continue;
        }
        landings_.push_back({seg, c.offset, c.byte_len, c.connection_id});
      }
      Status st = PostSegments(4);
      if (!st.ok()) control_error_ = st.ToString();
      cv_.notify_all();
    }
  }

  // ---- Front-end NIC and senders --------------------------------------------------------------
  Status StartFrontEnd() {
    ASYMNVM_ASSIGN_OR_RETURN(front_pd_, front_->AllocPd());
    senders_.resize(o_.senders);
    for (uint32_t i = 0; i < o_.senders; i++) {
      Sender& s = senders_[i];
      s.id = i;
      s.buf.assign(kMaxRecord + 64 * 8, 0);
      fabric::MemoryRegionOptions mo;
      mo.access = fabric::kLocalWrite;
      ASYMNVM_ASSIGN_OR_RETURN(s.mr, front_pd_->RegisterMemory(s.buf.data(), s.buf.size(), mo));
      ASYMNVM_ASSIGN_OR_RETURN(s.cq, front_->CreateCq({}));
    }
    // The back-end accepts every sender's connection while the senders connect.
    Status accept_st;
    std::thread acceptor([&] {
      for (uint32_t i = 0; i < o_.senders; i++) {
        ConnectionOptions co;
        co.send_cq = target_send_cq_.get();
        co.recv_cq = target_recv_cq_.get();
        co.srq = srq_.get();
        auto c = listener_->Accept(co);
        if (!c.ok()) {
          accept_st = c.status().WithContext("accept");
          return;
        }
        const auto& pd = (*c)->peer_private_data();
        conn_sender_[(*c)->id()] = pd.empty() ? -1 : pd[0];
        target_conns_.push_back(std::move(c).value());
      }
    });
    Status connect_st;
    for (uint32_t i = 0; i < o_.senders && connect_st.ok(); i++) {
      ConnectionOptions co;
      co.send_cq = senders_[i].cq.get();
      co.recv_cq = senders_[i].cq.get();
      co.private_data = {static_cast<uint8_t>(i)};
      auto c = front_->Connect(front_pd_.get(), listener_->address(), co);
      if (!c.ok()) {
        connect_st = c.status().WithContext("connect " + listener_->address());
      } else {
        senders_[i].conn = std::move(c).value();
      }
    }
    acceptor.join();
    ASYMNVM_RETURN_IF_ERROR(connect_st);
    ASYMNVM_RETURN_IF_ERROR(accept_st);
    return Status::Ok();
  }

  struct Sender {
    uint32_t id = 0;
    std::vector<uint8_t> buf;  // [0, 256): record; then 8-byte atomic/READ results
    std::unique_ptr<MemoryRegion> mr;
    std::unique_ptr<fabric::CompletionQueue> cq;
    std::unique_ptr<Connection> conn;
    uint64_t sent = 0;
    uint64_t bytes = 0;
    bool won_cas = false;
    Status status;
  };

  // Posts `wrs` and waits for `signaled` completions.
  static Status PostAndWait(Sender& s, const std::vector<WorkRequest>& wrs, size_t signaled) {
    ASYMNVM_RETURN_IF_ERROR(s.conn->Post(wrs));
    Completion comps[8];
    size_t got = 0;
    while (got < signaled) {
      auto n = s.cq->Wait(comps, std::chrono::seconds(5));
      if (!n.ok()) return n.status();
      if (*n == 0) return Status::TimedOut("no completion within 5 s");
      for (size_t i = 0; i < *n; i++) {
        if (comps[i].status != CompletionStatus::kSuccess) {
          return Status::ConnectionError(std::string(OpcodeName(comps[i].opcode)) +
                                         " failed: " + CompletionStatusName(comps[i].status) + " " +
                                         s.conn->error().ToString());
        }
      }
      got += *n;
    }
    return Status::Ok();
  }

  Status SenderLoop(Sender& s) {
    std::mt19937_64 rng(o_.seed * 1000003 + s.id);
    std::uniform_int_distribution<uint32_t> len_dist(kMinRecord, kMaxRecord);
    const uint64_t counters = target_mr_->descriptor().addr + kCountersOffset;
    const uint32_t rkey = target_mr_->rkey();
    uint8_t* rec = s.buf.data();
    uint64_t* faa_result = reinterpret_cast<uint64_t*>(s.buf.data() + kMaxRecord);
    uint64_t* progress = faa_result + 1;
    for (uint64_t seq = 0; seq < o_.records; seq++) {
      uint32_t len = len_dist(rng);
      RecordHeader h{
          kRecordMagic, static_cast<uint16_t>(s.id), static_cast<uint16_t>(len), epoch_, 0, seq};
      std::memcpy(rec, &h, sizeof(h));
      for (uint32_t i = sizeof(h); i < len; i++) rec[i] = static_cast<uint8_t>(rng());
      h.crc = RecordCrc(rec, len);
      std::memcpy(rec, &h, sizeof(h));
      // One doorbell: SEND the record, count it with a fetch-and-add, flush (durable on return).
      std::vector<WorkRequest> wrs(3);
      wrs[0].opcode = Opcode::kSend;
      wrs[0].signaled = false;
      wrs[0].local_addr = rec;
      wrs[0].length = len;
      wrs[0].local_mr = s.mr.get();
      wrs[1].opcode = Opcode::kFetchAdd;
      wrs[1].signaled = false;
      wrs[1].local_addr = faa_result;
      wrs[1].length = 8;
      wrs[1].local_mr = s.mr.get();
      wrs[1].remote_addr = counters + 8 * kWordRunRecords;
      wrs[1].rkey = rkey;
      wrs[1].compare_add = 1;
      wrs[2].opcode = Opcode::kFlush;
      wrs[2].remote_addr = counters;
      wrs[2].rkey = rkey;
      wrs[2].wr_id = seq;
      // Every 50 records (and the last): WRITE progress, FAA the all-time total.
      if (seq % 50 == 49 || seq + 1 == o_.records) {
        *progress = seq + 1;
        WorkRequest w;
        w.opcode = Opcode::kWrite;
        w.signaled = false;
        w.local_addr = progress;
        w.length = 8;
        w.local_mr = s.mr.get();
        w.remote_addr = counters + 8 * (kWordProgress + s.id);
        w.rkey = rkey;
        wrs.insert(wrs.begin() + 2, w);
      }
      WorkRequest all;
      all.opcode = Opcode::kFetchAdd;
      all.signaled = false;
      all.remote_addr = counters + 8 * kWordAllRecords;
      all.rkey = rkey;
      all.compare_add = 1;
      wrs.insert(wrs.end() - 1, all);
      Status st = PostAndWait(s, wrs, 1);
      if (!st.ok())
        return st.WithContext("sender " + std::to_string(s.id) + " record " + std::to_string(seq));
      s.sent++;
      s.bytes += len;
    }
    // Claim the "first to finish" word with a CAS; read it back with a READ.
    uint64_t* cas_result = faa_result + 2;
    uint64_t* read_back = faa_result + 3;
    std::vector<WorkRequest> wrs(3);
    wrs[0].opcode = Opcode::kCompareSwap;
    wrs[0].local_addr = cas_result;
    wrs[0].length = 8;
    wrs[0].local_mr = s.mr.get();
    wrs[0].remote_addr = counters + 8 * kWordFinisher;
    wrs[0].rkey = rkey;
    wrs[0].compare_add = 0;
    wrs[0].swap = s.id + 1;
    wrs[1].opcode = Opcode::kRead;
    wrs[1].local_addr = read_back;
    wrs[1].length = 8;
    wrs[1].local_mr = s.mr.get();
    wrs[1].remote_addr = counters + 8 * kWordFinisher;
    wrs[1].rkey = rkey;
    wrs[2].opcode = Opcode::kFlush;
    wrs[2].remote_addr = counters;
    wrs[2].rkey = rkey;
    ASYMNVM_RETURN_IF_ERROR(
        PostAndWait(s, wrs, 3).WithContext("sender " + std::to_string(s.id) + " CAS"));
    s.won_cas = *cas_result == 0;
    if (*read_back == 0) return Status::Internal("CAS then READ saw no finisher");
    return Status::Ok();
  }

  Status Drive() {
    const uint64_t expected = uint64_t{o_.senders} * o_.records;
    out_ << "front-end NIC: " << front_->provider() << ", " << o_.senders
         << " sender threads, one connection each; each SENDs " << o_.records
         << " records of 64-256 B + FAA + flush in one doorbell\n";
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (Sender& s : senders_) {
      threads.emplace_back([this, &s] { s.status = SenderLoop(s); });
    }
    for (std::thread& t : threads) t.join();
    elapsed_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (Sender& s : senders_) {
      if (!s.status.ok()) return s.status;
    }
    // Every record was flushed before its sender moved on, so every landing completion is
    // already produced; wait for the control thread to have seen them all.
    std::unique_lock<std::mutex> lk(mu_);
    bool all = cv_.wait_for(lk, std::chrono::seconds(10), [&] {
      return landings_.size() + recv_errors_ >= expected || !control_error_.empty();
    });
    if (!control_error_.empty()) return Status::Internal("control thread: " + control_error_);
    if (!all) {
      return Status::TimedOut("only " + std::to_string(landings_.size()) + " of " +
                              std::to_string(expected) + " landing completions after 10 s");
    }
    return Status::Ok();
  }

  // ---- What happened --------------------------------------------------------------------------
  Status Report() {
    std::vector<Landing> landings;
    {
      std::lock_guard<std::mutex> lk(mu_);
      landings = landings_;
    }
    const uint64_t expected = uint64_t{o_.senders} * o_.records;
    std::sort(landings.begin(), landings.end(), [](const Landing& a, const Landing& b) {
      return a.segment != b.segment ? a.segment < b.segment : a.offset < b.offset;
    });
    std::vector<uint64_t> per_sender(o_.senders, 0);
    std::vector<int64_t> last_seq(o_.senders, -1);
    uint64_t out_of_order = 0, bad = 0, conn_mismatch = 0, back_to_back = 0, pairs = 0;
    uint64_t switches = 0, rollovers = 0, gap_bytes = 0, bytes = 0;
    std::vector<std::string> sample;
    const uint8_t* log = user_ + kLogOffset;
    for (size_t i = 0; i < landings.size(); i++) {
      const Landing& l = landings[i];
      const uint8_t* p = log + uint64_t{l.segment} * kSegmentBytes + l.offset;
      RecordHeader h;
      if (!ValidRecord(p, kSegmentBytes - l.offset, &h) || h.epoch != epoch_ ||
          h.length != l.length || h.sender >= o_.senders) {
        bad++;
        continue;
      }
      landed_valid_++;
      bytes += h.length;
      per_sender[h.sender]++;
      if (static_cast<int64_t>(h.seq) <= last_seq[h.sender]) out_of_order++;
      last_seq[h.sender] = static_cast<int64_t>(h.seq);
      auto cs = conn_sender_.find(l.connection_id);
      if (cs != conn_sender_.end() && cs->second != h.sender) conn_mismatch++;
      if (i > 0) {
        const Landing& prev = landings[i - 1];
        const uint8_t* pp = log + uint64_t{prev.segment} * kSegmentBytes + prev.offset;
        uint16_t prev_sender;
        std::memcpy(&prev_sender, pp + offsetof(RecordHeader, sender), 2);
        if (prev_sender != h.sender) switches++;
        if (prev.segment == l.segment) {
          pairs++;
          uint64_t next = RoundUp(prev.offset + prev.length, kStride);
          if (next == l.offset) {
            back_to_back++;
          } else if (l.offset > next) {
            gap_bytes += l.offset - next;
          }
        } else {
          rollovers++;
        }
      }
      if (sample.size() < 12) {
        std::ostringstream os;
        os << "    seg " << std::setw(2) << l.segment << "  +" << Hex(l.offset, 5) << "  len "
           << std::setw(3) << h.length << " (next at +"
           << Hex(RoundUp(l.offset + h.length, kStride), 5) << ")  sender " << h.sender << "  seq "
           << std::setw(4) << h.seq << "  crc " << Hex(h.crc, 8) << "  conn " << l.connection_id;
        sample.push_back(os.str());
      }
    }
    out_ << "\n-- b-log (multi-packet SRQ over PM segments) --\n";
    out_ << "  records sent " << expected << ", landed " << landings.size() << ", valid on PM "
         << landed_valid_ << " (" << bytes << " B in " << elapsed_s_ << " s, " << std::fixed
         << std::setprecision(0)
         << (elapsed_s_ > 0 ? static_cast<double>(landed_valid_) / elapsed_s_ : 0.0)
         << " records/s durable)\n";
    out_ << "  per sender:";
    for (uint32_t i = 0; i < o_.senders; i++) out_ << "  #" << i << " " << per_sender[i];
    out_ << "\n  each sender's records in order of landing: "
         << (out_of_order == 0 ? "yes" : "NO (" + std::to_string(out_of_order) + " out of order)")
         << "; completions' connection matches the record's sender: "
         << (conn_mismatch == 0 ? "yes" : "NO") << "\n";
    out_ << "  placement: " << back_to_back << " of " << pairs
         << " neighbouring records in a segment are back to back at the next 64 B stride ("
         << gap_bytes << " B of holes); " << switches << " sender switches between neighbours; "
         << rollovers << " segment roll-overs (" << retired_segments_
         << " retired with a zero-length completion)\n";
    out_ << "  first landings (arrival order across senders):\n";
    for (const std::string& s : sample) out_ << s << "\n";
    uint64_t scanned = ScanLog(log, segments_, epoch_, nullptr);
    out_ << "  tail-less scan of the PM log finds " << scanned << " valid records of run #"
         << epoch_ << "\n";

    // One-sided traffic: read the counters area back with a READ from sender 0.
    Sender& s0 = senders_[0];
    uint64_t* words = reinterpret_cast<uint64_t*>(s0.buf.data() + kMaxRecord);
    std::vector<WorkRequest> rd(1);
    rd[0].opcode = Opcode::kRead;
    rd[0].local_addr = words;
    rd[0].length = 8 * 8;
    rd[0].local_mr = s0.mr.get();
    rd[0].remote_addr = target_mr_->descriptor().addr + kCountersOffset;
    rd[0].rkey = target_mr_->rkey();
    ASYMNVM_RETURN_IF_ERROR(PostAndWait(s0, rd, 1).WithContext("READ counters"));
    uint64_t run_records = words[kWordRunRecords], finisher = words[kWordFinisher],
             all_time = words[kWordAllRecords];
    int cas_winners = 0;
    for (const Sender& s : senders_) cas_winners += s.won_cas ? 1 : 0;
    const uint64_t* progress =
        reinterpret_cast<const uint64_t*>(user_ + kCountersOffset) + kWordProgress;
    out_ << "\n-- one-sided traffic on the counters area --\n";
    out_ << "  FAA records this run = " << run_records << " (expected " << expected
         << "); FAA records all runs = " << all_time << " (was " << all_time_before_
         << " before this run)\n";
    out_ << "  CAS 'first to finish' = sender " << static_cast<int64_t>(finisher) - 1 << " ("
         << cas_winners << " CAS succeeded, expected 1); WRITE progress per sender:";
    for (uint32_t i = 0; i < o_.senders; i++) out_ << " " << progress[i];
    out_ << "\n";

    Counters front = front_->counters(), back = target_->counters();
    out_ << "\n-- fabric counters --\n";
    PrintCounters(out_, "front-end (initiator)", front);
    PrintCounters(out_, "back-end (target)", back);
    out_ << "  round trips per record: " << std::setprecision(3)
         << static_cast<double>(front.round_trips) / static_cast<double>(expected) << "\n";

    xpline_.Finish();
    out_ << "\n-- PM --\n";
    out_ << "  pool " << pool_->path() << ", DAX " << (pool_->is_dax() ? "yes" : "no")
         << ", persist mode " << pm::PersistModeName(pool_->mode()) << "\n";
    out_ << "  XPLine model (16 KiB write-combining buffer, 256 B lines): requested "
         << xpline_.requested_bytes() << " B, media " << xpline_.media_bytes() << " B, DLWA "
         << std::setprecision(3) << xpline_.dlwa() << "\n\n";

    if (landings.size() != expected)
      failures_.push_back("landed " + std::to_string(landings.size()));
    if (bad != 0) failures_.push_back(std::to_string(bad) + " landed records failed validation");
    if (out_of_order != 0) failures_.push_back("records out of order");
    if (conn_mismatch != 0) failures_.push_back("completion connection != record sender");
    if (scanned != landed_valid_) failures_.push_back("scan found " + std::to_string(scanned));
    if (run_records != expected) failures_.push_back("FAA count " + std::to_string(run_records));
    if (all_time != all_time_before_ + expected) failures_.push_back("all-time FAA count");
    if (cas_winners != 1 || finisher == 0)
      failures_.push_back("CAS winners " + std::to_string(cas_winners));
    if (multi_packet_native_ && pairs != back_to_back) failures_.push_back("holes between records");
    if (!failures_.empty()) {
      std::string all;
      for (const std::string& f : failures_) all += (all.empty() ? "" : "; ") + f;
      out_ << "CHECKS FAILED: " << all << "\n";
      return Status::Internal("demo checks failed: " + all);
    }
    out_ << "all checks passed: every record durable, in order per sender, back to back on PM.\n";
    return Status::Ok();
  }

  void Shutdown() {
    stop_control_.store(true);
    if (control_.joinable()) control_.join();
    for (Sender& s : senders_) s.conn.reset();
    target_conns_.clear();
    senders_.clear();
    listener_.reset();
    srq_.reset();
    target_recv_cq_.reset();
    target_send_cq_.reset();
    target_mr_.reset();
    target_pd_.reset();
    front_pd_.reset();
    front_.reset();
    target_.reset();
  }

  const DemoOptions& o_;
  std::ostream& out_;
  pm::XPLineModel xpline_;
  std::unique_ptr<pm::Pool> pool_;
  std::string path_;
  bool existed_ = false;
  uint8_t* user_ = nullptr;
  uint32_t segments_ = 0;
  uint64_t runs_before_ = 0;
  uint64_t all_time_before_ = 0;
  uint32_t epoch_ = 1;
  uint64_t landed_valid_ = 0;
  double elapsed_s_ = 0;
  std::vector<std::string> failures_;

  std::unique_ptr<Fabric> target_;
  std::unique_ptr<fabric::ProtectionDomain> target_pd_;
  std::unique_ptr<MemoryRegion> target_mr_;
  std::unique_ptr<fabric::CompletionQueue> target_recv_cq_;
  std::unique_ptr<fabric::CompletionQueue> target_send_cq_;
  std::unique_ptr<fabric::SharedReceiveQueue> srq_;
  std::unique_ptr<fabric::Listener> listener_;
  std::vector<std::unique_ptr<Connection>> target_conns_;
  std::map<uint64_t, int> conn_sender_;
  bool multi_packet_native_ = true;
  uint32_t next_segment_ = 0;
  uint32_t highest_segment_ = 0;

  std::thread control_;
  std::atomic<bool> stop_control_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Landing> landings_;
  uint64_t recv_errors_ = 0;
  uint64_t retired_segments_ = 0;
  std::string control_error_;

  std::unique_ptr<Fabric> front_;
  std::unique_ptr<fabric::ProtectionDomain> front_pd_;
  std::vector<Sender> senders_;
};

}  // namespace

Status RunDemo(const DemoOptions& options, std::ostream& out) {
  Demo demo(options, out);
  return demo.Run();
}

}  // namespace asymnvm::demo
