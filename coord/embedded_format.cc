#include "coord/embedded_format.h"

#include "common/checksum.h"
#include "common/coding.h"

namespace asymnvm::coord {

std::string EncodeNodeFile(const NodeFile& n) {
  std::string out(kNodeHeaderSize + n.data.size(), '\0');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  PutLe32(p + 0, kNodeMagic);
  PutLe16(p + 4, kNodeFormat);
  PutLe16(p + 6, n.ephemeral ? kNodeFlagEphemeral : 0);
  PutLe64(p + 8, static_cast<uint64_t>(n.version));
  PutLe64(p + 16, n.creation_id);
  PutLe64(p + 24, n.owner_session);
  PutLe32(p + 32, static_cast<uint32_t>(n.data.size()));
  n.data.copy(out.data() + kNodeHeaderSize, n.data.size());
  uint32_t crc = Crc32c(p, 36);
  crc = Crc32c(p + kNodeHeaderSize, n.data.size(), crc);
  PutLe32(p + 36, crc);
  return out;
}

Result<NodeFile> DecodeNodeFile(std::string_view bytes, const std::string& what) {
  auto bad = [&](const std::string& why) {
    return Status::Corruption("coord: node file '" + what + "': " + why);
  };
  if (bytes.size() < kNodeHeaderSize) return bad("shorter than its 40-byte header");
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  if (GetLe32(p) != kNodeMagic) return bad("bad magic");
  if (GetLe16(p + 4) != kNodeFormat) {
    return bad("format " + std::to_string(GetLe16(p + 4)) + " (this build reads format 1)");
  }
  const uint32_t len = GetLe32(p + 32);
  if (len > kMaxNodeData || kNodeHeaderSize + len != bytes.size()) {
    return bad("data length " + std::to_string(len) + " does not match the file size " +
               std::to_string(bytes.size()));
  }
  uint32_t crc = Crc32c(p, 36);
  crc = Crc32c(p + kNodeHeaderSize, len, crc);
  if (crc != GetLe32(p + 36)) return bad("checksum mismatch");
  NodeFile n;
  n.ephemeral = (GetLe16(p + 6) & kNodeFlagEphemeral) != 0;
  n.version = static_cast<int64_t>(GetLe64(p + 8));
  n.creation_id = GetLe64(p + 16);
  n.owner_session = GetLe64(p + 24);
  n.data.assign(bytes.substr(kNodeHeaderSize));
  return n;
}

}  // namespace asymnvm::coord
