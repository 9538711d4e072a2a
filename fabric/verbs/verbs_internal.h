// Internals of the verbs provider, shared by its .cc files and its unit tests.
//
// Object graph: VerbsFabric owns a DeviceCore (ibv_context, device/port attributes, the registry
// qp_num → ConnCore). VerbsPd (ibv_pd + a 64-byte scratch MR for flush READs and discarded atomic
// results), VerbsMr (ibv_mr), VerbsCq (ibv_cq + completion channel + a software queue),
// VerbsSrq/SrqCore (ibv_srq + slot bookkeeping), VerbsConnection/ConnCore (RC ibv_qp + wr_id
// bookkeeping + counters). Children keep a raw DeviceCore*: the Fabric outlives them (fabric.h).
//
// Locks: DeviceCore::mu → ConnCore::mu → SrqCore::mu, and VerbsCq::mu → ConnCore::mu. Post drains a
// ring CQ before taking ConnCore::mu; Close pushes synthesized completions after releasing it.
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "asymnvm/fabric.h"
#include "common/thread_annotations.h"
#include "fabric/verbs/verbs_api.h"

namespace asymnvm::fabric::verbs {

// ---- constants (README.md explains each) ---------------------------------------------------

// Nominal per-packet header counted in bytes_out/bytes_in: RoCEv2 Ethernet 14 + IPv4 20 + UDP 8 +
// BTH 12 + RETH 16 + ICRC 4, rounded up to 64 (FCS/preamble ignored).
inline constexpr uint64_t kWireHeaderBytes = 64;
inline constexpr uint64_t kAtomicRequestExtra = 16;  // compare + swap/add operands
inline constexpr size_t kScratchBytes = 64;
inline constexpr uint8_t kQpAckTimeout = 14;  // 4.096 µs · 2^14 ≈ 67 ms per attempt
inline constexpr uint8_t kQpRetryCount = 7;
inline constexpr uint32_t kMaxRnrRetry = 6;  // 7 means "retry forever" in IB: never used
inline constexpr uint8_t kMaxRdAtomic = 16;
inline constexpr uint32_t kDefaultMaxInline = 256;
inline constexpr uint32_t kMaxPrivateData = 1024;
inline constexpr uint32_t kSlotsPerBufferBudget = 1024;  // SRQ fallback: hw depth per buffer

// ---- wr_id encoding: top 2 bits say which queue a completion belongs to ---------------------

enum class WrKind : uint64_t { kSend = 0, kRecv = 1, kSrq = 2 };
inline constexpr uint64_t kWrValueMask = (uint64_t{1} << 62) - 1;
inline constexpr int kSlotBits = 24;
inline uint64_t EncodeWrId(WrKind kind, uint64_t value) {
  return (static_cast<uint64_t>(kind) << 62) | (value & kWrValueMask);
}
inline WrKind WrKindOf(uint64_t wr_id) { return static_cast<WrKind>(wr_id >> 62); }
inline uint64_t WrValueOf(uint64_t wr_id) { return wr_id & kWrValueMask; }
inline uint64_t EncodeSrqSlot(uint64_t buffer_seq, uint32_t slot) {
  return EncodeWrId(WrKind::kSrq, (buffer_seq << kSlotBits) | slot);
}

// ---- pure mappings ----------------------------------------------------------------------------

int MapAccess(uint32_t access);  // Access bits → IBV_ACCESS_*
CompletionStatus MapWcStatus(ibv_wc_status status);
uint8_t RnrTimerCode(std::chrono::microseconds backoff);  // IB min_rnr_timer encoding
uint32_t MtuBytes(ibv_mtu mtu);
// kIoError "verbs: <call>: <strerror>" with sys_errno; `ret` is the call's return (errno value,
// or -1 with errno set).
Status VerbsError(std::string_view call, int ret);
Status VerbsErrnoError(std::string_view call, int err);  // for calls returning nullptr
// The Status a connection records when a completion with `s` puts it in kError.
Status ConnectionErrorFor(CompletionStatus s, Opcode op);

// ---- connection parameters exchanged through the bootstrap handshake ---------------------------
//
// Blob (little-endian): magic u32 "AVB1" | qpn u32 | psn u32 | lid u16 | mtu u8 (ibv_mtu) |
// port u8 | gid [16] | private_data_len u32 | private_data.
struct QpInfo {
  uint32_t qpn = 0;
  uint32_t psn = 0;  // 24 bits
  uint16_t lid = 0;
  uint8_t mtu = IBV_MTU_1024;
  uint8_t port = 1;
  ibv_gid gid{};
  std::vector<uint8_t> private_data;
};
inline constexpr uint32_t kBlobMagic = 0x31425641;  // "AVB1"
inline constexpr size_t kBlobHeader = 36;
std::vector<uint8_t> EncodeQpInfo(const QpInfo& info);
// kProtocolError on bad magic, truncation, 24-bit overflow or a length mismatch.
Result<QpInfo> DecodeQpInfo(std::span<const uint8_t> blob);

struct DeviceCore;
ibv_qp_attr BuildInitAttr(const DeviceCore& dev, int* mask);
ibv_qp_attr BuildRtrAttr(const DeviceCore& dev, const QpInfo& local, const QpInfo& peer,
                         const ConnectionOptions& options, int* mask);
ibv_qp_attr BuildRtsAttr(const DeviceCore& dev, const QpInfo& local,
                         const ConnectionOptions& options, int* mask);

// ---- objects ----------------------------------------------------------------------------------

class ConnCore;

struct DeviceCore {
  std::shared_ptr<VerbsApi> api;
  FabricOptions options;
  std::string device_name;
  ibv_context* ctx = nullptr;
  ibv_device_attr dev_attr{};
  ibv_port_attr port_attr{};
  ibv_gid gid{};
  std::atomic<uint64_t> next_conn_id{1};

