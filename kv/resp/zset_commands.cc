// Redis sorted-set commands (doc/types.md §Sorted sets). A sorted set is a slotted collection
// (types.h SlottedPut): member m → record 'f'+m holding its slot and its score; slot i → record
// 's'+i holding the score and m. The score is the double's 8 bytes, little-endian. Commands that
// depend on order (ranges, ranks, pops) read every member and sort by (score, member) in memory:
// O(n log n) per command; an ordered per-shard index is the future work (doc/types.md).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "kv/resp/types.h"

namespace asymnvm::kv::resp::handlers {
namespace {

constexpr size_t kScoreSize = 8;  // the payload of a sorted set's member and slot records
constexpr int64_t kMaxRandomReply = 1 << 24;  // ZRANDMEMBER with a negative count

std::string EncodeScore(double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  return EncodeI64(static_cast<int64_t>(bits));
}

bool DecodeScore(std::string_view p, double* v) {
  int64_t bits = 0;
  if (p.size() != kScoreSize || !DecodeI64(p, &bits)) return false;
  std::memcpy(v, &bits, sizeof *v);
  return !std::isnan(*v);
}

// Redis's text for a double (addReplyDouble, d2string): the shortest digits that read back as the
// same double, laid out as printf's %.17g lays them out (fixed for exponents -4..16, else
// d.ddde+XX); "inf" and "-inf".
std::string FormatScore(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(r.ptr - buf));
  const bool neg = sci[0] == '-';
  const size_t e = sci.find('e');
  int exp = std::atoi(std::string(sci.substr(e + 1)).c_str());
  std::string digits;
  for (size_t i = neg ? 1 : 0; i < e; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 17) {
    out.push_back(digits[0]);
    if (digits.size() > 1) out.append(".").append(digits, 1);
    out.append(exp < 0 ? "e-" : "e+");
    int a = std::abs(exp);
    if (a < 10) out.push_back('0');
    out.append(std::to_string(a));
  } else if (exp >= 0) {
    const size_t whole = static_cast<size_t>(exp) + 1;
    if (digits.size() <= whole) {
      out.append(digits).append(whole - digits.size(), '0');
    } else {
      out.append(digits, 0, whole).append(".").append(digits, whole);
    }
  } else {
    out.append("0.").append(static_cast<size_t>(-exp - 1), '0').append(digits);
  }
  return out;
}

// A score reply: a RESP3 double, a bulk string in RESP2.
void ReplyScore(ReplyWriter& w, double v) {
  std::string s = FormatScore(v);
  if (w.proto() >= 3) {
    w.Raw("," + s + "\r\n");
  } else {
    w.Bulk(s);
  }
}

struct ZEntry {
  std::string member;
  double score = 0;
};

bool Before(const ZEntry& a, const ZEntry& b) {
  return a.score < b.score || (a.score == b.score && a.member < b.member);
}

Status BadScore() { return Status::Corruption("sorted set score record malformed"); }

// The member's slot and score, or nullopt.
struct Found {
  int64_t slot = 0;
  double score = 0;
};
Result<std::optional<Found>> Find(CollTx& tx, const Coll& z, std::string_view member) {
  ASYMNVM_ASSIGN_OR_RETURN(std::optional<SlotRef> ref, SlottedFind(tx, z, member, kScoreSize));
  if (!ref) return std::optional<Found>();
  Found f;
  f.slot = ref->slot;
  if (!DecodeScore(ref->payload, &f.score)) return BadScore();
  return std::optional<Found>(f);
}

// Every member in slot order. A set (a ZUNION/ZINTER/ZDIFF source) gives score 1 to each member.
Result<std::vector<ZEntry>> Entries(CollTx& tx, const Coll& z) {
  const size_t psize = z.type == KeyType::kZset ? kScoreSize : 0;
  ASYMNVM_ASSIGN_OR_RETURN(std::vector<SlottedMember> all, SlottedAll(tx, z, psize));
  std::vector<ZEntry> out;
  out.reserve(all.size());
  for (auto& m : all) {
    ZEntry e{std::move(m.member), 1.0};
    if (psize != 0 && !DecodeScore(m.payload, &e.score)) return BadScore();
    out.push_back(std::move(e));
  }
  return out;
}

Result<std::vector<ZEntry>> Sorted(CollTx& tx, const Coll& z) {
  ASYMNVM_ASSIGN_OR_RETURN(std::vector<ZEntry> v, Entries(tx, z));
  std::sort(v.begin(), v.end(), Before);
  return v;
}

int64_t SizeOf(const Coll& z) { return z.type == KeyType::kNone ? 0 : z.meta.size; }

// --- Ranges (Redis's zslParseRange / zslParseLexRange and their comparisons) ---

struct ScoreRange {
  double min = 0, max = 0;
  bool minex = false, maxex = false;
  bool GteMin(double v) const { return minex ? v > min : v >= min; }
  bool LteMax(double v) const { return maxex ? v < max : v <= max; }
  bool Empty() const { return min > max || (min == max && (minex || maxex)); }
};

bool ParseScoreItem(std::string_view s, double* v, bool* ex) {
  std::string t(s);
  const char* p = t.c_str();
  *ex = !t.empty() && t[0] == '(';
  if (*ex) ++p;
  char* end = nullptr;
  *v = std::strtod(p, &end);
  return end == t.c_str() + t.size() && !std::isnan(*v);
}

bool ParseScoreRange(std::string_view min, std::string_view max, ScoreRange* r) {
  return ParseScoreItem(min, &r->min, &r->minex) && ParseScoreItem(max, &r->max, &r->maxex);
}

// A lexicographic bound: "-" (below everything), "+" (above everything), "(v" or "[v".
struct LexBound {
  enum Kind { kMinusInf, kPlusInf, kValue } kind = kValue;
  std::string v;
  bool ex = false;
};

bool ParseLexItem(std::string_view s, LexBound* b) {
  if (s.empty()) return false;
  switch (s[0]) {
    case '+':
    case '-':
      if (s.size() != 1) return false;
      b->kind = s[0] == '+' ? LexBound::kPlusInf : LexBound::kMinusInf;
      b->ex = true;
      return true;
    case '(':
    case '[':
      b->kind = LexBound::kValue;
      b->ex = s[0] == '(';
      b->v.assign(s.substr(1));
      return true;
    default:
      return false;
  }
}

// Compares a member (or bound) with a bound as Redis's sdscmplex does.
int LexCmp(const LexBound& a, const LexBound& b) {
  if (a.kind == b.kind && a.kind != LexBound::kValue) return 0;
  if (a.kind == LexBound::kMinusInf || b.kind == LexBound::kPlusInf) return -1;
  if (a.kind == LexBound::kPlusInf || b.kind == LexBound::kMinusInf) return 1;
  int c = a.v.compare(b.v);
  return c < 0 ? -1 : (c > 0 ? 1 : 0);
}

struct LexRange {
  LexBound min, max;
  static int Cmp(std::string_view m, const LexBound& b) {
    LexBound v;
    v.v.assign(m);
    return LexCmp(v, b);
  }
  bool GteMin(std::string_view m) const {
    int c = Cmp(m, min);
    return min.ex ? c > 0 : c >= 0;
  }
  bool LteMax(std::string_view m) const {
    int c = Cmp(m, max);
    return max.ex ? c < 0 : c <= 0;
  }
  bool Empty() const {
    int c = LexCmp(min, max);
    return c > 0 || (c == 0 && (min.ex || max.ex));
  }
};

bool ParseLexRange(std::string_view min, std::string_view max, LexRange* r) {
  return ParseLexItem(min, &r->min) && ParseLexItem(max, &r->max);
}

constexpr std::string_view kErrMinMaxFloat = "ERR min or max is not a float";
constexpr std::string_view kErrMinMaxLex = "ERR min or max not valid string range item";

enum class RangeType { kAuto, kRank, kScore, kLex };
enum class Direction { kAuto, kForward, kReverse };

struct RangeSpec {
  RangeType type = RangeType::kRank;
  bool reverse = false;
  bool withscores = false;
  int64_t start = 0, end = 0;  // ranks
  ScoreRange score;
  LexRange lex;
  int64_t offset = 0, limit = -1;  // LIMIT (limit < 0: no limit)
};

// Redis's zrangeGenericCommand argument rules: a[src] is the key, then min and max, then options
// (WITHSCORES unless storing, LIMIT, REV and BYSCORE/BYLEX unless the command fixes them). False
// after replying the error.
bool ParseRange(ReplyWriter& out, const std::vector<std::string>& a, size_t src, bool store,
                RangeType type, Direction dir, RangeSpec* r) {
  for (size_t j = src + 3; j < a.size(); ++j) {
    const size_t left = a.size() - j - 1;
    if (!store && EqualsNoCase(a[j], "withscores")) {
      r->withscores = true;
    } else if (EqualsNoCase(a[j], "limit") && left >= 2) {
      if (!ParseInt64(a[j + 1], &r->offset) || !ParseInt64(a[j + 2], &r->limit)) {
        out.Error(kErrNotInteger);
        return false;
      }
      j += 2;
    } else if (dir == Direction::kAuto && EqualsNoCase(a[j], "rev")) {
      dir = Direction::kReverse;
    } else if (type == RangeType::kAuto && EqualsNoCase(a[j], "bylex")) {
      type = RangeType::kLex;
    } else if (type == RangeType::kAuto && EqualsNoCase(a[j], "byscore")) {
      type = RangeType::kScore;
    } else {
      out.Error(kErrSyntax);
      return false;
    }
  }
  if (type == RangeType::kAuto) type = RangeType::kRank;
  r->type = type;
  r->reverse = dir == Direction::kReverse;
  if (r->limit != -1 && type == RangeType::kRank) {
    out.Error(
        "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX");
    return false;
  }
  if (r->withscores && type == RangeType::kLex) {
    out.Error("ERR syntax error, WITHSCORES not supported in combination with BYLEX");
    return false;
  }
  // BYSCORE/BYLEX in reverse take the range as max, min.
  const bool swap = r->reverse && type != RangeType::kRank;
  const std::string& lo = a[swap ? src + 2 : src + 1];
  const std::string& hi = a[swap ? src + 1 : src + 2];
  switch (type) {
    case RangeType::kAuto:
    case RangeType::kRank:
      if (!ParseInt64(lo, &r->start) || !ParseInt64(hi, &r->end)) {
        out.Error(kErrNotInteger);
        return false;
      }
      break;
    case RangeType::kScore:
      if (!ParseScoreRange(lo, hi, &r->score)) {
        out.Error(kErrMinMaxFloat);
        return false;
      }
      break;
    case RangeType::kLex:
      if (!ParseLexRange(lo, hi, &r->lex)) {
        out.Error(kErrMinMaxLex);
        return false;
      }
      break;
  }
  return true;
}

// Normalizes a rank range [start, end] of n members as Redis does; false when it is empty.
bool NormalizeRanks(int64_t n, int64_t* start, int64_t* end) {
  if (*start < 0) *start = n + *start;
  if (*end < 0) *end = n + *end;
  if (*start < 0) *start = 0;
  if (*start > *end || *start >= n) return false;
  if (*end >= n) *end = n - 1;
  return true;
}

// The entries of `sorted` (ascending) that the range selects, in reply order. Score and lex
// ranges walk as Redis's skiplist does: from the first member in range (the last, in reverse),
// skip `offset`, then take up to `limit` while in range.
std::vector<const ZEntry*> SelectRange(const std::vector<ZEntry>& sorted, const RangeSpec& r) {
  std::vector<const ZEntry*> out;
  const int64_t n = static_cast<int64_t>(sorted.size());
  if (r.type == RangeType::kRank || r.type == RangeType::kAuto) {
    int64_t start = r.start, end = r.end;
    if (!NormalizeRanks(n, &start, &end)) return out;
    for (int64_t i = start; i <= end; ++i) {
      out.push_back(&sorted[static_cast<size_t>(r.reverse ? n - 1 - i : i)]);
    }
    return out;
  }
  const bool by_score = r.type == RangeType::kScore;
  auto gte_min = [&](const ZEntry& e) {
    return by_score ? r.score.GteMin(e.score) : r.lex.GteMin(e.member);
  };
  auto lte_max = [&](const ZEntry& e) {
    return by_score ? r.score.LteMax(e.score) : r.lex.LteMax(e.member);
  };
  if (by_score ? r.score.Empty() : r.lex.Empty()) return out;
  // An offset past the end (or negative: Redis's skip loop then consumes every member) selects
  // nothing; checked first so that the index arithmetic below cannot overflow.
  if (r.offset < 0 || r.offset >= n) return out;
  int64_t i = 0;
  if (!r.reverse) {
    while (i < n && !gte_min(sorted[static_cast<size_t>(i)])) ++i;
    if (i == n || !lte_max(sorted[static_cast<size_t>(i)])) return out;
  } else {
    i = n - 1;
    while (i >= 0 && !lte_max(sorted[static_cast<size_t>(i)])) --i;
    if (i < 0 || !gte_min(sorted[static_cast<size_t>(i)])) return out;
  }
  i += r.reverse ? -r.offset : r.offset;
  for (; i >= 0 && i < n && (r.limit < 0 || static_cast<int64_t>(out.size()) < r.limit);
       i += r.reverse ? -1 : 1) {
    const ZEntry& e = sorted[static_cast<size_t>(i)];
    if (r.reverse ? !gte_min(e) : !lte_max(e)) break;
    out.push_back(&e);
  }
  return out;
}

// An array of members, with their scores when asked: flat pairs in RESP2, [member, score] pairs
// in RESP3 (Redis's zrange result handler).
void ReplyEntries(ReplyWriter& w, const std::vector<const ZEntry*>& v, bool withscores) {
  const bool nested = withscores && w.proto() >= 3;
  w.Array(withscores && !nested ? v.size() * 2 : v.size());
  for (const ZEntry* e : v) {
    if (nested) w.Array(2);
    w.Bulk(e->member);
    if (withscores) ReplyScore(w, e->score);
  }
}

// Replaces `dst` (any type) by a sorted set of `result` in the transaction, commits, and replies
// the size (0: dst deleted).
TxOutcome StoreResult(CommandContext& c, CollTx& tx, const std::string& dst,
                      const std::vector<const ZEntry*>& result) {
  auto d = tx.Open(dst);
  if (!d.ok()) return TxFail(c.out, d.status());
  if (result.empty()) {
    (*d)->deleted = true;
  } else {
    tx.Create(*d, KeyType::kZset);
    for (const ZEntry* e : result) {
      if (!MemberSizeOk(c.out, dst, e->member)) return TxOutcome::kError;
      SlottedPut(tx, *d, e->member, EncodeScore(e->score), std::nullopt);
    }
  }
  TxOutcome o = tx.Commit(c.out);
  if (o == TxOutcome::kCommitted) c.out.Integer(static_cast<int64_t>(result.size()));
  return o;
}

// Removes `victims` from z (all of them: the key goes, its records left to the incarnation).
Status RemoveEntries(CollTx& tx, Coll* z, const std::vector<const ZEntry*>& victims) {
  if (static_cast<int64_t>(victims.size()) == z->meta.size) {
    z->deleted = true;
    return Status::Ok();
  }
  for (const ZEntry* e : victims) {
    ASYMNVM_ASSIGN_OR_RETURN(bool removed, SlottedRemove(tx, z, e->member, kScoreSize));
    if (!removed) return Status::Corruption("sorted set member vanished inside its transaction");
  }
  return Status::Ok();
}

// A snapshot read of one sorted set: body(tx, z, w) with z absent (kNone) or a sorted set.
template <typename Body>
void ZsetRead(CommandContext& c, std::string_view key, Body&& body) {
  SnapshotRead(c, [&](CollTx& tx, ReplyWriter& w) -> Status {
    ASYMNVM_ASSIGN_OR_RETURN(Coll * z, OpenTyped(tx, key, KeyType::kZset, w));
    if (z == nullptr) return Status::Ok();
    return body(tx, *z, w);
  });
}

// ZPOPMIN/ZPOPMAX/ZMPOP (Redis's genericZpopCommand): pops from the first non-empty key.
// count -1: no count given (one member, flat reply).
// For the blocking pops (ZsetPopFirst): `empty` non-null: nothing is replied when every key is
// empty (*empty = true); skip_wrong: a key of another type counts as empty; flat_key: one member
// replied as [key, member, score] (BZPOPMIN).
void PopGeneric(CommandContext& c, const std::vector<std::string>& keys, bool max, int64_t count,
                bool emit_key, bool nested, bool nil_when_empty, bool* empty = nullptr,
                bool skip_wrong = false, bool flat_key = false) {
  if (keys.size() > 1) {
    // One key at a time: a transaction's condition covers only the key it pops, so the keys may
    // be in different shards (led by different servers).
    for (size_t i = 0; i < keys.size(); ++i) {
      const bool last = i + 1 == keys.size();
      bool none = false;
      PopGeneric(c, {keys[i]}, max, count, emit_key, nested, nil_when_empty, last ? empty : &none,
                 skip_wrong, flat_key);
      if (!none) return;  // popped, replied an error, or the last key answered
    }
    return;
  }
  RunTx(c, [&](CollTx& tx) {
    Coll* z = nullptr;
    if (empty != nullptr) *empty = false;
    for (const auto& k : keys) {
      bool wrong = false;
      auto r = tx.OpenAs(k, KeyType::kZset, &wrong);
      if (!r.ok()) return TxFail(c.out, r.status());
      if (wrong && skip_wrong) continue;
      if (wrong) {
        c.out.Error(kErrWrongType);
        return TxOutcome::kError;
      }
      if ((*r)->type != KeyType::kNone) {
        z = *r;
        break;
      }
    }
    if (z == nullptr && empty != nullptr) {
      *empty = true;
      return TxOutcome::kCommitted;
    }
    if (z == nullptr) {
      if (nil_when_empty) {
        c.out.NullArray();
      } else {
        c.out.Array(0);
      }
      return TxOutcome::kCommitted;
    }
    if (count == 0) {
      c.out.Array(0);
      return TxOutcome::kCommitted;
    }
    auto sorted = Sorted(tx, *z);
    if (!sorted.ok()) return TxFail(c.out, sorted.status());
    const size_t n = sorted->size();
    const size_t k = std::min<size_t>(count < 0 ? 1 : static_cast<size_t>(count), n);
    std::vector<const ZEntry*> popped;
    for (size_t i = 0; i < k; ++i) popped.push_back(&(*sorted)[max ? n - 1 - i : i]);
    Status st = RemoveEntries(tx, z, popped);
    if (!st.ok()) return TxFail(c.out, st);
    TxOutcome o = tx.Commit(c.out);
    if (o != TxOutcome::kCommitted) return o;
    if (flat_key) {
      c.out.Array(3);
      c.out.Bulk(z->key);
      c.out.Bulk(popped[0]->member);
      ReplyScore(c.out, popped[0]->score);
      return o;
    }
    if (emit_key) {
      c.out.Array(2);
      c.out.Bulk(z->key);
    }
    c.out.Array(nested ? popped.size() : popped.size() * 2);
    for (const ZEntry* e : popped) {
      if (nested) c.out.Array(2);
      c.out.Bulk(e->member);
      ReplyScore(c.out, e->score);
    }
    return o;
  });
}

}  // namespace

