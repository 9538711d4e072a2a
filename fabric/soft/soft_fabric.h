// The soft provider: a software RDMA NIC (doc/fabric.md).
//
// Each Fabric returned by OpenSoftFabric is one NIC: options.nic_threads worker threads that own
// the Fabric's registered memory and every connection's byte stream. Only NIC threads execute a
// peer's one-sided operations; application threads only post requests (writing their request
// packets to the transport themselves — the "inline doorbell") and poll completion queues.
// Transports: tcp://, unix:// (stream sockets, HMAC-authenticated handshake from
// fabric/bootstrap.h) and inproc:// (same process; in-memory byte pipes woken by eventfds).
//
// Thread safety: as include/asymnvm/fabric.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "asymnvm/fabric.h"
#include "fabric/soft/direct.h"

namespace asymnvm::fabric::soft {

// Errors: kInvalidArgument (nic_threads == 0 or > 64), kIoError (epoll/eventfd creation failed).
Result<std::unique_ptr<Fabric>> OpenSoftFabric(const FabricOptions& options);
// The soft NIC with a direct path (fabric/soft/direct.h): what the shm provider opens.
Result<std::unique_ptr<Fabric>> OpenSoftFabric(const FabricOptions& options,
                                               std::shared_ptr<Extension> extension);

// The blob each side sends in the bootstrap handshake (doc/fabric.md §Handshake blob). Exposed
// so tests can speak the wire protocol from a raw socket.
struct ConnParams {
  static constexpr uint32_t kMagic = 0x54464F53;  // "SOFT"
  uint32_t rnr_retry = 7;
  uint32_t rnr_backoff_us = 50;
  uint32_t max_message = 0;
  std::vector<uint8_t> private_data;
  // The direct-path offer (Extension::Offer; <= kMaxOffer bytes), after the private data as a
  // 4-byte length and the bytes; absent (empty) from a plain soft NIC.
  std::vector<uint8_t> offer;
  static constexpr size_t kMaxOffer = 1024;

  std::vector<uint8_t> Encode() const;
  // Errors: kProtocolError (bad magic, truncated, private data > 1024 bytes, offer too long).
  static Result<ConnParams> Decode(std::span<const uint8_t> blob);
};

}  // namespace asymnvm::fabric::soft