  Mutex mu;
  std::unordered_map<uint32_t, std::shared_ptr<ConnCore>> by_qpn ASYMNVM_GUARDED_BY(mu);  // live
  std::vector<std::shared_ptr<ConnCore>> all_conns
      ASYMNVM_GUARDED_BY(mu);  // live and closed, for counters()

  std::shared_ptr<ConnCore> FindByQpn(uint32_t qpn);
  void Register(const std::shared_ptr<ConnCore>& conn);
  void Unregister(uint32_t qpn);
  uint32_t RandomPsn();
};

class VerbsMr final : public MemoryRegion {
 public:
  VerbsMr(std::shared_ptr<VerbsApi> api, ibv_mr* mr, void* addr, size_t length, uint32_t access)
      : api_(std::move(api)), mr_(mr), addr_(addr), length_(length), access_(access) {}
  ~VerbsMr() override;
  void* addr() const override { return addr_; }
  size_t length() const override { return length_; }
  uint32_t lkey() const override { return mr_->lkey; }
  uint32_t rkey() const override { return mr_->rkey; }
  uint32_t access() const override { return access_; }

 private:
  std::shared_ptr<VerbsApi> api_;
  ibv_mr* mr_;
  void* addr_;
  size_t length_;
  uint32_t access_;
};

class VerbsPd final : public ProtectionDomain {
 public:
  static Result<std::unique_ptr<VerbsPd>> Create(DeviceCore* dev);
  ~VerbsPd() override;
  Result<std::unique_ptr<MemoryRegion>> RegisterMemory(void* addr, size_t length,
                                                       const MemoryRegionOptions& options) override;
  ibv_pd* pd() const { return pd_; }
  DeviceCore* dev() const { return dev_; }
  // 64 bytes registered with local write: destination of flush READs and discarded atomics.
  void* scratch() { return scratch_; }
  uint32_t scratch_lkey() const { return scratch_mr_->lkey; }