Result<std::vector<std::string>> ZsetMembersByScore(CollTx& tx, const Coll& z) {
  ASYMNVM_ASSIGN_OR_RETURN(std::vector<ZEntry> v, Sorted(tx, z));
  std::vector<std::string> out;
  out.reserve(v.size());
  for (auto& e : v) out.push_back(std::move(e.member));
  return out;
}

void ZAdd(CommandContext& c, const std::vector<std::string>& a) {
  const bool zincrby = EqualsNoCase(a[0], "zincrby");
  bool nx = false, xx = false, gt = false, lt = false, ch = false, incr = zincrby;
  size_t i = 2;
  for (; !zincrby && i < a.size(); ++i) {
    if (EqualsNoCase(a[i], "nx")) {
      nx = true;
    } else if (EqualsNoCase(a[i], "xx")) {
      xx = true;
    } else if (EqualsNoCase(a[i], "ch")) {
      ch = true;
    } else if (EqualsNoCase(a[i], "incr")) {
      incr = true;
    } else if (EqualsNoCase(a[i], "gt")) {
      gt = true;
    } else if (EqualsNoCase(a[i], "lt")) {
      lt = true;
    } else {
      break;
    }
  }
  const size_t elements = a.size() - i;
  if (elements == 0 || elements % 2 != 0) return c.out.Error(kErrSyntax);
  if (nx && xx) return c.out.Error("ERR XX and NX options at the same time are not compatible");
  if ((gt && nx) || (lt && nx) || (gt && lt)) {
    return c.out.Error("ERR GT, LT, and/or NX options at the same time are not compatible");
  }
  if (incr && elements > 2) {
    return c.out.Error("ERR INCR option supports a single increment-element pair");
  }
  std::vector<std::pair<double, const std::string*>> pairs;
  for (size_t j = i; j < a.size(); j += 2) {
    double score = 0;
    if (!ParseDouble(a[j], &score)) return c.out.Error(kErrNotFloat);
    pairs.emplace_back(score, &a[j + 1]);
  }
  for (const auto& p : pairs) {
    if (!MemberSizeOk(c.out, a[1], *p.second)) return;
  }
  RunTx(c, [&](CollTx& tx) {
    auto r = OpenTyped(tx, a[1], KeyType::kZset, c.out);
    if (!r.ok()) return TxFail(c.out, r.status());
    Coll* z = *r;
    if (z == nullptr) return TxOutcome::kError;
    int64_t added = 0, updated = 0, processed = 0;
    double last = 0;
    auto reply = [&] {
      if (!incr) return c.out.Integer(ch ? added + updated : added);
      if (processed > 0) return ReplyScore(c.out, last);
      c.out.Null();
    };
    if (z->type == KeyType::kNone) {
      if (xx) {
        reply();
        return TxOutcome::kCommitted;
      }
      tx.Create(z, KeyType::kZset);
    }
    for (const auto& [given, member] : pairs) {
      double score = given;
      auto f = Find(tx, *z, *member);
      if (!f.ok()) return TxFail(c.out, f.status());
      if (*f) {
        if (nx) continue;
        const double cur = (*f)->score;
        if (incr) {
          score += cur;
          if (std::isnan(score)) {
            c.out.Error("ERR resulting score is not a number (NaN)");
            return TxOutcome::kError;
          }
        }
        if ((gt && score <= cur) || (lt && score >= cur)) continue;
        ++processed;
        last = score;
        if (score != cur) {
          SlottedPut(tx, z, *member, EncodeScore(score), (*f)->slot);
          ++updated;
        }
      } else if (!xx) {
        SlottedPut(tx, z, *member, EncodeScore(score), std::nullopt);
        ++added;
        ++processed;
        last = score;
      }
    }
    if (added + updated == 0) {
      reply();
      return TxOutcome::kCommitted;
    }
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) reply();
    return o;
  });
}

