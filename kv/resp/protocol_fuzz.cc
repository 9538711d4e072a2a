// libFuzzer target for the RESP request parser: any byte string yields commands, rejections, a
// need-more prefix or one fatal error — never a crash, a read out of bounds or a hang — and
// feeding the same bytes split at every byte boundary (and one byte at a time) yields exactly the
// same events as feeding them at once.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "kv/resp/protocol.h"

namespace {

using asymnvm::kv::resp::ParserLimits;
using asymnvm::kv::resp::Request;
using asymnvm::kv::resp::RequestParser;

struct Event {
  RequestParser::Kind kind;
  std::vector<std::string> argv;
  std::string message;
  bool operator==(const Event& o) const {
    return kind == o.kind && argv == o.argv && message == o.message;
  }
};

// Small limits so that every limit is reached by short inputs.
ParserLimits FuzzLimits() {
  ParserLimits l;
  l.max_bulk_len = 64;
  l.max_array_len = 8;
  l.max_inline_len = 128;
  l.max_request_bytes = 256;
  return l;
}

void Drain(RequestParser& p, std::vector<Event>* events) {
  for (int guard = 0; guard < 1 << 20; ++guard) {
    Request r;
    auto k = p.Next(&r);
    if (k == RequestParser::Kind::kNeedMore) return;
    if (k == RequestParser::Kind::kCommand && r.argv.empty()) std::abort();
    if (k == RequestParser::Kind::kFatal) {
      if (events->empty() || events->back().kind != k) events->push_back({k, {}, p.message()});
      return;
    }
    events->push_back({k, r.argv, std::string()});
  }
  std::abort();  // Next() never stops returning events: a loop without progress
}

std::vector<Event> Feed(const uint8_t* data, size_t size, size_t split_every, size_t first_cut) {
  RequestParser p(FuzzLimits());
  std::vector<Event> events;
  size_t off = 0;
  if (first_cut > 0) {
    p.Append(reinterpret_cast<const char*>(data), first_cut);
    Drain(p, &events);
    off = first_cut;
  }
  while (off < size) {
    size_t n = std::min(split_every, size - off);
    p.Append(reinterpret_cast<const char*>(data) + off, n);
    Drain(p, &events);
    off += n;
  }
  Drain(p, &events);
  return events;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Exact-size heap copy so ASan flags any read past the end.
  std::vector<uint8_t> buf(data, data + size);
  auto whole = Feed(buf.data(), buf.size(), buf.size() + 1, 0);
  if (size > 2048) return 0;  // the split sweep is quadratic
  for (size_t cut = 1; cut < size; ++cut) {
    if (Feed(buf.data(), buf.size(), buf.size() + 1, cut) != whole) std::abort();
  }
  if (Feed(buf.data(), buf.size(), 1, 0) != whole) std::abort();
  return 0;
}
