// API glue shared by every provider: descriptor wire form, counters, names.
#include <cstdlib>
#include <cstring>
#include <thread>

#include "asymnvm/fabric.h"
#include "common/coding.h"

namespace asymnvm::fabric {

std::chrono::microseconds DefaultSpin() {
  static const std::chrono::microseconds value = [] {
    if (const char* env = std::getenv("ASYMNVM_SPIN_US")) {
      char* end = nullptr;
      long v = std::strtol(env, &end, 10);
      if (end != env && *end == '\0' && v >= 0 && v <= 1000000) return std::chrono::microseconds(v);
    }
    return std::chrono::microseconds(std::thread::hardware_concurrency() >= 4 ? 50 : 0);
  }();
  return value;
}

// Layout (doc/fabric.md §Region descriptor): addr u64 | length u64 | rkey u32 | access u32 | tag
// u64.
void RegionDescriptor::EncodeTo(uint8_t* out) const {
  PutLe64(out, addr);
  PutLe64(out + 8, length);
  PutLe32(out + 16, rkey);
  PutLe32(out + 20, access);
  PutLe64(out + 24, tag);
}

Result<RegionDescriptor> RegionDescriptor::Decode(const uint8_t* data, size_t len) {
  if (data == nullptr || len < kEncodedSize) {
    return Status::Corruption("region descriptor: " + std::to_string(len) + " bytes, need " +
                              std::to_string(kEncodedSize));
  }
  RegionDescriptor d;
  d.addr = GetLe64(data);
  d.length = GetLe64(data + 8);
  d.rkey = GetLe32(data + 16);
  d.access = GetLe32(data + 20);
  d.tag = GetLe64(data + 24);
  if ((d.access & ~static_cast<uint32_t>(kAllRemote)) != 0) {
    return Status::Corruption("region descriptor: unknown access bits");
  }
  if (d.length == 0 || d.addr + d.length < d.addr) {
    return Status::Corruption("region descriptor: empty or wrapping range");
  }
  return d;
}

Counters& Counters::operator+=(const Counters& o) {
  writes += o.writes;
  reads += o.reads;
  compare_swaps += o.compare_swaps;
  fetch_adds += o.fetch_adds;
  sends += o.sends;
  flushes += o.flushes;
  recvs += o.recvs;
  round_trips += o.round_trips;
  bytes_out += o.bytes_out;
  bytes_in += o.bytes_in;
  payload_bytes += o.payload_bytes;
  rnr_events += o.rnr_events;
  errors += o.errors;
  remote_ops_served += o.remote_ops_served;
  return *this;
}

Counters Counters::operator-(const Counters& o) const {
  Counters r = *this;
  r.writes -= o.writes;
  r.reads -= o.reads;
  r.compare_swaps -= o.compare_swaps;
  r.fetch_adds -= o.fetch_adds;
  r.sends -= o.sends;
  r.flushes -= o.flushes;
  r.recvs -= o.recvs;
  r.round_trips -= o.round_trips;
  r.bytes_out -= o.bytes_out;
  r.bytes_in -= o.bytes_in;
  r.payload_bytes -= o.payload_bytes;
  r.rnr_events -= o.rnr_events;
  r.errors -= o.errors;
  r.remote_ops_served -= o.remote_ops_served;
  return r;
}

const char* OpcodeName(Opcode op) {
  switch (op) {
    case Opcode::kWrite:
      return "WRITE";
    case Opcode::kRead:
      return "READ";
    case Opcode::kCompareSwap:
      return "CAS";
    case Opcode::kFetchAdd:
      return "FAA";
    case Opcode::kSend:
      return "SEND";
    case Opcode::kFlush:
      return "FLUSH";
    case Opcode::kRecv:
      return "RECV";
  }
  return "UNKNOWN";
}

const char* CompletionStatusName(CompletionStatus s) {
  switch (s) {
    case CompletionStatus::kSuccess:
      return "success";
    case CompletionStatus::kLocalProtectionError:
      return "local protection error";
    case CompletionStatus::kLocalLengthError:
      return "local length error";
    case CompletionStatus::kRemoteAccessError:
      return "remote access error";
    case CompletionStatus::kRemoteInvalidRequest:
      return "remote invalid request";
    case CompletionStatus::kRnrRetryExceeded:
      return "RNR retry exceeded";
    case CompletionStatus::kTransportError:
      return "transport error";
    case CompletionStatus::kFlushed:
      return "flushed";
    case CompletionStatus::kGeneralError:
      return "general error";
  }
  return "unknown";
}

}  // namespace asymnvm::fabric
