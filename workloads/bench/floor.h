// The floor the fabric is compared against: a plain lock-step ping-pong between two threads of
// this process over the same transport, with no fabric logic at all.
//
//   tcp     127.0.0.1 stream socket, TCP_NODELAY, blocking read/write
//   unix    AF_UNIX stream socket (a path in /tmp), blocking read/write
//   inproc  a mutex + condition variable hand-off; the payload is memcpy'd into a shared buffer
//
// Each operation moves `size` payload bytes from the client to the server and an 8-byte reply back:
// one round trip carrying the payload, the least any one-round-trip fabric operation of that size
// can cost. Thread safety: each call owns its threads and sockets.
#pragma once

#include <cstdint>
#include <string>

#include "asymnvm/status.h"
#include "workloads/bench/latency.h"

namespace asymnvm::bench {

inline constexpr uint32_t kFloorReplyBytes = 8;

// transport: "tcp" | "unix" | "inproc". Errors: kInvalidArgument, kIoError.
Result<Measurement> RunFloor(const std::string& transport, uint32_t size, const Budget& budget);

}  // namespace asymnvm::bench
