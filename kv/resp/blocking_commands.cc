// The blocking pops (doc/types.md §Blocking pops; the parking is blocking.h and server.cc), LMPOP,
// and CLIENT UNBLOCK. Each handler parses as Redis does (the timeout first, then the rest), tries
// the pop of the plain command, and, when every key is empty, leaves a BlockRequest in the session
// instead of a reply — unless it runs inside EXEC (its store is the transaction's overlay, not the
// dispatcher's), where it replies nil at once as Redis does.
#include <algorithm>

#include "kv/resp/types.h"

namespace asymnvm::kv::resp::handlers {
namespace {

constexpr uint32_t kW = kWrite;

// Runs attempt(skip_wrongtype, &empty) — which pops and replies, or sets empty and replies
// nothing — and blocks on `keys` when nothing was popped. A re-run of a parked command keeps its
// deadline and skips keys that now hold another type (Redis wakes a client only for its type).
template <typename Attempt>
void PopOrBlock(CommandContext& c, const std::vector<std::string>& a, std::vector<std::string> keys,
                int64_t timeout_ms, bool nil_is_bulk, Attempt attempt) {
  Session& s = c.session;
  const bool rerun = s.block != nullptr;
  const bool may_block = &c.store == &c.dispatcher.store();
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  std::vector<uint64_t> seqs;
  for (const auto& k : keys) seqs.push_back(c.state.blocking.Seq(k));
  bool empty = false;
  attempt(rerun, &empty);
  if (!empty) {
    if (rerun) s.block->wait = false;
    return;
  }
  if (!may_block) {
    // Inside MULTI/EXEC: Redis ignores the timeout and replies nil.
    if (nil_is_bulk) {
      c.out.Null();
    } else {
      c.out.NullArray();
    }
    return;
  }
  if (!rerun) {
    auto b = std::make_shared<BlockRequest>();
    b->argv = a;
    b->keys = std::move(keys);
    // + 1: SteadyMs truncates, and the client must wait at least the whole timeout.
    b->deadline_ms = timeout_ms == 0 ? 0 : SteadyMs() + timeout_ms + 1;
    s.block = std::move(b);
  }
  s.block->seqs = std::move(seqs);
  s.block->wait = true;
}

bool Timeout(CommandContext& c, std::string_view arg, int64_t* ms) {
  std::string err = ParseBlockTimeout(arg, ms);
  if (err.empty()) return true;
  c.out.Error(err);
  return false;
}

bool Side(std::string_view w, bool* left) {
  if (EqualsNoCase(w, "left")) {
    *left = true;
  } else if (EqualsNoCase(w, "right")) {
    *left = false;
  } else {
    return false;
  }
  return true;
}

// [B]LMPOP / BZMPOP's "numkeys key... WHERE [COUNT n]" from argv[at]: Redis's lmpopGenericCommand
// and zmpopGenericCommand checks and texts. false after replying the error.
bool ParseMPop(CommandContext& c, const std::vector<std::string>& a, size_t at, bool zset,
               std::vector<std::string>* keys, bool* side, int64_t* count) {
  int64_t numkeys = 0;
  if (!ParseInt64(a[at], &numkeys) || numkeys < 1) {
    c.out.Error("ERR numkeys should be greater than 0");
    return false;
  }
  if (numkeys > static_cast<int64_t>(a.size() - at) - 2) {
    c.out.Error(kErrSyntax);
    return false;
  }
  const size_t where = at + 1 + static_cast<size_t>(numkeys);
  bool ok = false;
  if (zset) {
    ok = EqualsNoCase(a[where], "min") || EqualsNoCase(a[where], "max");
    *side = EqualsNoCase(a[where], "max");
  } else {
    ok = Side(a[where], side);
  }
  if (!ok) {
    c.out.Error(kErrSyntax);
    return false;
  }
  *count = -1;
  for (size_t j = where + 1; j < a.size(); ++j) {
    if (*count == -1 && EqualsNoCase(a[j], "count") && j + 1 < a.size()) {
      if (!ParseInt64(a[++j], count) || *count < 1) {
        c.out.Error("ERR count should be greater than 0");
        return false;
      }
    } else {
      c.out.Error(kErrSyntax);
      return false;
    }
  }
  if (*count == -1) *count = 1;
  keys->assign(a.begin() + static_cast<long>(at) + 1, a.begin() + static_cast<long>(where));
  return true;
}

}  // namespace

// BLPOP, BRPOP key [key ...] timeout.
void BPop(CommandContext& c, const std::vector<std::string>& a) {
  int64_t ms = 0;
  if (!Timeout(c, a.back(), &ms)) return;
  const bool left = a[0][1] == 'l' || a[0][1] == 'L';
  std::vector<std::string> keys(a.begin() + 1, a.end() - 1);
  PopOrBlock(c, a, keys, ms, false,
             [&](bool skip, bool* empty) { ListPopFirst(c, keys, left, -1, skip, empty); });
}

// BLMOVE src dst LEFT|RIGHT LEFT|RIGHT timeout, BRPOPLPUSH src dst timeout.
void BLMove(CommandContext& c, const std::vector<std::string>& a) {
  bool from_left = false, to_left = true;
  if (EqualsNoCase(a[0], "blmove") && (!Side(a[3], &from_left) || !Side(a[4], &to_left))) {
    return c.out.Error(kErrSyntax);
  }
  int64_t ms = 0;
  if (!Timeout(c, a.back(), &ms)) return;
  PopOrBlock(c, a, {a[1]}, ms, true, [&](bool skip, bool* empty) {
    ListMove(c, a[1], a[2], from_left, to_left, skip, empty);
  });
}

// LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT n]; BLMPOP timeout numkeys ...
void LMPop(CommandContext& c, const std::vector<std::string>& a) {
  const bool blocking = a[0][0] == 'b' || a[0][0] == 'B';
  int64_t ms = 0;
  if (blocking && !Timeout(c, a[1], &ms)) return;
  std::vector<std::string> keys;
  bool left = true;
  int64_t count = 1;
  if (!ParseMPop(c, a, blocking ? 2 : 1, false, &keys, &left, &count)) return;
  if (!blocking) return ListPopFirst(c, keys, left, count, false, nullptr);
  PopOrBlock(c, a, keys, ms, false,
             [&](bool skip, bool* empty) { ListPopFirst(c, keys, left, count, skip, empty); });
}

// BZPOPMIN, BZPOPMAX key [key ...] timeout.
void BZPop(CommandContext& c, const std::vector<std::string>& a) {
  int64_t ms = 0;
  if (!Timeout(c, a.back(), &ms)) return;
  const bool max = EqualsNoCase(a[0], "bzpopmax");
  std::vector<std::string> keys(a.begin() + 1, a.end() - 1);
  PopOrBlock(c, a, keys, ms, false,
             [&](bool skip, bool* empty) { ZsetPopFirst(c, keys, max, -1, skip, empty); });
}

// BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT n].
void BZMPop(CommandContext& c, const std::vector<std::string>& a) {
  int64_t ms = 0;
  if (!Timeout(c, a[1], &ms)) return;
  std::vector<std::string> keys;
  bool max = false;
  int64_t count = 1;
  if (!ParseMPop(c, a, 2, true, &keys, &max, &count)) return;
  PopOrBlock(c, a, keys, ms, false,
             [&](bool skip, bool* empty) { ZsetPopFirst(c, keys, max, count, skip, empty); });
}

// CLIENT UNBLOCK client-id [TIMEOUT|ERROR].
void ClientUnblock(CommandContext& c, const std::vector<std::string>& a) {
  WakeReason why = WakeReason::kTimeout;
  if (a.size() == 4) {
    if (EqualsNoCase(a[3], "error")) {
      why = WakeReason::kError;
    } else if (!EqualsNoCase(a[3], "timeout")) {
      return c.out.Error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR");
    }
  }
  int64_t id = 0;
  if (!ParseInt64(a[2], &id)) return c.out.Error(kErrNotInteger);
  c.out.Integer(id > 0 && c.state.blocking.Unblock(static_cast<uint64_t>(id), why) ? 1 : 0);
}

std::vector<CommandSpec> BlockingCommandSpecs() {
  const char* parked =
      "parks the connection (no thread held) until a push through this gateway wakes it, or a "
      "re-check (10-200 ms) sees one made elsewhere; FIFO per key (doc/types.md §Blocking pops)";
  return {
      {"blmove", 6, kW | kBlocking, 1, 2, 1, "list", "6.2.0",
       "Pops an element from a list, pushes it to another list and returns it. Blocks until an "
       "element is available otherwise. Deletes the list if the last element was moved.",
       parked, BLMove},
      {"blmpop", -5, kW | kBlocking, 3, 3, 1, "list", "7.0.0",
       "Pops the first element from one of multiple lists. Blocks until an element is available "
       "otherwise. Deletes the list if the last element was popped.",
       parked, LMPop},
      {"blpop", -3, kW | kBlocking, 1, -2, 1, "list", "2.0.0",
       "Removes and returns the first element in a list. Blocks until an element is available "
       "otherwise. Deletes the list if the last element was popped.",
       parked, BPop},
      {"brpop", -3, kW | kBlocking, 1, -2, 1, "list", "2.0.0",
       "Removes and returns the last element in a list. Blocks until an element is available "
       "otherwise. Deletes the list if the last element was popped.",
       parked, BPop},
      {"brpoplpush", 4, kW | kBlocking, 1, 2, 1, "list", "2.2.0",
       "Pops an element from a list, pushes it to another list and returns it. Block until an "
       "element is available otherwise. Deletes the list if the last element was popped.",
       parked, BLMove},
      {"bzmpop", -5, kW | kBlocking, 3, 3, 1, "sorted-set", "7.0.0",
       "Removes and returns a member by score from one or more sorted sets. Blocks until a "
       "member is available otherwise. Deletes the sorted set if the last element was popped.",
       parked, BZMPop},
      {"bzpopmax", -3, kW | kBlocking | kFast, 1, -2, 1, "sorted-set", "5.0.0",
       "Removes and returns the member with the highest score from one or more sorted sets. "
       "Blocks until a member available otherwise. Deletes the sorted set if the last element "
       "was popped.",
       parked, BZPop},
      {"bzpopmin", -3, kW | kBlocking | kFast, 1, -2, 1, "sorted-set", "5.0.0",
       "Removes and returns the member with the lowest score from one or more sorted sets. "
       "Blocks until a member is available otherwise. Deletes the sorted set if the last element "
       "was popped.",
       parked, BZPop},
      {"lmpop", -4, kW, 2, 2, 1, "list", "7.0.0",
       "Returns multiple elements from a list after removing them. Deletes the list if the last "
       "element was popped.",
       "at most ~60 elements per command", LMPop},
  };
}

}  // namespace asymnvm::kv::resp::handlers