 private:
  VerbsPd(DeviceCore* dev, ibv_pd* pd) : dev_(dev), pd_(pd) {}
  DeviceCore* dev_;
  ibv_pd* pd_;
  ibv_mr* scratch_mr_ = nullptr;
  alignas(64) uint8_t scratch_[kScratchBytes] = {};
};

class VerbsCq final : public CompletionQueue {
 public:
  static Result<std::unique_ptr<VerbsCq>> Create(DeviceCore* dev, const CompletionQueueOptions& o);
  ~VerbsCq() override;
  Result<size_t> Poll(std::span<Completion> out) override;
  Result<size_t> Wait(std::span<Completion> out, std::chrono::microseconds timeout) override;
  uint64_t overwritten() const override { return overwritten_.load(); }
  uint32_t capacity() const override { return options_.capacity; }

  bool ring() const { return options_.ring; }
  ibv_cq* cq() const { return cq_; }
  // Ring mode: moves every completion the hardware CQ holds into the software ring.
  void Drain();
  // Appends provider-made completions (flushes at Close).
  void Push(std::vector<Completion> completions);

 private:
  VerbsCq(DeviceCore* dev, ibv_comp_channel* ch, ibv_cq* cq, const CompletionQueueOptions& o)
      : dev_(dev), channel_(ch), cq_(cq), options_(o) {}
  Status DrainLocked(size_t want)
      ASYMNVM_REQUIRES(mu_);  // want: hardware entries to take (ring: all)
  void Append(const Completion& c) ASYMNVM_REQUIRES(mu_);

  DeviceCore* dev_;
  ibv_comp_channel* channel_;
  ibv_cq* cq_;
  CompletionQueueOptions options_;
  Mutex mu_;
  std::deque<Completion> pending_ ASYMNVM_GUARDED_BY(mu_);
  bool overrun_ ASYMNVM_GUARDED_BY(mu_) = false;
  std::atomic<uint64_t> overwritten_{0};
};

// Slot bookkeeping of one SRQ (see README.md "multi-packet fallback").
class SrqCore {
 public:
  SrqCore(DeviceCore* dev, ibv_srq* srq, const SrqOptions& o, uint32_t hw_depth)
      : dev_(dev), srq_(srq), options_(o), hw_depth_(hw_depth) {}
  Status PostRecv(std::span<const RecvRequest> buffers);
  uint32_t posted() const;
  // Maps a completed slot back to its buffer. false when the slot is unknown.
  bool OnSlotCompleted(uint64_t value, uint64_t* user_wr_id, uint32_t* offset, bool* buffer_done);
  ibv_srq* srq() const { return srq_; }
  uint32_t hw_depth() const { return hw_depth_; }

 private:
  struct Buffer {
    uint64_t user_wr_id;
    uint32_t slots;
    uint32_t consumed;
    uint32_t slot_size;
  };
  DeviceCore* dev_;
  ibv_srq* srq_;
  SrqOptions options_;
  uint32_t hw_depth_;
  mutable Mutex mu_;
  std::map<uint64_t, Buffer> buffers_ ASYMNVM_GUARDED_BY(mu_);  // by buffer sequence
  uint64_t next_seq_ ASYMNVM_GUARDED_BY(mu_) = 1;
  uint64_t slots_outstanding_ ASYMNVM_GUARDED_BY(mu_) = 0;
};

class VerbsSrq final : public SharedReceiveQueue {
 public:
  static Result<std::unique_ptr<VerbsSrq>> Create(DeviceCore* dev, VerbsPd* pd,
                                                  const SrqOptions& o);
  ~VerbsSrq() override;
  Status PostRecv(std::span<const RecvRequest> buffers) override {
    return core_->PostRecv(buffers);
  }
  uint32_t posted() const override { return core_->posted(); }
  bool multi_packet_native() const override { return false; }
  const std::shared_ptr<SrqCore>& core() const { return core_; }

