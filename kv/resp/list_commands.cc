// Redis list commands (doc/types.md §Lists). Element i of a list of incarnation id is record
// 'l'+seq with seq = head + i; the metadata holds [head, tail). Pushes move head down or tail up;
// pops delete the end record. Records outside [head, tail) are never read and are overwritten by a
// later push that reaches their sequence number.
#include <algorithm>

#include "kv/resp/types.h"

namespace asymnvm::kv::resp::handlers {
namespace {

// Records LTRIM deletes before it leaves the trimmed ones as dead records of the incarnation.
constexpr int64_t kTrimDeleteMax = 48;

TxOutcome Fail(CommandContext& c, const Status& st) { return TxFail(c.out, st); }

Result<Coll*> OpenList(CollTx& tx, std::string_view key, ReplyWriter& w) {
  bool wrong = false;
  ASYMNVM_ASSIGN_OR_RETURN(Coll * l, tx.OpenAs(key, KeyType::kList, &wrong));
  if (wrong) {
    w.Error(kErrWrongType);
    return static_cast<Coll*>(nullptr);
  }
  return l;
}

int64_t Len(const Coll& l) { return l.type == KeyType::kNone ? 0 : l.meta.tail - l.meta.head; }

Result<std::string> Elem(CollTx& tx, const Coll& l, int64_t index) {
  auto r = tx.Get(ElemKey(l.key, l.meta.id, l.meta.head + index));
  if (!r.ok()) return r.status();
  if (!r->has_value()) return tx.Inconsistent("list element record missing");
  return std::move(**r);
}

void SetElem(CollTx& tx, Coll* l, int64_t index, std::string v) {
  tx.Put(ElemKey(l->key, l->meta.id, l->meta.head + index), std::move(v));
  l->changed = true;
}

void Push(CollTx& tx, Coll* l, bool left, std::string v) {
  if (left) {
    l->meta.head--;
    tx.Put(ElemKey(l->key, l->meta.id, l->meta.head), std::move(v));
  } else {
    tx.Put(ElemKey(l->key, l->meta.id, l->meta.tail), std::move(v));
    l->meta.tail++;
  }
  l->meta.size = l->meta.tail - l->meta.head;
  l->changed = true;
}

Result<std::string> Pop(CollTx& tx, Coll* l, bool left) {
  int64_t seq = left ? l->meta.head : l->meta.tail - 1;
  auto r = tx.Get(ElemKey(l->key, l->meta.id, seq));
  if (!r.ok()) return r.status();
  if (!r->has_value()) return tx.Inconsistent("list element record missing");
  tx.Del(ElemKey(l->key, l->meta.id, seq));
  if (left) {
    l->meta.head++;
  } else {
    l->meta.tail--;
  }
  l->meta.size = l->meta.tail - l->meta.head;
  l->changed = true;
  return std::move(**r);
}

Result<std::vector<std::string>> All(CollTx& tx, const Coll& l, int64_t from, int64_t to) {
  std::vector<std::string> out;
  for (int64_t i = from; i <= to; ++i) {
    ASYMNVM_ASSIGN_OR_RETURN(std::string e, Elem(tx, l, i));
    out.push_back(std::move(e));
  }
  return out;
}

// Rewrites the list as `elems` keeping head fixed: writes from the first index that differs.
void Rewrite(CollTx& tx, Coll* l, const std::vector<std::string>& old,
             const std::vector<std::string>& elems) {
  size_t first = 0;
  while (first < old.size() && first < elems.size() && old[first] == elems[first]) ++first;
  for (size_t i = first; i < elems.size(); ++i) SetElem(tx, l, static_cast<int64_t>(i), elems[i]);
  for (size_t i = elems.size(); i < old.size(); ++i) {
    tx.Del(ElemKey(l->key, l->meta.id, l->meta.head + static_cast<int64_t>(i)));
  }
  l->meta.tail = l->meta.head + static_cast<int64_t>(elems.size());
  l->meta.size = static_cast<int64_t>(elems.size());
  l->changed = true;
}

bool LeftWord(std::string_view w, bool* left) {
  if (EqualsNoCase(w, "left")) {
    *left = true;
  } else if (EqualsNoCase(w, "right")) {
    *left = false;
  } else {
    return false;
  }
  return true;
}

}  // namespace

// LPUSH RPUSH LPUSHX RPUSHX.
void LPush(CommandContext& c, const std::vector<std::string>& a) {
  const bool left = a[0][0] == 'l' || a[0][0] == 'L';
  const bool only_existing = a[0].size() == 6;  // lpushx / rpushx
  RunTx(c, [&](CollTx& tx) {
    auto l = OpenList(tx, a[1], c.out);
    if (!l.ok()) return Fail(c, l.status());
    if (*l == nullptr) return TxOutcome::kError;
    if ((*l)->type == KeyType::kNone) {
      if (only_existing) {
        c.out.Integer(0);
        return TxOutcome::kCommitted;
      }
      tx.Create(*l, KeyType::kList);
    }
    for (size_t i = 2; i < a.size(); ++i) Push(tx, *l, left, a[i]);
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) c.out.Integer(Len(**l));
    return o;
  });
}

