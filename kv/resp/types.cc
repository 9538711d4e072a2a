// Record layouts and the per-command transaction of the type commands (types.h, doc/types.md).
#include "kv/resp/types.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <unordered_map>

#include "asymnvm/kv.h"
#include "kv/resp/value.h"

namespace asymnvm::kv::resp {
namespace {

void PutLe64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetLe64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

constexpr size_t kSubKeyHead = kv::kRoutedKeyMagic.size() + 8 + 8 + 1;

}  // namespace

const char* TypeName(KeyType t) {
  switch (t) {
    case KeyType::kString:
      return "string";
    case KeyType::kHash:
      return "hash";
    case KeyType::kList:
      return "list";
    case KeyType::kSet:
      return "set";
    case KeyType::kZset:
      return "zset";
    case KeyType::kNone:
      break;
  }
  return "none";
}

KeyType TypeOfValue(std::string_view raw) {
  DecodedValue d = DecodeValue(raw);
  if (d.type == 0) return KeyType::kString;
  if (d.type > static_cast<uint8_t>(KeyType::kZset)) return KeyType::kString;
  return static_cast<KeyType>(d.type);
}

std::string EncodeMeta(const Meta& m) {
  std::string out;
  out.reserve(32);
  PutLe64(&out, m.id);
  PutLe64(&out, static_cast<uint64_t>(m.size));
  PutLe64(&out, static_cast<uint64_t>(m.head));
  PutLe64(&out, static_cast<uint64_t>(m.tail));
  return out;
}

bool DecodeMeta(std::string_view p, Meta* m) {
  if (p.size() != 32) return false;
  m->id = GetLe64(p.data());
  m->size = static_cast<int64_t>(GetLe64(p.data() + 8));
  m->head = static_cast<int64_t>(GetLe64(p.data() + 16));
  m->tail = static_cast<int64_t>(GetLe64(p.data() + 24));
  return m->id != 0 && m->size >= 0;
}

std::string SubKey(std::string_view key, uint64_t id, char kind, std::string_view suffix) {
  std::string out;
  out.reserve(kSubKeyHead + suffix.size());
  out.append(kv::kRoutedKeyMagic);
  PutLe64(&out, kv::RouteHash(key));
  PutLe64(&out, id);
  out.push_back(kind);
  out.append(suffix);
  return out;
}

std::string EncodeHashSlot(std::string_view field, std::string_view value) {
  std::string out;
  out.reserve(4 + field.size() + value.size());
  uint32_t n = static_cast<uint32_t>(field.size());
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out.append(field);
  out.append(value);
  return out;
}

bool DecodeHashSlot(std::string_view raw, std::string_view* field, std::string_view* value) {
  if (raw.size() < 4) return false;
  uint32_t n = 0;
  for (int i = 0; i < 4; ++i) n |= static_cast<uint32_t>(static_cast<uint8_t>(raw[i])) << (8 * i);
  if (raw.size() - 4 < n) return false;
  *field = raw.substr(4, n);
  *value = raw.substr(4 + n);
  return true;
}

std::string EncodeI64(int64_t v) {
  std::string s;
  PutLe64(&s, static_cast<uint64_t>(v));
  return s;
}

bool DecodeI64(std::string_view s, int64_t* v) {
  if (s.size() < 8) return false;
  *v = static_cast<int64_t>(GetLe64(s.data()));
  return true;
}

std::string FieldKey(std::string_view key, uint64_t id, std::string_view field) {
  return SubKey(key, id, 'f', field);
}
std::string SlotKey(std::string_view key, uint64_t id, int64_t slot) {
  return SubKey(key, id, 's', EncodeI64(slot));
}
std::string ElemKey(std::string_view key, uint64_t id, int64_t seq) {
  return SubKey(key, id, 'l', EncodeI64(seq));
}

size_t MaxFieldSize(std::string_view) { return kv::kMaxKeySize - kSubKeyHead; }

uint64_t RandomU64() {
  thread_local std::mt19937_64 rng([] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
           static_cast<uint64_t>(reinterpret_cast<uintptr_t>(&rd));
  }());
  return rng();
}

