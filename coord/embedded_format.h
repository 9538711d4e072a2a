// The embedded coordinator's node file (".node"), byte layout in doc/coord.md §Embedded.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "asymnvm/status.h"

namespace asymnvm::coord {

inline constexpr uint32_t kNodeMagic = 0x4E434E41;  // "ANCN"
inline constexpr uint16_t kNodeFormat = 1;
inline constexpr uint16_t kNodeFlagEphemeral = 1;
inline constexpr size_t kNodeHeaderSize = 40;
inline constexpr size_t kMaxNodeData = 1
                                       << 20;  // the same 1 MiB limit as ZooKeeper's jute.maxbuffer

struct NodeFile {
  bool ephemeral = false;
  int64_t version = 0;
  uint64_t creation_id = 0;
  uint64_t owner_session = 0;
  std::string data;
};

std::string EncodeNodeFile(const NodeFile& n);
// kCorruption naming `what` (the file) if the bytes are not a valid node file.
Result<NodeFile> DecodeNodeFile(std::string_view bytes, const std::string& what);

}  // namespace asymnvm::coord