// LPOP RPOP.
void LPop(CommandContext& c, const std::vector<std::string>& a) {
  const bool left = a[0][0] == 'l' || a[0][0] == 'L';
  const bool has_count = a.size() >= 3;
  int64_t count = 1;
  if (a.size() > 3) return c.out.Error(ArityError(a[0]));  // as Redis (arity is -2)
  if (has_count && (!ParseInt64(a[2], &count) || count < 0)) {
    return c.out.Error(std::string(kErrOutOfRange));
  }
  RunTx(c, [&](CollTx& tx) {
    auto l = OpenList(tx, a[1], c.out);
    if (!l.ok()) return Fail(c, l.status());
    if (*l == nullptr) return TxOutcome::kError;
    if (Len(**l) == 0) {
      if (has_count) {
        c.out.NullArray();
      } else {
        c.out.Null();
      }
      return TxOutcome::kCommitted;
    }
    std::vector<std::string> popped;
    for (int64_t i = 0; i < count && Len(**l) > 0; ++i) {
      auto e = Pop(tx, *l, left);
      if (!e.ok()) return Fail(c, e.status());
      popped.push_back(std::move(*e));
    }
    if (popped.empty()) {
      c.out.Array(0);
      return TxOutcome::kCommitted;
    }
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) {
      if (has_count) {
        c.out.Array(popped.size());
        for (const auto& e : popped) c.out.Bulk(e);
      } else {
        c.out.Bulk(popped[0]);
      }
    }
    return o;
  });
}

void LLen(CommandContext& c, const std::vector<std::string>& a) {
  CollTx tx(c.store, c.state.NowMs());
  auto l = OpenList(tx, a[1], c.out);
  if (!l.ok()) return c.out.Error(TxError(l.status()));
  if (*l == nullptr) return;
  c.out.Integer(Len(**l));
}

void LIndex(CommandContext& c, const std::vector<std::string>& a) {
  int64_t index = 0;
  if (!ParseInt64(a[2], &index)) return c.out.Error(std::string(kErrNotInteger));
  SnapshotRead(c, [&](CollTx& tx, ReplyWriter& w) -> Status {
    ASYMNVM_ASSIGN_OR_RETURN(Coll * l, OpenList(tx, a[1], w));
    if (l == nullptr) return Status::Ok();
    int64_t n = Len(*l), i = index < 0 ? n + index : index;
    if (i < 0 || i >= n) {
      w.Null();
      return Status::Ok();
    }
    ASYMNVM_ASSIGN_OR_RETURN(std::string e, Elem(tx, *l, i));
    w.Bulk(e);
    return Status::Ok();
  });
}

void LRange(CommandContext& c, const std::vector<std::string>& a) {
  int64_t start = 0, stop = 0;
  if (!ParseInt64(a[2], &start) || !ParseInt64(a[3], &stop)) {
    return c.out.Error(std::string(kErrNotInteger));
  }
  SnapshotRead(c, [&](CollTx& tx, ReplyWriter& w) -> Status {
    ASYMNVM_ASSIGN_OR_RETURN(Coll * l, OpenList(tx, a[1], w));
    if (l == nullptr) return Status::Ok();
    int64_t n = Len(*l);
    int64_t s = start < 0 ? std::max<int64_t>(0, n + start) : start;
    int64_t e = stop < 0 ? n + stop : std::min(stop, n - 1);
    if (s > e || s >= n) {
      w.Array(0);
      return Status::Ok();
    }
    ASYMNVM_ASSIGN_OR_RETURN(std::vector<std::string> v, All(tx, *l, s, e));
    w.Array(v.size());
    for (const auto& x : v) w.Bulk(x);
    return Status::Ok();
  });
}

