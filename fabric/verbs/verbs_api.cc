// RealVerbsApi: one-line forwards to libibverbs.
#include "fabric/verbs/verbs_api.h"

namespace asymnvm::fabric::verbs {

ibv_device** RealVerbsApi::GetDeviceList(int* n) { return ibv_get_device_list(n); }
void RealVerbsApi::FreeDeviceList(ibv_device** list) { ibv_free_device_list(list); }
const char* RealVerbsApi::GetDeviceName(ibv_device* d) { return ibv_get_device_name(d); }
ibv_context* RealVerbsApi::OpenDevice(ibv_device* d) { return ibv_open_device(d); }
int RealVerbsApi::CloseDevice(ibv_context* c) { return ibv_close_device(c); }
int RealVerbsApi::QueryDevice(ibv_context* c, ibv_device_attr* a) { return ibv_query_device(c, a); }
int RealVerbsApi::QueryPort(ibv_context* c, uint8_t port, ibv_port_attr* a) {
  return ibv_query_port(c, port, a);
}
int RealVerbsApi::QueryGid(ibv_context* c, uint8_t port, int index, ibv_gid* gid) {
  return ibv_query_gid(c, port, index, gid);
}
ibv_pd* RealVerbsApi::AllocPd(ibv_context* c) { return ibv_alloc_pd(c); }
int RealVerbsApi::DeallocPd(ibv_pd* pd) { return ibv_dealloc_pd(pd); }
ibv_mr* RealVerbsApi::RegMr(ibv_pd* pd, void* addr, size_t length, int access) {
  return ibv_reg_mr(pd, addr, length, access);
}
int RealVerbsApi::DeregMr(ibv_mr* mr) { return ibv_dereg_mr(mr); }
ibv_comp_channel* RealVerbsApi::CreateCompChannel(ibv_context* c) {
  return ibv_create_comp_channel(c);
}
int RealVerbsApi::DestroyCompChannel(ibv_comp_channel* ch) { return ibv_destroy_comp_channel(ch); }
ibv_cq* RealVerbsApi::CreateCq(ibv_context* c, int cqe, void* ctx, ibv_comp_channel* ch,
                               int vector) {
  return ibv_create_cq(c, cqe, ctx, ch, vector);
}
int RealVerbsApi::DestroyCq(ibv_cq* cq) { return ibv_destroy_cq(cq); }
int RealVerbsApi::ReqNotifyCq(ibv_cq* cq, int solicited_only) {
  return ibv_req_notify_cq(cq, solicited_only);
}
int RealVerbsApi::GetCqEvent(ibv_comp_channel* ch, ibv_cq** cq, void** ctx) {
  return ibv_get_cq_event(ch, cq, ctx);
}
void RealVerbsApi::AckCqEvents(ibv_cq* cq, unsigned int n) { ibv_ack_cq_events(cq, n); }
ibv_srq* RealVerbsApi::CreateSrq(ibv_pd* pd, ibv_srq_init_attr* a) { return ibv_create_srq(pd, a); }
int RealVerbsApi::DestroySrq(ibv_srq* srq) { return ibv_destroy_srq(srq); }
ibv_qp* RealVerbsApi::CreateQp(ibv_pd* pd, ibv_qp_init_attr* a) { return ibv_create_qp(pd, a); }
int RealVerbsApi::DestroyQp(ibv_qp* qp) { return ibv_destroy_qp(qp); }
int RealVerbsApi::ModifyQp(ibv_qp* qp, ibv_qp_attr* a, int mask) {
  return ibv_modify_qp(qp, a, mask);
}
int RealVerbsApi::PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  return ibv_post_send(qp, wr, bad);
}
int RealVerbsApi::PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  return ibv_post_recv(qp, wr, bad);
}
int RealVerbsApi::PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  return ibv_post_srq_recv(srq, wr, bad);
}
int RealVerbsApi::PollCq(ibv_cq* cq, int n, ibv_wc* wc) { return ibv_poll_cq(cq, n, wc); }

std::shared_ptr<VerbsApi> RealVerbs() {
  static const std::shared_ptr<VerbsApi> api = std::make_shared<RealVerbsApi>();
  return api;
}

}  // namespace asymnvm::fabric::verbs