Result<Coll*> CollTx::Open(std::string_view key) {
  for (auto& c : colls_) {
    if (c->key == key) return c.get();
  }
  auto r = store_.Get(key);
  if (!r.ok()) return r.status();
  auto c = std::make_unique<Coll>();
  c->key.assign(key);
  if (r->has_value()) {
    c->store_version = (*r)->version;
    DecodedValue d = DecodeValue((*r)->value);
    if (d.expire_at_ms == 0 || d.expire_at_ms > now_ms_) {
      c->expire_at_ms = d.expire_at_ms;
      if (d.type == 0 || d.type > static_cast<uint8_t>(KeyType::kZset)) {
        c->type = KeyType::kString;
      } else if (DecodeMeta(d.data, &c->meta)) {
        c->type = static_cast<KeyType>(d.type);
      } else {
        return Status::Corruption("metadata record of a " +
                                  std::string(TypeName(static_cast<KeyType>(d.type))) +
                                  " does not decode");
      }
    }
  }
  colls_.push_back(std::move(c));
  return colls_.back().get();
}

Result<Coll*> CollTx::OpenAs(std::string_view key, KeyType want, bool* wrongtype) {
  *wrongtype = false;
  auto c = Open(key);
  if (!c.ok()) return c.status();
  if ((*c)->type != KeyType::kNone && (*c)->type != want) {
    *wrongtype = true;
    return static_cast<Coll*>(nullptr);
  }
  return *c;
}

void CollTx::Create(Coll* c, KeyType t) {
  c->type = t;
  c->expire_at_ms = 0;
  c->meta = Meta{};
  c->meta.id = RandomU64() | 1;
  c->changed = true;
  c->deleted = false;
  c->fresh = true;
}

Result<std::optional<std::string>> CollTx::Get(const std::string& sub_key) {
  auto it = staged_.find(sub_key);
  if (it != staged_.end()) return it->second;
  auto r = store_.Get(sub_key);
  if (!r.ok()) return r.status();
  if (!r->has_value()) return std::optional<std::string>();
  return std::optional<std::string>(std::move((*r)->value));
}

void CollTx::Put(std::string sub_key, std::string value) {
  staged_[std::move(sub_key)] = std::move(value);
}

void CollTx::Del(std::string sub_key) { staged_[std::move(sub_key)] = std::nullopt; }

TxOutcome CollTx::Commit(ReplyWriter& out) {
  std::vector<BatchWrite> writes;
  size_t bytes = 0;
  for (auto& c : colls_) {
    BatchWrite w;
    w.key = c->key;
    w.expected_version = c->store_version;
    if (c->changed && c->type != KeyType::kNone && c->meta.size == 0) c->deleted = true;
    if (c->deleted) {
      if (c->store_version == 0) {
        w.check_only = true;
      } else {
        w.value = std::nullopt;
      }
    } else if (c->changed) {
      w.value = EncodeValue(EncodeMeta(c->meta), c->expire_at_ms, static_cast<uint8_t>(c->type));
      bytes += w.key.size() + w.value->size();
    } else {
      w.check_only = true;
    }
    writes.push_back(std::move(w));
  }
  for (auto& [k, v] : staged_) {
    BatchWrite w;
    w.key = k;
    w.unconditional = true;
    w.value = v;
    bytes += k.size() + (v ? v->size() : 0) + 16;
    writes.push_back(std::move(w));
  }
  if (writes.size() > kMaxTxRecords || bytes > kMaxTxBytes) {
    writes.resize(colls_.size());  // the metadata (and conditions) alone
    return CommitInParts(out, std::move(writes));
  }
  auto r = store_.CommitBatch(writes);
  if (r.ok()) return *r ? TxOutcome::kCommitted : TxOutcome::kRetry;
  if (r.status().code() != StatusCode::kNotSupported) {
    out.Error(TxError(r.status()));
    return TxOutcome::kError;
  }
  // Inside MULTI (the transaction overlay, txn.h): the overlay buffers these writes and EXEC
  // commits them with the rest of the transaction as one batch, conditional on what it read.
  for (const auto& w : writes) {
    Status st;
    if (w.check_only) continue;
    if (!w.unconditional) {
      if (w.value) {
        auto p = store_.PutIf(w.key, *w.value, w.expected_version);
        if (p.ok() && !p->has_value()) return TxOutcome::kRetry;
        st = p.status();
      } else {
        st = store_.Delete(w.key).status();
      }
    } else if (w.value) {
      st = store_.Put(w.key, *w.value).status();
    } else {
      st = store_.Delete(w.key).status();
    }
    if (!st.ok()) {
      out.Error(TxError(st));
      return TxOutcome::kError;
    }
  }
  return TxOutcome::kCommitted;
}