void LSet(CommandContext& c, const std::vector<std::string>& a) {
  int64_t index = 0;
  if (!ParseInt64(a[2], &index)) return c.out.Error(std::string(kErrNotInteger));
  RunTx(c, [&](CollTx& tx) {
    auto l = OpenList(tx, a[1], c.out);
    if (!l.ok()) return Fail(c, l.status());
    if (*l == nullptr) return TxOutcome::kError;
    if ((*l)->type == KeyType::kNone) {
      c.out.Error("ERR no such key");
      return TxOutcome::kError;
    }
    int64_t n = Len(**l), i = index < 0 ? n + index : index;
    if (i < 0 || i >= n) {
      c.out.Error("ERR index out of range");
      return TxOutcome::kError;
    }
    SetElem(tx, *l, i, a[3]);
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) c.out.Ok();
    return o;
  });
}

void LTrim(CommandContext& c, const std::vector<std::string>& a) {
  int64_t start = 0, stop = 0;
  if (!ParseInt64(a[2], &start) || !ParseInt64(a[3], &stop)) {
    return c.out.Error(std::string(kErrNotInteger));
  }
  RunTx(c, [&](CollTx& tx) {
    auto l = OpenList(tx, a[1], c.out);
    if (!l.ok()) return Fail(c, l.status());
    if (*l == nullptr) return TxOutcome::kError;
    Coll* list = *l;
    int64_t n = Len(*list);
    if (n == 0) {
      c.out.Ok();
      return TxOutcome::kCommitted;
    }
    int64_t s = start < 0 ? std::max<int64_t>(0, n + start) : start;
    int64_t e = stop < 0 ? n + stop : std::min(stop, n - 1);
    int64_t keep_from = 0, keep_to = -1;  // indexes kept
    if (s <= e && s < n) {
      keep_from = s;
      keep_to = e;
    }
    const int64_t drop = n - (keep_to - keep_from + 1);
    if (drop == 0) {
      c.out.Ok();
      return TxOutcome::kCommitted;
    }
    if (drop <= kTrimDeleteMax) {
      for (int64_t i = 0; i < n; ++i) {
        if (i < keep_from || i > keep_to)
          tx.Del(ElemKey(list->key, list->meta.id, list->meta.head + i));
      }
    }
    const int64_t old_head = list->meta.head;
    if (keep_to < keep_from) {
      list->meta.head = list->meta.tail = old_head;
    } else {
      list->meta.head = old_head + keep_from;
      list->meta.tail = old_head + keep_to + 1;
    }
    list->meta.size = list->meta.tail - list->meta.head;
    list->changed = true;
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) c.out.Ok();
    return o;
  });
}

void LRem(CommandContext& c, const std::vector<std::string>& a) {
  int64_t count = 0;
  if (!ParseInt64(a[2], &count)) return c.out.Error(std::string(kErrNotInteger));
  RunTx(c, [&](CollTx& tx) {
    auto l = OpenList(tx, a[1], c.out);
    if (!l.ok()) return Fail(c, l.status());
    if (*l == nullptr) return TxOutcome::kError;
    int64_t n = Len(**l);
    if (n == 0) {
      c.out.Integer(0);
      return TxOutcome::kCommitted;
    }
    auto old = All(tx, **l, 0, n - 1);
    if (!old.ok()) return Fail(c, old.status());
    std::vector<bool> drop(old->size(), false);
    int64_t removed = 0;
    const int64_t limit = count == 0 ? INT64_MAX : (count < 0 ? -count : count);
    if (count >= 0) {
      for (size_t i = 0; i < old->size() && removed < limit; ++i) {
        if ((*old)[i] == a[3]) drop[i] = true, ++removed;
      }
    } else {
      for (size_t i = old->size(); i-- > 0 && removed < limit;) {
        if ((*old)[i] == a[3]) drop[i] = true, ++removed;
      }
    }
    if (removed == 0) {
      c.out.Integer(0);
      return TxOutcome::kCommitted;
    }
    std::vector<std::string> kept;
    for (size_t i = 0; i < old->size(); ++i) {
      if (!drop[i]) kept.push_back((*old)[i]);
    }
    Rewrite(tx, *l, *old, kept);
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) c.out.Integer(removed);
    return o;
  });
}