void ZRem(CommandContext& c, const std::vector<std::string>& a) {
  RunTx(c, [&](CollTx& tx) {
    auto r = OpenTyped(tx, a[1], KeyType::kZset, c.out);
    if (!r.ok()) return TxFail(c.out, r.status());
    if (*r == nullptr) return TxOutcome::kError;
    int64_t removed = 0;
    for (size_t i = 2; i < a.size(); ++i) {
      auto gone = SlottedRemove(tx, *r, a[i], kScoreSize);
      if (!gone.ok()) return TxFail(c.out, gone.status());
      removed += *gone ? 1 : 0;
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

void ZCard(CommandContext& c, const std::vector<std::string>& a) {
  CollTx tx(c.store, c.state.NowMs());
  auto r = OpenTyped(tx, a[1], KeyType::kZset, c.out);
  if (!r.ok()) return c.out.Error(TxError(r.status()));
  if (*r != nullptr) c.out.Integer(SizeOf(**r));
}

void ZScore(CommandContext& c, const std::vector<std::string>& a) {
  ZsetRead(c, a[1], [&](CollTx& tx, const Coll& z, ReplyWriter& w) -> Status {
    ASYMNVM_ASSIGN_OR_RETURN(std::optional<Found> f, Find(tx, z, a[2]));
    if (f) {
      ReplyScore(w, f->score);
    } else {
      w.Null();
    }
    return Status::Ok();
  });
}

void ZMScore(CommandContext& c, const std::vector<std::string>& a) {
  ZsetRead(c, a[1], [&](CollTx& tx, const Coll& z, ReplyWriter& w) -> Status {
    w.Array(a.size() - 2);
    for (size_t i = 2; i < a.size(); ++i) {
      ASYMNVM_ASSIGN_OR_RETURN(std::optional<Found> f, Find(tx, z, a[i]));
      if (f) {
        ReplyScore(w, f->score);
      } else {
        w.Null();
      }
    }
    return Status::Ok();
  });
}

// ZCOUNT, ZLEXCOUNT.
void ZCount(CommandContext& c, const std::vector<std::string>& a) {
  const bool lex = EqualsNoCase(a[0], "zlexcount");
  ScoreRange sr;
  LexRange lr;
  if (lex ? !ParseLexRange(a[2], a[3], &lr) : !ParseScoreRange(a[2], a[3], &sr)) {
    return c.out.Error(lex ? kErrMinMaxLex : kErrMinMaxFloat);
  }
  ZsetRead(c, a[1], [&](CollTx& tx, const Coll& z, ReplyWriter& w) -> Status {
    ASYMNVM_ASSIGN_OR_RETURN(std::vector<ZEntry> all, Entries(tx, z));
    int64_t n = 0;
    for (const auto& e : all) {
      bool in = lex ? lr.GteMin(e.member) && lr.LteMax(e.member)
                    : sr.GteMin(e.score) && sr.LteMax(e.score);
      n += in ? 1 : 0;
    }
    w.Integer(n);
    return Status::Ok();
  });
}

// ZRANGE and the commands it generalizes: ZREVRANGE, ZRANGEBYSCORE, ZREVRANGEBYSCORE,
// ZRANGEBYLEX, ZREVRANGEBYLEX (their range type and direction fixed).
void ZRange(CommandContext& c, const std::vector<std::string>& a) {
  RangeType type = RangeType::kAuto;
  Direction dir = Direction::kAuto;
  const std::string& name = a[0];
  if (EqualsNoCase(name, "zrevrange")) {
    type = RangeType::kRank;
    dir = Direction::kReverse;
  } else if (EqualsNoCase(name, "zrangebyscore") || EqualsNoCase(name, "zrevrangebyscore")) {
    type = RangeType::kScore;
    dir = EqualsNoCase(name, "zrangebyscore") ? Direction::kForward : Direction::kReverse;
  } else if (EqualsNoCase(name, "zrangebylex") || EqualsNoCase(name, "zrevrangebylex")) {
    type = RangeType::kLex;
    dir = EqualsNoCase(name, "zrangebylex") ? Direction::kForward : Direction::kReverse;
  }
  RangeSpec r;
  if (!ParseRange(c.out, a, 1, false, type, dir, &r)) return;
  ZsetRead(c, a[1], [&](CollTx& tx, const Coll& z, ReplyWriter& w) -> Status {
    if (z.type == KeyType::kNone) {
      w.Array(0);
      return Status::Ok();
    }
    ASYMNVM_ASSIGN_OR_RETURN(std::vector<ZEntry> sorted, Sorted(tx, z));
    ReplyEntries(w, SelectRange(sorted, r), r.withscores);
    return Status::Ok();
  });
}

void ZRangeStore(CommandContext& c, const std::vector<std::string>& a) {
  RangeSpec r;
  if (!ParseRange(c.out, a, 2, true, RangeType::kAuto, Direction::kAuto, &r)) return;
  RunTx(c, [&](CollTx& tx) {
    auto src = OpenTyped(tx, a[2], KeyType::kZset, c.out);
    if (!src.ok()) return TxFail(c.out, src.status());
    if (*src == nullptr) return TxOutcome::kError;
    auto sorted = Sorted(tx, **src);
    if (!sorted.ok()) return TxFail(c.out, sorted.status());
    return StoreResult(c, tx, a[1], SelectRange(*sorted, r));
  });
}

// ZRANK, ZREVRANK [WITHSCORE].
void ZRank(CommandContext& c, const std::vector<std::string>& a) {
  if (a.size() > 4) return c.out.Error(ArityError(a[0]));
  const bool withscore = a.size() == 4;
  if (withscore && !EqualsNoCase(a[3], "withscore")) return c.out.Error(kErrSyntax);
  const bool reverse = EqualsNoCase(a[0], "zrevrank");
  ZsetRead(c, a[1], [&](CollTx& tx, const Coll& z, ReplyWriter& w) -> Status {
    ASYMNVM_ASSIGN_OR_RETURN(std::optional<Found> f, Find(tx, z, a[2]));
    if (!f) {
      if (withscore) {
        w.NullArray();
      } else {
        w.Null();
      }
      return Status::Ok();
    }
    ASYMNVM_ASSIGN_OR_RETURN(std::vector<ZEntry> all, Entries(tx, z));
    const ZEntry me{a[2], f->score};
    int64_t rank = 0;
    for (const auto& e : all) rank += Before(e, me) ? 1 : 0;
    if (reverse) rank = static_cast<int64_t>(all.size()) - 1 - rank;
    if (withscore) w.Array(2);
    w.Integer(rank);
    if (withscore) ReplyScore(w, f->score);
    return Status::Ok();
  });
}

// ZREMRANGEBYRANK, ZREMRANGEBYSCORE, ZREMRANGEBYLEX.
void ZRemRange(CommandContext& c, const std::vector<std::string>& a) {
  RangeSpec r;
  if (EqualsNoCase(a[0], "zremrangebyrank")) {
    r.type = RangeType::kRank;
    if (!ParseInt64(a[2], &r.start) || !ParseInt64(a[3], &r.end)) {
      return c.out.Error(kErrNotInteger);
    }
  } else if (EqualsNoCase(a[0], "zremrangebyscore")) {
    r.type = RangeType::kScore;
    if (!ParseScoreRange(a[2], a[3], &r.score)) return c.out.Error(kErrMinMaxFloat);
  } else {
    r.type = RangeType::kLex;
    if (!ParseLexRange(a[2], a[3], &r.lex)) return c.out.Error(kErrMinMaxLex);
  }
  RunTx(c, [&](CollTx& tx) {
    auto z = OpenTyped(tx, a[1], KeyType::kZset, c.out);
    if (!z.ok()) return TxFail(c.out, z.status());
    if (*z == nullptr) return TxOutcome::kError;
    if ((*z)->type == KeyType::kNone) {
      c.out.Integer(0);
      return TxOutcome::kCommitted;
    }
    auto sorted = Sorted(tx, **z);
    if (!sorted.ok()) return TxFail(c.out, sorted.status());
    std::vector<const ZEntry*> victims = SelectRange(*sorted, r);
    if (victims.empty()) {
      c.out.Integer(0);
      return TxOutcome::kCommitted;
    }
    Status st = RemoveEntries(tx, *z, victims);
    if (!st.ok()) return TxFail(c.out, st);
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) c.out.Integer(static_cast<int64_t>(victims.size()));
    return o;
  });
}

// ZPOPMIN, ZPOPMAX [count].
void ZPop(CommandContext& c, const std::vector<std::string>& a) {
  if (a.size() > 3) return c.out.Error(kErrSyntax);
  int64_t count = -1;
  if (a.size() == 3) {
    if (!ParseInt64(a[2], &count)) return c.out.Error(kErrNotInteger);
    if (count < 0) return c.out.Error(kErrOutOfRange);
  }
  const bool nested = c.session.proto >= 3 && count != -1;
  PopGeneric(c, {a[1]}, EqualsNoCase(a[0], "zpopmax"), count, false, nested, false);
}

// ZMPOP numkeys key [key ...] MIN|MAX [COUNT count].
void ZMPop(CommandContext& c, const std::vector<std::string>& a) {
  int64_t numkeys = 0;
  if (!ParseInt64(a[1], &numkeys) || numkeys < 1) {
    return c.out.Error("ERR numkeys should be greater than 0");
  }
  if (numkeys > static_cast<int64_t>(a.size()) - 3) return c.out.Error(kErrSyntax);
  const size_t where = 2 + static_cast<size_t>(numkeys);
  bool max = false;
  if (EqualsNoCase(a[where], "max")) {
    max = true;
  } else if (!EqualsNoCase(a[where], "min")) {
    return c.out.Error(kErrSyntax);
  }
  int64_t count = -1;
  for (size_t j = where + 1; j < a.size(); ++j) {
    if (count == -1 && EqualsNoCase(a[j], "count") && j + 1 < a.size()) {
      if (!ParseInt64(a[++j], &count) || count < 1) {
        return c.out.Error("ERR count should be greater than 0");
      }
    } else {
      return c.out.Error(kErrSyntax);
    }
  }
  std::vector<std::string> keys(a.begin() + 2, a.begin() + static_cast<long>(where));
  PopGeneric(c, keys, max, count < 0 ? 1 : count, true, true, true);
}

void ZsetPopFirst(CommandContext& c, const std::vector<std::string>& keys, bool max, int64_t count,
                  bool skip_wrongtype, bool* empty) {
  if (count < 0) {
    PopGeneric(c, keys, max, 1, false, false, false, empty, skip_wrongtype, true);
  } else {
    PopGeneric(c, keys, max, count, true, true, true, empty, skip_wrongtype, false);
  }
}

void ZRandMember(CommandContext& c, const std::vector<std::string>& a) {
  if (a.size() < 3) {
    return ZsetRead(c, a[1], [&](CollTx& tx, const Coll& z, ReplyWriter& w) -> Status {
      if (SizeOf(z) == 0) {
        w.Null();
        return Status::Ok();
      }
      const int64_t slot = static_cast<int64_t>(RandomU64() % static_cast<uint64_t>(z.meta.size));
      ASYMNVM_ASSIGN_OR_RETURN(SlottedMember m, SlottedAt(tx, z, slot, kScoreSize));
      w.Bulk(m.member);
      return Status::Ok();
    });
  }
  int64_t l = 0;
  if (!ParseInt64(a[2], &l)) return c.out.Error(kErrNotInteger);
  if (a.size() > 4 || (a.size() == 4 && !EqualsNoCase(a[3], "withscores"))) {
    return c.out.Error(kErrSyntax);
  }
  const bool withscores = a.size() == 4;
  if (l < -(INT64_MAX / 2) || l > INT64_MAX / 2) {
    if (withscores || l == INT64_MIN) return c.out.Error("ERR value is out of range");
  }
  const bool uniq = l >= 0;
  const int64_t count = uniq ? l : -l;
  // With repetition the reply has |count| members whatever the set's size; Redis streams such a
  // reply until memory runs out. Here it is built whole first, so an absurd count is refused.
  if (!uniq && count > kMaxRandomReply) {
    return c.out.Error("ERR value is out of range: at most " + std::to_string(kMaxRandomReply) +
                       " members per ZRANDMEMBER reply here");
  }
  ZsetRead(c, a[1], [&](CollTx& tx, const Coll& z, ReplyWriter& w) -> Status {
    const int64_t n = SizeOf(z);
    if (n == 0 || count == 0) {
      w.Array(0);
      return Status::Ok();
    }
    std::vector<int64_t> slots;
    if (!uniq || count == 1) {
      slots = RandomSlots(n, count, false);
    } else if (count >= n) {
      for (int64_t i = 0; i < n; ++i) slots.push_back(i);
    } else {
      slots = RandomSlots(n, count, true);
    }
    const bool nested = withscores && w.proto() >= 3;
    w.Array(withscores && !nested ? slots.size() * 2 : slots.size());
    std::unordered_map<int64_t, ZEntry> cache;
    for (int64_t s : slots) {
      auto it = cache.find(s);
      if (it == cache.end()) {
        ASYMNVM_ASSIGN_OR_RETURN(SlottedMember m, SlottedAt(tx, z, s, kScoreSize));
        ZEntry e{std::move(m.member), 0};
        if (!DecodeScore(m.payload, &e.score)) return BadScore();
        it = cache.emplace(s, std::move(e)).first;
      }
      if (nested) w.Array(2);
      w.Bulk(it->second.member);
      if (withscores) ReplyScore(w, it->second.score);
    }
    return Status::Ok();
  });
}

// ZSCAN key cursor [MATCH pattern] [COUNT count] [NOSCORES]: as SSCAN (cursor = 1 + the next slot,
// slots visited from the highest down, so ZREM's move of the last slot never hides a survivor).
void ZScan(CommandContext& c, const std::vector<std::string>& a) {
  int64_t cursor = 0;
  if (!ParseInt64(a[2], &cursor) || cursor < 0) return c.out.Error("ERR invalid cursor");
  std::string pattern;
  bool has_pattern = false, noscores = false;
  int64_t count = 10;
  for (size_t i = 3; i < a.size(); ++i) {
    if (EqualsNoCase(a[i], "match") && i + 1 < a.size()) {
      pattern = a[++i];
      has_pattern = pattern != "*";
    } else if (EqualsNoCase(a[i], "count") && i + 1 < a.size()) {
      if (!ParseInt64(a[++i], &count)) return c.out.Error(kErrNotInteger);
      if (count < 1) return c.out.Error(kErrSyntax);
    } else if (EqualsNoCase(a[i], "noscores")) {
      noscores = true;
    } else {
      return c.out.Error(kErrSyntax);
    }
  }
  ZsetRead(c, a[1], [&](CollTx& tx, const Coll& z, ReplyWriter& w) -> Status {
    const int64_t n = SizeOf(z);
    int64_t pos = cursor == 0 ? n - 1 : std::min<int64_t>(cursor - 1, n - 1);
    std::vector<ZEntry> items;
    for (int64_t seen = 0; pos >= 0 && seen < count; --pos, ++seen) {
      ASYMNVM_ASSIGN_OR_RETURN(SlottedMember m, SlottedAt(tx, z, pos, kScoreSize));
      if (has_pattern && !GlobMatch(pattern, m.member)) continue;
      ZEntry e{std::move(m.member), 0};
      if (!DecodeScore(m.payload, &e.score)) return BadScore();
      items.push_back(std::move(e));
    }
    w.Array(2);
    w.Bulk(std::to_string(pos < 0 ? 0 : pos + 1));
    w.Array(noscores ? items.size() : items.size() * 2);
    for (const auto& e : items) {
      w.Bulk(e.member);
      if (!noscores) w.Bulk(FormatScore(e.score));
    }
    return Status::Ok();
  });
}

// ZUNION, ZINTER, ZDIFF (numkeys at 1), their STORE forms (destination at 1, numkeys at 2) and
// ZINTERCARD (Redis's zunionInterDiffGenericCommand). Sources may be sets (score 1).
void ZCombine(CommandContext& c, const std::vector<std::string>& a) {
  std::string name(a[0]);
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  enum class Op { kUnion, kInter, kDiff } op = Op::kInter;
  if (name.rfind("zunion", 0) == 0) op = Op::kUnion;
  if (name.rfind("zdiff", 0) == 0) op = Op::kDiff;
  const bool store = name.size() > 5 && name.compare(name.size() - 5, 5, "store") == 0;
  const bool card = name == "zintercard";
  const size_t numkeys_idx = store ? 2 : 1;
  int64_t setnum = 0;
  if (!ParseInt64(a[numkeys_idx], &setnum)) return c.out.Error(kErrNotInteger);
  if (setnum < 1) {
    return c.out.Error("ERR at least 1 input key is needed for '" + name + "' command");
  }
  if (setnum > static_cast<int64_t>(a.size() - numkeys_idx - 1)) return c.out.Error(kErrSyntax);
  const size_t first = numkeys_idx + 1, end = first + static_cast<size_t>(setnum);
  // Options: parsed now, an error replied after the sources' type check (as Redis orders them).
  std::vector<double> weights(static_cast<size_t>(setnum), 1.0);
  enum class Agg { kSum, kMin, kMax } agg = Agg::kSum;
  bool withscores = false;
  int64_t limit = 0;
  std::string opt_error;
  for (size_t j = end; j < a.size() && opt_error.empty();) {
    const size_t remaining = a.size() - j;
    if (op != Op::kDiff && !card && remaining >= static_cast<size_t>(setnum) + 1 &&
        EqualsNoCase(a[j], "weights")) {
      ++j;
      for (size_t k = 0; k < weights.size(); ++k, ++j) {
        if (!ParseDouble(a[j], &weights[k])) {
          opt_error = "ERR weight value is not a float";
          break;
        }
      }
    } else if (op != Op::kDiff && !card && remaining >= 2 && EqualsNoCase(a[j], "aggregate")) {
      const std::string& v = a[j + 1];
      if (EqualsNoCase(v, "sum")) {
        agg = Agg::kSum;
      } else if (EqualsNoCase(v, "min")) {
        agg = Agg::kMin;
      } else if (EqualsNoCase(v, "max")) {
        agg = Agg::kMax;
      } else {
        opt_error = std::string(kErrSyntax);
      }
      j += 2;
    } else if (!store && !card && EqualsNoCase(a[j], "withscores")) {
      withscores = true;
      ++j;
    } else if (card && remaining >= 2 && EqualsNoCase(a[j], "limit")) {
      if (!ParseInt64(a[j + 1], &limit) || limit < 0) opt_error = "ERR LIMIT can't be negative";
      j += 2;
    } else {
      opt_error = std::string(kErrSyntax);
    }
  }
  auto aggregate = [&](double* target, double v) {
    if (agg == Agg::kSum) {
      *target += v;
      if (std::isnan(*target)) *target = 0;
    } else if (agg == Agg::kMin) {
      *target = v < *target ? v : *target;
    } else {
      *target = v > *target ? v : *target;
    }
  };
  // The result (unsorted) or a Status; nullopt after an error reply went to w.
  auto compute = [&](CollTx& tx, ReplyWriter& w) -> Result<std::optional<std::vector<ZEntry>>> {
    using Out = std::optional<std::vector<ZEntry>>;
    std::vector<Coll*> srcs;
    for (size_t j = first; j < end; ++j) {
      ASYMNVM_ASSIGN_OR_RETURN(Coll * s, tx.Open(a[j]));
      if (s->type != KeyType::kNone && s->type != KeyType::kZset && s->type != KeyType::kSet) {
        w.Error(kErrWrongType);
        return Out();
      }
      srcs.push_back(s);
    }
    if (!opt_error.empty()) {
      w.Error(opt_error);
      return Out();
    }
    std::vector<std::vector<ZEntry>> data;
    for (Coll* s : srcs) {
      ASYMNVM_ASSIGN_OR_RETURN(std::vector<ZEntry> e, Entries(tx, *s));
      data.push_back(std::move(e));
    }
    std::vector<size_t> order(data.size());
    for (size_t k = 0; k < order.size(); ++k) order[k] = k;
    if (op != Op::kDiff) {
      std::stable_sort(order.begin(), order.end(),
                       [&](size_t x, size_t y) { return data[x].size() < data[y].size(); });
    }
    std::vector<ZEntry> result;
    if (op == Op::kUnion) {
      std::unordered_map<std::string, size_t> index;
      for (size_t k : order) {
        for (auto& e : data[k]) {
          double score = weights[k] * e.score;
          if (std::isnan(score)) score = 0;
          auto [it, fresh] = index.emplace(e.member, result.size());
          if (fresh) {
            result.push_back({e.member, score});
          } else {
            aggregate(&result[it->second].score, score);
          }
        }
      }
    } else {
      std::vector<std::unordered_map<std::string, double>> maps(data.size());
      for (size_t k = 0; k < data.size(); ++k) {
        for (const auto& e : data[k]) maps[k].emplace(e.member, e.score);
      }
      const size_t base = order[0];
      for (const auto& e : data[base]) {
        if (op == Op::kDiff) {
          bool elsewhere = false;
          for (size_t k = 1; k < data.size() && !elsewhere; ++k) {
            elsewhere = maps[k].count(e.member) > 0;
          }
          if (!elsewhere) result.push_back(e);
          continue;
        }
        double score = weights[base] * e.score;
        if (std::isnan(score)) score = 0;
        bool all = true;
        for (size_t oi = 1; oi < order.size() && all; ++oi) {
          auto it = maps[order[oi]].find(e.member);
          if (it == maps[order[oi]].end()) {
            all = false;
          } else {
            aggregate(&score, it->second * weights[order[oi]]);
          }
        }
        if (!all) continue;
        result.push_back({e.member, score});
        if (card && limit > 0 && static_cast<int64_t>(result.size()) >= limit) break;
      }
    }
    std::sort(result.begin(), result.end(), Before);
    return Out(std::move(result));
  };
  auto pointers = [](const std::vector<ZEntry>& v) {
    std::vector<const ZEntry*> p;
    p.reserve(v.size());
    for (const auto& e : v) p.push_back(&e);
    return p;
  };
  if (store) {
    return RunTx(c, [&](CollTx& tx) {
      auto r = compute(tx, c.out);
      if (!r.ok()) return TxFail(c.out, r.status());
      if (!*r) return TxOutcome::kError;
      return StoreResult(c, tx, a[1], pointers(**r));
    });
  }
  SnapshotRead(c, [&](CollTx& tx, ReplyWriter& w) -> Status {
    ASYMNVM_ASSIGN_OR_RETURN(auto r, compute(tx, w));
    if (!r) return Status::Ok();
    if (card) {
      w.Integer(static_cast<int64_t>(r->size()));
    } else {
      ReplyEntries(w, pointers(*r), withscores);
    }
    return Status::Ok();
  });
}

}  // namespace asymnvm::kv::resp::handlers
