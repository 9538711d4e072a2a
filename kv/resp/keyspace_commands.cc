// Keyspace commands beyond data_commands.cc's: RENAME, RENAMENX, COPY, KEYS, TYPE, UNLINK, TOUCH,
// OBJECT, MEMORY, EXPIREAT/PEXPIREAT, EXPIRETIME/PEXPIRETIME, FLUSHDB, WATCH/UNWATCH, and the
// server commands a Redis client or the Redis test suite sends to any server: FUNCTION (no
// scripting here), SAVE, SHUTDOWN. Semantics and error texts follow Redis 7 (db.c, expire.c,
// multi.c).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>

#include "asymnvm/kv.h"
#include "kv/format.h"
#include "kv/resp/commands.h"
#include "kv/resp/data_util.h"
#include "kv/resp/types.h"

namespace asymnvm::kv::resp::handlers {
namespace {

// The raw stored bytes of a live key (its TTL frame included), for RENAME and COPY.
struct RawCurrent {
  bool exists = false;
  std::string raw;
  uint8_t type = 0;  // 0: a string; else a collection's metadata record (types.h)
};

// COPY and RENAME of a hash, list, set or sorted set: its records are named by their key's route
// (doc/types.md §Records), so the copy writes every one of them again under the destination's name
// and a new incarnation, with the destination's metadata (the source's size and TTL) and, for
// RENAME, the source's deletion in one conditional commit (in parts when large: CollTx::Commit).
// O(N) where Redis's RENAME is O(1). Returns false, having replied nothing, when `src` holds no
// collection (the caller's string path takes over); else it has replied: RENAME OK, RENAMENX and
// COPY 1, or 0 when `dst` exists and may not be replaced.
bool CopyCollection(CommandContext& c, const std::string& src, const std::string& dst, bool rename,
                    bool replace) {
  bool collection = true;
  auto reply = [&](bool done) {
    if (rename && replace) return c.out.Ok();
    c.out.Integer(done ? 1 : 0);
  };
  RunTx(c, [&](CollTx& tx) {
    auto s = tx.Open(src);
    if (!s.ok()) return TxFail(c.out, s.status());
    Coll* sc = *s;
    if (sc->type == KeyType::kNone || sc->type == KeyType::kString) {
      collection = false;
      return TxOutcome::kCommitted;  // nothing written, nothing replied
    }
    if (src == dst) {
      reply(false);
      return TxOutcome::kCommitted;
    }
    auto d = tx.Open(dst);
    if (!d.ok()) return TxFail(c.out, d.status());
    Coll* dc = *d;
    if (dc->type != KeyType::kNone && !replace) {
      reply(false);
      return TxOutcome::kCommitted;
    }
    tx.Create(dc, sc->type);
    std::vector<std::pair<std::string, std::string>> records;
    Status st = CollectionImage(tx, *sc, dst, dc->meta.id, &records);
    if (!st.ok()) return TxFail(c.out, st);
    const uint64_t id = dc->meta.id;
    dc->meta = sc->meta;
    dc->meta.id = id;
    dc->expire_at_ms = sc->expire_at_ms;
    for (auto& [k, v] : records) tx.Put(std::move(k), std::move(v));
    if (rename) sc->deleted = true;
    TxOutcome o = tx.Commit(c.out);
    if (o == TxOutcome::kCommitted) reply(true);
    return o;
  });
  return collection;
}

Result<RawCurrent> ReadRaw(CommandContext& c, std::string_view key) {
  auto r = c.store.Get(key);
  if (!r.ok()) return r.status();
  RawCurrent cur;
  if (!r->has_value()) return cur;
  DecodedValue d = DecodeValue((*r)->value);
  if (d.expire_at_ms != 0 && d.expire_at_ms <= c.state.NowMs()) return cur;
  cur.exists = true;
  cur.type = d.type;
  cur.raw = std::move((*r)->value);
  return cur;
}

// RENAME and RENAMENX. Redis: a missing source is "ERR no such key"; renaming a key to itself
// succeeds (RENAME OK, RENAMENX 0) without changing it.
void RenameGeneric(CommandContext& c, const std::vector<std::string>& a, bool nx) {
  const std::string& src = a[1];
  const std::string& dst = a[2];
  if (!CommitTogether(c, {src, dst})) return c.out.Error(std::string(kErrCrossSlot));
  if (CopyCollection(c, src, dst, /*rename=*/true, /*replace=*/!nx)) return;
  enum { kNoKey, kSame, kExists, kDone, kCollection } outcome = kNoKey;
  bool ok = Atomically(c, [&](CommandContext& t) {
    auto s = ReadRaw(t, src);
    if (!s.ok()) {
      t.out.Error(StoreError(s.status()));
      return false;
    }
    if (!s->exists) {
      outcome = kNoKey;
      return true;
    }
    if (s->type != 0) {  // it became a collection after CopyCollection looked
      outcome = kCollection;
      return true;
    }
    if (src == dst) {
      outcome = kSame;
      return true;
    }
    if (nx) {
      auto d = ReadCurrent(t, dst);
      if (!d.ok()) {
        t.out.Error(StoreError(d.status()));
        return false;
      }
      if (d->exists) {
        outcome = kExists;
        return true;
      }
    }
    auto p = t.store.Put(dst, s->raw);
    auto del = p.ok() ? t.store.Delete(src) : Result<bool>(p.status());
    if (!del.ok()) {
      t.out.Error(StoreError(del.status()));
      return false;
    }
    outcome = kDone;
    return true;
  });
  if (!ok) return;
  if (outcome == kNoKey) return c.out.Error("ERR no such key");
  if (outcome == kCollection) return c.out.Error(std::string(kErrTryAgain));
  if (nx) return c.out.Integer(outcome == kDone ? 1 : 0);
  c.out.Ok();
}

// The log bytes of one sampled element of collection `m` (type t) of `key`: its records'
// 64-byte-aligned entries (kv/format.h). 0 when the element is not there (a concurrent change).
Result<size_t> ElementFootprint(CommandContext& c, std::string_view key, KeyType t, const Meta& m,
                                int64_t i) {
  const std::string sub =
      t == KeyType::kList ? ElemKey(key, m.id, m.head + i) : SlotKey(key, m.id, i);
  auto r = c.store.Get(sub);
  if (!r.ok()) return r.status();
  if (!r->has_value()) return size_t{0};
  const std::string& v = (*r)->value;
  size_t bytes = format::EntryFootprint(sub.size(), v.size());
  if (t == KeyType::kList) return bytes;
  // Its member record ('f' + field/member → slot and payload).
  std::string_view member = v;
  size_t payload = 0;
  if (t == KeyType::kHash) {
    std::string_view value;
    if (!DecodeHashSlot(v, &member, &value)) return bytes;
  } else if (t == KeyType::kZset) {
    payload = 8;
    member = std::string_view(v).substr(std::min<size_t>(8, v.size()));
  }
  return bytes + format::EntryFootprint(FieldKey(key, m.id, member).size(), 8 + payload);
}

std::string ObjectEncoding(const std::string& v) {
  int64_t n = 0;
  if (v.size() <= 20 && ParseInt64(v, &n)) return "int";
  return v.size() <= 44 ? "embstr" : "raw";
}

}  // namespace

void Rename(CommandContext& c, const std::vector<std::string>& a) { RenameGeneric(c, a, false); }
void RenameNx(CommandContext& c, const std::vector<std::string>& a) { RenameGeneric(c, a, true); }

void Copy(CommandContext& c, const std::vector<std::string>& a) {
  bool replace = false;
  for (size_t i = 3; i < a.size(); ++i) {
    if (EqualsNoCase(a[i], "REPLACE")) {
      replace = true;
    } else if (EqualsNoCase(a[i], "DB") && i + 1 < a.size()) {
      int64_t db = 0;
      if (!ParseInt64(a[i + 1], &db)) return c.out.Error(std::string(kErrNotInteger));
      if (db != 0) return c.out.Error("ERR DB index is out of range");
      ++i;
    } else {
      return c.out.Error(std::string(kErrSyntax));
    }
  }
  if (a[1] == a[2]) return c.out.Error("ERR source and destination objects are the same");
  if (!CommitTogether(c, {a[1], a[2]})) return c.out.Error(std::string(kErrCrossSlot));
  if (CopyCollection(c, a[1], a[2], /*rename=*/false, replace)) return;
  bool copied = false;
  bool collection = false;
  bool ok = Atomically(c, [&](CommandContext& t) {
    copied = false;
    collection = false;
    auto s = ReadRaw(t, a[1]);
    if (!s.ok()) {
      t.out.Error(StoreError(s.status()));
      return false;
    }
    if (!s->exists) return true;
    if (s->type != 0) {  // it became a collection after CopyCollection looked
      collection = true;
      return true;
    }
    auto d = ReadCurrent(t, a[2]);
    if (!d.ok()) {
      t.out.Error(StoreError(d.status()));
      return false;
    }
    if (d->exists && !replace) return true;
    auto p = t.store.Put(a[2], s->raw);
    if (!p.ok()) {
      t.out.Error(StoreError(p.status()));
      return false;
    }
    copied = true;
    return true;
  });
  if (!ok) return;
  if (collection) return c.out.Error(std::string(kErrTryAgain));
  c.out.Integer(copied ? 1 : 0);
}

void Keys(CommandContext& c, const std::vector<std::string>& a) {
  const std::string& pattern = a[1];
  const bool all = pattern == "*";
  std::vector<std::string> keys;
  uint64_t cursor = 0;
  do {
    auto page = c.store.Scan(cursor, 1000);
    if (!page.ok()) return c.out.Error(StoreError(page.status()));
    int64_t now = c.state.NowMs();
    for (size_t i = 0; i < page->keys.size(); ++i) {
      if (kv::IsRoutedKey(page->keys[i])) continue;  // a collection's sub-record (doc/types.md)
      if ((all || GlobMatch(pattern, page->keys[i])) && Live(*page, i, now)) {
        keys.push_back(std::move(page->keys[i]));
      }
    }
    cursor = page->next_cursor;
  } while (cursor != 0);
  c.out.Array(keys.size());
  for (const auto& k : keys) c.out.Bulk(k);
}

void RandomKey(CommandContext& c, const std::vector<std::string>&) {
  // Reservoir sampling over a full SCAN (O(N), as KEYS): every live key equally likely.
  std::string pick;
  uint64_t seen = 0;
  uint64_t cursor = 0;
  std::mt19937_64 rng(std::random_device{}());
  do {
    auto page = c.store.Scan(cursor, 1000);
    if (!page.ok()) return c.out.Error(StoreError(page.status()));
    int64_t now = c.state.NowMs();
    for (size_t i = 0; i < page->keys.size(); ++i) {
      if (!Live(*page, i, now) || kv::IsRoutedKey(page->keys[i])) continue;
      if (rng() % ++seen == 0) pick = page->keys[i];
    }
    cursor = page->next_cursor;
  } while (cursor != 0);
  if (seen == 0) return c.out.Null();
  c.out.Bulk(pick);
}

void Type(CommandContext& c, const std::vector<std::string>& a) {
  auto cur = ReadCurrent(c, a[1]);
  if (!cur.ok()) return c.out.Error(StoreError(cur.status()));
  if (!cur->exists) return c.out.Simple("none");
  // A collection's metadata record names its type (doc/types.md); any other value is a string.
  c.out.Simple(cur->type == 0 ? "string" : TypeName(static_cast<KeyType>(cur->type)));
}

void Touch(CommandContext& c, const std::vector<std::string>& a) {
  int64_t n = 0;
  for (size_t i = 1; i < a.size(); ++i) {
    auto cur = ReadCurrent(c, a[i]);
    if (!cur.ok()) return c.out.Error(StoreError(cur.status()));
    n += cur->exists ? 1 : 0;
  }
  c.out.Integer(n);
}

void Object(CommandContext& c, const std::vector<std::string>& a) {
  const std::string& sub = a[1];
  if (EqualsNoCase(sub, "HELP") && a.size() == 2) {
    static const char* kHelp[] = {
        "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "ENCODING <key>",
        "    Return the kind of internal representation used in order to store the value",
        "    associated with a <key>.",
        "FREQ <key>",
        "    Return the access frequency index of the <key>. The returned integer is",
        "    proportional to the logarithm of the recent access frequency of the key.",
        "IDLETIME <key>",
        "    Return the idle time of the <key>, that is the approximated number of",
        "    seconds elapsed since the last access to the key.",
        "REFCOUNT <key>",
        "    Return the number of references of the value associated with the specified",
        "    <key>.",
        "HELP",
        "    Print this help."};
    c.out.Array(sizeof(kHelp) / sizeof(kHelp[0]));
    for (const char* l : kHelp) c.out.Simple(l);
    return;
  }
  bool known = EqualsNoCase(sub, "ENCODING") || EqualsNoCase(sub, "REFCOUNT") ||
               EqualsNoCase(sub, "IDLETIME") || EqualsNoCase(sub, "FREQ");
  if (!known || a.size() != 3) {
    return c.out.Error("ERR unknown subcommand or wrong number of arguments for '" +
                       sub.substr(0, 128) + "'. Try OBJECT HELP.");
  }
  auto cur = ReadCurrent(c, a[2]);
  if (!cur.ok()) return c.out.Error(StoreError(cur.status()));
  if (!cur->exists) return c.out.Null();
  if (EqualsNoCase(sub, "ENCODING")) {
    // A collection: the encoding Redis uses for a large one (its records are a hash table here).
    if (cur->type != 0) {
      const KeyType t = static_cast<KeyType>(cur->type);
      return c.out.Bulk(t == KeyType::kList ? "quicklist"
                                            : (t == KeyType::kZset ? "skiplist" : "hashtable"));
    }
    return c.out.Bulk(ObjectEncoding(cur->data));
  }
  if (EqualsNoCase(sub, "REFCOUNT")) return c.out.Integer(1);
  if (EqualsNoCase(sub, "IDLETIME")) return c.out.Integer(0);
  c.out.Error(
      "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note "
      "that when switching between policies at runtime LRU and LFU data will take some time to "
      "adjust.");
}

// MEMORY (Redis 7 object.c): USAGE estimates a key's bytes as what its records take in the
// store's logs (64-byte-aligned entries): a string exactly; a collection's metadata record plus
// its elements' records, the first SAMPLES elements (default 5; 0: all) read and extrapolated
// to its size as Redis does. STATS, DOCTOR, MALLOC-STATS and PURGE answer for this process.
void Memory(CommandContext& c, const std::vector<std::string>& a) {
  const std::string& sub = a[1];
  if (EqualsNoCase(sub, "HELP") && a.size() == 2) {
    static const char* kHelp[] = {
        "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "DOCTOR",
        "    Return memory problems reports.",
        "MALLOC-STATS",
        "    Return internal statistics report from the memory allocator.",
        "PURGE",
        "    Attempt to purge dirty pages for reclamation by the allocator.",
        "STATS",
        "    Return information about the memory usage of the server.",
        "USAGE <key> [SAMPLES <count>]",
        "    Return memory in bytes used by <key> and its value. Nested values are",
        "    sampled up to <count> times (default: 5, 0 means sample all).",
        "HELP",
        "    Print this help."};
    c.out.Array(sizeof(kHelp) / sizeof(kHelp[0]));
    for (const char* l : kHelp) c.out.Simple(l);
    return;
  }
  if (EqualsNoCase(sub, "USAGE") && a.size() >= 3) {
    int64_t samples = 5;
    for (size_t i = 3; i < a.size(); ++i) {
      if (EqualsNoCase(a[i], "SAMPLES") && i + 1 < a.size()) {
        if (!ParseInt64(a[i + 1], &samples) || samples < 0) {
          return c.out.Error(std::string(kErrNotInteger));
        }
        if (samples == 0) samples = INT64_MAX;
        ++i;
      } else {
        return c.out.Error(std::string(kErrSyntax));
      }
    }
    auto cur = ReadRaw(c, a[2]);
    if (!cur.ok()) return c.out.Error(StoreError(cur.status()));
    if (!cur->exists) return c.out.Null();
    int64_t bytes = static_cast<int64_t>(format::EntryFootprint(a[2].size(), cur->raw.size()));
    Meta m;
    const auto t = static_cast<KeyType>(cur->type);
    if (cur->type != 0 && DecodeMeta(DecodeValue(cur->raw).data, &m) && m.size > 0) {
      const int64_t n = std::min(samples, m.size);
      int64_t sampled = 0;
      for (int64_t i = 0; i < n; ++i) {
        auto e = ElementFootprint(c, a[2], t, m, i);
        if (!e.ok()) return c.out.Error(StoreError(e.status()));
        sampled += static_cast<int64_t>(*e);
      }
      bytes += n == m.size ? sampled : sampled / n * m.size;
    }
    return c.out.Integer(bytes);
  }
  if (a.size() != 2) {
    return c.out.Error("ERR unknown subcommand or wrong number of arguments for '" +
                       sub.substr(0, 128) + "'. Try MEMORY HELP.");
  }
  if (EqualsNoCase(sub, "DOCTOR")) {
    return c.out.Bulk(
        "Hi Sam, I can't find any memory issue in your instance. The data lives in the servers' "
        "persistent memory pools; see INFO memory for this process.");
  }
  if (EqualsNoCase(sub, "MALLOC-STATS")) {
    return c.out.Bulk("Stats not supported for the current allocator");
  }
  if (EqualsNoCase(sub, "PURGE")) return c.out.Ok();
  if (EqualsNoCase(sub, "STATS")) {
    // This process's resident and peak resident set (/proc/self/status VmRSS, VmHWM).
    int64_t rss = 0, peak = 0;
    if (FILE* f = std::fopen("/proc/self/status", "r")) {
      char line[256];
      while (std::fgets(line, sizeof line, f) != nullptr) {
        long kb = 0;
        if (std::sscanf(line, "VmRSS: %ld kB", &kb) == 1) rss = kb * 1024;
        if (std::sscanf(line, "VmHWM: %ld kB", &kb) == 1) peak = kb * 1024;
      }
      std::fclose(f);
    }
    c.out.Map(2);
    c.out.Bulk("peak.allocated");
    c.out.Integer(peak);
    c.out.Bulk("total.allocated");
    c.out.Integer(rss);
    return;
  }
  c.out.Error("ERR unknown subcommand '" + sub.substr(0, 128) + "'. Try MEMORY HELP.");
}

void ExpireTime(CommandContext& c, const std::vector<std::string>& a) {
  bool ms = EqualsNoCase(a[0], "pexpiretime");
  auto cur = ReadCurrent(c, a[1]);
  if (!cur.ok()) return c.out.Error(StoreError(cur.status()));
  if (!cur->exists) return c.out.Integer(-2);
  if (cur->expire_at == 0) return c.out.Integer(-1);
  c.out.Integer(ms ? cur->expire_at : cur->expire_at / 1000);
}

void Watch(CommandContext& c, const std::vector<std::string>& a) {
  if (c.session.in_multi) return c.out.Error("ERR WATCH inside MULTI is not allowed");
  for (size_t i = 1; i < a.size(); ++i) {
    bool seen = false;
    for (const auto& w : c.session.watched) seen = seen || w.key == a[i];
    if (seen) continue;
    auto cur = ReadCurrent(c, a[i]);
    if (!cur.ok()) return c.out.Error(StoreError(cur.status()));
    c.session.watched.push_back({a[i], cur->version, cur->exists});
  }
  c.out.Ok();
}

void Unwatch(CommandContext& c, const std::vector<std::string>&) {
  c.session.watched.clear();
  c.out.Ok();
}

void Function(CommandContext& c, const std::vector<std::string>& a) {
  const std::string& sub = a[1];
  if (EqualsNoCase(sub, "FLUSH")) {
    if (a.size() > 3 ||
        (a.size() == 3 && !EqualsNoCase(a[2], "ASYNC") && !EqualsNoCase(a[2], "SYNC"))) {
      return c.out.Error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option");
    }
    return c.out.Ok();  // no scripting: there is never a library to remove
  }
  if (EqualsNoCase(sub, "LIST")) {
    for (size_t i = 2; i < a.size(); ++i) {
      if (EqualsNoCase(a[i], "WITHCODE")) continue;
      if (EqualsNoCase(a[i], "LIBRARYNAME") && i + 1 < a.size()) {
        ++i;
        continue;
      }
      return c.out.Error("ERR Unknown argument " + a[i].substr(0, 128));
    }
    return c.out.Array(0);
  }
  if (EqualsNoCase(sub, "STATS")) {
    c.out.Map(2);
    c.out.Bulk("running_script");
    c.out.Null();
    c.out.Bulk("engines");
    c.out.Map(0);
    return;
  }
  c.out.Error("ERR unknown subcommand '" + sub.substr(0, 128) +
              "'. This server has no scripting: FUNCTION FLUSH, LIST and STATS only.");
}

void Save(CommandContext& c, const std::vector<std::string>&) {
  // Every acknowledged write is already durable in the pool (and on every live backup).
  c.out.Ok();
}

void Shutdown(CommandContext& c, const std::vector<std::string>&) {
  c.out.Error(
      "ERR SHUTDOWN is not served by the gateway: stop asymnvm-kv itself (SIGTERM); every "
      "acknowledged write is already durable");
}

std::vector<CommandSpec> KeyspaceCommandSpecs() {
  // name, arity, flags, first/last/step key, group, since, summary, notes, handler, subcommands
  return {
      {"copy", -3, kWrite, 1, 2, 1, "generic", "6.2.0", "Copies the value of a key to a new key.",
       "DB 0 only; REPLACE; one conditional batch: in a replicated cluster both keys must share a "
       "shard (a hash tag `{...}`), else -CROSSSLOT",
       Copy},
      {"expireat", -3, kWrite | kFast, 1, 1, 1, "generic", "1.2.0",
       "Sets the expiration time of a key to a Unix timestamp.", "as EXPIRE", Expire},
      {"expiretime", 2, kReadonly | kFast, 1, 1, 1, "generic", "7.0.0",
       "Returns the expiration time of a key as a Unix timestamp.", "", ExpireTime},
      {"flushdb", -1, kWrite | kNoTxn, 0, 0, 0, "server", "1.0.0",
       "Remove all keys from the current database.", "as FLUSHALL (one database)", FlushAll},
      {"function", -2, kInline, 0, 0, 0, "scripting", "7.0.0", "A container for function commands.",
       "no scripting: FLUSH (OK), LIST (empty), STATS; others are errors", Function,
       "flush list stats"},
      {"keys", 2, kReadonly | kNoTxn, 0, 0, 0, "generic", "1.0.0",
       "Returns all key names that match a pattern.",
       "a full SCAN of every shard (O(N)), on a worker thread", Keys},
      {"memory", -2, kReadonly, 2, 2, 1, "server", "4.0.0",
       "A container for memory diagnostics commands.",
       "USAGE: the key's records' bytes in the store's logs (a collection's elements sampled, "
       "SAMPLES n, as Redis); STATS, DOCTOR, MALLOC-STATS, PURGE about the gateway process",
       Memory, "usage stats doctor malloc-stats purge help"},
      {"object", -2, kReadonly, 2, 2, 1, "generic", "2.2.3",
       "A container for object introspection commands.",
       "ENCODING (int, embstr or raw by the value, as Redis would choose), REFCOUNT (1), IDLETIME "
       "(0); FREQ is Redis's no-LFU error",
       Object, "encoding refcount idletime freq help"},
      {"pexpireat", -3, kWrite | kFast, 1, 1, 1, "generic", "2.6.0",
       "Sets the expiration time of a key to a Unix milliseconds timestamp.", "as EXPIRE", Expire},
      {"pexpiretime", 2, kReadonly | kFast, 1, 1, 1, "generic", "7.0.0",
       "Returns the expiration time of a key as a Unix milliseconds timestamp.", "", ExpireTime},
      {"randomkey", 1, kReadonly | kNoTxn, 0, 0, 0, "generic", "1.0.0",
       "Returns a random key name from the database.",
       "a full SCAN of every shard (O(N)), one key picked uniformly", RandomKey},
      {"rename", 3, kWrite, 1, 2, 1, "generic", "1.0.0",
       "Renames a key and overwrites the destination.",
       "keeps the TTL; one conditional batch: in a replicated cluster both keys must share a shard "
       "(a hash tag `{...}`), else -CROSSSLOT",
       Rename},
      {"renamenx", 3, kWrite, 1, 2, 1, "generic", "1.0.0",
       "Renames a key only when the target key name doesn't exist.", "as RENAME", RenameNx},
      {"save", 1, kAdmin | kNoTxn, 0, 0, 0, "server", "1.0.0",
       "Synchronously saves the database(s) to disk.",
       "OK at once: every acknowledged write is already durable", Save},
      {"shutdown", -1, kAdmin | kNoTxn | kInline, 0, 0, 0, "server", "1.0.0",
       "Synchronously saves the database(s) to disk and shuts down the server.",
       "an error: stop asymnvm-kv itself (SIGTERM)", Shutdown},
      {"touch", -2, kReadonly | kFast, 1, -1, 1, "generic", "3.2.1",
       "Returns the number of existing keys out of those specified after updating the time they "
       "were last accessed.",
       "counts the existing keys (no access time is kept)", Touch},
      {"type", 2, kReadonly | kFast, 1, 1, 1, "generic", "1.0.0",
       "Determines the type of value stored at a key.", "", Type},
      {"unlink", -2, kWrite | kFast, 1, -1, 1, "generic", "4.0.0",
       "Asynchronously deletes one or more keys.", "as DEL (synchronous)", Del},
      {"unwatch", 1, kFast | kNoMulti | kInline, 0, 0, 0, "transactions", "2.2.0",
       "Forgets about watched keys of a transaction.", "", Unwatch},
      {"watch", -2, kFast | kNoMulti, 1, -1, 1, "transactions", "2.2.0",
       "Monitors changes to keys to determine the execution of a transaction.",
       "the versions read are conditions of EXEC's batch: the watched keys must share the "
       "transaction's shard",
       Watch},
  };
}

}  // namespace asymnvm::kv::resp::handlers
