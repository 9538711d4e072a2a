// Redis set commands (doc/types.md §Sets). A set is a slotted collection without payload
// (types.h SlottedPut): member m of incarnation id → record 'f'+m holding its slot; slot i → record
// 's'+i holding m; slots 0..size-1 are dense (SREM moves the last slot into the freed one).
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "kv/resp/types.h"

namespace asymnvm::kv::resp::handlers {
namespace {

// A set is a slotted collection without payload (types.h SlottedFind ...).
constexpr size_t kNoPayload = 0;

Result<std::string> SlotMember(CollTx& tx, const Coll& s, int64_t slot) {
  ASYMNVM_ASSIGN_OR_RETURN(SlottedMember m, SlottedAt(tx, s, slot, kNoPayload));
  return std::move(m.member);
}

Result<bool> IsMember(CollTx& tx, const Coll& s, std::string_view member) {
  ASYMNVM_ASSIGN_OR_RETURN(std::optional<SlotRef> ref, SlottedFind(tx, s, member, kNoPayload));
  return ref.has_value();
}

// Adds `member`; whether it is new.
Result<bool> AddMember(CollTx& tx, Coll* s, std::string_view member) {
  ASYMNVM_ASSIGN_OR_RETURN(bool in, IsMember(tx, *s, member));
  if (in) return false;
  SlottedPut(tx, s, member, "", std::nullopt);
  return true;
}

Result<bool> RemoveMember(CollTx& tx, Coll* s, std::string_view member) {
  return SlottedRemove(tx, s, member, kNoPayload);
}

Result<std::vector<std::string>> Members(CollTx& tx, const Coll& s) {
  ASYMNVM_ASSIGN_OR_RETURN(std::vector<SlottedMember> all, SlottedAll(tx, s, kNoPayload));
  std::vector<std::string> out;
  out.reserve(all.size());
  for (auto& m : all) out.push_back(std::move(m.member));
  return out;
}

Result<Coll*> OpenSet(CollTx& tx, std::string_view key, ReplyWriter& w) {
  return OpenTyped(tx, key, KeyType::kSet, w);
}

TxOutcome Fail(CommandContext& c, const Status& st) { return TxFail(c.out, st); }

bool CheckMemberSize(CommandContext& c, std::string_view key, std::string_view m) {
  return MemberSizeOk(c.out, key, m);
}

enum class SetOp { kInter, kUnion, kDiff };

// The result of SINTER/SUNION/SDIFF over keys[first..]; nullopt after WRONGTYPE went to w.
Result<std::optional<std::vector<std::string>>> Combine(CollTx& tx, SetOp op,
                                                        const std::vector<std::string>& a,
                                                        size_t first, size_t end, ReplyWriter& w) {
  std::vector<Coll*> sets;
  for (size_t i = first; i < end; ++i) {
    ASYMNVM_ASSIGN_OR_RETURN(Coll * s, OpenSet(tx, a[i], w));
    if (s == nullptr) return std::optional<std::vector<std::string>>();
    sets.push_back(s);
  }
  std::vector<std::string> result;
  if (op == SetOp::kInter) {
    // Walk the smallest set, probe the others.
    auto smallest = std::min_element(sets.begin(), sets.end(), [](Coll* x, Coll* y) {
      int64_t nx = x->type == KeyType::kNone ? 0 : x->meta.size;
      int64_t ny = y->type == KeyType::kNone ? 0 : y->meta.size;
      return nx < ny;
    });
    ASYMNVM_ASSIGN_OR_RETURN(std::vector<std::string> base, Members(tx, **smallest));
    for (auto& m : base) {
      bool all = true;
      for (Coll* s : sets) {
        if (s == *smallest) continue;
        ASYMNVM_ASSIGN_OR_RETURN(bool in, IsMember(tx, *s, m));
        if (!in) {
          all = false;
          break;
        }
      }
      if (all) result.push_back(std::move(m));
    }
  } else if (op == SetOp::kUnion) {
    std::unordered_set<std::string> seen;
    for (Coll* s : sets) {
      ASYMNVM_ASSIGN_OR_RETURN(std::vector<std::string> ms, Members(tx, *s));
      for (auto& m : ms) {
        if (seen.insert(m).second) result.push_back(std::move(m));
      }
    }
  } else {
    ASYMNVM_ASSIGN_OR_RETURN(std::vector<std::string> base, Members(tx, *sets[0]));
    for (auto& m : base) {
      bool other = false;
      for (size_t i = 1; i < sets.size() && !other; ++i) {
        ASYMNVM_ASSIGN_OR_RETURN(bool in, IsMember(tx, *sets[i], m));
        other = in;
      }
      if (!other) result.push_back(std::move(m));
    }
  }
  return std::optional<std::vector<std::string>>(std::move(result));
}

SetOp OpOf(std::string_view name) {
  if (EqualsNoCase(name.substr(0, 6), "sunion")) return SetOp::kUnion;
  if (EqualsNoCase(name.substr(0, 5), "sdiff")) return SetOp::kDiff;
  return SetOp::kInter;
}

}  // namespace

void SAdd(CommandContext& c, const std::vector<std::string>& a) {
  for (size_t i = 2; i < a.size(); ++i) {
    if (!CheckMemberSize(c, a[1], a[i])) return;
  }
  RunTx(c, [&](CollTx& tx) {
    auto s = OpenSet(tx, a[1], c.out);
    if (!s.ok()) return Fail(c, s.status());
    if (*s == nullptr) return TxOutcome::kError;
    if ((*s)->type == KeyType::kNone) tx.Create(*s, KeyType::kSet);
    int64_t added = 0;
    for (size_t i = 2; i < a.size(); ++i) {
      auto r = AddMember(tx, *s, a[i]);
      if (!r.ok()) return Fail(c, r.status());
      added += *r ? 1 : 0;
    }
    if (added == 0 && (*s)->store_version != 0) {
      c.out.Integer(0);
      return TxOutcome::kCommitted;
    }
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) c.out.Integer(added);
    return o;
  });
}

