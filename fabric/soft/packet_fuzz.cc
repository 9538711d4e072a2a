// libFuzzer target for the soft NIC's packet parser: any byte string must parse into complete
// packets, an incomplete prefix or a kProtocolError, never reading outside the input.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fabric/soft/packet.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace asymnvm::fabric::soft;
  // Exact-size heap copy so ASan flags any read past the end.
  std::vector<uint8_t> buf(data, data + size);
  size_t off = 0;
  while (off < buf.size()) {
    size_t consumed = 0;
    auto r = ParsePacket(buf.data() + off, buf.size() - off, &consumed);
    if (!r.ok()) break;
    if (!r->complete) {
      if (r->needed <= buf.size() - off) std::abort();  // claims more is needed than it has
      break;
    }
    if (consumed == 0 || consumed > buf.size() - off) std::abort();
    if (r->payload_len > 0) {
      if (r->payload < buf.data() + off ||
          r->payload + r->payload_len > buf.data() + off + consumed) {
        std::abort();
      }
      volatile uint8_t sink = r->payload[r->payload_len - 1];
      (void)sink;
    }
    off += consumed;
  }
  return 0;
}
