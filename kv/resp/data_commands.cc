// String and keyspace commands over the Store. Values carry the gateway's framing (value.h): an
// expired value reads as absent, and the next write replaces it conditionally on its version.
#include <algorithm>
#include <cctype>

#include "asymnvm/kv.h"
#include "kv/resp/commands.h"
#include "kv/resp/data_util.h"
#include "kv/resp/types.h"
#include "kv/resp/value.h"

namespace asymnvm::kv::resp::handlers {

void Get(CommandContext& c, const std::vector<std::string>& a) {
  auto cur = ReadCurrent(c, a[1]);
  if (!cur.ok()) return c.out.Error(StoreError(cur.status()));
  if (NotString(c, *cur)) return;
  if (cur->exists) {
    c.out.Bulk(cur->data);
  } else {
    c.out.Null();
  }
}

void Set(CommandContext& c, const std::vector<std::string>& a) {
  bool nx = false, xx = false, get = false, keepttl = false, has_expiry = false;
  int64_t deadline = 0;
  for (size_t i = 3; i < a.size(); ++i) {
    const std::string& o = a[i];
    if (EqualsNoCase(o, "NX") && !xx) {
      nx = true;
    } else if (EqualsNoCase(o, "XX") && !nx) {
      xx = true;
    } else if (EqualsNoCase(o, "GET")) {
      get = true;
    } else if (EqualsNoCase(o, "KEEPTTL") && !has_expiry) {
      keepttl = true;
    } else if (!has_expiry && !keepttl) {
      ExpiryOption e = ParseExpiryOption(c, a, &i, "set", &deadline);
      if (e == ExpiryOption::kAnswered) return;
      if (e == ExpiryOption::kNotExpiry) return c.out.Error(std::string(kErrSyntax));
      has_expiry = true;
    } else {
      return c.out.Error(std::string(kErrSyntax));
    }
  }
  const std::string& key = a[1];
  const std::string& value = a[2];
  if (!nx && !xx && !get && !keepttl) {
    // The nilext path: one unconditional PUT.
    auto r = c.store.Put(key, EncodeValue(value, deadline));
    if (!r.ok()) return c.out.Error(StoreError(r.status()));
    return c.out.Ok();
  }
  bool wrote = false, had_old = false;
  std::string old;
  bool ok = ReadModifyWrite(c, key, [&](const Current& cur, Mutation* m) {
    if (get && NotString(c, cur)) return false;
    had_old = cur.exists;
    old = cur.data;
    wrote = false;
    if ((nx && cur.exists) || (xx && !cur.exists)) return true;
    m->action = Action::kPut;
    m->data = value;
    m->expire_at = keepttl ? cur.expire_at : deadline;
    wrote = true;
    return true;
  });
  if (!ok) return;
  if (get) {
    if (had_old) {
      c.out.Bulk(old);
    } else {
      c.out.Null();
    }
  } else if (wrote) {
    c.out.Ok();
  } else {
    c.out.Null();
  }
}

void SetNx(CommandContext& c, const std::vector<std::string>& a) {
  bool wrote = false;
  bool ok = ReadModifyWrite(c, a[1], [&](const Current& cur, Mutation* m) {
    wrote = !cur.exists;
    if (wrote) {
      m->action = Action::kPut;
      m->data = a[2];
    }
    return true;
  });
  if (ok) c.out.Integer(wrote ? 1 : 0);
}

void MGet(CommandContext& c, const std::vector<std::string>& a) {
  std::string replies;
  ReplyWriter w(&replies, c.out.proto());
  w.Array(a.size() - 1);
  for (size_t i = 1; i < a.size(); ++i) {
    auto cur = ReadCurrent(c, a[i]);
    if (!cur.ok()) return c.out.Error(StoreError(cur.status()));
    if (cur->exists && cur->type == 0) {
      w.Bulk(cur->data);
    } else {
      w.Null();
    }
  }
  c.out.Raw(replies);
}

void MSet(CommandContext& c, const std::vector<std::string>& a) {
  if (a.size() % 2 != 1) return c.out.Error(ArityError("mset"));
  // Atomic, as Redis's (no reader sees some of the keys set, nor does a crash leave some): one
  // unconditional batch when the keys commit together (Store::CommitGroup) and fit one batch.
  // Otherwise (a replicated cluster's keys of several shards, more than a batch holds) one PUT per
  // key, atomic per key (where Redis Cluster answers CROSSSLOT).
  std::vector<BatchWrite> writes;
  std::vector<std::string_view> keys;
  size_t bytes = 0;
  const bool may_fit = (a.size() - 1) / 2 <= kMaxTxRecords;
  for (size_t i = 1; may_fit && i + 1 < a.size(); i += 2) {
    auto same = std::find_if(writes.begin(), writes.end(),
                             [&](const BatchWrite& w) { return w.key == a[i]; });
    if (same == writes.end()) {
      keys.push_back(a[i]);
      same = writes.insert(writes.end(), BatchWrite{a[i], 0, std::nullopt, false, true});
    }
    same->value = EncodeValue(a[i + 1], 0);  // the last value of a repeated key wins
    bytes += a[i].size() + same->value->size();
  }
  if (may_fit && bytes <= kMaxTxBytes && CommitTogether(c, keys)) {
    auto r = c.store.CommitBatch(writes);
    if (!r.ok()) return c.out.Error(StoreError(r.status()));
    return c.out.Ok();  // unconditional: always applied
  }
  for (size_t i = 1; i + 1 < a.size(); i += 2) {
    auto r = c.store.Put(a[i], EncodeValue(a[i + 1], 0));
    if (!r.ok()) return c.out.Error(StoreError(r.status()));
  }
  c.out.Ok();
}

void Del(CommandContext& c, const std::vector<std::string>& a) {
  int64_t n = 0;
  for (size_t i = 1; i < a.size(); ++i) {
    auto r = c.store.Delete(a[i]);
    if (!r.ok()) return c.out.Error(StoreError(r.status()));
    n += *r ? 1 : 0;
  }
  c.out.Integer(n);
}

void Exists(CommandContext& c, const std::vector<std::string>& a) {
  int64_t n = 0;
  for (size_t i = 1; i < a.size(); ++i) {
    auto cur = ReadCurrent(c, a[i]);
    if (!cur.ok()) return c.out.Error(StoreError(cur.status()));
    n += cur->exists ? 1 : 0;
  }
  c.out.Integer(n);
}

void IncrFamily(CommandContext& c, const std::vector<std::string>& a) {
  std::string cmd(a[0]);
  for (char& ch : cmd) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  int64_t delta = 1;
  if (cmd == "decr") {
    delta = -1;
  } else if (cmd == "incrby" || cmd == "decrby") {
    if (!ParseInt64(a[2], &delta)) return c.out.Error(std::string(kErrNotInteger));
    if (cmd == "decrby") {
      if (delta == INT64_MIN) return c.out.Error("ERR decrement would overflow");
      delta = -delta;
    }
  }
  // One round trip when the value is a plain decimal (no TTL): the store's atomic Incr.
  auto fast = c.store.Incr(a[1], delta);
  if (!fast.ok()) return c.out.Error(StoreError(fast.status()));
  if (fast->has_value()) return c.out.Integer(**fast);
  int64_t result = 0;
  bool ok = ReadModifyWrite(c, a[1], [&](const Current& cur, Mutation* m) {
    if (NotString(c, cur)) return false;
    int64_t v = 0;
    if (cur.exists && !ParseInt64(cur.data, &v)) {
      c.out.Error(std::string(kErrNotInteger));
      return false;
    }
    if ((delta > 0 && v > INT64_MAX - delta) || (delta < 0 && v < INT64_MIN - delta)) {
      c.out.Error("ERR increment or decrement would overflow");
      return false;
    }
    result = v + delta;
    m->action = Action::kPut;
    m->data = std::to_string(result);
    m->expire_at = cur.expire_at;
    return true;
  });
  if (ok) c.out.Integer(result);
}

void Append(CommandContext& c, const std::vector<std::string>& a) {
  size_t len = 0;
  bool ok = ReadModifyWrite(c, a[1], [&](const Current& cur, Mutation* m) {
    if (NotString(c, cur)) return false;
    m->action = Action::kPut;
    m->data = cur.data + a[2];
    m->expire_at = cur.expire_at;
    len = m->data.size();
    return true;
  });
  if (ok) c.out.Integer(static_cast<int64_t>(len));
}

void StrLen(CommandContext& c, const std::vector<std::string>& a) {
  auto cur = ReadCurrent(c, a[1]);
  if (!cur.ok()) return c.out.Error(StoreError(cur.status()));
  if (NotString(c, *cur)) return;
  c.out.Integer(static_cast<int64_t>(cur->exists ? cur->data.size() : 0));
}

void GetSet(CommandContext& c, const std::vector<std::string>& a) {
  bool had = false;
  std::string old;
  bool ok = ReadModifyWrite(c, a[1], [&](const Current& cur, Mutation* m) {
    if (NotString(c, cur)) return false;
    had = cur.exists;
    old = cur.data;
    m->action = Action::kPut;
    m->data = a[2];
    return true;
  });
  if (!ok) return;
  if (had) {
    c.out.Bulk(old);
  } else {
    c.out.Null();
  }
}

void Scan(CommandContext& c, const std::vector<std::string>& a) {
  uint64_t cursor = 0;
  {
    const std::string& s = a[1];
    if (s.empty() || s.size() > 20) return c.out.Error("ERR invalid cursor");
    for (char ch : s) {
      if (ch < '0' || ch > '9') return c.out.Error("ERR invalid cursor");
      uint64_t d = static_cast<uint64_t>(ch - '0');
      if (cursor > (UINT64_MAX - d) / 10) return c.out.Error("ERR invalid cursor");
      cursor = cursor * 10 + d;
    }
  }
  std::string match;
  bool has_match = false, has_type = false;
  std::string type;
  int64_t count = 10;
  for (size_t i = 2; i < a.size(); i += 2) {
    if (i + 1 >= a.size()) return c.out.Error(std::string(kErrSyntax));
    if (EqualsNoCase(a[i], "MATCH")) {
      match = a[i + 1];
      has_match = match != "*";
    } else if (EqualsNoCase(a[i], "COUNT")) {
      if (!ParseInt64(a[i + 1], &count)) return c.out.Error(std::string(kErrNotInteger));
      if (count < 1) return c.out.Error(std::string(kErrSyntax));
    } else if (EqualsNoCase(a[i], "TYPE")) {
      has_type = true;
      type = a[i + 1];
    } else {
      return c.out.Error(std::string(kErrSyntax));
    }
  }
  auto page = c.store.Scan(cursor, static_cast<size_t>(std::min<int64_t>(count, 100000)));
  if (!page.ok()) return c.out.Error(StoreError(page.status()));
  std::vector<const std::string*> keys;
  int64_t now = c.state.NowMs();
  for (size_t i = 0; i < page->keys.size(); ++i) {
    const auto& k = page->keys[i];
    if (kv::IsRoutedKey(k)) continue;  // a sub-record of a hash, list, set (doc/types.md)
    if (has_type && i < page->values.size() &&
        !EqualsNoCase(type, TypeName(TypeOfValue(page->values[i])))) {
      continue;
    }
    if ((!has_match || GlobMatch(match, k)) && Live(*page, i, now)) keys.push_back(&k);
  }
  c.out.Array(2);
  c.out.Bulk(std::to_string(page->next_cursor));
  c.out.Array(keys.size());
  for (const auto* k : keys) c.out.Bulk(*k);
}

void DbSize(CommandContext& c, const std::vector<std::string>&) {
  uint64_t cursor = 0;
  int64_t n = 0;
  do {
    auto page = c.store.Scan(cursor, 1000);
    if (!page.ok()) return c.out.Error(StoreError(page.status()));
    int64_t now = c.state.NowMs();
    for (size_t i = 0; i < page->keys.size(); ++i) {
      n += Live(*page, i, now) && !kv::IsRoutedKey(page->keys[i]) ? 1 : 0;
    }
    cursor = page->next_cursor;
  } while (cursor != 0);
  c.out.Integer(n);
}

void FlushAll(CommandContext& c, const std::vector<std::string>& a) {
  if (a.size() > 2 ||
      (a.size() == 2 && !EqualsNoCase(a[1], "ASYNC") && !EqualsNoCase(a[1], "SYNC"))) {
    return c.out.Error(std::string(kErrSyntax));
  }
  std::vector<std::string> keys;
  uint64_t cursor = 0;
  do {
    auto page = c.store.Scan(cursor, 1000);
    if (!page.ok()) return c.out.Error(StoreError(page.status()));
    for (auto& k : page->keys) keys.push_back(std::move(k));
    cursor = page->next_cursor;
  } while (cursor != 0);
  for (const auto& k : keys) {
    auto r = c.store.Delete(k);
    if (!r.ok()) return c.out.Error(StoreError(r.status()));
  }
  c.out.Ok();
}

void Expire(CommandContext& c, const std::vector<std::string>& a) {
  std::string name = a[0];
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  const bool ms = name == "pexpire" || name == "pexpireat";
  const bool absolute = name == "expireat" || name == "pexpireat";
  int64_t deadline = 0;
  if (!ParseExpiry(c, a[2], ms ? 1 : 1000, absolute, name, &deadline)) return;
  bool nx = false, xx = false, gt = false, lt = false;
  for (size_t i = 3; i < a.size(); ++i) {
    if (EqualsNoCase(a[i], "NX")) {
      nx = true;
    } else if (EqualsNoCase(a[i], "XX")) {
      xx = true;
    } else if (EqualsNoCase(a[i], "GT")) {
      gt = true;
    } else if (EqualsNoCase(a[i], "LT")) {
      lt = true;
    } else {
      return c.out.Error("ERR Unsupported option " + a[i].substr(0, 64));
    }
  }
  if (nx && (xx || gt || lt)) {
    return c.out.Error("ERR NX and XX, GT or LT options at the same time are not compatible");
  }
  if (gt && lt) return c.out.Error("ERR GT and LT options at the same time are not compatible");
  bool applied = false;
  bool ok = ReadModifyWrite(c, a[1], [&](const Current& cur, Mutation* m) {
    applied = false;
    if (!cur.exists) return true;
    bool has = cur.expire_at != 0;
    if ((nx && has) || (xx && !has) || (gt && (!has || deadline <= cur.expire_at)) ||
        (lt && has && deadline >= cur.expire_at)) {
      return true;
    }
    applied = true;
    if (deadline <= c.state.NowMs()) {
      m->action = Action::kDelete;
    } else {
      m->action = Action::kPut;
      m->data = cur.data;
      m->type = cur.type;
      m->expire_at = deadline;
    }
    return true;
  });
  if (ok) c.out.Integer(applied ? 1 : 0);
}

void Ttl(CommandContext& c, const std::vector<std::string>& a) {
  bool ms = EqualsNoCase(a[0], "pttl");
  auto cur = ReadCurrent(c, a[1]);
  if (!cur.ok()) return c.out.Error(StoreError(cur.status()));
  if (!cur->exists) return c.out.Integer(-2);
  if (cur->expire_at == 0) return c.out.Integer(-1);
  int64_t left = std::max<int64_t>(0, cur->expire_at - c.state.NowMs());
  c.out.Integer(ms ? left : (left + 500) / 1000);
}

void Persist(CommandContext& c, const std::vector<std::string>& a) {
  bool applied = false;
  bool ok = ReadModifyWrite(c, a[1], [&](const Current& cur, Mutation* m) {
    applied = cur.exists && cur.expire_at != 0;
    if (applied) {
      m->action = Action::kPut;
      m->data = cur.data;
      m->type = cur.type;
    }
    return true;
  });
  if (ok) c.out.Integer(applied ? 1 : 0);
}

}  // namespace asymnvm::kv::resp::handlers