void LInsert(CommandContext& c, const std::vector<std::string>& a) {
  bool before = false;
  if (EqualsNoCase(a[2], "before")) {
    before = true;
  } else if (!EqualsNoCase(a[2], "after")) {
    return c.out.Error(std::string(kErrSyntax));
  }
  RunTx(c, [&](CollTx& tx) {
    auto l = OpenList(tx, a[1], c.out);
    if (!l.ok()) return Fail(c, l.status());
    if (*l == nullptr) return TxOutcome::kError;
    Coll* list = *l;
    int64_t n = Len(*list);
    if (n == 0) {
      c.out.Integer(0);
      return TxOutcome::kCommitted;
    }
    int64_t pivot = -1;
    for (int64_t i = 0; i < n && pivot < 0; ++i) {
      auto e = Elem(tx, *list, i);
      if (!e.ok()) return Fail(c, e.status());
      if (*e == a[3]) pivot = i;
    }
    if (pivot < 0) {
      c.out.Integer(-1);
      return TxOutcome::kCommitted;
    }
    const int64_t q = before ? pivot : pivot + 1;  // the new element's index
    if (q < n - q) {
      // Shift elements [0, q) one to the left.
      for (int64_t i = 0; i < q; ++i) {
        auto e = Elem(tx, *list, i);
        if (!e.ok()) return Fail(c, e.status());
        tx.Put(ElemKey(list->key, list->meta.id, list->meta.head + i - 1), std::move(*e));
      }
      list->meta.head--;
      tx.Put(ElemKey(list->key, list->meta.id, list->meta.head + q), a[4]);
    } else {
      for (int64_t i = n - 1; i >= q; --i) {
        auto e = Elem(tx, *list, i);
        if (!e.ok()) return Fail(c, e.status());
        tx.Put(ElemKey(list->key, list->meta.id, list->meta.head + i + 1), std::move(*e));
      }
      list->meta.tail++;
      tx.Put(ElemKey(list->key, list->meta.id, list->meta.head + q), a[4]);
    }
    list->meta.size = list->meta.tail - list->meta.head;
    list->changed = true;
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) c.out.Integer(Len(*list));
    return o;
  });
}

void LPos(CommandContext& c, const std::vector<std::string>& a) {
  int64_t rank = 1, count = -1, maxlen = 0;
  for (size_t i = 3; i < a.size(); i += 2) {
    if (i + 1 >= a.size()) return c.out.Error(std::string(kErrSyntax));
    int64_t v = 0;
    if (!ParseInt64(a[i + 1], &v)) return c.out.Error(std::string(kErrNotInteger));
    if (EqualsNoCase(a[i], "rank")) {
      if (v == 0 || v == INT64_MIN) {
        return c.out.Error(
            "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... "
            "or use negative to start from the end of the list");
      }
      rank = v;
    } else if (EqualsNoCase(a[i], "count")) {
      if (v < 0) return c.out.Error("ERR COUNT can't be negative");
      count = v;
    } else if (EqualsNoCase(a[i], "maxlen")) {
      if (v < 0) return c.out.Error("ERR MAXLEN can't be negative");
      maxlen = v;
    } else {
      return c.out.Error(std::string(kErrSyntax));
    }
  }
  SnapshotRead(c, [&](CollTx& tx, ReplyWriter& w) -> Status {
    ASYMNVM_ASSIGN_OR_RETURN(Coll * l, OpenList(tx, a[1], w));
    if (l == nullptr) return Status::Ok();
    const int64_t n = Len(*l);
    std::vector<int64_t> found;
    int64_t skip = (rank > 0 ? rank : -rank) - 1;
    const int64_t want = count < 0 ? 1 : (count == 0 ? INT64_MAX : count);
    int64_t examined = 0;
    for (int64_t k = 0; k < n && static_cast<int64_t>(found.size()) < want; ++k) {
      if (maxlen > 0 && examined >= maxlen) break;
      ++examined;
      const int64_t i = rank > 0 ? k : n - 1 - k;
      ASYMNVM_ASSIGN_OR_RETURN(std::string e, Elem(tx, *l, i));
      if (e != a[2]) continue;
      if (skip > 0) {
        --skip;
        continue;
      }
      found.push_back(i);
    }
    if (count < 0) {
      if (found.empty()) {
        w.Null();
      } else {
        w.Integer(found[0]);
      }
    } else {
      w.Array(found.size());
      for (int64_t i : found) w.Integer(i);
    }
    return Status::Ok();
  });
}

