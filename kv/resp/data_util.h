// Helpers the data-command files share (data_commands.cc, string_commands.cc,
// keyspace_commands.cc): reading a key's current value (expired = absent), read-modify-write with
// a conditional put, expiry arguments, and atomic multi-key commands over a transaction overlay.
//
// Thread safety: as the handlers (one CommandContext per call).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kv/resp/commands.h"
#include "kv/resp/txn.h"
#include "kv/resp/types.h"
#include "kv/resp/value.h"

namespace asymnvm::kv::resp::handlers {

inline constexpr std::string_view kErrCrossSlot =
    "CROSSSLOT Keys in request don't hash to the same slot";

struct Current {
  bool exists = false;  // present and not expired
  std::string data;
  int64_t expire_at = 0;
  uint64_t version = 0;  // the stored version, also for an expired value (0: nothing stored)
  uint8_t type = 0;      // 0: a string; else a hash, list, set or sorted set (types.h KeyType)
};

// Replies Redis's WRONGTYPE when `cur` is a live value other than a string (a collection's
// metadata record: doc/types.md); the string commands call it before touching the value.
inline bool NotString(CommandContext& c, const Current& cur) {
  if (!cur.exists || cur.type == 0) return false;
  c.out.Error(std::string(kErrWrongType));
  return true;
}

inline Result<Current> ReadCurrent(CommandContext& c, std::string_view key) {
  auto r = c.store.Get(key);
  if (!r.ok()) return r.status();
  Current cur;
  if (!r->has_value()) return cur;
  cur.version = (*r)->version;
  DecodedValue d = DecodeValue((*r)->value);
  if (d.expire_at_ms != 0 && d.expire_at_ms <= c.state.NowMs()) return cur;
  cur.exists = true;
  cur.data.assign(d.data);
  cur.expire_at = d.expire_at_ms;
  cur.type = d.type;
  return cur;
}

enum class Action { kNone, kPut, kDelete };
struct Mutation {
  Action action = Action::kNone;
  std::string data;
  int64_t expire_at = 0;
  uint8_t type = 0;  // EXPIRE/PERSIST keep a collection's metadata frame (cur.type)
};

// Reads `key`, asks fn(cur, &mutation) what to write (fn returns false after replying an error),
// and writes it conditionally on the version read, re-reading on a concurrent change. Returns true
// when the handler should now write its success reply.
template <typename Fn>
bool ReadModifyWrite(CommandContext& c, std::string_view key, Fn&& fn) {
  ConflictRetry retry;
  do {
    auto cur = ReadCurrent(c, key);
    if (!cur.ok()) {
      c.out.Error(StoreError(cur.status()));
      return false;
    }
    Mutation m;
    if (!fn(*cur, &m)) return false;
    if (m.action == Action::kNone) return true;
    if (m.action == Action::kDelete) {
      auto d = c.store.Delete(key);
      if (!d.ok()) {
        c.out.Error(StoreError(d.status()));
        return false;
      }
      return true;
    }
    auto p = c.store.PutIf(key, EncodeValue(m.data, m.expire_at, m.type), cur->version);
    if (!p.ok()) {
      c.out.Error(StoreError(p.status()));
      return false;
    }
    if (p->has_value()) return true;
  } while (retry.Again());
  c.out.Error("TRYAGAIN the key kept changing; nothing was written");
  return false;
}

// Parses an expiry argument into an absolute Unix-ms deadline; false after replying an error.
inline bool ParseExpiry(CommandContext& c, std::string_view arg, int64_t unit_ms, bool absolute,
                        std::string_view cmd, int64_t* deadline) {
  int64_t v = 0;
  if (!ParseInt64(arg, &v)) {
    c.out.Error(std::string(kErrNotInteger));
    return false;
  }
  std::string err = "ERR invalid expire time in '" + std::string(cmd) + "' command";
  if (unit_ms > 1 && (v > INT64_MAX / unit_ms || v < INT64_MIN / unit_ms)) {
    c.out.Error(err);
    return false;
  }
  int64_t ms = v * unit_ms;
  if (!absolute) {
    int64_t now = c.state.NowMs();
    if ((ms > 0 && now > INT64_MAX - ms)) {
      c.out.Error(err);
      return false;
    }
    ms += now;
  }
  *deadline = ms;
  return true;
}

// The expiry options SET and GETEX share (EX seconds, PX milliseconds, EXAT, PXAT: Redis's
// parseExtendedStringArgumentsOrReply). When a[*i] is one of them and a value follows, the value
// is parsed into *deadline (absolute Unix ms) and *i is moved past it. kNotExpiry: a[*i] is
// something else (the caller decides); kAnswered: the value was bad and an error was replied.
enum class ExpiryOption { kNotExpiry, kParsed, kAnswered };
inline ExpiryOption ParseExpiryOption(CommandContext& c, const std::vector<std::string>& a,
                                      size_t* i, std::string_view cmd, int64_t* deadline) {
  const std::string& o = a[*i];
  bool secs = EqualsNoCase(o, "EX") || EqualsNoCase(o, "EXAT");
  bool absolute = EqualsNoCase(o, "EXAT") || EqualsNoCase(o, "PXAT");
  if (*i + 1 >= a.size() || !(secs || absolute || EqualsNoCase(o, "PX"))) {
    return ExpiryOption::kNotExpiry;
  }
  const std::string& arg = a[++*i];
  int64_t v = 0;
  if (!ParseInt64(arg, &v)) {
    c.out.Error(std::string(kErrNotInteger));
    return ExpiryOption::kAnswered;
  }
  if (v <= 0) {
    c.out.Error("ERR invalid expire time in '" + std::string(cmd) + "' command");
    return ExpiryOption::kAnswered;
  }
  if (!ParseExpiry(c, arg, secs ? 1000 : 1, absolute, cmd, deadline)) {
    return ExpiryOption::kAnswered;
  }
  return ExpiryOption::kParsed;
}

// Whether a scanned value is live (not expired) at `now`.
inline bool Live(const Store::ScanPage& page, size_t i, int64_t now) {
  if (i >= page.values.size()) return true;
  int64_t exp = DecodeValue(page.values[i]).expire_at_ms;
  return exp == 0 || exp > now;
}

// Whether every key is in one commit group (Store::CommitGroup: the condition of an atomic
// multi-key write; else -CROSSSLOT).
inline bool CommitTogether(CommandContext& c, const std::vector<std::string_view>& keys) {
  for (size_t i = 1; i < keys.size(); ++i) {
    if (c.store.CommitGroup(keys[i]) != c.store.CommitGroup(keys[0])) return false;
  }
  return true;
}

// Runs fn(CommandContext& tc) over a transaction overlay of c.store and commits its writes as one
// conditional batch (every write or none, conditional on every version read), re-running fn when
// a key changed meanwhile. fn replies errors to tc.out and returns false (nothing is written; the
// error is passed on); it must not reply success itself. Keys must be in one commit group (the
// caller checks CommitTogether and answers CROSSSLOT). Returns true when the handler should reply
// success.
template <typename Fn>
bool Atomically(CommandContext& c, Fn&& fn) {
  ConflictRetry retry;
  do {
    TxnStore txn(&c.store);
    std::string errors;
    ReplyWriter w(&errors, c.out.proto());
    CommandContext tc{c.session, c.state, txn, w, c.dispatcher};
    if (!fn(tc)) {
      c.out.Raw(errors);
      return false;
    }
    auto committed = txn.Commit();
    if (!committed.ok()) {
      c.out.Error(StoreError(committed.status()) + " (nothing was written)");
      return false;
    }
    if (*committed) return true;
  } while (retry.Again());
  c.out.Error("TRYAGAIN the keys kept changing; nothing was written");
  return false;
}

}  // namespace asymnvm::kv::resp::handlers
