// The verbs provider's connection set-up: QP creation, the INIT → RTR → RTS transitions, the
// parameter blob exchanged through the authenticated bootstrap channel (fabric/bootstrap.h), and
// the Listener.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/logging.h"
#include "fabric/bootstrap.h"
#include "fabric/verbs/verbs_internal.h"

namespace asymnvm::fabric::verbs {
namespace {

void PutLe(std::vector<uint8_t>* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; i++) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint64_t GetLe(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; i++) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

}  // namespace

// ---- blob ---------------------------------------------------------------------------------------

std::vector<uint8_t> EncodeQpInfo(const QpInfo& info) {
  std::vector<uint8_t> out;
  out.reserve(kBlobHeader + info.private_data.size());
  PutLe(&out, kBlobMagic, 4);
  PutLe(&out, info.qpn, 4);
  PutLe(&out, info.psn, 4);
  PutLe(&out, info.lid, 2);
  out.push_back(info.mtu);
  out.push_back(info.port);
  out.insert(out.end(), info.gid.raw, info.gid.raw + 16);
  PutLe(&out, info.private_data.size(), 4);
  out.insert(out.end(), info.private_data.begin(), info.private_data.end());
  return out;
}

Result<QpInfo> DecodeQpInfo(std::span<const uint8_t> blob) {
  if (blob.size() < kBlobHeader) {
    return Status::ProtocolError("verbs: peer parameters truncated (" +
                                 std::to_string(blob.size()) + " bytes)");
  }
  const uint8_t* p = blob.data();
  if (GetLe(p, 4) != kBlobMagic) return Status::ProtocolError("verbs: peer parameters: bad magic");
  QpInfo info;
  info.qpn = static_cast<uint32_t>(GetLe(p + 4, 4));
  info.psn = static_cast<uint32_t>(GetLe(p + 8, 4));
  info.lid = static_cast<uint16_t>(GetLe(p + 12, 2));
  info.mtu = p[14];
  info.port = p[15];
  std::memcpy(info.gid.raw, p + 16, 16);
  uint64_t pd_len = GetLe(p + 32, 4);
  if ((info.qpn >> 24) != 0 || (info.psn >> 24) != 0) {
    return Status::ProtocolError("verbs: peer parameters: QPN/PSN wider than 24 bits");
  }
  if (info.mtu < IBV_MTU_256 || info.mtu > IBV_MTU_4096) {
    return Status::ProtocolError("verbs: peer parameters: bad MTU code");
  }
  if (pd_len > kMaxPrivateData || kBlobHeader + pd_len != blob.size()) {
    return Status::ProtocolError("verbs: peer parameters: private data length mismatch");
  }
  info.private_data.assign(p + kBlobHeader, p + kBlobHeader + pd_len);
  return info;
}

// ---- QP transitions -----------------------------------------------------------------------------

ibv_qp_attr BuildInitAttr(const DeviceCore& dev, int* mask) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = dev.options.port;
  a.qp_access_flags = IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
  *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  return a;
}

ibv_qp_attr BuildRtrAttr(const DeviceCore& dev, const QpInfo& local, const QpInfo& peer,
                         const ConnectionOptions& options, int* mask) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = static_cast<ibv_mtu>(std::min(local.mtu, peer.mtu));
  a.dest_qp_num = peer.qpn;
  a.rq_psn = peer.psn;
  a.max_dest_rd_atomic = static_cast<uint8_t>(
      std::clamp(dev.dev_attr.max_qp_rd_atom, 1, static_cast<int>(kMaxRdAtomic)));
  a.min_rnr_timer = RnrTimerCode(options.rnr_backoff);
  a.ah_attr.dlid = peer.lid;
  a.ah_attr.sl = 0;
  a.ah_attr.src_path_bits = 0;
  a.ah_attr.port_num = dev.options.port;
  // RoCE needs a GRH; InfiniBand within a subnet routes by LID.
  if (dev.port_attr.link_layer == IBV_LINK_LAYER_ETHERNET || peer.lid == 0) {
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = peer.gid;
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(dev.options.gid_index);
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.grh.traffic_class = 0;
    a.ah_attr.grh.flow_label = 0;
  }
  *mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  return a;
}

ibv_qp_attr BuildRtsAttr(const DeviceCore& dev, const QpInfo& local,
                         const ConnectionOptions& options, int* mask) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = local.psn;
  a.timeout = kQpAckTimeout;
  a.retry_cnt = kQpRetryCount;
  a.rnr_retry = static_cast<uint8_t>(std::min(options.rnr_retry, kMaxRnrRetry));
  a.max_rd_atomic = static_cast<uint8_t>(
      std::clamp(dev.dev_attr.max_qp_init_rd_atom, 1, static_cast<int>(kMaxRdAtomic)));
  *mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
          IBV_QP_MAX_QP_RD_ATOMIC;
  return a;
}

// ---- ConnCore set-up ----------------------------------------------------------------------------

