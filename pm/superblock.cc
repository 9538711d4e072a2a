// Superblock encoding and validation. Byte layout: doc/pm-layout.md.
#include <cstdio>
#include <cstring>
#include <string>

#include "asymnvm/pm.h"
#include "common/checksum.h"

namespace asymnvm::pm {
namespace {

// Field offsets inside the 4096-byte superblock (doc/pm-layout.md).
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 8;
constexpr size_t kOffHeaderSize = 12;
constexpr size_t kOffPoolSize = 16;
constexpr size_t kOffUuid = 24;
constexpr size_t kOffLayout = 40;
constexpr size_t kLayoutField = 32;  // NUL-padded, at most 31 characters
constexpr size_t kOffCreateTime = 72;
constexpr size_t kOffFlags = 80;
constexpr size_t kOffChecksum = 88;
constexpr size_t kOffReserved = 92;  // through kSuperblockSize: zero

void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

uint32_t SuperblockCrc(const uint8_t* data) {
  static constexpr uint8_t kZero[4] = {0, 0, 0, 0};
  uint32_t crc = Crc32c(data, kOffChecksum);
  crc = Crc32c(kZero, sizeof(kZero), crc);
  return Crc32c(data + kOffChecksum + 4, kSuperblockSize - kOffChecksum - 4, crc);
}

}  // namespace

void EncodeSuperblock(const Superblock& sb, uint8_t* out) {
  std::memset(out, 0, kSuperblockSize);
  std::memcpy(out + kOffMagic, Superblock::kMagic, sizeof(Superblock::kMagic));
  Put32(out + kOffVersion, sb.layout_version);
  Put32(out + kOffHeaderSize, static_cast<uint32_t>(kSuperblockSize));
  Put64(out + kOffPoolSize, sb.pool_size);
  std::memcpy(out + kOffUuid, sb.uuid.data(), sb.uuid.size());
  // Truncated to 31 characters and at the first NUL, so the field always decodes.
  size_t n = sb.layout.size() < kLayoutField - 1 ? sb.layout.size() : kLayoutField - 1;
  size_t nul = sb.layout.find('\0');
  if (nul != std::string::npos && nul < n) n = nul;
  std::memcpy(out + kOffLayout, sb.layout.data(), n);
  Put64(out + kOffCreateTime, sb.create_time_ns);
  Put64(out + kOffFlags, sb.flags);
  Put32(out + kOffChecksum, SuperblockCrc(out));
}

Status DecodeSuperblock(const uint8_t* data, size_t len, Superblock* out) {
  if (data == nullptr || len < kSuperblockSize) {
    return Status::Corruption("superblock truncated: " + std::to_string(len) + " bytes, need " +
                              std::to_string(kSuperblockSize));
  }
  if (std::memcmp(data + kOffMagic, Superblock::kMagic, sizeof(Superblock::kMagic)) != 0) {
    return Status::Corruption("not an AsymNVM pool (bad magic)");
  }
  uint32_t stored = Get32(data + kOffChecksum);
  uint32_t computed = SuperblockCrc(data);
  if (stored != computed) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "superblock checksum mismatch (stored %08x, computed %08x)",
                  stored, computed);
    return Status::Corruption(buf);
  }
  uint32_t version = Get32(data + kOffVersion);
  if (version != kLayoutVersion) {
    return Status::NotSupported("pool layout version " + std::to_string(version) +
                                ", this build reads version " + std::to_string(kLayoutVersion));
  }
  uint32_t header_size = Get32(data + kOffHeaderSize);
  if (header_size != kSuperblockSize) {
    return Status::Corruption("superblock header size " + std::to_string(header_size) +
                              ", expected " + std::to_string(kSuperblockSize));
  }
  uint64_t pool_size = Get64(data + kOffPoolSize);
  if (pool_size < kMinPoolSize) {
    return Status::Corruption("superblock pool size " + std::to_string(pool_size) +
                              " is below the minimum " + std::to_string(kMinPoolSize));
  }
  const uint8_t* layout = data + kOffLayout;
  size_t layout_len = 0;
  while (layout_len < kLayoutField && layout[layout_len] != 0) ++layout_len;
  if (layout_len == kLayoutField) {
    return Status::Corruption("superblock layout name is not NUL-terminated");
  }
  for (size_t i = layout_len; i < kLayoutField; ++i) {
    if (layout[i] != 0) return Status::Corruption("superblock layout name has non-zero padding");
  }
  for (size_t i = kOffReserved; i < kSuperblockSize; ++i) {
    if (data[i] != 0) {
      return Status::Corruption("superblock reserved byte " + std::to_string(i) + " is not zero");
    }
  }
  if (out != nullptr) {
    out->layout_version = version;
    out->pool_size = pool_size;
    std::memcpy(out->uuid.data(), data + kOffUuid, out->uuid.size());
    out->layout.assign(reinterpret_cast<const char*>(layout), layout_len);
    out->create_time_ns = Get64(data + kOffCreateTime);
    out->flags = Get64(data + kOffFlags);
  }
  return Status::Ok();
}

}  // namespace asymnvm::pm
