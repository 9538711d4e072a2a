// The soft NIC's direct-path hooks: how the shm provider (fabric/shm/, doc/fabric.md §shm) rides on
// the soft NIC. The soft NIC keeps the handshake, SEND/RECV, the error states and every request the
// direct path declines; an Extension adds, per connection, a DirectConn that executes one-sided
// requests with the initiator's own loads, stores and atomics on memory the peer shared with it.
//
// Ordering: ConnCore::Post offers a request to the DirectConn only when nothing of the connection
// is outstanding ahead of it (its send ring is empty), so a request executed directly never
// overtakes one still travelling through the channel; completions stay in posting order.
// Thread safety: a DirectConn is called with its connection's send lock held (one caller at a
// time); Extension methods may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "asymnvm/fabric.h"

namespace asymnvm::pm {
class Persister;
}

namespace asymnvm::fabric::soft {

namespace internal {
// The soft NIC's DMA copy (fabric/soft/soft_internal.h): the direct path copies through it too, so
// its copies — concurrent with the target's CPU by design, as a NIC's — share the one
// ThreadSanitizer suppression (tests/tsan.supp).
void DmaCopy(void* dst, const void* src, size_t len);
}  // namespace internal

class DirectConn {
 public:
  virtual ~DirectConn() = default;
  // Executes `w` (already validated by Post: opcode, local buffer) directly, or returns false to
  // send it through the channel (unknown or revoked rkey, outside the grant, missing right,
  // misaligned atomic: the target then rejects it as on any provider). kFlush: persists what this
  // DirectConn wrote (always), and returns true only when `channel_dirty` is false (nothing landed
  // at the target through the channel since its last FLUSH). On true, *byte_len is the
  // completion's byte_len.
  virtual bool Execute(const WorkRequest& w, bool channel_dirty, uint32_t* byte_len) = 0;
};

class Extension {
 public:
  virtual ~Extension() = default;
  virtual std::string provider() const = 0;
  // Region (de)registration of this fabric (key = lkey = rkey).
  virtual void OnRegister(uint64_t pd_id, uint32_t key, void* addr, size_t length, uint32_t access,
                          pm::Persister* persister) = 0;
  virtual void OnDeregister(uint32_t key) = 0;
  // Bytes this side offers in the handshake for a connection of protection domain `pd_id`.
  virtual std::vector<uint8_t> Offer(uint64_t pd_id) = 0;
  // The direct path of a new connection given the peer's offer (empty when the peer is a plain
  // soft NIC); null when none can be had (another host, refused): then everything uses the
  // channel.
  virtual std::unique_ptr<DirectConn> Connect(std::span<const uint8_t> peer_offer) = 0;
};

}  // namespace asymnvm::fabric::soft
