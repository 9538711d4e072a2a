// The verbs provider: device open, protection domains, memory regions, CQ/SRQ creation, the
// Fabric object, and the pure mappings between our API and libibverbs.
#include "fabric/verbs/verbs_fabric.h"

#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "common/logging.h"
#include "fabric/verbs/verbs_internal.h"

namespace asymnvm::fabric::verbs {

// Defined in verbs_setup.cc.
Result<std::unique_ptr<Listener>> ListenVerbs(DeviceCore* dev, VerbsPd* pd,
                                              const std::string& address);
Result<std::unique_ptr<Connection>> ConnectVerbs(DeviceCore* dev, VerbsPd* pd,
                                                 const std::string& address,
                                                 const ConnectionOptions& options);

// ---- mappings -----------------------------------------------------------------------------------

int MapAccess(uint32_t access) {
  int flags = 0;
  if (access & kLocalWrite) flags |= IBV_ACCESS_LOCAL_WRITE;
  if (access & kRemoteRead) flags |= IBV_ACCESS_REMOTE_READ;
  // libibverbs rejects remote write / atomic without local write (EINVAL): add it.
  if (access & kRemoteWrite) flags |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  if (access & kRemoteAtomic) flags |= IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
  return flags;
}

CompletionStatus MapWcStatus(ibv_wc_status status) {
  switch (status) {
    case IBV_WC_SUCCESS:
      return CompletionStatus::kSuccess;
    case IBV_WC_LOC_PROT_ERR:
      return CompletionStatus::kLocalProtectionError;
    case IBV_WC_LOC_LEN_ERR:
      return CompletionStatus::kLocalLengthError;
    case IBV_WC_REM_ACCESS_ERR:
      return CompletionStatus::kRemoteAccessError;
    case IBV_WC_REM_INV_REQ_ERR:
      return CompletionStatus::kRemoteInvalidRequest;
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return CompletionStatus::kRnrRetryExceeded;
    case IBV_WC_RETRY_EXC_ERR:
      return CompletionStatus::kTransportError;
    case IBV_WC_WR_FLUSH_ERR:
      return CompletionStatus::kFlushed;
    default:
      return CompletionStatus::kGeneralError;
  }
}

uint8_t RnrTimerCode(std::chrono::microseconds backoff) {
  // IB spec table 45: code → delay in units of 10 µs (code 0 = 655.36 ms, the maximum).
  static constexpr uint32_t kTenUs[32] = {65536, 1,    2,    3,     4,     6,     8,     12,
                                          16,    24,   32,   48,    64,    96,    128,   192,
                                          256,   384,  512,  768,   1024,  1536,  2048,  3072,
                                          4096,  6144, 8192, 12288, 16384, 24576, 32768, 49152};
  const int64_t us = backoff.count();
  for (uint8_t code = 1; code < 32; code++) {
    if (static_cast<int64_t>(kTenUs[code]) * 10 >= us) return code;
  }
  return 0;
}

uint32_t MtuBytes(ibv_mtu mtu) {
  switch (mtu) {
    case IBV_MTU_256:
      return 256;
    case IBV_MTU_512:
      return 512;
    case IBV_MTU_1024:
      return 1024;
    case IBV_MTU_2048:
      return 2048;
    case IBV_MTU_4096:
      return 4096;
  }
  return 1024;
}

Status VerbsErrnoError(std::string_view call, int err) {
  return Status(StatusCode::kIoError, "verbs: " + std::string(call) + ": " + std::strerror(err),
                err);
}

Status VerbsError(std::string_view call, int ret) {
  int err = ret > 0 ? ret : errno;
  if (err == 0) err = EIO;
  return VerbsErrnoError(call, err);
}

Status ConnectionErrorFor(CompletionStatus s, Opcode op) {
  std::string msg = std::string("verbs: ") + OpcodeName(op) + " completed with " +
                    CompletionStatusName(s) + "; connection in error state";
  switch (s) {
    case CompletionStatus::kRemoteAccessError:
    case CompletionStatus::kRemoteInvalidRequest:
      return Status::RemoteAccessError(msg);
    case CompletionStatus::kRnrRetryExceeded:
      return Status::RnrRetryExceeded(msg);
    default:
      return Status::ConnectionError(msg);
  }
}

// ---- DeviceCore ---------------------------------------------------------------------------------

std::shared_ptr<ConnCore> DeviceCore::FindByQpn(uint32_t qpn) {
  MutexLock lk(mu);
  auto it = by_qpn.find(qpn);
  return it == by_qpn.end() ? nullptr : it->second;
}

void DeviceCore::Register(const std::shared_ptr<ConnCore>& conn) {
  MutexLock lk(mu);
  by_qpn[conn->qpn()] = conn;
  all_conns.push_back(conn);
}

void DeviceCore::Unregister(uint32_t qpn) {
  MutexLock lk(mu);
  by_qpn.erase(qpn);
}

uint32_t DeviceCore::RandomPsn() {
  static thread_local std::mt19937 rng(std::random_device{}());
  return rng() & 0xffffff;
}

// ---- memory -------------------------------------------------------------------------------------

VerbsMr::~VerbsMr() {
  int rc = api_->DeregMr(mr_);
  if (rc != 0) LOG_WARN("verbs", VerbsError("ibv_dereg_mr", rc).ToString());
}

Result<std::unique_ptr<VerbsPd>> VerbsPd::Create(DeviceCore* dev) {
  ibv_pd* pd = dev->api->AllocPd(dev->ctx);
  if (pd == nullptr) return VerbsErrnoError("ibv_alloc_pd", errno);
  std::unique_ptr<VerbsPd> p(new VerbsPd(dev, pd));
  p->scratch_mr_ = dev->api->RegMr(pd, p->scratch_, kScratchBytes, IBV_ACCESS_LOCAL_WRITE);
  if (p->scratch_mr_ == nullptr) {
    Status st = VerbsErrnoError("ibv_reg_mr (scratch)", errno);
    p.reset();  // deallocates the PD
    return st;
  }
  return p;
}

VerbsPd::~VerbsPd() {
  if (scratch_mr_ != nullptr) {
    int rc = dev_->api->DeregMr(scratch_mr_);
    if (rc != 0) LOG_WARN("verbs", VerbsError("ibv_dereg_mr (scratch)", rc).ToString());
  }
  int rc = dev_->api->DeallocPd(pd_);
  if (rc != 0) LOG_WARN("verbs", VerbsError("ibv_dealloc_pd", rc).ToString());
}

Result<std::unique_ptr<MemoryRegion>> VerbsPd::RegisterMemory(void* addr, size_t length,
                                                              const MemoryRegionOptions& options) {
  if (addr == nullptr || length == 0) {
    return Status::InvalidArgument("verbs: RegisterMemory: null address or zero length");
  }
  if ((options.access & ~static_cast<uint32_t>(kAllRemote)) != 0) {
    return Status::InvalidArgument("verbs: RegisterMemory: unknown access bits");
  }
  ibv_mr* mr = dev_->api->RegMr(pd_, addr, length, MapAccess(options.access));
  if (mr == nullptr) {
    int err = errno;
    if (err == ENOMEM) {
      return Status(
          StatusCode::kResourceExhausted,
          "verbs: ibv_reg_mr(" + std::to_string(length) + " bytes): " + std::strerror(err), err);
    }
    return VerbsErrnoError("ibv_reg_mr(" + std::to_string(length) + " bytes)", err);
  }
  return std::unique_ptr<MemoryRegion>(new VerbsMr(dev_->api, mr, addr, length, options.access));
}

// ---- queues -------------------------------------------------------------------------------------

Result<std::unique_ptr<VerbsCq>> VerbsCq::Create(DeviceCore* dev, const CompletionQueueOptions& o) {
  if (o.capacity == 0) return Status::InvalidArgument("verbs: CreateCq: capacity 0");
  if (dev->dev_attr.max_cqe > 0 && o.capacity > static_cast<uint32_t>(dev->dev_attr.max_cqe)) {
    return Status::InvalidArgument("verbs: CreateCq: capacity " + std::to_string(o.capacity) +
                                   " > device max_cqe " + std::to_string(dev->dev_attr.max_cqe));
  }
  ibv_comp_channel* ch = dev->api->CreateCompChannel(dev->ctx);
  if (ch == nullptr) return VerbsErrnoError("ibv_create_comp_channel", errno);
  ibv_cq* cq = dev->api->CreateCq(dev->ctx, static_cast<int>(o.capacity), nullptr, ch, 0);
  if (cq == nullptr) {
    Status st = VerbsErrnoError("ibv_create_cq", errno);
    int rc = dev->api->DestroyCompChannel(ch);
    if (rc != 0) LOG_WARN("verbs", VerbsError("ibv_destroy_comp_channel", rc).ToString());
    return st;
  }
  // Non-blocking channel: a spurious wake-up never blocks in ibv_get_cq_event.
  int fl = fcntl(ch->fd, F_GETFL);
  if (fl >= 0) (void)fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK);
  return std::unique_ptr<VerbsCq>(new VerbsCq(dev, ch, cq, o));
}

