// Redis hash commands (doc/types.md §Hashes). Field f of incarnation id: record 'f'+f → its slot
// (8 bytes LE); record 's'+slot → field length (4 LE), field, value; slots 0..size-1 are dense
// (HDEL moves the last slot into the freed one).
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "kv/resp/types.h"

namespace asymnvm::kv::resp::handlers {
namespace {

Status Corrupt(std::string_view what) { return Status::Corruption(std::string(what)); }

// The slot of `field`, or nullopt.
Result<std::optional<int64_t>> FieldSlot(CollTx& tx, const Coll& h, std::string_view field) {
  auto r = tx.Get(FieldKey(h.key, h.meta.id, field));
  if (!r.ok()) return r.status();
  if (!r->has_value()) return std::optional<int64_t>();
  int64_t slot = 0;
  if (!DecodeI64(**r, &slot) || slot < 0 || slot >= h.meta.size) {
    return tx.Inconsistent("hash field record names a slot out of range");
  }
  return std::optional<int64_t>(slot);
}

// The slot record's field and value.
struct SlotEntry {
  std::string field, value;
};
Result<SlotEntry> ReadSlot(CollTx& tx, const Coll& h, int64_t slot) {
  auto r = tx.Get(SlotKey(h.key, h.meta.id, slot));
  if (!r.ok()) return r.status();
  if (!r->has_value()) return tx.Inconsistent("hash slot record missing");
  std::string_view f, v;
  if (!DecodeHashSlot(**r, &f, &v)) return Corrupt("hash slot record malformed");
  return SlotEntry{std::string(f), std::string(v)};
}

// Sets field := value; returns whether the field is new.
Result<bool> SetField(CollTx& tx, Coll* h, std::string_view field, std::string_view value) {
  ASYMNVM_ASSIGN_OR_RETURN(std::optional<int64_t> slot, FieldSlot(tx, *h, field));
  h->changed = true;
  if (slot) {
    tx.Put(SlotKey(h->key, h->meta.id, *slot), EncodeHashSlot(field, value));
    return false;
  }
  int64_t s = h->meta.size++;
  tx.Put(FieldKey(h->key, h->meta.id, field), EncodeI64(s));
  tx.Put(SlotKey(h->key, h->meta.id, s), EncodeHashSlot(field, value));
  return true;
}

// Removes `field`; returns whether it was there.
Result<bool> DelField(CollTx& tx, Coll* h, std::string_view field) {
  ASYMNVM_ASSIGN_OR_RETURN(std::optional<int64_t> slot, FieldSlot(tx, *h, field));
  if (!slot) return false;
  const int64_t last = h->meta.size - 1;
  if (*slot != last) {
    ASYMNVM_ASSIGN_OR_RETURN(SlotEntry moved, ReadSlot(tx, *h, last));
    tx.Put(FieldKey(h->key, h->meta.id, moved.field), EncodeI64(*slot));
    tx.Put(SlotKey(h->key, h->meta.id, *slot), EncodeHashSlot(moved.field, moved.value));
  }
  tx.Del(SlotKey(h->key, h->meta.id, last));
  tx.Del(FieldKey(h->key, h->meta.id, field));
  h->meta.size--;
  h->changed = true;
  return true;
}

// Opens `key` as a hash for a write: nullptr after replying an error (WRONGTYPE, store).
Coll* OpenHash(CommandContext& c, CollTx& tx, std::string_view key, bool create) {
  bool wrong = false;
  auto r = tx.OpenAs(key, KeyType::kHash, &wrong);
  if (!r.ok()) {
    c.out.Error(TxError(r.status()));
    return nullptr;
  }
  if (wrong) {
    c.out.Error(std::string(kErrWrongType));
    return nullptr;
  }
  if (create && (*r)->type == KeyType::kNone) tx.Create(*r, KeyType::kHash);
  return *r;
}

bool CheckFieldSize(CommandContext& c, std::string_view key, std::string_view field) {
  if (field.size() <= MaxFieldSize(key)) return true;
  c.out.Error("ERR field of " + std::to_string(field.size()) + " bytes; fields are at most " +
              std::to_string(MaxFieldSize(key)) + " bytes here (doc/types.md §Limits)");
  return false;
}

// A snapshot read of one hash (types.h SnapshotRead): body(tx, h, w) with h absent (kNone) or a
// hash; WRONGTYPE is replied here.
template <typename Body>
void HashRead(CommandContext& c, std::string_view key, Body&& body) {
  SnapshotRead(c, [&](CollTx& tx, ReplyWriter& w) -> Status {
    bool wrong = false;
    ASYMNVM_ASSIGN_OR_RETURN(Coll * h, tx.OpenAs(key, KeyType::kHash, &wrong));
    if (wrong) {
      w.Error(kErrWrongType);
      return Status::Ok();
    }
    return body(tx, *h, w);
  });
}

}  // namespace

void HSet(CommandContext& c, const std::vector<std::string>& a) {
  if (a.size() % 2 != 0) return c.out.Error(ArityError(a[0]));
  const bool hmset = EqualsNoCase(a[0], "hmset");
  for (size_t i = 2; i < a.size(); i += 2) {
    if (!CheckFieldSize(c, a[1], a[i])) return;
  }
  RunTx(c, [&](CollTx& tx) {
    Coll* h = OpenHash(c, tx, a[1], true);
    if (h == nullptr) return TxOutcome::kError;
    int64_t added = 0;
    for (size_t i = 2; i < a.size(); i += 2) {
      auto r = SetField(tx, h, a[i], a[i + 1]);
      if (!r.ok()) {
        return TxFail(c.out, r.status());
      }
      added += *r ? 1 : 0;
    }
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) {
      if (hmset) {
        c.out.Ok();
      } else {
        c.out.Integer(added);
      }
    }
    return o;
  });
}