TxOutcome CollTx::CommitInParts(ReplyWriter& out, std::vector<BatchWrite> metas) {
  // 1. The new state of each changed collection that stays, whole, under an incarnation no
  //    metadata names yet: a fresh one of its own (Create), else a new one.
  std::vector<std::pair<std::string, std::string>> records;
  for (size_t i = 0; i < colls_.size(); ++i) {
    Coll* c = colls_[i].get();
    if (c->deleted || !c->changed) continue;
    const uint64_t id = c->fresh ? c->meta.id : (RandomU64() | 1);
    Status st = CollectionImage(*this, *c, c->key, id, &records);
    if (!st.ok()) return TxFail(out, st);
    c->meta.id = id;
    metas[i].value =
        EncodeValue(EncodeMeta(c->meta), c->expire_at_ms, static_cast<uint8_t>(c->type));
  }
  // 2. Those records in batches (a record over one batch's bytes alone); nothing reads them yet,
  //    and a crash or a lost race below leaves them as a dead incarnation's (§Deletion).
  size_t next = 0;
  while (next < records.size()) {
    std::vector<BatchWrite> part;
    size_t bytes = 0;
    while (next < records.size() && part.size() < kMaxTxRecords) {
      const size_t b = records[next].first.size() + records[next].second.size() + 16;
      if (!part.empty() && bytes + b > kMaxTxBytes) break;
      BatchWrite w;
      w.key = std::move(records[next].first);
      w.value = std::move(records[next].second);
      w.unconditional = true;
      part.push_back(std::move(w));
      bytes += b;
      ++next;
    }
    Status st;
    if (part.size() == 1 && bytes > kMaxTxBytes) {
      st = store_.Put(part[0].key, *part[0].value).status();
    } else {
      auto r = store_.CommitBatch(part);
      st = r.status();
      if (st.code() == StatusCode::kNotSupported) {
        // Inside MULTI: EXEC commits the whole transaction as one batch, so it must fit one.
        out.Error("ERR the command would write more than " + std::to_string(kMaxTxRecords) +
                  " records or " + std::to_string(kMaxTxBytes) +
                  " bytes, more than one atomic write holds inside MULTI (doc/types.md §Limits)");
        return TxOutcome::kError;
      }
    }
    if (!st.ok()) {
      out.Error(TxError(st));
      return TxOutcome::kError;
    }
  }
  // 3. The commit point: every metadata record, conditional on the versions read.
  auto r = store_.CommitBatch(metas);
  if (r.ok()) return *r ? TxOutcome::kCommitted : TxOutcome::kRetry;
  out.Error(TxError(r.status()));
  return TxOutcome::kError;
}

Status CollectionImage(CollTx& tx, const Coll& c, std::string_view key, uint64_t id,
                       std::vector<std::pair<std::string, std::string>>* out) {
  const uint64_t from = c.meta.id;
  if (c.type == KeyType::kList) {
    for (int64_t seq = c.meta.head; seq < c.meta.tail; ++seq) {
      ASYMNVM_ASSIGN_OR_RETURN(std::optional<std::string> e, tx.Get(ElemKey(c.key, from, seq)));
      if (!e) return tx.Inconsistent("list element " + std::to_string(seq) + " missing");
      out->emplace_back(ElemKey(key, id, seq), std::move(*e));
    }
    return Status::Ok();
  }
  if (c.type != KeyType::kHash && c.type != KeyType::kSet && c.type != KeyType::kZset) {
    return Status::InvalidArgument("not a collection");
  }
  const size_t payload = c.type == KeyType::kZset ? 8 : 0;
  for (int64_t slot = 0; slot < c.meta.size; ++slot) {
    ASYMNVM_ASSIGN_OR_RETURN(std::optional<std::string> rec, tx.Get(SlotKey(c.key, from, slot)));
    if (!rec) return tx.Inconsistent("slot " + std::to_string(slot) + " missing");
    std::string field = EncodeI64(slot);
    std::string_view member;
    if (c.type == KeyType::kHash) {
      std::string_view value;
      if (!DecodeHashSlot(*rec, &member, &value)) return Status::Corruption("hash slot malformed");
    } else {
      if (rec->size() < payload) return Status::Corruption("slot record malformed");
      member = std::string_view(*rec).substr(payload);
      field.append(rec->data(), payload);
    }
    out->emplace_back(FieldKey(key, id, member), std::move(field));
    out->emplace_back(SlotKey(key, id, slot), std::move(*rec));
  }
  return Status::Ok();
}

