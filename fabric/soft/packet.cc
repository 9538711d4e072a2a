// Wire packet parser (doc/fabric.md §Wire protocol).
#include "fabric/soft/packet.h"

#include <string>

namespace asymnvm::fabric::soft {

Result<ParsedPacket> ParsePacket(const uint8_t* data, size_t len, size_t* consumed) {
  *consumed = 0;
  ParsedPacket p;
  if (len < 3) {
    if (len >= 1 && data[0] != kWireMagic) return Status::ProtocolError("packet: bad magic");
    if (len >= 2 && data[1] != kWireVersion) return Status::ProtocolError("packet: bad version");
    p.needed = 3;
    return p;
  }
  if (data[0] != kWireMagic) return Status::ProtocolError("packet: bad magic");
  if (data[1] != kWireVersion) return Status::ProtocolError("packet: bad version");
  p.opcode = data[2];
  size_t header = 0;
  switch (p.opcode) {
    case kWireWrite:
    case kWireRead:
    case kWireCompareSwap:
    case kWireFetchAdd:
    case kWireSend:
    case kWireFlush:
      header = kRequestHeaderSize;
      break;
    case kWireAck:
    case kWireReadResp:
    case kWireAtomicResp:
    case kWireNak:
    case kWireRnrNotice:
      header = kResponseHeaderSize;
      p.is_response = true;
      break;
    default:
      return Status::ProtocolError("packet: unknown opcode " + std::to_string(p.opcode));
  }
  if (len < header) {
    p.needed = header;
    return p;
  }
  p.seq = LoadLe32(data + 4);
  p.length = LoadLe32(data + 8);
  if (p.length > kMaxMessage) {
    return Status::ProtocolError("packet: length " + std::to_string(p.length) +
                                 " above the maximum message");
  }
  if (!p.is_response) {
    p.flags = data[3];
    if ((p.flags & ~kRequestFlagMask) != 0) {
      return Status::ProtocolError("packet: reserved flag bits set");
    }
    p.rkey = LoadLe32(data + 12);
    p.remote_addr = LoadLe64(data + 16);
    p.compare_add = LoadLe64(data + 24);
    p.swap = LoadLe64(data + 32);
    if (p.opcode == kWireWrite || p.opcode == kWireSend) p.payload_len = p.length;
  } else {
    p.reason = data[3];
    if (LoadLe32(data + 12) != 0) return Status::ProtocolError("packet: reserved bytes set");
    switch (p.opcode) {
      case kWireReadResp:
        p.payload_len = p.length;
        break;
      case kWireAtomicResp:
        if (p.length != 8) return Status::ProtocolError("packet: atomic response length != 8");
        p.payload_len = 8;
        break;
      case kWireNak:
        if (p.reason < kNakRnr || p.reason > kNakLength) {
          return Status::ProtocolError("packet: unknown NAK reason");
        }
        [[fallthrough]];
      default:
        if (p.length != 0) return Status::ProtocolError("packet: unexpected payload");
    }
    if (p.opcode != kWireNak && p.reason != 0) {
      return Status::ProtocolError("packet: reason byte set on a non-NAK");
    }
  }
  size_t total = header + p.payload_len;
  if (len < total) {
    p.needed = total;
    return p;
  }
  p.complete = true;
  p.payload = p.payload_len ? data + header : nullptr;
  *consumed = total;
  return p;
}

}  // namespace asymnvm::fabric::soft