ConnCore::ConnCore(DeviceCore* dev, VerbsPd* pd, ibv_qp* qp, const ConnectionOptions& o)
    : dev_(dev),
      pd_(pd),
      qp_(qp),
      id_(dev->next_conn_id.fetch_add(1)),
      send_cq_(static_cast<VerbsCq*>(o.send_cq)),
      recv_cq_(static_cast<VerbsCq*>(o.recv_cq)),
      max_send_wr_(o.max_send_wr),
      max_recv_wr_(o.srq != nullptr ? 0 : o.max_recv_wr),
      max_inline_(o.max_inline) {
  if (o.srq != nullptr) srq_ = static_cast<VerbsSrq*>(o.srq)->core();
}

Result<std::shared_ptr<ConnCore>> ConnCore::Create(DeviceCore* dev, VerbsPd* pd,
                                                   const ConnectionOptions& o) {
  if (o.send_cq == nullptr) return Status::InvalidArgument("verbs: send_cq is required");
  auto* send_cq = dynamic_cast<VerbsCq*>(o.send_cq);
  auto* recv_cq = o.recv_cq != nullptr ? dynamic_cast<VerbsCq*>(o.recv_cq) : nullptr;
  if (send_cq == nullptr || (o.recv_cq != nullptr && recv_cq == nullptr)) {
    return Status::InvalidArgument("verbs: completion queues must come from the verbs fabric");
  }
  VerbsSrq* srq = nullptr;
  if (o.srq != nullptr) {
    srq = dynamic_cast<VerbsSrq*>(o.srq);
    if (srq == nullptr)
      return Status::InvalidArgument("verbs: SRQ must come from the verbs fabric");
    if (recv_cq == nullptr) return Status::InvalidArgument("verbs: an SRQ needs a recv_cq");
  }
  if (o.max_send_wr == 0) return Status::InvalidArgument("verbs: max_send_wr 0");
  if (o.private_data.size() > kMaxPrivateData) {
    return Status::InvalidArgument("verbs: private_data larger than 1024 bytes");
  }
  ibv_qp_init_attr init{};
  init.send_cq = send_cq->cq();
  init.recv_cq = recv_cq != nullptr ? recv_cq->cq() : send_cq->cq();
  init.srq = srq != nullptr ? srq->core()->srq() : nullptr;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;
  init.cap.max_send_wr = o.max_send_wr;
  init.cap.max_recv_wr = (srq != nullptr || recv_cq == nullptr) ? 0 : o.max_recv_wr;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.cap.max_inline_data = o.max_inline;
  ibv_qp* qp = dev->api->CreateQp(pd->pd(), &init);
  if (qp == nullptr) return VerbsErrnoError("ibv_create_qp", errno);

  int mask = 0;
  ibv_qp_attr attr = BuildInitAttr(*dev, &mask);
  int rc = dev->api->ModifyQp(qp, &attr, mask);
  if (rc != 0) {
    Status st = VerbsError("ibv_modify_qp(INIT)", rc);
    int drc = dev->api->DestroyQp(qp);
    if (drc != 0) LOG_WARN("verbs", VerbsError("ibv_destroy_qp", drc).ToString());
    return st;
  }
  ConnectionOptions eff = o;
  if (recv_cq == nullptr) eff.max_recv_wr = 0;
  auto core = std::make_shared<ConnCore>(dev, pd, qp, eff);
  core->max_inline_ = std::min(o.max_inline, init.cap.max_inline_data);
  core->local_.qpn = qp->qp_num;
  core->local_.psn = dev->RandomPsn();
  core->local_.lid = dev->port_attr.lid;
  core->local_.mtu = static_cast<uint8_t>(dev->port_attr.active_mtu);
  core->local_.port = dev->options.port;
  core->local_.gid = dev->gid;
  core->local_.private_data = o.private_data;
  return core;
}

Status ConnCore::Establish(int fd, bool server, const std::string& peer_address,
                           const ConnectionOptions& o) {
  auto fail = [&](Status st) { return Abort(std::move(st)); };
  std::vector<uint8_t> mine = EncodeQpInfo(local_);
  std::vector<uint8_t> theirs;
  const std::string& secret = dev_->options.cluster_secret;
  Status st = server ? HandshakeServer(fd, secret, mine, &theirs, o.timeout)
                     : HandshakeClient(fd, secret, mine, &theirs, o.timeout);
  if (!st.ok()) return fail(st.WithContext("verbs: handshake"));
  auto peer = DecodeQpInfo(theirs);
  if (!peer.ok()) return fail(peer.status());

  int mask = 0;
  ibv_qp_attr attr = BuildRtrAttr(*dev_, local_, *peer, o, &mask);
  int rc = dev_->api->ModifyQp(qp_, &attr, mask);
  if (rc != 0) return fail(VerbsError("ibv_modify_qp(RTR)", rc));
  attr = BuildRtsAttr(*dev_, local_, o, &mask);
  rc = dev_->api->ModifyQp(qp_, &attr, mask);
  if (rc != 0) return fail(VerbsError("ibv_modify_qp(RTS)", rc));

  // Both sides are at RTS before either posts: exchange one byte.
  auto deadline = std::chrono::steady_clock::now() + o.timeout;
  const uint8_t ready = 'R';
  uint8_t peer_ready = 0;
  st = WriteFull(fd, &ready, 1, deadline);
  if (st.ok()) st = ReadFull(fd, &peer_ready, 1, deadline);
  if (st.ok() && peer_ready != ready) st = Status::ProtocolError("bad ready byte");
  if (!st.ok()) return fail(st.WithContext("verbs: ready exchange"));

  mtu_bytes_ = MtuBytes(static_cast<ibv_mtu>(std::min(local_.mtu, peer->mtu)));
  peer_private_data_ = std::move(peer->private_data);
  peer_address_ = peer_address;
  return Status::Ok();
}

