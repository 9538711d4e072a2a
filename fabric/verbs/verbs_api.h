// VerbsApi: the libibverbs calls the verbs provider makes, behind one virtual interface.
//
// The provider never calls libibverbs directly: it calls a VerbsApi. RealVerbsApi forwards each
// method to the libibverbs function of the same name (wrapping the static-inline ones such as
// ibv_post_send and ibv_poll_cq); tests inject a gMock double (mock_verbs_api.h) so every mapping
// and failure branch runs without an RDMA device.
//
// Conventions (as libibverbs): functions returning a pointer return nullptr on failure with errno
// set; functions returning int return 0 on success, otherwise an errno value (or -1 with errno
// set). PollCq returns the number of completions written (>= 0) or a negative value on error.
//
// Thread safety: as libibverbs (RealVerbsApi holds no state). Only fabric/verbs/ includes this
// header and <infiniband/verbs.h>.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace asymnvm::fabric::verbs {

class VerbsApi {
 public:
  virtual ~VerbsApi() = default;

  virtual ibv_device** GetDeviceList(int* num_devices) = 0;
  virtual void FreeDeviceList(ibv_device** list) = 0;
  virtual const char* GetDeviceName(ibv_device* device) = 0;
  virtual ibv_context* OpenDevice(ibv_device* device) = 0;
  virtual int CloseDevice(ibv_context* context) = 0;
  virtual int QueryDevice(ibv_context* context, ibv_device_attr* attr) = 0;
  virtual int QueryPort(ibv_context* context, uint8_t port, ibv_port_attr* attr) = 0;
  virtual int QueryGid(ibv_context* context, uint8_t port, int index, ibv_gid* gid) = 0;

  virtual ibv_pd* AllocPd(ibv_context* context) = 0;
  virtual int DeallocPd(ibv_pd* pd) = 0;
  virtual ibv_mr* RegMr(ibv_pd* pd, void* addr, size_t length, int access) = 0;
  virtual int DeregMr(ibv_mr* mr) = 0;

  virtual ibv_comp_channel* CreateCompChannel(ibv_context* context) = 0;
  virtual int DestroyCompChannel(ibv_comp_channel* channel) = 0;
  virtual ibv_cq* CreateCq(ibv_context* context, int cqe, void* cq_context,
                           ibv_comp_channel* channel, int comp_vector) = 0;
  virtual int DestroyCq(ibv_cq* cq) = 0;
  virtual int ReqNotifyCq(ibv_cq* cq, int solicited_only) = 0;
  virtual int GetCqEvent(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) = 0;
  virtual void AckCqEvents(ibv_cq* cq, unsigned int nevents) = 0;

  virtual ibv_srq* CreateSrq(ibv_pd* pd, ibv_srq_init_attr* attr) = 0;
  virtual int DestroySrq(ibv_srq* srq) = 0;
  virtual ibv_qp* CreateQp(ibv_pd* pd, ibv_qp_init_attr* attr) = 0;
  virtual int DestroyQp(ibv_qp* qp) = 0;
  virtual int ModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) = 0;

  virtual int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) = 0;
  virtual int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) = 0;
  virtual int PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) = 0;
  virtual int PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) = 0;
};

// Forwards every call to libibverbs.
class RealVerbsApi final : public VerbsApi {
 public:
  ibv_device** GetDeviceList(int* num_devices) override;
  void FreeDeviceList(ibv_device** list) override;
  const char* GetDeviceName(ibv_device* device) override;
  ibv_context* OpenDevice(ibv_device* device) override;
  int CloseDevice(ibv_context* context) override;
  int QueryDevice(ibv_context* context, ibv_device_attr* attr) override;
  int QueryPort(ibv_context* context, uint8_t port, ibv_port_attr* attr) override;
  int QueryGid(ibv_context* context, uint8_t port, int index, ibv_gid* gid) override;
  ibv_pd* AllocPd(ibv_context* context) override;
  int DeallocPd(ibv_pd* pd) override;
  ibv_mr* RegMr(ibv_pd* pd, void* addr, size_t length, int access) override;
  int DeregMr(ibv_mr* mr) override;
  ibv_comp_channel* CreateCompChannel(ibv_context* context) override;
  int DestroyCompChannel(ibv_comp_channel* channel) override;
  ibv_cq* CreateCq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel,
                   int comp_vector) override;
  int DestroyCq(ibv_cq* cq) override;
  int ReqNotifyCq(ibv_cq* cq, int solicited_only) override;
  int GetCqEvent(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) override;
  void AckCqEvents(ibv_cq* cq, unsigned int nevents) override;
  ibv_srq* CreateSrq(ibv_pd* pd, ibv_srq_init_attr* attr) override;
  int DestroySrq(ibv_srq* srq) override;
  ibv_qp* CreateQp(ibv_pd* pd, ibv_qp_init_attr* attr) override;
  int DestroyQp(ibv_qp* qp) override;
  int ModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) override;
  int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad_wr) override;
  int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) override;
  int PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad_wr) override;
  int PollCq(ibv_cq* cq, int num_entries, ibv_wc* wc) override;
};

// A process-wide RealVerbsApi.
std::shared_ptr<VerbsApi> RealVerbs();

}  // namespace asymnvm::fabric::verbs
