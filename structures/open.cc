// structures::Open* — dispatch by kind.
#include "structures/kinds.h"

namespace asymnvm::structures {

Result<std::unique_ptr<Sequence>> OpenSequence(frontend::Session& s, Kind kind,
                                               const std::string& name, const Options& o) {
  switch (kind) {
    case Kind::kStack:
      return internal::OpenStack(s, name, o);
    case Kind::kQueue:
      return internal::OpenQueue(s, name, o);
    default:
      break;
  }
  return Status::InvalidArgument(std::string(KindName(kind)) + " is a map, not a sequence");
}

Result<std::unique_ptr<Map>> OpenMap(frontend::Session& s, Kind kind, const std::string& name,
                                     const Options& o) {
  switch (kind) {
    case Kind::kStack:
    case Kind::kQueue:
      return Status::InvalidArgument(std::string(KindName(kind)) + " is a sequence, not a map");
    case Kind::kHashTable:
      return internal::OpenHashTable(s, name, o);
    case Kind::kSkipList:
      return internal::OpenSkipList(s, name, o);
    case Kind::kBst:
      return internal::OpenBst(s, name, o);
    case Kind::kBPlusTree:
      return internal::OpenBPlusTree(s, name, o);
    case Kind::kMvBst:
      return internal::OpenMvBst(s, name, o);
    case Kind::kMvBPlusTree:
      return internal::OpenMvBPlusTree(s, name, o);
  }
  return Status::InvalidArgument("unknown structure kind " +
                                 std::to_string(static_cast<uint32_t>(kind)));
}

Result<std::unique_ptr<Handle>> Open(frontend::Session& s, Kind kind, const std::string& name,
                                     const Options& o) {
  if (IsSequence(kind)) {
    ASYMNVM_ASSIGN_OR_RETURN(auto h, OpenSequence(s, kind, name, o));
    return std::unique_ptr<Handle>(std::move(h));
  }
  ASYMNVM_ASSIGN_OR_RETURN(auto h, OpenMap(s, kind, name, o));
  return std::unique_ptr<Handle>(std::move(h));
}

}  // namespace asymnvm::structures