void HSetNx(CommandContext& c, const std::vector<std::string>& a) {
  if (!CheckFieldSize(c, a[1], a[2])) return;
  RunTx(c, [&](CollTx& tx) {
    Coll* h = OpenHash(c, tx, a[1], true);
    if (h == nullptr) return TxOutcome::kError;
    if (h->store_version != 0 && !h->changed) {
      auto slot = FieldSlot(tx, *h, a[2]);
      if (!slot.ok()) {
        return TxFail(c.out, slot.status());
      }
      if (slot->has_value()) {
        c.out.Integer(0);
        return TxOutcome::kCommitted;
      }
    }
    auto r = SetField(tx, h, a[2], a[3]);
    if (!r.ok()) {
      return TxFail(c.out, r.status());
    }
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) c.out.Integer(1);
    return o;
  });
}

void HGet(CommandContext& c, const std::vector<std::string>& a) {
  HashRead(c, a[1], [&](CollTx& tx, const Coll& h, ReplyWriter& w) -> Status {
    if (h.type == KeyType::kNone) {
      w.Null();
      return Status::Ok();
    }
    ASYMNVM_ASSIGN_OR_RETURN(std::optional<int64_t> slot, FieldSlot(tx, h, a[2]));
    if (!slot) {
      w.Null();
      return Status::Ok();
    }
    ASYMNVM_ASSIGN_OR_RETURN(SlotEntry e, ReadSlot(tx, h, *slot));
    w.Bulk(e.value);
    return Status::Ok();
  });
}

void HStrLen(CommandContext& c, const std::vector<std::string>& a) {
  HashRead(c, a[1], [&](CollTx& tx, const Coll& h, ReplyWriter& w) -> Status {
    int64_t n = 0;
    if (h.type != KeyType::kNone) {
      ASYMNVM_ASSIGN_OR_RETURN(std::optional<int64_t> slot, FieldSlot(tx, h, a[2]));
      if (slot) {
        ASYMNVM_ASSIGN_OR_RETURN(SlotEntry e, ReadSlot(tx, h, *slot));
        n = static_cast<int64_t>(e.value.size());
      }
    }
    w.Integer(n);
    return Status::Ok();
  });
}

void HMGet(CommandContext& c, const std::vector<std::string>& a) {
  HashRead(c, a[1], [&](CollTx& tx, const Coll& h, ReplyWriter& w) -> Status {
    w.Array(a.size() - 2);
    for (size_t i = 2; i < a.size(); ++i) {
      if (h.type == KeyType::kNone) {
        w.Null();
        continue;
      }
      ASYMNVM_ASSIGN_OR_RETURN(std::optional<int64_t> slot, FieldSlot(tx, h, a[i]));
      if (!slot) {
        w.Null();
        continue;
      }
      ASYMNVM_ASSIGN_OR_RETURN(SlotEntry e, ReadSlot(tx, h, *slot));
      w.Bulk(e.value);
    }
    return Status::Ok();
  });
}

void HExists(CommandContext& c, const std::vector<std::string>& a) {
  HashRead(c, a[1], [&](CollTx& tx, const Coll& h, ReplyWriter& w) -> Status {
    bool found = false;
    if (h.type != KeyType::kNone) {
      ASYMNVM_ASSIGN_OR_RETURN(std::optional<int64_t> slot, FieldSlot(tx, h, a[2]));
      found = slot.has_value();
    }
    w.Integer(found ? 1 : 0);
    return Status::Ok();
  });
}

void HLen(CommandContext& c, const std::vector<std::string>& a) {
  CollTx tx(c.store, c.state.NowMs());
  Coll* h = OpenHash(c, tx, a[1], false);
  if (h == nullptr) return;
  c.out.Integer(h->type == KeyType::kNone ? 0 : h->meta.size);
}

