// Small PM-layer helpers: persist-mode names, sizes, UUID text, the DRAM persister.
#include <cctype>
#include <cstdio>
#include <string>

#include "asymnvm/pm.h"

namespace asymnvm::pm {
namespace {

class NoopPersister final : public Persister {
 public:
  void Flush(const void*, size_t) override {}
  void Drain() override {}
};

}  // namespace

const char* PersistModeName(PersistMode mode) {
  switch (mode) {
    case PersistMode::kAuto:
      return "auto";
    case PersistMode::kMsync:
      return "msync";
    case PersistMode::kFlushOnly:
      return "flush";
  }
  return "unknown";
}

Result<PersistMode> ParsePersistMode(const std::string& name) {
  if (name == "auto") return PersistMode::kAuto;
  if (name == "msync") return PersistMode::kMsync;
  if (name == "flush" || name == "flush-only") return PersistMode::kFlushOnly;
  return Status::InvalidArgument("unknown persist mode '" + name +
                                 "' (expected auto, msync or flush)");
}

Persister* DramPersister() {
  static NoopPersister persister;
  return &persister;
}

std::string UuidToString(const std::array<uint8_t, 16>& uuid) {
  std::string s;
  s.reserve(36);
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < uuid.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s.push_back('-');
    s.push_back(kHex[uuid[i] >> 4]);
    s.push_back(kHex[uuid[i] & 0xf]);
  }
  return s;
}

Result<std::array<uint8_t, 16>> UuidFromString(std::string_view text) {
  auto bad = [&] { return Status::InvalidArgument("not a uuid: '" + std::string(text) + "'"); };
  if (text.size() != 36) return bad();
  std::array<uint8_t, 16> out{};
  size_t j = 0;
  for (size_t i = 0; i < text.size(); i++) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (text[i] != '-') return bad();
      continue;
    }
    const char c = text[i];
    int v;
    if (c >= '0' && c <= '9') {
      v = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      v = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      v = c - 'A' + 10;
    } else {
      return bad();
    }
    out[j / 2] = static_cast<uint8_t>(j % 2 == 0 ? v << 4 : out[j / 2] | v);
    j++;
  }
  return out;
}

Result<uint64_t> ParseSize(const std::string& text) {
  auto bad = [&](const char* why) {
    return Status::InvalidArgument("invalid size '" + text + "': " + why);
  };
  if (text.empty()) return bad("empty");
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (value > (UINT64_MAX - digit) / 10) return bad("too large");
    value = value * 10 + digit;
    ++i;
  }
  if (i == 0) return bad("expected a non-negative integer, optionally followed by K, M, G or T");
  unsigned shift = 0;
  if (i < text.size()) {
    switch (std::toupper(static_cast<unsigned char>(text[i]))) {
      case 'K':
        shift = 10;
        break;
      case 'M':
        shift = 20;
        break;
      case 'G':
        shift = 30;
        break;
      case 'T':
        shift = 40;
        break;
      case 'B':
        break;
      default:
        return bad("unknown unit (use K, M, G or T)");
    }
    ++i;
    // Optional "B" / "iB" after a multiplier ("64KiB", "16MB").
    std::string rest = text.substr(i);
    if (shift != 0 && (rest == "B" || rest == "b" || rest == "iB" || rest == "ib")) {
      i = text.size();
    }
    if (i != text.size()) return bad("trailing characters");
  }
  if (shift != 0 && value > (UINT64_MAX >> shift)) return bad("too large");
  return value << shift;
}

}  // namespace asymnvm::pm