VerbsCq::~VerbsCq() {
  int rc = dev_->api->DestroyCq(cq_);
  if (rc != 0) LOG_WARN("verbs", VerbsError("ibv_destroy_cq", rc).ToString());
  rc = dev_->api->DestroyCompChannel(channel_);
  if (rc != 0) LOG_WARN("verbs", VerbsError("ibv_destroy_comp_channel", rc).ToString());
}

Result<std::unique_ptr<VerbsSrq>> VerbsSrq::Create(DeviceCore* dev, VerbsPd* pd,
                                                   const SrqOptions& o) {
  if (o.max_wr == 0) return Status::InvalidArgument("verbs: CreateSrq: max_wr 0");
  uint32_t hw_depth = o.max_wr;
  if (o.multi_packet) {
    if (o.stride == 0 || o.fallback_slot_size < o.stride || o.fallback_slot_size % o.stride != 0) {
      return Status::InvalidArgument(
          "verbs: CreateSrq: fallback_slot_size must be a non-zero multiple of stride");
    }
    uint64_t want = static_cast<uint64_t>(o.max_wr) * kSlotsPerBufferBudget;
    if (dev->dev_attr.max_srq_wr > 0) {
      want = std::min<uint64_t>(want, static_cast<uint64_t>(dev->dev_attr.max_srq_wr));
    }
    hw_depth = static_cast<uint32_t>(std::min<uint64_t>(want, UINT32_MAX));
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      LOG_INFO("verbs", "multi-packet SRQ is not offered by libibverbs: using the fallback of "
                            << o.fallback_slot_size
                            << "-byte slots (one message per slot, offsets are slot offsets)");
    }
  }
  ibv_srq_init_attr attr{};
  attr.attr.max_wr = hw_depth;
  attr.attr.max_sge = 1;
  ibv_srq* srq = dev->api->CreateSrq(pd->pd(), &attr);
  if (srq == nullptr) return VerbsErrnoError("ibv_create_srq", errno);
  if (attr.attr.max_wr > hw_depth) hw_depth = attr.attr.max_wr;  // the device may round up
  return std::unique_ptr<VerbsSrq>(
      new VerbsSrq(dev, std::make_shared<SrqCore>(dev, srq, o, hw_depth)));
}