Status ConnCore::Abort(Status st) {
  int rc = dev_->api->DestroyQp(qp_);
  if (rc != 0) LOG_WARN("verbs", VerbsError("ibv_destroy_qp", rc).ToString());
  MutexLock lk(mu_);
  state_ = ConnectionState::kClosed;
  return st;
}

// ---- Listener and Connect -----------------------------------------------------------------------

namespace {

std::string PeerOf(int fd, const Endpoint& bound) {
  if (bound.kind != Endpoint::Kind::kTcp) return FormatAddress(bound);
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "tcp://?";
  char host[INET6_ADDRSTRLEN] = {};
  Endpoint ep;
  ep.kind = Endpoint::Kind::kTcp;
  if (ss.ss_family == AF_INET) {
    auto* in = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
    ep.port = ntohs(in->sin_port);
  } else {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    ep.port = ntohs(in6->sin6_port);
  }
  ep.host = host;
  return FormatAddress(ep);
}

Result<Endpoint> ParseVerbsAddress(const std::string& address) {
  ASYMNVM_ASSIGN_OR_RETURN(Endpoint ep, ParseAddress(address));
  if (ep.kind == Endpoint::Kind::kInproc) {
    return Status::NotSupported("verbs: inproc:// addresses are soft-provider only (" + address +
                                "); use tcp:// or unix://");
  }
  return ep;
}

class VerbsListener final : public Listener {
 public:
  VerbsListener(DeviceCore* dev, VerbsPd* pd, int fd, Endpoint bound)
      : dev_(dev), pd_(pd), fd_(fd), bound_(std::move(bound)) {}
  ~VerbsListener() override {
    ::close(fd_);
    if (bound_.kind == Endpoint::Kind::kUnix) ::unlink(bound_.path.c_str());
  }
  std::string address() const override { return FormatAddress(bound_); }
  Result<std::unique_ptr<Connection>> Accept(const ConnectionOptions& options) override {
    ASYMNVM_ASSIGN_OR_RETURN(int fd, AcceptSocket(fd_, options.timeout));
    auto core = ConnCore::Create(dev_, pd_, options);
    if (!core.ok()) {
      ::close(fd);
      return core.status();
    }
    Status st = (*core)->Establish(fd, /*server=*/true, PeerOf(fd, bound_), options);
    ::close(fd);
    if (!st.ok()) return st;
    dev_->Register(*core);
    return std::unique_ptr<Connection>(new VerbsConnection(std::move(*core)));
  }

 private:
  DeviceCore* dev_;
  VerbsPd* pd_;
  int fd_;
  Endpoint bound_;
};

}  // namespace

Result<std::unique_ptr<Listener>> ListenVerbs(DeviceCore* dev, VerbsPd* pd,
                                              const std::string& address) {
  ASYMNVM_ASSIGN_OR_RETURN(Endpoint ep, ParseVerbsAddress(address));
  Endpoint bound;
  ASYMNVM_ASSIGN_OR_RETURN(int fd, ListenSocket(ep, &bound));
  return std::unique_ptr<Listener>(new VerbsListener(dev, pd, fd, std::move(bound)));
}

Result<std::unique_ptr<Connection>> ConnectVerbs(DeviceCore* dev, VerbsPd* pd,
                                                 const std::string& address,
                                                 const ConnectionOptions& options) {
  ASYMNVM_ASSIGN_OR_RETURN(Endpoint ep, ParseVerbsAddress(address));
  ASYMNVM_ASSIGN_OR_RETURN(auto core, ConnCore::Create(dev, pd, options));
  auto fd = ConnectSocket(ep, options.timeout);
  if (!fd.ok()) return core->Abort(fd.status().WithContext("verbs: connect " + address));
  Status st = core->Establish(*fd, /*server=*/false, address, options);
  ::close(*fd);
  if (!st.ok()) return st;
  dev->Register(core);
  return std::unique_ptr<Connection>(new VerbsConnection(std::move(core)));
}

}  // namespace asymnvm::fabric::verbs