void SRem(CommandContext& c, const std::vector<std::string>& a) {
  RunTx(c, [&](CollTx& tx) {
    auto s = OpenSet(tx, a[1], c.out);
    if (!s.ok()) return Fail(c, s.status());
    if (*s == nullptr) return TxOutcome::kError;
    int64_t removed = 0;
    for (size_t i = 2; i < a.size(); ++i) {
      auto r = RemoveMember(tx, *s, a[i]);
      if (!r.ok()) return Fail(c, r.status());
      removed += *r ? 1 : 0;
    }
    if (removed == 0) {
      c.out.Integer(0);
      return TxOutcome::kCommitted;
    }
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) c.out.Integer(removed);
    return o;
  });
}

void SIsMember(CommandContext& c, const std::vector<std::string>& a) {
  const bool multi = EqualsNoCase(a[0], "smismember");
  SnapshotRead(c, [&](CollTx& tx, ReplyWriter& w) -> Status {
    ASYMNVM_ASSIGN_OR_RETURN(Coll * s, OpenSet(tx, a[1], w));
    if (s == nullptr) return Status::Ok();
    if (multi) w.Array(a.size() - 2);
    for (size_t i = 2; i < a.size(); ++i) {
      ASYMNVM_ASSIGN_OR_RETURN(bool in, IsMember(tx, *s, a[i]));
      w.Integer(in ? 1 : 0);
    }
    return Status::Ok();
  });
}

void SCard(CommandContext& c, const std::vector<std::string>& a) {
  CollTx tx(c.store, c.state.NowMs());
  auto s = OpenSet(tx, a[1], c.out);
  if (!s.ok()) return c.out.Error(TxError(s.status()));
  if (*s == nullptr) return;
  c.out.Integer((*s)->type == KeyType::kNone ? 0 : (*s)->meta.size);
}

void SMembers(CommandContext& c, const std::vector<std::string>& a) {
  SnapshotRead(c, [&](CollTx& tx, ReplyWriter& w) -> Status {
    ASYMNVM_ASSIGN_OR_RETURN(Coll * s, OpenSet(tx, a[1], w));
    if (s == nullptr) return Status::Ok();
    ASYMNVM_ASSIGN_OR_RETURN(std::vector<std::string> ms, Members(tx, *s));
    w.Set(ms.size());
    for (const auto& m : ms) w.Bulk(m);
    return Status::Ok();
  });
}

