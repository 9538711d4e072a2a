// OQ wire and PM encodings shared by server, client and tests (byte layouts: doc/oq.md).
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "asymnvm/fabric.h"
#include "asymnvm/status.h"
#include "fabric/oq/oq.h"

namespace asymnvm::oq::wire {

inline constexpr uint8_t kVersion = 1;
inline constexpr uint8_t kFlagNilext = 1;

struct ResponseHeader {
  uint32_t size = 0;
  StatusCode code = StatusCode::kOk;
  StatusSubCode subcode = StatusSubCode::kNone;  // kNone in every OK response
  uint64_t seq = 0;
  uint32_t worker = 0;
};
// Appends a response (header + body) to *out. `body` is the handler's bytes, or the error message.
void EncodeResponse(const ResponseHeader& h, std::span<const uint8_t> body,
                    std::vector<uint8_t>* out);
// Errors: kCorruption (short, size beyond bytes, checksum, version, unknown status code or
// sub-code, a sub-code on an OK response).
Result<ResponseHeader> ValidateResponse(std::span<const uint8_t> bytes);

// The one codec of an error Status on this wire (every OQ service: the back-end, the KV server,
// the mirror). The header carries the code and sub-code, the body the message (at most
// kMaxErrorMessage bytes: longer ones are cut) as human context only: decisions are made on the
// code and sub-code. The retryable bit and errno stay on the server: a response proves the
// request landed, which "retryable" (never sent) would contradict.
inline constexpr size_t kMaxErrorMessage = 1024;
void EncodeErrorResponse(const Status& st, uint64_t seq, uint32_t worker,
                         std::vector<uint8_t>* out);  // st not OK
// The Status an error response (h.code != kOk, validated) carries: its code and sub-code, and
// "oq server: <message>".
Status DecodeErrorStatus(const ResponseHeader& h, std::span<const uint8_t> body);

// Handshake blobs (connection private data).
inline constexpr char kServerMagic[4] = {'O', 'Q', 'S', '1'};
inline constexpr char kClientMagic[4] = {'O', 'Q', 'C', '1'};
struct ServerHello {
  uint32_t worker = 0;
  ServerInfo info;
  fabric::RegionDescriptor flush_target;
  std::vector<std::string> addresses;  // one per worker
};
Result<std::vector<uint8_t>> EncodeServerHello(const ServerHello& h);  // kInvalidArgument > 1024 B
Result<ServerHello> DecodeServerHello(const std::vector<uint8_t>& b);  // kProtocolError
struct ClientHello {
  uint32_t worker = 0;
  uint64_t client_id = 0;
  uint32_t window = 0;
};
std::vector<uint8_t> EncodeClientHello(const ClientHello& h);
Result<ClientHello> DecodeClientHello(const std::vector<uint8_t>& b);  // kProtocolError

// Self-validating 8-byte PM word: 56-bit value, top byte = low byte of CRC32C of the low 7 bytes.
uint64_t EncodeWord(uint64_t value);
bool DecodeWord(uint64_t word, uint64_t* value);

// Queue position = (post_seq << 16) | slot, slot = offset / stride.
inline uint64_t Position(uint64_t post_seq, uint32_t slot) { return (post_seq << 16) | slot; }

}  // namespace asymnvm::oq::wire
