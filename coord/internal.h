// Factories of the two implementations (Coordinator::Open dispatches on the URI scheme).
#pragma once

#include <memory>
#include <string>

#include "asymnvm/coord.h"

namespace asymnvm::coord {

// `dir`: the embedded coordinator's directory (created if missing).
Result<std::unique_ptr<Coordinator>> OpenEmbedded(const std::string& dir, const Options& options);

// `spec`: "HOST:PORT[,HOST:PORT...][/chroot]" (the URI without "zk:").
Result<std::unique_ptr<Coordinator>> OpenZooKeeper(const std::string& spec, const Options& options);

// "/a/b/c" → "/a/b" ("/a" → "/"); the path must be valid and not "/".
std::string ParentOf(const std::string& path);
// "/a/b/c" → "c".
std::string LeafOf(const std::string& path);

}  // namespace asymnvm::coord