Result<bool> CollTx::Unchanged() {
  for (auto& c : colls_) {
    auto r = store_.Get(c->key);
    if (!r.ok()) return r.status();
    uint64_t v = r->has_value() ? (*r)->version : 0;
    if (v != c->store_version) return false;
  }
  return true;
}

std::string TxError(const Status& st) {
  if (st.code() == StatusCode::kInvalidArgument && st.subcode() == StatusSubCode::kCrossShard) {
    return "CROSSSLOT Keys in request don't hash to the same slot";
  }
  return StoreError(st);
}

bool ParseDouble(std::string_view s, double* out) {
  // Redis's getDoubleFromObject: the whole text, no leading space, no NaN; an overflow to
  // infinity or an underflow to zero is refused ("inf" itself is fine). No length limit.
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return false;
  std::string t(s);
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size() || std::isnan(v)) return false;
  if (errno == ERANGE && (std::isinf(v) || std::fpclassify(v) == FP_ZERO)) return false;
  *out = v;
  return true;
}

bool ParseLongDouble(std::string_view s, long double* out) {
  if (s.empty() || s.size() > 300) return false;
  std::string t(s);
  if (std::isspace(static_cast<unsigned char>(t[0]))) return false;
  char* end = nullptr;
  errno = 0;
  long double v = std::strtold(t.c_str(), &end);
  if (end != t.c_str() + t.size() || std::isnan(v)) return false;
  if (errno == ERANGE && !std::isinf(v) && v != 0) return false;
  *out = v;
  return true;
}