void SRandMember(CommandContext& c, const std::vector<std::string>& a) {
  int64_t count = 1;
  const bool has_count = a.size() >= 3;
  if (a.size() > 3) return c.out.Error(std::string(kErrSyntax));
  if (has_count && !ParseInt64(a[2], &count)) return c.out.Error(std::string(kErrNotInteger));
  if (has_count && (count < -(INT64_MAX / 2) || count > INT64_MAX / 2)) {
    return c.out.Error("ERR value is out of range");
  }
  SnapshotRead(c, [&](CollTx& tx, ReplyWriter& w) -> Status {
    ASYMNVM_ASSIGN_OR_RETURN(Coll * s, OpenSet(tx, a[1], w));
    if (s == nullptr) return Status::Ok();
    const int64_t n = s->type == KeyType::kNone ? 0 : s->meta.size;
    if (!has_count) {
      if (n == 0) {
        w.Null();
        return Status::Ok();
      }
      ASYMNVM_ASSIGN_OR_RETURN(std::string m,
                               SlotMember(tx, *s, static_cast<int64_t>(RandomU64() % n)));
      w.Bulk(m);
      return Status::Ok();
    }
    auto slots = RandomSlots(n, count >= 0 ? count : -count, count >= 0);
    w.Array(slots.size());
    std::unordered_map<int64_t, std::string> cache;
    for (int64_t slot : slots) {
      auto it = cache.find(slot);
      if (it == cache.end()) {
        ASYMNVM_ASSIGN_OR_RETURN(std::string m, SlotMember(tx, *s, slot));
        it = cache.emplace(slot, std::move(m)).first;
      }
      w.Bulk(it->second);
    }
    return Status::Ok();
  });
}

void SPop(CommandContext& c, const std::vector<std::string>& a) {
  int64_t count = 1;
  const bool has_count = a.size() >= 3;
  if (a.size() > 3) return c.out.Error(std::string(kErrSyntax));
  if (has_count && !ParseInt64(a[2], &count)) return c.out.Error(std::string(kErrNotInteger));
  if (has_count && count < 0) return c.out.Error(std::string(kErrOutOfRange));
  RunTx(c, [&](CollTx& tx) {
    auto s = OpenSet(tx, a[1], c.out);
    if (!s.ok()) return Fail(c, s.status());
    if (*s == nullptr) return TxOutcome::kError;
    Coll* set = *s;
    const int64_t n = set->type == KeyType::kNone ? 0 : set->meta.size;
    if (n == 0 || count == 0) {
      if (has_count) {
        c.out.Set(0);
      } else {
        c.out.Null();
      }
      return TxOutcome::kCommitted;
    }
    std::vector<std::string> popped;
    if (count >= n) {
      // Everything: the key goes (its records become garbage of a dead incarnation).
      auto ms = Members(tx, *set);
      if (!ms.ok()) return Fail(c, ms.status());
      popped = std::move(*ms);
      set->deleted = true;
    } else {
      for (int64_t i = 0; i < count; ++i) {
        auto m = SlotMember(tx, *set, static_cast<int64_t>(RandomU64() % set->meta.size));
        if (!m.ok()) return Fail(c, m.status());
        auto r = RemoveMember(tx, set, *m);
        if (!r.ok()) return Fail(c, r.status());
        popped.push_back(std::move(*m));
      }
    }
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) {
      if (has_count) {
        c.out.Set(popped.size());
        for (const auto& m : popped) c.out.Bulk(m);
      } else {
        c.out.Bulk(popped[0]);
      }
    }
    return o;
  });
}

void SMove(CommandContext& c, const std::vector<std::string>& a) {
  if (!CheckMemberSize(c, a[2], a[3])) return;
  RunTx(c, [&](CollTx& tx) {
    auto src = OpenSet(tx, a[1], c.out);
    if (!src.ok()) return Fail(c, src.status());
    if (*src == nullptr) return TxOutcome::kError;
    auto dst = OpenSet(tx, a[2], c.out);
    if (!dst.ok()) return Fail(c, dst.status());
    if (*dst == nullptr) return TxOutcome::kError;
    auto in = IsMember(tx, **src, a[3]);
    if (!in.ok()) return Fail(c, in.status());
    if (!*in || *src == *dst) {
      c.out.Integer(*in ? 1 : 0);
      return TxOutcome::kCommitted;
    }
    auto r = RemoveMember(tx, *src, a[3]);
    if (!r.ok()) return Fail(c, r.status());
    if ((*dst)->type == KeyType::kNone) tx.Create(*dst, KeyType::kSet);
    auto added = AddMember(tx, *dst, a[3]);
    if (!added.ok()) return Fail(c, added.status());
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) c.out.Integer(1);
    return o;
  });
}

// SINTER, SUNION, SDIFF.
void SCombine(CommandContext& c, const std::vector<std::string>& a) {
  const SetOp op = OpOf(a[0]);
  SnapshotRead(c, [&](CollTx& tx, ReplyWriter& w) -> Status {
    ASYMNVM_ASSIGN_OR_RETURN(auto r, Combine(tx, op, a, 1, a.size(), w));
    if (!r) return Status::Ok();
    w.Set(r->size());
    for (const auto& m : *r) w.Bulk(m);
    return Status::Ok();
  });
}

