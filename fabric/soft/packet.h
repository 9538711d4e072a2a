// The soft NIC's wire packets (byte layouts: doc/fabric.md §Wire protocol).
//
// Every packet starts with a 2-byte magic/version (0xA7, 0x01) and an opcode byte. Requests carry
// a fixed 40-byte header followed, for WRITE and SEND, by `length` payload bytes. Responses carry
// a fixed 16-byte header followed by `length` payload bytes (READ data, an atomic's original
// value). All integers are little-endian.
//
// ParsePacket is a pure function: it never reads outside [data, data + len) and never allocates.
// Thread safety: all functions are reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "asymnvm/status.h"

namespace asymnvm::fabric::soft {

inline constexpr uint8_t kWireMagic = 0xA7;
inline constexpr uint8_t kWireVersion = 0x01;
inline constexpr size_t kRequestHeaderSize = 40;
inline constexpr size_t kResponseHeaderSize = 16;
// Largest WRITE/READ/SEND length one request may carry (Capabilities::max_message).
inline constexpr uint32_t kMaxMessage = 16u << 20;

// Request opcodes equal fabric::Opcode values; response opcodes have the high bit set.
enum WireOp : uint8_t {
  kWireWrite = 1,
  kWireRead = 2,
  kWireCompareSwap = 3,
  kWireFetchAdd = 4,
  kWireSend = 5,
  kWireFlush = 6,
  kWireAck = 0x81,         // cumulative: this seq and every earlier one succeeded
  kWireReadResp = 0x82,    // payload: the bytes read
  kWireAtomicResp = 0x83,  // payload: the 8-byte original value
  kWireNak = 0x84,         // reason byte says why; the connection is then in error
  kWireRnrNotice = 0x85,   // informational: seq found no receive buffer, target retries
};

enum RequestFlags : uint8_t {
  kFlagSignaled = 1u << 0,
  kFlagNeedsAck = 1u << 1,
  kRequestFlagMask = kFlagSignaled | kFlagNeedsAck,
};

enum NakReason : uint8_t {
  kNakRnr = 1,      // receiver not ready after all retries → kRnrRetryExceeded
  kNakAccess = 2,   // bad rkey, bounds, rights → kRemoteAccessError
  kNakInvalid = 3,  // malformed, bad opcode, misaligned atomic → kRemoteInvalidRequest
  kNakLength = 4,   // message longer than the receive buffer → kRemoteInvalidRequest
};

struct ParsedPacket {
  bool complete = false;  // false: need `needed` bytes in total before parsing succeeds
  size_t needed = 0;
  bool is_response = false;
  uint8_t opcode = 0;
  uint8_t flags = 0;   // requests
  uint8_t reason = 0;  // NAK
  uint32_t seq = 0;
  uint32_t length = 0;
  uint32_t rkey = 0;
  uint64_t remote_addr = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  const uint8_t* payload = nullptr;  // points into the input; payload_len bytes
  uint32_t payload_len = 0;
};

// Parses one packet from the front of [data, data + len).
//  * complete packet: returns it with complete = true and *consumed = its size;
//  * a valid but incomplete prefix: complete = false, needed = bytes required, *consumed = 0;
//  * malformed (bad magic/version, unknown opcode, reserved bits, length above kMaxMessage or
//    inconsistent with the opcode): kProtocolError.
Result<ParsedPacket> ParsePacket(const uint8_t* data, size_t len, size_t* consumed);

inline void StoreLe16(uint8_t* p, uint16_t v) {
  p[0] = static_cast<uint8_t>(v);
  p[1] = static_cast<uint8_t>(v >> 8);
}
inline void StoreLe32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void StoreLe64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint32_t LoadLe32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}
inline uint64_t LoadLe64(const uint8_t* p) {
  return static_cast<uint64_t>(LoadLe32(p)) | static_cast<uint64_t>(LoadLe32(p + 4)) << 32;
}

// Writes a kRequestHeaderSize-byte request header.
inline void EncodeRequestHeader(uint8_t* out, uint8_t opcode, uint8_t flags, uint32_t seq,
                                uint32_t length, uint32_t rkey, uint64_t remote_addr,
                                uint64_t compare_add, uint64_t swap) {
  out[0] = kWireMagic;
  out[1] = kWireVersion;
  out[2] = opcode;
  out[3] = flags;
  StoreLe32(out + 4, seq);
  StoreLe32(out + 8, length);
  StoreLe32(out + 12, rkey);
  StoreLe64(out + 16, remote_addr);
  StoreLe64(out + 24, compare_add);
  StoreLe64(out + 32, swap);
}

// Writes a kResponseHeaderSize-byte response header; `length` payload bytes must follow.
inline void EncodeResponseHeader(uint8_t* out, uint8_t opcode, uint8_t reason, uint32_t seq,
                                 uint32_t length) {
  out[0] = kWireMagic;
  out[1] = kWireVersion;
  out[2] = opcode;
  out[3] = reason;
  StoreLe32(out + 4, seq);
  StoreLe32(out + 8, length);
  StoreLe32(out + 12, 0);
}

}  // namespace asymnvm::fabric::soft
