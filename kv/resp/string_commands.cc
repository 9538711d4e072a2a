// String commands beyond the basic ones of data_commands.cc: GETEX, GETDEL, SETEX, PSETEX,
// INCRBYFLOAT, GETRANGE/SUBSTR, SETRANGE, GETBIT/SETBIT/BITCOUNT, MSETNX, LCS. Semantics and error
// texts follow Redis 7 (t_string.c, bitops.c); single-key writes are a read-modify-write with a
// conditional put, multi-key ones one conditional batch (data_util.h Atomically).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "kv/resp/commands.h"
#include "kv/resp/data_util.h"

namespace asymnvm::kv::resp::handlers {
namespace {

// Redis's string2ld: the whole string is one long double, no leading space, not NaN.
bool ParseLongDouble(std::string_view s, long double* out) {
  if (s.empty() || s.size() >= 5 * 1024) return false;
  std::string buf(s);
  if (std::isspace(static_cast<unsigned char>(buf[0]))) return false;
  errno = 0;
  char* end = nullptr;
  long double v = std::strtold(buf.c_str(), &end);
  if (end == nullptr || static_cast<size_t>(end - buf.c_str()) != buf.size()) return false;
  if (errno == ERANGE && (v == HUGE_VALL || v == -HUGE_VALL || std::fpclassify(v) == FP_ZERO)) {
    return false;
  }
  if (errno == EINVAL || std::isnan(v)) return false;
  *out = v;
  return true;
}

// Redis's ld2string(LD_STR_HUMAN): %.17Lf without trailing zeros, never "-0".
std::string FormatLongDouble(long double v) {
  char buf[5 * 1024 + 64];
  int n = std::snprintf(buf, sizeof(buf), "%.17Lf", v);
  if (n <= 0 || static_cast<size_t>(n) >= sizeof(buf)) return "0";
  std::string s(buf, static_cast<size_t>(n));
  if (s.find('.') != std::string::npos) {
    while (!s.empty() && s.back() == '0') s.pop_back();
    if (!s.empty() && s.back() == '.') s.pop_back();
  }
  if (s == "-0") s = "0";
  return s;
}

// GETRANGE's index arithmetic (Redis 7): an empty string for an empty range.
std::string_view Range(std::string_view v, int64_t start, int64_t end) {
  const int64_t len = static_cast<int64_t>(v.size());
  if (start < 0 && end < 0 && start > end) return {};
  if (start < 0) start = len + start;
  if (end < 0) end = len + end;
  if (start < 0) start = 0;
  if (end < 0) end = 0;
  if (end >= len) end = len - 1;
  if (start > end || len == 0) return {};
  return v.substr(static_cast<size_t>(start), static_cast<size_t>(end - start + 1));
}

// Bit offsets: Redis's getBitOffsetFromArgument (the string may grow to proto-max-bulk-len).
bool ParseBitOffset(CommandContext& c, std::string_view arg, int64_t* off) {
  int64_t v = 0;
  if (!ParseInt64(arg, &v) || v < 0 || (v >> 3) >= c.state.proto_max_bulk_len) {
    c.out.Error("ERR bit offset is not an integer or out of range");
    return false;
  }
  *off = v;
  return true;
}

}  // namespace

void GetEx(CommandContext& c, const std::vector<std::string>& a) {
  bool persist = false, has_expiry = false;
  int64_t deadline = 0;
  for (size_t i = 2; i < a.size(); ++i) {
    const std::string& o = a[i];
    if (EqualsNoCase(o, "PERSIST") && !has_expiry && !persist) {
      persist = true;
    } else if (!has_expiry && !persist) {
      ExpiryOption e = ParseExpiryOption(c, a, &i, "getex", &deadline);
      if (e == ExpiryOption::kAnswered) return;
      if (e == ExpiryOption::kNotExpiry) return c.out.Error(std::string(kErrSyntax));
      has_expiry = true;
    } else {
      return c.out.Error(std::string(kErrSyntax));
    }
  }
  bool found = false;
  std::string value;
  bool ok = ReadModifyWrite(c, a[1], [&](const Current& cur, Mutation* m) {
    if (NotString(c, cur)) return false;
    found = cur.exists;
    value = cur.data;
    if (!cur.exists) return true;
    if (has_expiry && deadline <= c.state.NowMs()) {
      m->action = Action::kDelete;
    } else if (has_expiry || (persist && cur.expire_at != 0)) {
      m->action = Action::kPut;
      m->data = cur.data;
      m->expire_at = has_expiry ? deadline : 0;
    }
    return true;
  });
  if (!ok) return;
  if (found) {
    c.out.Bulk(value);
  } else {
    c.out.Null();
  }
}

void GetDel(CommandContext& c, const std::vector<std::string>& a) {
  bool found = false;
  std::string value;
  bool ok = Atomically(c, [&](CommandContext& t) {
    auto cur = ReadCurrent(t, a[1]);
    if (!cur.ok()) {
      t.out.Error(StoreError(cur.status()));
      return false;
    }
    if (NotString(t, *cur)) return false;
    found = cur->exists;
    value = cur->data;
    if (cur->version != 0) {  // also an expired value: delete it
      auto d = t.store.Delete(a[1]);
      if (!d.ok()) {
        t.out.Error(StoreError(d.status()));
        return false;
      }
    }
    return true;
  });
  if (!ok) return;
  if (found) {
    c.out.Bulk(value);
  } else {
    c.out.Null();
  }
}

void SetEx(CommandContext& c, const std::vector<std::string>& a) {
  bool ms = EqualsNoCase(a[0], "psetex");
  const char* name = ms ? "psetex" : "setex";
  int64_t v = 0;
  if (!ParseInt64(a[2], &v)) return c.out.Error(std::string(kErrNotInteger));
  if (v <= 0) return c.out.Error(std::string("ERR invalid expire time in '") + name + "' command");
  int64_t deadline = 0;
  if (!ParseExpiry(c, a[2], ms ? 1 : 1000, false, name, &deadline)) return;
  auto r = c.store.Put(a[1], EncodeValue(a[3], deadline));
  if (!r.ok()) return c.out.Error(StoreError(r.status()));
  c.out.Ok();
}

void IncrByFloat(CommandContext& c, const std::vector<std::string>& a) {
  long double incr = 0;
  if (!ParseLongDouble(a[2], &incr)) return c.out.Error("ERR value is not a valid float");
  std::string result;
  bool ok = ReadModifyWrite(c, a[1], [&](const Current& cur, Mutation* m) {
    if (NotString(c, cur)) return false;
    long double v = 0;
    if (cur.exists && !ParseLongDouble(cur.data, &v)) {
      c.out.Error("ERR value is not a valid float");
      return false;
    }
    long double sum = v + incr;
    if (std::isnan(sum) || std::isinf(sum)) {
      c.out.Error("ERR increment would produce NaN or Infinity");
      return false;
    }
    result = FormatLongDouble(sum);
    m->action = Action::kPut;
    m->data = result;
    m->expire_at = cur.expire_at;
    return true;
  });
  if (ok) c.out.Bulk(result);
}

void GetRange(CommandContext& c, const std::vector<std::string>& a) {
  int64_t start = 0, end = 0;
  if (!ParseInt64(a[2], &start) || !ParseInt64(a[3], &end)) {
    return c.out.Error(std::string(kErrNotInteger));
  }
  auto cur = ReadCurrent(c, a[1]);
  if (!cur.ok()) return c.out.Error(StoreError(cur.status()));
  if (NotString(c, *cur)) return;
  c.out.Bulk(cur->exists ? Range(cur->data, start, end) : std::string_view());
}

void SetRange(CommandContext& c, const std::vector<std::string>& a) {
  int64_t off = 0;
  if (!ParseInt64(a[2], &off)) return c.out.Error(std::string(kErrNotInteger));
  if (off < 0) return c.out.Error("ERR offset is out of range");
  const std::string& v = a[3];
  if (!v.empty() && off > c.state.proto_max_bulk_len - static_cast<int64_t>(v.size())) {
    return c.out.Error("ERR string exceeds maximum allowed size (proto-max-bulk-len)");
  }
  size_t len = 0;
  bool ok = ReadModifyWrite(c, a[1], [&](const Current& cur, Mutation* m) {
    if (NotString(c, cur)) return false;
    len = cur.exists ? cur.data.size() : 0;
    if (v.empty()) return true;  // nothing to write; an absent key stays absent
    std::string data = cur.exists ? cur.data : std::string();
    size_t need = static_cast<size_t>(off) + v.size();
    if (data.size() < need) data.resize(need, '\0');
    std::memcpy(data.data() + off, v.data(), v.size());
    len = data.size();
    m->action = Action::kPut;
    m->data = std::move(data);
    m->expire_at = cur.expire_at;
    return true;
  });
  if (ok) c.out.Integer(static_cast<int64_t>(len));
}

void GetBit(CommandContext& c, const std::vector<std::string>& a) {
  int64_t off = 0;
  if (!ParseBitOffset(c, a[2], &off)) return;
  auto cur = ReadCurrent(c, a[1]);
  if (!cur.ok()) return c.out.Error(StoreError(cur.status()));
  if (NotString(c, *cur)) return;
  size_t byte = static_cast<size_t>(off >> 3);
  int bit = 0;
  if (cur->exists && byte < cur->data.size()) {
    bit = (static_cast<uint8_t>(cur->data[byte]) >> (7 - (off & 7))) & 1;
  }
  c.out.Integer(bit);
}

void SetBit(CommandContext& c, const std::vector<std::string>& a) {
  int64_t off = 0;
  if (!ParseBitOffset(c, a[2], &off)) return;
  int64_t on = 0;
  if (!ParseInt64(a[3], &on) || (on != 0 && on != 1)) {
    return c.out.Error("ERR bit is not an integer or out of range");
  }
  int old = 0;
  bool ok = ReadModifyWrite(c, a[1], [&](const Current& cur, Mutation* m) {
    if (NotString(c, cur)) return false;
    std::string data = cur.exists ? cur.data : std::string();
    size_t byte = static_cast<size_t>(off >> 3);
    if (data.size() <= byte) data.resize(byte + 1, '\0');
    const uint8_t mask = static_cast<uint8_t>(1u << (7 - (off & 7)));
    uint8_t b = static_cast<uint8_t>(data[byte]);
    old = (b & mask) ? 1 : 0;
    b = on ? (b | mask) : (b & ~mask);
    data[byte] = static_cast<char>(b);
    m->action = Action::kPut;
    m->data = std::move(data);
    m->expire_at = cur.expire_at;
    return true;
  });
  if (ok) c.out.Integer(old);
}

void BitCount(CommandContext& c, const std::vector<std::string>& a) {
  int64_t start = 0, end = -1;
  bool bits = false, ranged = false;
  if (a.size() == 3 || a.size() > 5) return c.out.Error(std::string(kErrSyntax));
  if (a.size() >= 4) {
    if (!ParseInt64(a[2], &start) || !ParseInt64(a[3], &end)) {
      return c.out.Error(std::string(kErrNotInteger));
    }
    ranged = true;
    if (a.size() == 5) {
      if (EqualsNoCase(a[4], "BIT")) {
        bits = true;
      } else if (!EqualsNoCase(a[4], "BYTE")) {
        return c.out.Error(std::string(kErrSyntax));
      }
    }
  }
  auto cur = ReadCurrent(c, a[1]);
  if (!cur.ok()) return c.out.Error(StoreError(cur.status()));
  if (NotString(c, *cur)) return;
  if (!cur->exists) return c.out.Integer(0);
  const std::string& s = cur->data;
  const int64_t total = static_cast<int64_t>(s.size()) * (bits ? 8 : 1);
  if (ranged) {
    if (start < 0 && end < 0 && start > end) return c.out.Integer(0);
    if (start < 0) start = total + start;
    if (end < 0) end = total + end;
    if (start < 0) start = 0;
    if (end < 0) end = 0;
    if (end >= total) end = total - 1;
    if (start > end) return c.out.Integer(0);
  } else {
    start = 0;
    end = total - 1;
  }
  int64_t n = 0;
  for (int64_t i = start; i <= end; ++i) {
    if (bits) {
      n += (static_cast<uint8_t>(s[static_cast<size_t>(i >> 3)]) >> (7 - (i & 7))) & 1;
    } else {
      n += __builtin_popcount(static_cast<uint8_t>(s[static_cast<size_t>(i)]));
    }
  }
  c.out.Integer(n);
}

void MSetNx(CommandContext& c, const std::vector<std::string>& a) {
  if (a.size() % 2 != 1) return c.out.Error(ArityError("msetnx"));
  std::vector<std::string_view> keys;
  for (size_t i = 1; i < a.size(); i += 2) keys.push_back(a[i]);
  if (!CommitTogether(c, keys)) return c.out.Error(std::string(kErrCrossSlot));
  bool wrote = false;
  bool ok = Atomically(c, [&](CommandContext& t) {
    wrote = false;
    for (auto k : keys) {
      auto cur = ReadCurrent(t, k);
      if (!cur.ok()) {
        t.out.Error(StoreError(cur.status()));
        return false;
      }
      if (cur->exists) return true;
    }
    for (size_t i = 1; i + 1 < a.size(); i += 2) {
      auto p = t.store.Put(a[i], EncodeValue(a[i + 1], 0));
      if (!p.ok()) {
        t.out.Error(StoreError(p.status()));
        return false;
      }
    }
    wrote = true;
    return true;
  });
  if (ok) c.out.Integer(wrote ? 1 : 0);
}

void Lcs(CommandContext& c, const std::vector<std::string>& a) {
  bool getlen = false, getidx = false, withmatchlen = false;
  int64_t minmatchlen = 0;
  for (size_t i = 3; i < a.size(); ++i) {
    if (EqualsNoCase(a[i], "IDX")) {
      getidx = true;
    } else if (EqualsNoCase(a[i], "LEN")) {
      getlen = true;
    } else if (EqualsNoCase(a[i], "WITHMATCHLEN")) {
      withmatchlen = true;
    } else if (EqualsNoCase(a[i], "MINMATCHLEN") && i + 1 < a.size()) {
      if (!ParseInt64(a[i + 1], &minmatchlen)) return c.out.Error(std::string(kErrNotInteger));
      if (minmatchlen < 0) minmatchlen = 0;
      ++i;
    } else {
      return c.out.Error(std::string(kErrSyntax));
    }
  }
  if (getidx && getlen) {
    return c.out.Error("ERR If you want both the length and indexes, please just use IDX.");
  }
  std::string sa, sb;
  for (int k = 0; k < 2; ++k) {
    auto cur = ReadCurrent(c, a[1 + k]);
    if (!cur.ok()) return c.out.Error(StoreError(cur.status()));
    if (NotString(c, *cur)) return;
    (k == 0 ? sa : sb) = cur->exists ? cur->data : std::string();
  }
  const size_t alen = sa.size(), blen = sb.size();
  const uint64_t cells = static_cast<uint64_t>(alen + 1) * (blen + 1);
  if (cells * sizeof(uint32_t) > static_cast<uint64_t>(c.state.proto_max_bulk_len)) {
    return c.out.Error(
        "ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len");
  }
  // The dynamic-programming table of Redis's lcsCommand: LCS(i, j) of the prefixes.
  std::vector<uint32_t> dp(cells, 0);
  auto at = [&](size_t i, size_t j) -> uint32_t& { return dp[j * (alen + 1) + i]; };
  for (size_t i = 1; i <= alen; ++i) {
    for (size_t j = 1; j <= blen; ++j) {
      at(i, j) =
          sa[i - 1] == sb[j - 1] ? at(i - 1, j - 1) + 1 : std::max(at(i - 1, j), at(i, j - 1));
    }
  }
  uint32_t idx = at(alen, blen);
  const uint32_t len = idx;
  if (getlen) return c.out.Integer(len);
  std::string result(getidx ? 0 : len, '\0');
  std::string matches;
  ReplyWriter mw(&matches, c.out.proto());
  size_t nmatches = 0;
  size_t arange_start = alen, arange_end = 0, brange_start = 0, brange_end = 0;
  size_t i = alen, j = blen;
  while (i > 0 && j > 0) {
    bool emit = false;
    if (sa[i - 1] == sb[j - 1]) {
      if (!getidx) result[idx - 1] = sa[i - 1];
      if (arange_start == alen) {
        arange_start = arange_end = i - 1;
        brange_start = brange_end = j - 1;
      } else if (arange_start == i && brange_start == j) {
        arange_start--;
        brange_start--;
      } else {
        emit = true;
      }
      if (arange_start == 0 || brange_start == 0) emit = true;
      idx--;
      i--;
      j--;
    } else {
      if (at(i - 1, j) > at(i, j - 1)) {
        i--;
      } else {
        j--;
      }
      if (arange_start != alen) emit = true;
    }
    if (emit) {
      int64_t match_len = static_cast<int64_t>(arange_end - arange_start + 1);
      if (getidx && (minmatchlen == 0 || match_len >= minmatchlen)) {
        mw.Array(withmatchlen ? 3 : 2);
        mw.Array(2);
        mw.Integer(static_cast<int64_t>(arange_start));
        mw.Integer(static_cast<int64_t>(arange_end));
        mw.Array(2);
        mw.Integer(static_cast<int64_t>(brange_start));
        mw.Integer(static_cast<int64_t>(brange_end));
        if (withmatchlen) mw.Integer(match_len);
        nmatches++;
      }
      arange_start = alen;
    }
  }
  if (!getidx) return c.out.Bulk(result);
  c.out.Map(2);
  c.out.Bulk("matches");
  c.out.Array(nmatches);
  c.out.Raw(matches);
  c.out.Bulk("len");
  c.out.Integer(len);
}

std::vector<CommandSpec> StringCommandSpecs() {
  // name, arity, flags, first/last/step key, group, since, summary, notes, handler
  return {
      {"bitcount", -2, kReadonly, 1, 1, 1, "bitmap", "2.6.0",
       "Counts the number of set bits (population counting) in a string.", "BYTE and BIT ranges",
       BitCount},
      {"getbit", 3, kReadonly | kFast, 1, 1, 1, "bitmap", "2.2.0", "Returns a bit value by offset.",
       "", GetBit},
      {"getdel", 2, kWrite | kFast, 1, 1, 1, "string", "6.2.0",
       "Returns the string value of a key after deleting the key.",
       "read and delete as one conditional batch", GetDel},
      {"getex", -2, kWrite | kFast, 1, 1, 1, "string", "6.2.0",
       "Returns the string value of a key after setting its expiration time.",
       "EX, PX, EXAT, PXAT, PERSIST; read-modify-write with a conditional put", GetEx},
      {"getrange", 4, kReadonly, 1, 1, 1, "string", "2.4.0",
       "Returns a substring of the string stored at a key.", "", GetRange},
      {"incrbyfloat", 3, kWrite | kFast, 1, 1, 1, "string", "2.6.0",
       "Increment the floating point value of a key by a number.",
       "long double arithmetic and formatting as Redis; keeps the TTL", IncrByFloat},
      {"lcs", -3, kReadonly, 1, 2, 1, "string", "7.0.0", "Finds the longest common substring.",
       "LEN, IDX, MINMATCHLEN, WITHMATCHLEN", Lcs},
      {"msetnx", -3, kWrite, 1, -1, 2, "string", "1.0.1",
       "Atomically modifies the string values of one or more keys only when all keys don't exist.",
       "one conditional batch: in a replicated cluster the keys must share a shard (a hash tag "
       "`{...}`), else -CROSSSLOT",
       MSetNx},
      {"psetex", 4, kWrite, 1, 1, 1, "string", "2.6.0",
       "Sets both string value and expiration time in milliseconds of a key.", "", SetEx},
      {"setbit", 4, kWrite, 1, 1, 1, "bitmap", "2.2.0",
       "Sets or clears the bit at offset of the string value.",
       "read-modify-write with a conditional put; keeps the TTL", SetBit},
      {"setex", 4, kWrite, 1, 1, 1, "string", "2.0.0",
       "Sets the string value and expiration time of a key.", "", SetEx},
      {"setrange", 4, kWrite, 1, 1, 1, "string", "2.2.0",
       "Overwrites a part of a string value with another by an offset.",
       "read-modify-write with a conditional put; keeps the TTL", SetRange},
      {"substr", 4, kReadonly, 1, 1, 1, "string", "1.0.0",
       "Returns a substring from a string value.", "as GETRANGE", GetRange},
  };
}

}  // namespace asymnvm::kv::resp::handlers