// LMOVE src dst LEFT|RIGHT LEFT|RIGHT, RPOPLPUSH src dst.
void LMove(CommandContext& c, const std::vector<std::string>& a) {
  bool from_left = false, to_left = true;
  if (EqualsNoCase(a[0], "lmove")) {
    if (!LeftWord(a[3], &from_left) || !LeftWord(a[4], &to_left)) {
      return c.out.Error(std::string(kErrSyntax));
    }
  }
  ListMove(c, a[1], a[2], from_left, to_left, false, nullptr);
}

// As Redis's lmoveGenericCommand: the source first (WRONGTYPE, or nil when empty), the
// destination's type only when there is an element to move.
void ListMove(CommandContext& c, const std::string& src_key, const std::string& dst_key,
              bool from_left, bool to_left, bool skip_wrongtype, bool* empty) {
  RunTx(c, [&](CollTx& tx) {
    if (empty != nullptr) *empty = false;
    bool wrong = false;
    auto src = tx.OpenAs(src_key, KeyType::kList, &wrong);
    if (!src.ok()) return Fail(c, src.status());
    if (wrong && !skip_wrongtype) {
      c.out.Error(kErrWrongType);
      return TxOutcome::kError;
    }
    if (wrong || Len(**src) == 0) {
      if (empty != nullptr) {
        *empty = true;
      } else {
        c.out.Null();
      }
      return TxOutcome::kCommitted;
    }
    auto dst = OpenList(tx, dst_key, c.out);
    if (!dst.ok()) return Fail(c, dst.status());
    if (*dst == nullptr) return TxOutcome::kError;
    auto e = Pop(tx, *src, from_left);
    if (!e.ok()) return Fail(c, e.status());
    if ((*dst)->type == KeyType::kNone) tx.Create(*dst, KeyType::kList);
    Push(tx, *dst, to_left, *e);
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) c.out.Bulk(*e);
    return o;
  });
}

void ListPopFirst(CommandContext& c, const std::vector<std::string>& keys, bool left, int64_t count,
                  bool skip_wrongtype, bool* empty) {
  if (keys.size() > 1) {
    // One key at a time: a transaction's condition covers only the key it pops, so the keys may
    // be in different shards (led by different servers).
    for (size_t i = 0; i < keys.size(); ++i) {
      const bool last = i + 1 == keys.size();
      bool none = false;
      ListPopFirst(c, {keys[i]}, left, count, skip_wrongtype, last ? empty : &none);
      if (!none) return;  // popped, replied an error, or the last key answered
    }
    return;
  }
  RunTx(c, [&](CollTx& tx) {
    if (empty != nullptr) *empty = false;
    Coll* l = nullptr;
    for (const auto& k : keys) {
      bool wrong = false;
      auto r = tx.OpenAs(k, KeyType::kList, &wrong);
      if (!r.ok()) return Fail(c, r.status());
      if (wrong && skip_wrongtype) continue;
      if (wrong) {
        c.out.Error(kErrWrongType);
        return TxOutcome::kError;
      }
      if (Len(**r) > 0) {
        l = *r;
        break;
      }
    }
    if (l == nullptr) {
      if (empty != nullptr) {
        *empty = true;
      } else {
        c.out.NullArray();
      }
      return TxOutcome::kCommitted;
    }
    std::vector<std::string> popped;
    const int64_t want = count < 0 ? 1 : count;
    for (int64_t i = 0; i < want && Len(*l) > 0; ++i) {
      auto e = Pop(tx, l, left);
      if (!e.ok()) return Fail(c, e.status());
      popped.push_back(std::move(*e));
    }
    TxOutcome o = tx.Commit(c.out);
    if (o != TxOutcome::kCommitted) return o;
    c.out.Array(2);
    c.out.Bulk(l->key);
    if (count < 0) {
      c.out.Bulk(popped[0]);
    } else {
      c.out.Array(popped.size());
      for (const auto& e : popped) c.out.Bulk(e);
    }
    return o;
  });
}

}  // namespace asymnvm::kv::resp::handlers