void HDel(CommandContext& c, const std::vector<std::string>& a) {
  RunTx(c, [&](CollTx& tx) {
    Coll* h = OpenHash(c, tx, a[1], false);
    if (h == nullptr) return TxOutcome::kError;
    int64_t removed = 0;
    if (h->type != KeyType::kNone) {
      for (size_t i = 2; i < a.size(); ++i) {
        auto r = DelField(tx, h, a[i]);
        if (!r.ok()) {
          return TxFail(c.out, r.status());
        }
        removed += *r ? 1 : 0;
      }
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

// HGETALL, HKEYS, HVALS.
void HGetAll(CommandContext& c, const std::vector<std::string>& a) {
  const bool keys = EqualsNoCase(a[0], "hkeys"), vals = EqualsNoCase(a[0], "hvals");
  HashRead(c, a[1], [&](CollTx& tx, const Coll& h, ReplyWriter& w) -> Status {
    const int64_t n = h.type == KeyType::kNone ? 0 : h.meta.size;
    if (keys || vals) {
      w.Array(static_cast<size_t>(n));
    } else {
      w.Map(static_cast<size_t>(n));
    }
    for (int64_t s = 0; s < n; ++s) {
      ASYMNVM_ASSIGN_OR_RETURN(SlotEntry e, ReadSlot(tx, h, s));
      if (!vals) w.Bulk(e.field);
      if (!keys) w.Bulk(e.value);
    }
    return Status::Ok();
  });
}

void HIncrBy(CommandContext& c, const std::vector<std::string>& a) {
  int64_t delta = 0;
  if (!ParseInt64(a[3], &delta)) return c.out.Error(std::string(kErrNotInteger));
  if (!CheckFieldSize(c, a[1], a[2])) return;
  RunTx(c, [&](CollTx& tx) {
    Coll* h = OpenHash(c, tx, a[1], true);
    if (h == nullptr) return TxOutcome::kError;
    int64_t cur = 0;
    auto slot = FieldSlot(tx, *h, a[2]);
    if (!slot.ok()) {
      return TxFail(c.out, slot.status());
    }
    if (slot->has_value()) {
      auto e = ReadSlot(tx, *h, **slot);
      if (!e.ok()) {
        return TxFail(c.out, e.status());
      }
      if (!ParseInt64(e->value, &cur)) {
        c.out.Error("ERR hash value is not an integer");
        return TxOutcome::kError;
      }
    }
    if ((delta > 0 && cur > INT64_MAX - delta) || (delta < 0 && cur < INT64_MIN - delta)) {
      c.out.Error("ERR increment or decrement would overflow");
      return TxOutcome::kError;
    }
    const int64_t next = cur + delta;
    auto r = SetField(tx, h, a[2], std::to_string(next));
    if (!r.ok()) {
      return TxFail(c.out, r.status());
    }
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) c.out.Integer(next);
    return o;
  });
}

void HIncrByFloat(CommandContext& c, const std::vector<std::string>& a) {
  long double delta = 0;
  if (!ParseLongDouble(a[3], &delta)) return c.out.Error(std::string(kErrNotFloat));
  if (std::isinf(delta)) return c.out.Error("ERR value is NaN or Infinity");  // as Redis 7
  if (!CheckFieldSize(c, a[1], a[2])) return;
  RunTx(c, [&](CollTx& tx) {
    Coll* h = OpenHash(c, tx, a[1], true);
    if (h == nullptr) return TxOutcome::kError;
    long double cur = 0;
    auto slot = FieldSlot(tx, *h, a[2]);
    if (!slot.ok()) {
      return TxFail(c.out, slot.status());
    }
    if (slot->has_value()) {
      auto e = ReadSlot(tx, *h, **slot);
      if (!e.ok()) {
        return TxFail(c.out, e.status());
      }
      long double v = 0;
      if (!ParseLongDouble(e->value, &v) || std::isinf(v)) {
        c.out.Error("ERR hash value is not a float");
        return TxOutcome::kError;
      }
      cur = v;
    }
    long double next = cur + delta;
    if (std::isnan(next) || std::isinf(next)) {
      c.out.Error("ERR increment would produce NaN or Infinity");
      return TxOutcome::kError;
    }
    std::string text = FormatDouble(next);
    auto r = SetField(tx, h, a[2], text);
    if (!r.ok()) {
      return TxFail(c.out, r.status());
    }
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) c.out.Bulk(text);
    return o;
  });
}

void HRandField(CommandContext& c, const std::vector<std::string>& a) {
  bool has_count = a.size() >= 3, with_values = false;
  int64_t count = 1;
  if (has_count && !ParseInt64(a[2], &count)) return c.out.Error(std::string(kErrNotInteger));
  if (a.size() == 4) {
    if (!EqualsNoCase(a[3], "withvalues")) return c.out.Error(std::string(kErrSyntax));
    with_values = true;
  } else if (a.size() > 4) {
    return c.out.Error(std::string(kErrSyntax));
  }
  if (has_count && (count < -(INT64_MAX / 2) || count > INT64_MAX / 2)) {
    return c.out.Error("ERR value is out of range");
  }
  HashRead(c, a[1], [&](CollTx& tx, const Coll& h, ReplyWriter& w) -> Status {
    const int64_t n = h.type == KeyType::kNone ? 0 : h.meta.size;
    if (!has_count) {
      if (n == 0) {
        w.Null();
        return Status::Ok();
      }
      ASYMNVM_ASSIGN_OR_RETURN(SlotEntry e, ReadSlot(tx, h, static_cast<int64_t>(RandomU64() % n)));
      w.Bulk(e.field);
      return Status::Ok();
    }
    std::vector<int64_t> slots;
    if (count >= 0) {
      // Distinct fields: all of them, or a random subset (partial Fisher-Yates over the slots).
      int64_t k = std::min(count, n);
      std::unordered_map<int64_t, int64_t> perm;
      for (int64_t i = 0; i < k; ++i) {
        int64_t j = i + static_cast<int64_t>(RandomU64() % static_cast<uint64_t>(n - i));
        int64_t vi = perm.count(i) ? perm[i] : i, vj = perm.count(j) ? perm[j] : j;
        perm[i] = vj;
        perm[j] = vi;
        slots.push_back(vj);
      }
    } else if (n > 0) {
      for (int64_t i = 0; i < -count; ++i) {
        slots.push_back(static_cast<int64_t>(RandomU64() % static_cast<uint64_t>(n)));
      }
    }
    const bool pairs = with_values && c.session.proto >= 3;
    w.Array(with_values && !pairs ? slots.size() * 2 : slots.size());
    std::unordered_map<int64_t, SlotEntry> cache;
    for (int64_t s : slots) {
      auto it = cache.find(s);
      if (it == cache.end()) {
        ASYMNVM_ASSIGN_OR_RETURN(SlotEntry e, ReadSlot(tx, h, s));
        it = cache.emplace(s, std::move(e)).first;
      }
      if (pairs) w.Array(2);
      w.Bulk(it->second.field);
      if (with_values) w.Bulk(it->second.value);
    }
    return Status::Ok();
  });
}

void HScan(CommandContext& c, const std::vector<std::string>& a) {
  // The cursor is 1 + the next slot to visit; slots are visited from the highest down, so HDEL
  // (which moves the last slot into the freed one) never hides a field that stays in the hash.
  uint64_t cursor = 0;
  {
    int64_t v = 0;
    if (!ParseInt64(a[2], &v) || v < 0) return c.out.Error("ERR invalid cursor");
    cursor = static_cast<uint64_t>(v);
  }
  std::string pattern;
  bool has_pattern = false, novalues = false;
  int64_t count = 10;
  for (size_t i = 3; i < a.size(); ++i) {
    if (EqualsNoCase(a[i], "match") && i + 1 < a.size()) {
      pattern = a[++i];
      has_pattern = pattern != "*";
    } else if (EqualsNoCase(a[i], "count") && i + 1 < a.size()) {
      if (!ParseInt64(a[++i], &count)) return c.out.Error(std::string(kErrNotInteger));
      if (count < 1) return c.out.Error(std::string(kErrSyntax));
    } else if (EqualsNoCase(a[i], "novalues")) {
      novalues = true;
    } else {
      return c.out.Error(std::string(kErrSyntax));
    }
  }
  HashRead(c, a[1], [&](CollTx& tx, const Coll& h, ReplyWriter& w) -> Status {
    const int64_t n = h.type == KeyType::kNone ? 0 : h.meta.size;
    int64_t pos = cursor == 0 ? n - 1 : std::min<int64_t>(static_cast<int64_t>(cursor - 1), n - 1);
    std::vector<SlotEntry> items;
    for (int64_t seen = 0; pos >= 0 && seen < count; --pos, ++seen) {
      ASYMNVM_ASSIGN_OR_RETURN(SlotEntry e, ReadSlot(tx, h, pos));
      if (has_pattern && !GlobMatch(pattern, e.field)) continue;
      items.push_back(std::move(e));
    }
    w.Array(2);
    w.Bulk(std::to_string(pos < 0 ? 0 : pos + 1));
    w.Array(novalues ? items.size() : items.size() * 2);
    for (const auto& e : items) {
      w.Bulk(e.field);
      if (!novalues) w.Bulk(e.value);
    }
    return Status::Ok();
  });
}

}  // namespace asymnvm::kv::resp::handlers
