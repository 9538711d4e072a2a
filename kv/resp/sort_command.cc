// SORT and SORT_RO (Redis 7 sort.c): the elements of a list, set or sorted set sorted numerically
// or lexicographically (ALPHA), optionally by the values of other keys (BY pattern, a hash field
// with "->field"; BY nosort keeps the collection's own order), LIMIT offset count, GET patterns
// ("#" = the element), and STORE destination (the result as a list, replacing the destination;
// an empty result deletes it). Reading the source and writing the destination is one conditional
// commit (types.h CollTx: in parts when large); keys named by BY and GET patterns are read
// without a condition, so they are not part of the snapshot (Redis runs the command alone).
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "kv/resp/commands.h"
#include "kv/resp/data_util.h"
#include "kv/resp/types.h"
#include "kv/resp/value.h"

namespace asymnvm::kv::resp::handlers {
namespace {

// The elements SORT sorts, in the collection's own order: a list's from head to tail, a set's
// members in slot order, a sorted set's by score.
Result<std::vector<std::string>> SortableElements(CollTx& tx, const Coll& c) {
  if (c.type == KeyType::kZset) return ZsetMembersByScore(tx, c);
  std::vector<std::string> out;
  if (c.type == KeyType::kSet) {
    ASYMNVM_ASSIGN_OR_RETURN(std::vector<SlottedMember> all, SlottedAll(tx, c, 0));
    for (auto& m : all) out.push_back(std::move(m.member));
    return out;
  }
  for (int64_t seq = c.meta.head; seq < c.meta.tail; ++seq) {
    ASYMNVM_ASSIGN_OR_RETURN(std::optional<std::string> e, tx.Get(ElemKey(c.key, c.meta.id, seq)));
    if (!e) return tx.Inconsistent("list element " + std::to_string(seq) + " missing");
    out.push_back(std::move(*e));
  }
  return out;
}

struct SortArgs {
  bool desc = false;
  bool alpha = false;
  int64_t offset = 0;
  int64_t count = -1;
  std::optional<std::string> by;  // a pattern with '*'
  bool dontsort = false;          // BY without '*' (e.g. nosort)
  std::vector<std::string> gets;
  std::optional<std::string> store;
};

// Redis's argument loop: an unknown word or a missing argument is a syntax error.
bool ParseSortArgs(CommandContext& c, const std::vector<std::string>& a, bool readonly,
                   SortArgs* s) {
  for (size_t j = 2; j < a.size(); ++j) {
    const size_t left = a.size() - j - 1;
    if (EqualsNoCase(a[j], "ASC")) {
      s->desc = false;
    } else if (EqualsNoCase(a[j], "DESC")) {
      s->desc = true;
    } else if (EqualsNoCase(a[j], "ALPHA")) {
      s->alpha = true;
    } else if (EqualsNoCase(a[j], "LIMIT") && left >= 2) {
      if (!ParseInt64(a[j + 1], &s->offset) || !ParseInt64(a[j + 2], &s->count)) {
        c.out.Error(std::string(kErrNotInteger));
        return false;
      }
      j += 2;
    } else if (EqualsNoCase(a[j], "STORE") && left >= 1 && !readonly) {
      s->store = a[j + 1];
      ++j;
    } else if (EqualsNoCase(a[j], "BY") && left >= 1) {
      if (a[j + 1].find('*') == std::string::npos) {
        s->dontsort = true;
        s->by.reset();
      } else {
        s->dontsort = false;
        s->by = a[j + 1];
      }
      ++j;
    } else if (EqualsNoCase(a[j], "GET") && left >= 1) {
      s->gets.push_back(a[j + 1]);
      ++j;
    } else {
      c.out.Error(std::string(kErrSyntax));
      return false;
    }
  }
  return true;
}

// lookupKeyByPattern: "#" is the element; the first '*' is replaced by it; "->field" after the
// '*' reads that field of a hash, else the key must hold a string. nullopt where Redis gives nil.
Result<std::optional<std::string>> LookupByPattern(CommandContext& c, const std::string& pattern,
                                                   const std::string& elem) {
  if (pattern == "#") return std::optional<std::string>(elem);
  const size_t star = pattern.find('*');
  if (star == std::string::npos) return std::optional<std::string>();
  size_t arrow = pattern.find("->", star + 1);
  if (arrow != std::string::npos && arrow + 2 == pattern.size()) arrow = std::string::npos;
  const std::string key =
      pattern.substr(0, star) + elem +
      pattern.substr(star + 1, arrow == std::string::npos ? std::string::npos : arrow - star - 1);
  if (arrow == std::string::npos) {
    auto r = c.store.Get(key);
    if (!r.ok()) return r.status();
    if (!r->has_value()) return std::optional<std::string>();
    DecodedValue d = DecodeValue((*r)->value);
    if (d.type != 0 || (d.expire_at_ms != 0 && d.expire_at_ms <= c.state.NowMs())) {
      return std::optional<std::string>();
    }
    return std::optional<std::string>(std::string(d.data));
  }
  const std::string field = pattern.substr(arrow + 2);
  CollTx tx(c.store, c.state.NowMs());
  ASYMNVM_ASSIGN_OR_RETURN(Coll * h, tx.Open(key));
  if (h->type != KeyType::kHash) return std::optional<std::string>();
  ASYMNVM_ASSIGN_OR_RETURN(std::optional<SlotRef> ref, SlottedFind(tx, *h, field, 0));
  if (!ref) return std::optional<std::string>();
  ASYMNVM_ASSIGN_OR_RETURN(std::optional<std::string> rec,
                           tx.Get(SlotKey(h->key, h->meta.id, ref->slot)));
  std::string_view f, v;
  if (!rec || !DecodeHashSlot(*rec, &f, &v)) return std::optional<std::string>();
  return std::optional<std::string>(std::string(v));
}

struct Item {
  std::string elem;
  double score = 0;
  std::optional<std::string> weight;  // ALPHA with BY: the looked-up value (nil sorts first)
};

// The sorted (and limited, and GET-expanded) result of SORT over `src` as tx reads it; nullopt
// after replying an error (WRONGTYPE, a score that is not a number).
Result<std::optional<std::vector<std::optional<std::string>>>> SortResult(
    CommandContext& c, CollTx& tx, const std::string& src, SortArgs s, ReplyWriter& w) {
  using Out = std::optional<std::vector<std::optional<std::string>>>;
  ASYMNVM_ASSIGN_OR_RETURN(Coll * sc, tx.Open(src));
  if (sc->type == KeyType::kString || sc->type == KeyType::kHash) {
    w.Error(kErrWrongType);
    return Out();
  }
  std::vector<std::string> elems;
  if (sc->type != KeyType::kNone) {
    ASYMNVM_ASSIGN_OR_RETURN(elems, SortableElements(tx, *sc));
  }
  // A set has no order of its own: with STORE, BY nosort sorts it ALPHA (as Redis does, so that a
  // stored result does not depend on the encoding).
  if (s.dontsort && sc->type == KeyType::kSet && s.store) {
    s.dontsort = false;
    s.alpha = true;
    s.by.reset();
  }
  if (s.dontsort && s.desc && sc->type != KeyType::kSet) std::reverse(elems.begin(), elems.end());
  std::vector<Item> items(elems.size());
  for (size_t i = 0; i < elems.size(); ++i) items[i].elem = std::move(elems[i]);
  if (!s.dontsort) {
    for (auto& it : items) {
      std::optional<std::string> byval;
      if (s.by) {
        ASYMNVM_ASSIGN_OR_RETURN(byval, LookupByPattern(c, *s.by, it.elem));
        if (!byval) continue;  // nil: score 0, weight nil
      }
      const std::string& v = s.by ? *byval : it.elem;
      if (s.alpha) {
        if (s.by) it.weight = v;
        continue;
      }
      errno = 0;
      char* end = nullptr;
      it.score = std::strtod(v.c_str(), &end);
      if (v.empty() || end != v.c_str() + v.size() || errno == ERANGE || std::isnan(it.score) ||
          std::isspace(static_cast<unsigned char>(v[0]))) {
        w.Error("ERR One or more scores can't be converted into double");
        return Out();
      }
    }
    auto cmp = [&](const Item& x, const Item& y) {
      int r = 0;
      if (!s.alpha) {
        r = x.score < y.score ? -1 : (x.score > y.score ? 1 : x.elem.compare(y.elem));
      } else if (s.by) {
        if (!x.weight || !y.weight) {
          r = x.weight ? 1 : (y.weight ? -1 : 0);
        } else {
          r = x.weight->compare(*y.weight);
        }
      } else {
        r = x.elem.compare(y.elem);
      }
      return s.desc ? r > 0 : r < 0;
    };
    std::stable_sort(items.begin(), items.end(), cmp);
  }
  // LIMIT as Redis clamps it.
  const int64_t n = static_cast<int64_t>(items.size());
  int64_t start = s.offset < 0 ? 0 : s.offset;
  int64_t end = s.count < 0 ? n - 1 : start + s.count - 1;
  if (start >= n) {
    start = n - 1;
    end = n - 2;
  }
  if (end >= n) end = n - 1;
  std::vector<std::optional<std::string>> out;
  for (int64_t i = start; i <= end; ++i) {
    if (s.gets.empty()) {
      out.emplace_back(items[static_cast<size_t>(i)].elem);
      continue;
    }
    for (const auto& g : s.gets) {
      ASYMNVM_ASSIGN_OR_RETURN(std::optional<std::string> v,
                               LookupByPattern(c, g, items[static_cast<size_t>(i)].elem));
      out.push_back(std::move(v));
    }
  }
  return Out(std::move(out));
}

void SortGeneric(CommandContext& c, const std::vector<std::string>& a, bool readonly) {
  SortArgs s;
  if (!ParseSortArgs(c, a, readonly, &s)) return;
  if (!s.store) {
    return SnapshotRead(c, [&](CollTx& tx, ReplyWriter& w) -> Status {
      auto r = SortResult(c, tx, a[1], s, w);
      if (!r.ok()) return r.status();
      if (!*r) return Status::Ok();  // replied an error
      w.Array((*r)->size());
      for (const auto& v : **r) {
        if (v) {
          w.Bulk(*v);
        } else {
          w.Null();
        }
      }
      return Status::Ok();
    });
  }
  if (!CommitTogether(c, {a[1], *s.store})) return c.out.Error(std::string(kErrCrossSlot));
  RunTx(c, [&](CollTx& tx) {
    auto r = SortResult(c, tx, a[1], s, c.out);
    if (!r.ok()) return TxFail(c.out, r.status());
    if (!*r) return TxOutcome::kError;
    const auto& out = **r;
    auto dst = tx.Open(*s.store);
    if (!dst.ok()) return TxFail(c.out, dst.status());
    Coll* d = *dst;
    if (out.empty()) {
      if (d->type != KeyType::kNone) d->deleted = true;
    } else {
      tx.Create(d, KeyType::kList);
      for (size_t i = 0; i < out.size(); ++i) {
        tx.Put(ElemKey(d->key, d->meta.id, static_cast<int64_t>(i)), out[i].value_or(""));
      }
      d->meta.head = 0;
      d->meta.tail = d->meta.size = static_cast<int64_t>(out.size());
    }
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) c.out.Integer(static_cast<int64_t>(out.size()));
    return o;
  });
}

}  // namespace

void Sort(CommandContext& c, const std::vector<std::string>& a) { SortGeneric(c, a, false); }
void SortRo(CommandContext& c, const std::vector<std::string>& a) { SortGeneric(c, a, true); }

std::vector<CommandSpec> SortCommandSpecs() {
  return {
      {"sort", -2, kWrite | kUnnamedKeys, 1, 1, 1, "generic", "1.0.0",
       "Sorts the elements in a list, a set, or a sorted set, optionally storing the result.",
       "BY and GET patterns read their keys outside the command's snapshot; STORE: one "
       "conditional commit with the source (in a replicated cluster its key must share the "
       "source's shard, else -CROSSSLOT)",
       Sort},
      {"sort_ro", -2, kReadonly, 1, 1, 1, "generic", "7.0.0",
       "Returns the sorted elements of a list, a set, or a sorted set.", "as SORT, without STORE",
       SortRo},
  };
}

}  // namespace asymnvm::kv::resp::handlers