 private:
  explicit VerbsSrq(DeviceCore* dev, std::shared_ptr<SrqCore> core)
      : dev_(dev), core_(std::move(core)) {}
  DeviceCore* dev_;
  std::shared_ptr<SrqCore> core_;
};

// State of one RC QP shared by its Connection and the CQs that deliver its completions.
class ConnCore {
 public:
  // Validates `options`, creates the QP and moves it to INIT. Not yet registered.
  static Result<std::shared_ptr<ConnCore>> Create(DeviceCore* dev, VerbsPd* pd,
                                                  const ConnectionOptions& options);
  // Handshake over `fd` (already connected), RTR, RTS, ready exchange; registers the QP.
  // On failure destroys the QP. Does not close fd.
  Status Establish(int fd, bool server, const std::string& peer_address,
                   const ConnectionOptions& options);
  // Set-up failed before registration: destroys the QP, returns `st`.
  Status Abort(Status st);

  Status Post(std::span<const WorkRequest> wrs);
  Status PostRecv(std::span<const RecvRequest> buffers);
  // Translates one hardware completion of this QP. false: nothing to report.
  bool OnCompletion(const ibv_wc& wc, Completion* out);
  void Close();

  ConnectionState state() const;
  Status error() const;
  uint64_t id() const { return id_; }
  uint32_t qpn() const { return qp_->qp_num; }
  Counters counters() const;
  const std::vector<uint8_t>& peer_private_data() const { return peer_private_data_; }
  const std::string& peer_address() const { return peer_address_; }
  const QpInfo& local_info() const { return local_; }
  uint32_t max_inline() const { return max_inline_; }

  ConnCore(DeviceCore* dev, VerbsPd* pd, ibv_qp* qp, const ConnectionOptions& o);

 private:
  struct SendEntry {
    uint64_t seq;
    uint64_t user_wr_id;
    Opcode opcode;
    uint32_t length;
  };
  Status Validate(const WorkRequest& wr, size_t index) const;
  void CountPosted(const WorkRequest& wr);
  void EnterError(CompletionStatus s, Opcode op) ASYMNVM_REQUIRES(mu_);

  DeviceCore* dev_;
  VerbsPd* pd_;
  ibv_qp* qp_;
  uint64_t id_;
  VerbsCq* send_cq_;
  VerbsCq* recv_cq_;  // null: no receiving
  std::shared_ptr<SrqCore> srq_;
  uint32_t max_send_wr_, max_recv_wr_, max_inline_;
  uint32_t mtu_bytes_ = 1024;
  QpInfo local_;
  std::vector<uint8_t> peer_private_data_;
  std::string peer_address_;

  mutable Mutex mu_;
  ConnectionState state_ ASYMNVM_GUARDED_BY(mu_) = ConnectionState::kConnected;
  Status error_ ASYMNVM_GUARDED_BY(mu_);
  std::deque<SendEntry> sends_;  // outstanding, posting order
  uint64_t next_send_seq_ = 1;
  std::unordered_map<uint64_t, uint64_t> recvs_;  // own RQ: seq → user wr_id
  uint64_t next_recv_seq_ = 1;
  Counters counters_;
};

class VerbsConnection final : public Connection {
 public:
  explicit VerbsConnection(std::shared_ptr<ConnCore> core) : core_(std::move(core)) {}
  ~VerbsConnection() override { core_->Close(); }
  Status Post(std::span<const WorkRequest> wrs) override { return core_->Post(wrs); }
  Status PostRecv(std::span<const RecvRequest> b) override { return core_->PostRecv(b); }
  ConnectionState state() const override { return core_->state(); }
  Status error() const override { return core_->error(); }
  uint64_t id() const override { return core_->id(); }
  const std::vector<uint8_t>& peer_private_data() const override {
    return core_->peer_private_data();
  }
  std::string peer_address() const override { return core_->peer_address(); }
  Counters counters() const override { return core_->counters(); }
  void Close() override { core_->Close(); }
  ConnCore* core() const { return core_.get(); }

 private:
  std::shared_ptr<ConnCore> core_;
};

}  // namespace asymnvm::fabric::verbs