std::string FormatDouble(long double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[128];
  std::snprintf(buf, sizeof buf, "%.17Lf", v);
  // Trim trailing zeros and a trailing point, as Redis's ld2string (humanfriendly) does.
  std::string s(buf);
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

Result<Coll*> OpenTyped(CollTx& tx, std::string_view key, KeyType want, ReplyWriter& w) {
  bool wrong = false;
  ASYMNVM_ASSIGN_OR_RETURN(Coll * c, tx.OpenAs(key, want, &wrong));
  if (wrong) {
    w.Error(kErrWrongType);
    return static_cast<Coll*>(nullptr);
  }
  return c;
}

constexpr std::string_view kStaleRead = "stale read: a concurrent writer moved the collection";

namespace {
std::atomic<int64_t> conflict_budget_ms{ConflictRetry::kBudget.count()};
}  // namespace

void ConflictRetry::SetBudgetForTesting(std::chrono::milliseconds budget) {
  conflict_budget_ms.store(budget.count());
}

bool ConflictRetry::Again() {
  if (std::chrono::steady_clock::now() - start_ >=
      std::chrono::milliseconds(conflict_budget_ms.load(std::memory_order_relaxed))) {
    return false;
  }
  thread_local std::minstd_rand rng(std::random_device{}());
  const uint32_t cap_us = std::min<uint32_t>(2000, 20u << std::min<uint32_t>(conflicts_, 7));
  conflicts_++;
  std::this_thread::sleep_for(
      std::chrono::microseconds(std::uniform_int_distribution<uint32_t>(1, cap_us)(rng)));
  return true;
}

bool IsStaleRead(const Status& st) {
  return st.code() == StatusCode::kAborted && st.subcode() == StatusSubCode::kStaleRead;
}

Status CollTx::Inconsistent(std::string what) {
  auto same = Unchanged();
  if (!same.ok()) return same.status();
  if (!*same) return Status::Aborted(kStaleRead).WithSubCode(StatusSubCode::kStaleRead);
  return Status::Corruption(what);
}

TxOutcome TxFail(ReplyWriter& out, const Status& st) {
  if (IsStaleRead(st)) return TxOutcome::kRetry;
  out.Error(TxError(st));
  return TxOutcome::kError;
}

bool MemberSizeOk(ReplyWriter& out, std::string_view key, std::string_view m) {
  if (m.size() <= MaxFieldSize(key)) return true;
  out.Error("ERR member of " + std::to_string(m.size()) + " bytes; members are at most " +
            std::to_string(MaxFieldSize(key)) + " bytes here (doc/types.md §Limits)");
  return false;
}

std::vector<int64_t> RandomSlots(int64_t n, int64_t k, bool distinct) {
  std::vector<int64_t> out;
  if (n <= 0) return out;
  if (!distinct) {
    for (int64_t i = 0; i < k; ++i) out.push_back(static_cast<int64_t>(RandomU64() % n));
    return out;
  }
  // A partial Fisher-Yates shuffle over the slots, the permutation kept sparse.
  k = std::min(k, n);
  std::unordered_map<int64_t, int64_t> perm;
  for (int64_t i = 0; i < k; ++i) {
    int64_t j = i + static_cast<int64_t>(RandomU64() % static_cast<uint64_t>(n - i));
    int64_t vi = perm.count(i) ? perm[i] : i, vj = perm.count(j) ? perm[j] : j;
    perm[i] = vj;
    perm[j] = vi;
    out.push_back(vj);
  }
  return out;
}

Result<std::optional<SlotRef>> SlottedFind(CollTx& tx, const Coll& c, std::string_view member,
                                           size_t payload_size) {
  if (c.type == KeyType::kNone) return std::optional<SlotRef>();
  auto r = tx.Get(FieldKey(c.key, c.meta.id, member));
  if (!r.ok()) return r.status();
  if (!r->has_value()) return std::optional<SlotRef>();
  SlotRef ref;
  if ((*r)->size() != 8 + payload_size || !DecodeI64(**r, &ref.slot) || ref.slot < 0 ||
      ref.slot >= c.meta.size) {
    return tx.Inconsistent(std::string(TypeName(c.type)) +
                           " member record malformed or names a slot out of range");
  }
  ref.payload = (*r)->substr(8);
  return std::optional<SlotRef>(std::move(ref));
}

Result<SlottedMember> SlottedAt(CollTx& tx, const Coll& c, int64_t slot, size_t payload_size) {
  auto r = tx.Get(SlotKey(c.key, c.meta.id, slot));
  if (!r.ok()) return r.status();
  if (!r->has_value() || (*r)->size() < payload_size) {
    return tx.Inconsistent(std::string(TypeName(c.type)) + " slot record missing or short");
  }
  SlottedMember m;
  m.payload = (*r)->substr(0, payload_size);
  m.member = (*r)->substr(payload_size);
  return m;
}

void SlottedPut(CollTx& tx, Coll* c, std::string_view member, std::string_view payload,
                std::optional<int64_t> slot) {
  const int64_t s = slot ? *slot : c->meta.size++;
  std::string field_rec = EncodeI64(s);
  field_rec.append(payload);
  std::string slot_rec(payload);
  slot_rec.append(member);
  tx.Put(FieldKey(c->key, c->meta.id, member), std::move(field_rec));
  tx.Put(SlotKey(c->key, c->meta.id, s), std::move(slot_rec));
  c->changed = true;
}

Result<bool> SlottedRemove(CollTx& tx, Coll* c, std::string_view member, size_t payload_size) {
  ASYMNVM_ASSIGN_OR_RETURN(std::optional<SlotRef> ref, SlottedFind(tx, *c, member, payload_size));
  if (!ref) return false;
  const int64_t last = c->meta.size - 1;
  if (ref->slot != last) {
    ASYMNVM_ASSIGN_OR_RETURN(SlottedMember moved, SlottedAt(tx, *c, last, payload_size));
    SlottedPut(tx, c, moved.member, moved.payload, ref->slot);
  }
  tx.Del(SlotKey(c->key, c->meta.id, last));
  tx.Del(FieldKey(c->key, c->meta.id, member));
  c->meta.size--;
  c->changed = true;
  return true;
}

Result<std::vector<SlottedMember>> SlottedAll(CollTx& tx, const Coll& c, size_t payload_size) {
  std::vector<SlottedMember> out;
  if (c.type == KeyType::kNone) return out;
  out.reserve(static_cast<size_t>(c.meta.size));
  for (int64_t i = 0; i < c.meta.size; ++i) {
    ASYMNVM_ASSIGN_OR_RETURN(SlottedMember m, SlottedAt(tx, c, i, payload_size));
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace asymnvm::kv::resp