VerbsSrq::~VerbsSrq() {
  int rc = dev_->api->DestroySrq(core_->srq());
  if (rc != 0) LOG_WARN("verbs", VerbsError("ibv_destroy_srq", rc).ToString());
}

// ---- the fabric ---------------------------------------------------------------------------------

namespace {

class VerbsFabric final : public Fabric {
 public:
  explicit VerbsFabric(std::unique_ptr<DeviceCore> dev) : dev_(std::move(dev)) {}
  ~VerbsFabric() override {
    int rc = dev_->api->CloseDevice(dev_->ctx);
    if (rc != 0) LOG_WARN("verbs", VerbsError("ibv_close_device", rc).ToString());
  }
  std::string provider() const override { return "verbs"; }
  Capabilities capabilities() const override {
    Capabilities c;
    c.multi_packet_srq_native = false;
    c.atomics = dev_->dev_attr.atomic_cap != IBV_ATOMIC_NONE;
    c.max_inline = kDefaultMaxInline;
    c.max_message = dev_->port_attr.max_msg_sz;
    c.transports = {"tcp", "unix"};
    return c;
  }
  Result<std::unique_ptr<ProtectionDomain>> AllocPd() override {
    ASYMNVM_ASSIGN_OR_RETURN(auto pd, VerbsPd::Create(dev_.get()));
    return std::unique_ptr<ProtectionDomain>(std::move(pd));
  }
  Result<std::unique_ptr<CompletionQueue>> CreateCq(const CompletionQueueOptions& o) override {
    ASYMNVM_ASSIGN_OR_RETURN(auto cq, VerbsCq::Create(dev_.get(), o));
    return std::unique_ptr<CompletionQueue>(std::move(cq));
  }
  Result<std::unique_ptr<SharedReceiveQueue>> CreateSrq(ProtectionDomain* pd,
                                                        const SrqOptions& o) override {
    auto* vpd = dynamic_cast<VerbsPd*>(pd);
    if (vpd == nullptr) return Status::InvalidArgument("verbs: CreateSrq: not a verbs PD");
    ASYMNVM_ASSIGN_OR_RETURN(auto srq, VerbsSrq::Create(dev_.get(), vpd, o));
    return std::unique_ptr<SharedReceiveQueue>(std::move(srq));
  }
  Result<std::unique_ptr<Listener>> Listen(ProtectionDomain* pd,
                                           const std::string& address) override {
    auto* vpd = dynamic_cast<VerbsPd*>(pd);
    if (vpd == nullptr) return Status::InvalidArgument("verbs: Listen: not a verbs PD");
    return ListenVerbs(dev_.get(), vpd, address);
  }
  Result<std::unique_ptr<Connection>> Connect(ProtectionDomain* pd, const std::string& address,
                                              const ConnectionOptions& options) override {
    auto* vpd = dynamic_cast<VerbsPd*>(pd);
    if (vpd == nullptr) return Status::InvalidArgument("verbs: Connect: not a verbs PD");
    return ConnectVerbs(dev_.get(), vpd, address, options);
  }
  Counters counters() const override {
    Counters sum;
    MutexLock lk(dev_->mu);
    for (const auto& c : dev_->all_conns) sum += c->counters();
    return sum;
  }

