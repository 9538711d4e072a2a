// Openers of each kind (internal; the public entry points are structures::Open*). Each lives in
// its kind's .cc file.
#pragma once

#include <memory>
#include <string>

#include "asymnvm/frontend.h"
#include "asymnvm/structures/structure.h"

namespace asymnvm::structures::internal {

Result<std::unique_ptr<Sequence>> OpenStack(frontend::Session& s, const std::string& name,
                                            Options o);
Result<std::unique_ptr<Sequence>> OpenQueue(frontend::Session& s, const std::string& name,
                                            Options o);
Result<std::unique_ptr<Map>> OpenHashTable(frontend::Session& s, const std::string& name,
                                           Options o);
Result<std::unique_ptr<Map>> OpenSkipList(frontend::Session& s, const std::string& name, Options o);
Result<std::unique_ptr<Map>> OpenBst(frontend::Session& s, const std::string& name, Options o);
Result<std::unique_ptr<Map>> OpenBPlusTree(frontend::Session& s, const std::string& name,
                                           Options o);
// Test hook: the leaves of a B+tree (Verify's walk); kInvalidArgument for another kind.
Result<uint64_t> BPlusTreeLeafCount(Map* m);
// Test hook: a B+tree's height after Verify (0 = empty, 1 = a root leaf).
Result<uint64_t> BPlusTreeHeight(Map* m);
Result<std::unique_ptr<Map>> OpenMvBst(frontend::Session& s, const std::string& name, Options o);
Result<std::unique_ptr<Map>> OpenMvBPlusTree(frontend::Session& s, const std::string& name,
                                             Options o);

}  // namespace asymnvm::structures::internal