// SINTERSTORE, SUNIONSTORE, SDIFFSTORE: the destination is replaced (any type) in the same atomic
// batch that reads the sources' versions.
void SCombineStore(CommandContext& c, const std::vector<std::string>& a) {
  const SetOp op = OpOf(a[0]);
  RunTx(c, [&](CollTx& tx) {
    std::string errors;
    ReplyWriter ew(&errors, c.session.proto);
    auto r = Combine(tx, op, a, 2, a.size(), ew);
    if (!r.ok()) return Fail(c, r.status());
    if (!*r) {
      c.out.Raw(errors);
      return TxOutcome::kError;
    }
    auto dst = tx.Open(a[1]);
    if (!dst.ok()) return Fail(c, dst.status());
    Coll* d = *dst;
    if ((**r).empty()) {
      d->deleted = true;
    } else {
      tx.Create(d, KeyType::kSet);
      for (const auto& m : **r) {
        if (m.size() > MaxFieldSize(a[1])) {
          c.out.Error("ERR member too long for the destination (doc/types.md §Limits)");
          return TxOutcome::kError;
        }
        auto added = AddMember(tx, d, m);
        if (!added.ok()) return Fail(c, added.status());
      }
    }
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) c.out.Integer(static_cast<int64_t>((**r).size()));
    return o;
  });
}

void SInterCard(CommandContext& c, const std::vector<std::string>& a) {
  int64_t numkeys = 0;
  if (!ParseInt64(a[1], &numkeys)) return c.out.Error(std::string(kErrNotInteger));
  if (numkeys <= 0) return c.out.Error("ERR numkeys should be greater than 0");
  if (static_cast<size_t>(numkeys) > a.size() - 2) {
    return c.out.Error("ERR Number of keys can't be greater than number of args");
  }
  int64_t limit = 0;
  size_t i = 2 + static_cast<size_t>(numkeys);
  while (i < a.size()) {
    if (EqualsNoCase(a[i], "limit") && i + 1 < a.size()) {
      if (!ParseInt64(a[i + 1], &limit)) return c.out.Error(std::string(kErrNotInteger));
      if (limit < 0) return c.out.Error("ERR LIMIT can't be negative");
      i += 2;
    } else {
      return c.out.Error(std::string(kErrSyntax));
    }
  }
  SnapshotRead(c, [&](CollTx& tx, ReplyWriter& w) -> Status {
    ASYMNVM_ASSIGN_OR_RETURN(auto r, Combine(tx, SetOp::kInter, a, 2, 2 + numkeys, w));
    if (!r) return Status::Ok();
    int64_t n = static_cast<int64_t>(r->size());
    w.Integer(limit > 0 ? std::min(n, limit) : n);
    return Status::Ok();
  });
}

void SScan(CommandContext& c, const std::vector<std::string>& a) {
  // As HSCAN: cursor = 1 + the next slot, slots visited from the highest down.
  int64_t cursor = 0;
  if (!ParseInt64(a[2], &cursor) || cursor < 0) return c.out.Error("ERR invalid cursor");
  std::string pattern;
  bool has_pattern = false;
  int64_t count = 10;
  for (size_t i = 3; i < a.size(); ++i) {
    if (EqualsNoCase(a[i], "match") && i + 1 < a.size()) {
      pattern = a[++i];
      has_pattern = pattern != "*";
    } else if (EqualsNoCase(a[i], "count") && i + 1 < a.size()) {
      if (!ParseInt64(a[++i], &count)) return c.out.Error(std::string(kErrNotInteger));
      if (count < 1) return c.out.Error(std::string(kErrSyntax));
    } else {
      return c.out.Error(std::string(kErrSyntax));
    }
  }
  SnapshotRead(c, [&](CollTx& tx, ReplyWriter& w) -> Status {
    ASYMNVM_ASSIGN_OR_RETURN(Coll * s, OpenSet(tx, a[1], w));
    if (s == nullptr) return Status::Ok();
    const int64_t n = s->type == KeyType::kNone ? 0 : s->meta.size;
    int64_t pos = cursor == 0 ? n - 1 : std::min<int64_t>(cursor - 1, n - 1);
    std::vector<std::string> items;
    for (int64_t seen = 0; pos >= 0 && seen < count; --pos, ++seen) {
      ASYMNVM_ASSIGN_OR_RETURN(std::string m, SlotMember(tx, *s, pos));
      if (has_pattern && !GlobMatch(pattern, m)) continue;
      items.push_back(std::move(m));
    }
    w.Array(2);
    w.Bulk(std::to_string(pos < 0 ? 0 : pos + 1));
    w.Array(items.size());
    for (const auto& m : items) w.Bulk(m);
    return Status::Ok();
  });
}

}  // namespace asymnvm::kv::resp::handlers