 private:
  std::unique_ptr<DeviceCore> dev_;
};

}  // namespace

bool VerbsDeviceAvailable() {
  auto api = RealVerbs();
  int num = 0;
  ibv_device** list = api->GetDeviceList(&num);
  if (list == nullptr) return false;
  api->FreeDeviceList(list);
  return num > 0;
}

Result<std::unique_ptr<Fabric>> OpenVerbsFabric(const FabricOptions& options) {
  return OpenVerbsFabricWithApi(options, RealVerbs());
}

Result<std::unique_ptr<Fabric>> OpenVerbsFabricWithApi(const FabricOptions& options,
                                                       std::shared_ptr<VerbsApi> api) {
  if (api == nullptr) return Status::InvalidArgument("verbs: null VerbsApi");
  if (options.port == 0) return Status::InvalidArgument("verbs: port numbers start at 1");
  if (options.gid_index < 0) return Status::InvalidArgument("verbs: negative gid_index");

  int num = 0;
  errno = 0;
  ibv_device** list = api->GetDeviceList(&num);
  if (list == nullptr) {
    int err = errno;
    return Status(StatusCode::kNotSupported,
                  std::string("verbs: no RDMA device (ibv_get_device_list: ") +
                      (err != 0 ? std::strerror(err) : "returned NULL") + "); use --fabric soft",
                  err);
  }
  if (num <= 0) {
    api->FreeDeviceList(list);
    return Status::NotSupported(
        "verbs: no RDMA device (ibv_get_device_list: empty list); use --fabric soft");
  }
  ibv_device* device = nullptr;
  std::string name, seen;
  for (int i = 0; i < num && list[i] != nullptr; i++) {
    const char* n = api->GetDeviceName(list[i]);
    std::string s = n != nullptr ? n : "";
    if (options.device.empty() || options.device == s) {
      device = list[i];
      name = s;
      break;
    }
    seen += (seen.empty() ? "" : ", ") + s;
  }
  if (device == nullptr) {
    api->FreeDeviceList(list);
    return Status::InvalidArgument("verbs: no device named '" + options.device +
                                   "' (found: " + seen + ")");
  }
  ibv_context* ctx = api->OpenDevice(device);
  int open_err = errno;
  api->FreeDeviceList(list);
  if (ctx == nullptr) return VerbsErrnoError("ibv_open_device(" + name + ")", open_err);

  auto dev = std::make_unique<DeviceCore>();
  dev->api = api;
  dev->options = options;
  dev->device_name = name;
  dev->ctx = ctx;
  auto fail = [&](Status st) -> Status {
    int rc = api->CloseDevice(ctx);
    if (rc != 0) LOG_WARN("verbs", VerbsError("ibv_close_device", rc).ToString());
    return st;
  };
  int rc = api->QueryDevice(ctx, &dev->dev_attr);
  if (rc != 0) return fail(VerbsError("ibv_query_device(" + name + ")", rc));
  rc = api->QueryPort(ctx, options.port, &dev->port_attr);
  if (rc != 0) {
    return fail(
        VerbsError("ibv_query_port(" + name + ", " + std::to_string(options.port) + ")", rc));
  }
  if (dev->port_attr.state != IBV_PORT_ACTIVE) {
    return fail(Status::IoError("verbs: port " + std::to_string(options.port) + " of " + name +
                                " is not active (state " +
                                std::to_string(static_cast<int>(dev->port_attr.state)) + ")"));
  }
  if (dev->port_attr.gid_tbl_len > 0 && options.gid_index >= dev->port_attr.gid_tbl_len) {
    return fail(Status::InvalidArgument("verbs: gid_index " + std::to_string(options.gid_index) +
                                        " >= gid table length " +
                                        std::to_string(dev->port_attr.gid_tbl_len)));
  }
  rc = api->QueryGid(ctx, options.port, options.gid_index, &dev->gid);
  if (rc != 0) return fail(VerbsError("ibv_query_gid", rc));
  LOG_INFO("verbs", "opened " << name << " port " << int(options.port) << " (mtu "
                              << MtuBytes(dev->port_attr.active_mtu) << ")");
  return std::unique_ptr<Fabric>(new VerbsFabric(std::move(dev)));
}

}  // namespace asymnvm::fabric::verbs
