// Connection- and server-level commands: none of them reads or writes keys (INFO keyspace and
// WAIT ask the store for counts), plus MULTI/EXEC/DISCARD.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <set>

#include "kv/resp/commands.h"
#include "kv/resp/txn.h"
#include "kv/resp/types.h"
#include "kv/resp/value.h"

namespace asymnvm::kv::resp::handlers {
namespace {

constexpr const char* kRedisCompatVersion = "7.0.0";  // the Redis command set we follow

std::string Lower(std::string_view s) {
  std::string l(s);
  for (char& ch : l) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return l;
}

bool SecretMatches(const std::string& secret, std::string_view given) {
  // Length-independent comparison time over the secret.
  unsigned char diff = secret.size() == given.size() ? 0 : 1;
  for (size_t i = 0; i < secret.size(); ++i) {
    diff |= static_cast<unsigned char>(secret[i] ^ (i < given.size() ? given[i] : 0));
  }
  return diff == 0;
}

// Returns an error text, or "" when the credentials are accepted.
std::string CheckAuth(CommandContext& c, std::string_view user, std::string_view pass) {
  if (c.state.cluster_secret.empty()) {
    return "ERR AUTH <password> called without any password configured for the default user. "
           "Are you sure your configuration is correct?";
  }
  if (user != "default" || !SecretMatches(c.state.cluster_secret, pass)) {
    return "WRONGPASS invalid username-password pair or user is disabled.";
  }
  c.session.authenticated = true;
  return "";
}

bool ValidClientName(std::string_view n) {
  for (char ch : n) {
    if (ch < '!' || ch > '~') return false;
  }
  return true;
}

void UnknownSubcommand(CommandContext& c, std::string_view sub, std::string_view cmd) {
  c.out.Error("ERR unknown subcommand '" + std::string(sub.substr(0, 128)) + "'. Try " +
              std::string(cmd) + " HELP.");
}

void WriteFlags(ReplyWriter& w, uint32_t flags) {
  std::vector<const char*> names;
  if (flags & kWrite) names.push_back("write");
  if (flags & kReadonly) names.push_back("readonly");
  if (flags & kFast) names.push_back("fast");
  if (flags & kNoAuth) names.push_back("no_auth");
  if (flags & kLoading) names.push_back("loading");
  if (flags & kStale) names.push_back("stale");
  if (flags & kNoMulti) names.push_back("no_multi");
  if (flags & kAdmin) names.push_back("admin");
  if (flags & kBlocking) names.push_back("blocking");
  w.Set(names.size());
  for (const char* n : names) w.Simple(n);
}

void WriteCommandInfo(ReplyWriter& w, const CommandSpec& s) {
  w.Array(10);
  w.Bulk(s.name);
  w.Integer(s.arity);
  WriteFlags(w, s.flags);
  w.Integer(s.first_key);
  w.Integer(s.last_key);
  w.Integer(s.key_step);
  std::vector<std::string> cats;
  if (s.flags & kWrite) cats.push_back("@write");
  if (s.flags & kReadonly) cats.push_back("@read");
  if (s.flags & kFast) cats.push_back("@fast");
  cats.push_back(std::string("@") + s.group);
  w.Set(cats.size());
  for (auto& cat : cats) w.Simple(cat);
  w.Set(0);    // tips
  w.Array(0);  // key specifications (first/last/step above say where keys are)
  w.Array(0);  // subcommands
}

void WriteCommandDoc(ReplyWriter& w, const CommandSpec& s) {
  w.Bulk(s.name);
  w.Map(3);
  w.Bulk("summary");
  w.Bulk(s.summary);
  w.Bulk("since");
  w.Bulk(s.since);
  w.Bulk("group");
  w.Bulk(s.group);
}

// name → value, for CONFIG GET. Values describe this gateway truthfully.
std::vector<std::pair<std::string, std::string>> ConfigValues(const GatewayState& st) {
  return {
      {"appendfsync", "always"},  // every acknowledged write is durable in PM
      {"appendonly", "yes"},
      {"bind", "0.0.0.0"},
      {"databases", "1"},
      {"io-threads", std::to_string(st.loop_threads)},
      {"maxclients", std::to_string(st.max_clients)},
      {"maxmemory", "0"},
      {"port", std::to_string(st.port)},
      {"proto-max-bulk-len", std::to_string(st.proto_max_bulk_len)},
      {"requirepass", ""},  // never revealed
      {"save", ""},
      {"timeout", "0"},
      // Redis 7's defaults of the parameters CONFIG SET accepts (SettableConfig): the suite reads
      // them back to restore them.
      {"activedefrag", "no"},
      {"active-expire-effort", "1"},
      {"busy-reply-threshold", "5000"},
      {"hash-max-listpack-entries", "128"},
      {"hash-max-listpack-value", "64"},
      {"hash-max-ziplist-entries", "128"},
      {"hash-max-ziplist-value", "64"},
      {"hz", "10"},
      {"latency-tracking", "yes"},
      {"lazyfree-lazy-user-del", "no"},
      {"lazyfree-lazy-user-flush", "no"},
      {"list-compress-depth", "0"},
      {"list-max-listpack-size", "-2"},
      {"list-max-ziplist-size", "-2"},
      {"lua-time-limit", "5000"},
      {"maxmemory-policy", "noeviction"},
      {"maxmemory-samples", "5"},
      {"replica-serve-stale-data", "yes"},
      {"set-max-intset-entries", "512"},
      {"set-max-listpack-entries", "128"},
      {"set-max-listpack-value", "64"},
      {"slowlog-log-slower-than", "10000"},
      {"slowlog-max-len", "128"},
      {"stream-node-max-bytes", "4096"},
      {"stream-node-max-entries", "100"},
      {"zset-max-listpack-entries", "128"},
      {"zset-max-listpack-value", "64"},
      {"zset-max-ziplist-entries", "128"},
      {"zset-max-ziplist-value", "64"},
  };
}

// Redis parameters CONFIG SET accepts: they tune Redis's own encodings, persistence, memory and
// scripting, none of which exists here, so a value is remembered (CONFIG GET shows it) and changes
// nothing. Others get Redis's unknown-option error.
bool SettableConfig(const std::string& name) {
  static const std::set<std::string> kNames = {"activedefrag",
                                               "active-expire-effort",
                                               "appendfsync",
                                               "appendonly",
                                               "busy-reply-threshold",
                                               "hash-max-listpack-entries",
                                               "hash-max-listpack-value",
                                               "hash-max-ziplist-entries",
                                               "hash-max-ziplist-value",
                                               "hz",
                                               "latency-tracking",
                                               "lazyfree-lazy-user-del",
                                               "lazyfree-lazy-user-flush",
                                               "list-compress-depth",
                                               "list-max-listpack-size",
                                               "list-max-ziplist-size",
                                               "lua-time-limit",
                                               "maxmemory",
                                               "maxmemory-policy",
                                               "maxmemory-samples",
                                               "replica-serve-stale-data",
                                               "save",
                                               "set-max-intset-entries",
                                               "set-max-listpack-entries",
                                               "set-max-listpack-value",
                                               "slowlog-log-slower-than",
                                               "slowlog-max-len",
                                               "stream-node-max-bytes",
                                               "stream-node-max-entries",
                                               "timeout",
                                               "zset-max-listpack-entries",
                                               "zset-max-listpack-value",
                                               "zset-max-ziplist-entries",
                                               "zset-max-ziplist-value"};
  return kNames.count(name) > 0;
}

// Redis's check of a CONFIG SET value for the parameters above; "" when valid, else the reason.
std::string CheckConfigValue(const std::string& name, const std::string& value) {
  static const std::set<std::string> kBool = {"activedefrag",
                                              "appendonly",
                                              "latency-tracking",
                                              "lazyfree-lazy-user-del",
                                              "lazyfree-lazy-user-flush",
                                              "replica-serve-stale-data"};
  static const std::set<std::string> kMemory = {"maxmemory", "stream-node-max-bytes"};
  std::string v = Lower(value);
  if (name == "save") return "";
  if (kBool.count(name) > 0) return v == "yes" || v == "no" ? "" : "argument must be 'yes' or 'no'";
  if (name == "appendfsync") {
    return v == "always" || v == "everysec" || v == "no"
               ? ""
               : "argument(s) must be one of the following: always, everysec, no";
  }
  if (name == "maxmemory-policy") {
    static const std::set<std::string> kPolicies = {
        "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl",
        "allkeys-lru",  "allkeys-lfu",  "allkeys-random",  "noeviction"};
    return kPolicies.count(v) > 0 ? ""
                                  : "argument(s) must be one of the following: volatile-lru, "
                                    "volatile-lfu, volatile-random, volatile-ttl, allkeys-lru, "
                                    "allkeys-lfu, allkeys-random, noeviction";
  }
  std::string digits = v;
  if (kMemory.count(name) > 0) {
    for (const char* unit : {"kb", "mb", "gb", "k", "m", "g", "b"}) {
      std::string u(unit);
      if (digits.size() > u.size() && digits.compare(digits.size() - u.size(), u.size(), u) == 0) {
        digits.resize(digits.size() - u.size());
        break;
      }
    }
    int64_t n = 0;
    return ParseInt64(digits, &n) && n >= 0 ? "" : "argument must be a memory value";
  }
  int64_t n = 0;
  return ParseInt64(digits, &n) ? "" : "argument couldn't be parsed into an integer";
}

std::string InfoSection(CommandContext& c, const std::string& name) {
  auto& st = c.state;
  std::string s;
  int64_t now = st.NowMs();
  if (name == "server") {
    s += "# Server\r\n";
    s += std::string("redis_version:") + kRedisCompatVersion + "\r\n";
    s += "redis_git_sha1:00000000\r\n";
    s += "redis_git_dirty:0\r\n";
    s += "asymnvm_version:" + st.version + "\r\n";
    s += "redis_mode:standalone\r\n";
    s += "os:Linux\r\n";
    s += "process_id:" + std::to_string(getpid()) + "\r\n";
    s += "run_id:" + st.run_id + "\r\n";
    s += "tcp_port:" + std::to_string(st.port) + "\r\n";
    s += "uptime_in_seconds:" + std::to_string((now - st.start_unix_ms) / 1000) + "\r\n";
    s += "io_threads_active:" + std::to_string(st.loop_threads) + "\r\n";
  } else if (name == "clients") {
    s += "# Clients\r\n";
    s += "connected_clients:" + std::to_string(st.connected_clients.load()) + "\r\n";
    s += "maxclients:" + std::to_string(st.max_clients) + "\r\n";
    s += "blocked_clients:" + std::to_string(st.blocking.blocked()) + "\r\n";
  } else if (name == "memory") {
    // The gateway process's resident set (the data lives in the servers' PM pools).
    long pages = 0, resident = 0;
    if (FILE* f = std::fopen("/proc/self/statm", "r")) {
      if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
      std::fclose(f);
    }
    int64_t bytes = static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
    s += "# Memory\r\n";
    s += "used_memory:" + std::to_string(bytes) + "\r\n";
    s += "used_memory_human:" + std::to_string(bytes >> 20) + "M\r\n";
    s += "maxmemory:0\r\n";
    s += "mem_allocator:libc\r\n";
  } else if (name == "persistence") {
    s += "# Persistence\r\n";
    s += "loading:0\r\n";
    s += "aof_enabled:1\r\n";  // closest Redis notion: every acknowledged write is in PM
    s += "rdb_changes_since_last_save:0\r\n";
    s += "asymnvm_durability:pm-acknowledged\r\n";
  } else if (name == "stats") {
    s += "# Stats\r\n";
    s += "total_connections_received:" + std::to_string(st.total_connections.load()) + "\r\n";
    s += "total_commands_processed:" + std::to_string(st.total_commands.load()) + "\r\n";
    s += "rejected_connections:" + std::to_string(st.rejected_connections.load()) + "\r\n";
    // The co-located fast path (doc/resp.md §Fast path): commands run on the event loops against
    // this server's own shards, and the group commits (syncs) that acknowledged them.
    s += "asymnvm_fast_path_commands:" + std::to_string(st.fast_path_commands.load()) + "\r\n";
    s += "asymnvm_fast_path_commits:" + std::to_string(st.fast_path_commits.load()) + "\r\n";
  } else if (name == "replication") {
    s += "# Replication\r\n";
    s += "role:master\r\n";
    auto r = c.store.DurableReplicas();
    s += "connected_slaves:" + std::to_string(r.ok() ? *r : 0) + "\r\n";
    s += "master_failover_state:no-failover\r\n";
    s += "master_replid:" + st.run_id + "\r\n";
    s += "master_repl_offset:0\r\n";
  } else if (name == "cpu") {
    rusage self{}, children{};
    getrusage(RUSAGE_SELF, &self);
    getrusage(RUSAGE_CHILDREN, &children);
    auto secs = [](const timeval& t) {
      char b[64];
      std::snprintf(b, sizeof(b), "%ld.%06ld", static_cast<long>(t.tv_sec),
                    static_cast<long>(t.tv_usec));
      return std::string(b);
    };
    s += "# CPU\r\n";
    s += "used_cpu_sys:" + secs(self.ru_stime) + "\r\n";
    s += "used_cpu_user:" + secs(self.ru_utime) + "\r\n";
    s += "used_cpu_sys_children:" + secs(children.ru_stime) + "\r\n";
    s += "used_cpu_user_children:" + secs(children.ru_utime) + "\r\n";
  } else if (name == "commandstats") {
    s += "# Commandstats\r\n";
    const auto& table = CommandTable();
    for (size_t i = 0; i < table.size() && i < GatewayState::kMaxCommands; ++i) {
      const auto& cs = st.command_stats[i];
      int64_t calls = cs.calls.load(), rejected = cs.rejected.load();
      if (calls == 0 && rejected == 0) continue;
      int64_t usec = cs.usec.load();
      char per[32];
      std::snprintf(per, sizeof(per), "%.2f",
                    calls ? static_cast<double>(usec) / static_cast<double>(calls) : 0.0);
      s += std::string("cmdstat_") + table[i].name + ":calls=" + std::to_string(calls) +
           ",usec=" + std::to_string(usec) + ",usec_per_call=" + per +
           ",rejected_calls=" + std::to_string(rejected) +
           ",failed_calls=" + std::to_string(cs.failed.load()) + "\r\n";
    }
  } else if (name == "errorstats") {
    s += "# Errorstats\r\n";
    for (const auto& [code, n] : st.ErrorStats()) {
      s += "errorstat_" + code + ":count=" + std::to_string(n) + "\r\n";
    }
  } else if (name == "keyspace") {
    s += "# Keyspace\r\n";
    uint64_t cursor = 0;
    int64_t keys = 0, expires = 0;
    do {
      auto page = c.store.Scan(cursor, 1000);
      if (!page.ok()) {
        s += "# error: " + page.status().ToString() + "\r\n";
        return s;
      }
      for (const auto& v : page->values) {
        int64_t exp = DecodeValue(v).expire_at_ms;
        if (exp != 0 && exp <= now) continue;
        keys++;
        expires += exp != 0 ? 1 : 0;
      }
      cursor = page->next_cursor;
    } while (cursor != 0);
    if (keys > 0) {
      s += "db0:keys=" + std::to_string(keys) + ",expires=" + std::to_string(expires) +
           ",avg_ttl=0\r\n";
    }
  }
  return s;
}

}  // namespace

void Ping(CommandContext& c, const std::vector<std::string>& a) {
  if (a.size() > 2) {
    c.out.Error(ArityError("ping"));
  } else if (a.size() == 2) {
    c.out.Bulk(a[1]);
  } else {
    c.out.Simple("PONG");
  }
}

void Echo(CommandContext& c, const std::vector<std::string>& a) { c.out.Bulk(a[1]); }

void Quit(CommandContext& c, const std::vector<std::string>&) {
  c.session.close_after_reply = true;
  c.out.Ok();
}

void Hello(CommandContext& c, const std::vector<std::string>& a) {
  int proto = c.session.proto;
  size_t i = 1;
  if (a.size() >= 2) {
    int64_t v = 0;
    if (!ParseInt64(a[1], &v)) {
      c.out.Error("ERR Protocol version is not an integer or out of range");
      return;
    }
    if (v != 2 && v != 3) {
      c.out.Error("NOPROTO unsupported protocol version");
      return;
    }
    proto = static_cast<int>(v);
    i = 2;
  }
  std::string setname;
  bool has_setname = false;
  for (; i < a.size(); ++i) {
    if (EqualsNoCase(a[i], "AUTH") && i + 2 < a.size()) {
      std::string err = CheckAuth(c, a[i + 1], a[i + 2]);
      if (!err.empty()) {
        c.out.Error(err);
        return;
      }
      i += 2;
    } else if (EqualsNoCase(a[i], "SETNAME") && i + 1 < a.size()) {
      if (!ValidClientName(a[i + 1])) {
        c.out.Error("ERR Client names cannot contain spaces, newlines or special characters.");
        return;
      }
      setname = a[i + 1];
      has_setname = true;
      ++i;
    } else {
      c.out.Error("ERR Syntax error in HELLO option '" + a[i].substr(0, 128) + "'");
      return;
    }
  }
  if (!c.state.cluster_secret.empty() && !c.session.authenticated) {
    c.out.Error(
        "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO "
        "<proto> AUTH <user> <pass> option can be used to authenticate the client and select the "
        "RESP protocol version at the same time");
    return;
  }
  if (has_setname) c.session.name = setname;
  c.session.proto = proto;
  c.out.set_proto(proto);
  c.out.Map(7);
  c.out.Bulk("server");
  c.out.Bulk("redis");
  c.out.Bulk("version");
  c.out.Bulk(kRedisCompatVersion);
  c.out.Bulk("proto");
  c.out.Integer(proto);
  c.out.Bulk("id");
  c.out.Integer(static_cast<int64_t>(c.session.id));
  c.out.Bulk("mode");
  c.out.Bulk("standalone");
  c.out.Bulk("role");
  c.out.Bulk("master");
  c.out.Bulk("modules");
  c.out.Array(0);
}

void Auth(CommandContext& c, const std::vector<std::string>& a) {
  if (a.size() > 3) {
    c.out.Error(std::string(kErrSyntax));
    return;
  }
  std::string err = a.size() == 2 ? CheckAuth(c, "default", a[1]) : CheckAuth(c, a[1], a[2]);
  if (err.empty()) {
    c.out.Ok();
  } else {
    c.out.Error(err);
  }
}

void Select(CommandContext& c, const std::vector<std::string>& a) {
  int64_t db = 0;
  if (!ParseInt64(a[1], &db)) {
    c.out.Error(std::string(kErrNotInteger));
  } else if (db != 0) {
    c.out.Error("ERR DB index is out of range");
  } else {
    c.out.Ok();
  }
}

// One line of CLIENT LIST / CLIENT INFO in Redis's format (its field order), the fields the
// gateway has an honest value for (doc/resp.md §CLIENT LIST).
static std::string ClientLine(const GatewayState& st, const ClientRecord& r, int64_t now_ms) {
  std::string name, cmd, lib_name, lib_ver;
  {
    MutexLock l(r.mu);
    name = r.name;
    cmd = r.cmd.empty() ? "NULL" : r.cmd;
    lib_name = r.lib_name;
    lib_ver = r.lib_ver;
  }
  const int64_t multi = r.multi.load(std::memory_order_relaxed);
  std::string flags;
  if (st.blocking.IsBlocked(r.id)) flags += 'b';
  if (r.closing.load(std::memory_order_relaxed)) flags += 'c';
  if (multi >= 0) flags += 'x';
  if (flags.empty()) flags = "N";
  const int64_t age = std::max<int64_t>(0, now_ms - r.created_ms) / 1000;
  const int64_t idle =
      std::max<int64_t>(0, now_ms - r.last_ms.load(std::memory_order_relaxed)) / 1000;
  return "id=" + std::to_string(r.id) + " addr=" + r.addr + " laddr=" + r.laddr +
         " fd=" + std::to_string(r.fd) + " name=" + name + " age=" + std::to_string(age) +
         " idle=" + std::to_string(idle) + " flags=" + flags +
         " db=0 sub=0 psub=0 ssub=0 multi=" + std::to_string(multi) + " cmd=" + cmd +
         " user=default redir=-1 resp=" + std::to_string(r.resp.load(std::memory_order_relaxed)) +
         " lib-name=" + lib_name + " lib-ver=" + lib_ver + "\n";
}

// CLIENT LIST [TYPE NORMAL|MASTER|REPLICA|PUBSUB] [ID id ...], as Redis 7 parses it.
static void ClientList(CommandContext& c, const std::vector<std::string>& a) {
  bool all = true;  // TYPE normal, or no filter: every client here is a normal one
  std::set<uint64_t> ids;
  bool by_id = false;
  if (a.size() == 4 && EqualsNoCase(a[2], "type")) {
    const std::string t = Lower(a[3]);
    if (t == "master" || t == "replica" || t == "slave" || t == "pubsub") {
      all = false;  // no replication links or subscribers are clients of the gateway
    } else if (t != "normal") {
      return c.out.Error("ERR Unknown client type '" + a[3] + "'");
    }
  } else if (a.size() > 3 && EqualsNoCase(a[2], "id")) {
    by_id = true;
    for (size_t i = 3; i < a.size(); ++i) {
      int64_t id = 0;
      if (!ParseInt64(a[i], &id)) return c.out.Error("ERR Invalid client ID");
      if (id > 0) ids.insert(static_cast<uint64_t>(id));
    }
  } else if (a.size() != 2) {
    return c.out.Error(std::string(kErrSyntax));
  }
  std::string text;
  if (all) {
    const int64_t now = SteadyMs();
    for (const auto& r : c.state.clients.All()) {
      if (by_id && ids.count(r->id) == 0) continue;
      text += ClientLine(c.state, *r, now);
    }
  }
  c.out.Verbatim(text);
}

void Client(CommandContext& c, const std::vector<std::string>& a) {
  std::string sub = Lower(a[1]);
  auto& s = c.session;
  if (sub == "setname" && a.size() == 3) {
    if (!ValidClientName(a[2])) {
      c.out.Error("ERR Client names cannot contain spaces, newlines or special characters.");
      return;
    }
    s.name = a[2];
    c.out.Ok();
  } else if (sub == "getname" && a.size() == 2) {
    if (s.name.empty()) {
      c.out.Null();
    } else {
      c.out.Bulk(s.name);
    }
  } else if (sub == "id" && a.size() == 2) {
    c.out.Integer(static_cast<int64_t>(s.id));
  } else if (sub == "setinfo" && a.size() == 4) {
    std::string attr = Lower(a[2]);
    if (!ValidClientName(a[3])) {
      c.out.Error("ERR " + attr + " cannot contain spaces, newlines or special characters.");
      return;
    }
    if (attr == "lib-name") {
      s.lib_name = a[3];
    } else if (attr == "lib-ver") {
      s.lib_ver = a[3];
    } else {
      c.out.Error("ERR Unrecognized option '" + a[2].substr(0, 128) + "'");
      return;
    }
    c.out.Ok();
  } else if (sub == "info" && a.size() == 2) {
    if (s.record != nullptr) return c.out.Verbatim(ClientLine(c.state, *s.record, SteadyMs()));
    ClientRecord r;  // a session no loop registered (tests): what the session knows
    r.id = s.id;
    r.addr = s.peer;
    r.created_ms = r.last_ms = SteadyMs();
    r.multi = s.in_multi ? static_cast<int64_t>(s.queued.size()) : -1;
    r.resp = s.proto;
    {
      MutexLock l(r.mu);
      r.cmd = "client|info";
      r.name = s.name;
      r.lib_name = s.lib_name;
      r.lib_ver = s.lib_ver;
    }
    c.out.Verbatim(ClientLine(c.state, r, r.created_ms));
  } else if (sub == "list") {
    ClientList(c, a);
  } else if (sub == "unblock" && (a.size() == 3 || a.size() == 4)) {
    ClientUnblock(c, a);
  } else if (sub == "setname" || sub == "getname" || sub == "id" || sub == "setinfo" ||
             sub == "info" || sub == "unblock") {
    c.out.Error("ERR wrong number of arguments for 'client|" + sub + "' command");
  } else {
    UnknownSubcommand(c, a[1], "CLIENT");
  }
}

void Command(CommandContext& c, const std::vector<std::string>& a) {
  const auto& table = CommandTable();
  if (a.size() == 1) {
    c.out.Array(table.size());
    for (const auto& s : table) WriteCommandInfo(c.out, s);
    return;
  }
  std::string sub = Lower(a[1]);
  if (sub == "count" && a.size() == 2) {
    c.out.Integer(static_cast<int64_t>(table.size()));
  } else if (sub == "list" && a.size() == 2) {
    c.out.Array(table.size());
    for (const auto& s : table) c.out.Bulk(s.name);
  } else if (sub == "info") {
    if (a.size() == 2) {
      c.out.Array(table.size());
      for (const auto& s : table) WriteCommandInfo(c.out, s);
      return;
    }
    c.out.Array(a.size() - 2);
    for (size_t i = 2; i < a.size(); ++i) {
      const CommandSpec* s = FindCommand(a[i]);
      if (s) {
        WriteCommandInfo(c.out, *s);
      } else {
        c.out.NullArray();
      }
    }
  } else if (sub == "getkeys" && a.size() >= 3) {
    // The keys a command names (COMMAND GETKEYS, Redis's errors).
    const CommandSpec* s = FindCommand(a[2]);
    if (s == nullptr) return c.out.Error("ERR Invalid command specified");
    const std::vector<std::string> argv(a.begin() + 2, a.end());
    const bool arity_ok = s->arity >= 0 ? static_cast<int>(argv.size()) == s->arity
                                        : static_cast<int>(argv.size()) >= -s->arity;
    if (!arity_ok) return c.out.Error("ERR Invalid number of arguments specified for command");
    const std::vector<std::string> keys = WrittenKeys(s->name, argv, CommandKeys(*s, argv));
    if (keys.empty()) return c.out.Error("ERR The command has no key arguments");
    c.out.Array(keys.size());
    for (const auto& k : keys) c.out.Bulk(k);
  } else if (sub == "docs") {
    std::vector<const CommandSpec*> picked;
    if (a.size() == 2) {
      for (const auto& s : table) picked.push_back(&s);
    } else {
      for (size_t i = 2; i < a.size(); ++i) {
        if (const CommandSpec* s = FindCommand(a[i])) picked.push_back(s);
      }
    }
    c.out.Map(picked.size());
    for (const CommandSpec* s : picked) WriteCommandDoc(c.out, *s);
  } else {
    UnknownSubcommand(c, a[1], "COMMAND");
  }
}

void Config(CommandContext& c, const std::vector<std::string>& a) {
  std::string sub = Lower(a[1]);
  if (sub == "resetstat" && a.size() == 2) {
    c.state.ResetStats();
    return c.out.Ok();
  }
  if (sub == "set") {
    if (a.size() < 4 || a.size() % 2 != 0) {
      return c.out.Error("ERR wrong number of arguments for 'config|set' command");
    }
    // Every parameter first (Redis applies all or none).
    for (size_t i = 2; i + 1 < a.size(); i += 2) {
      std::string name = Lower(a[i]);
      if (!SettableConfig(name)) {
        return c.out.Error("ERR Unknown option or number of arguments for CONFIG SET - '" +
                           a[i].substr(0, 128) + "'");
      }
      for (size_t j = 2; j < i; j += 2) {
        if (Lower(a[j]) == name) {
          return c.out.Error("ERR duplicate parameter - " + a[i].substr(0, 128));
        }
      }
    }
    for (size_t i = 2; i + 1 < a.size(); i += 2) {
      std::string why = CheckConfigValue(Lower(a[i]), a[i + 1]);
      if (!why.empty()) {
        return c.out.Error("ERR CONFIG SET failed (possibly related to argument '" +
                           a[i].substr(0, 128) + "') - " + why);
      }
    }
    for (size_t i = 2; i + 1 < a.size(); i += 2) c.state.SetConfig(Lower(a[i]), a[i + 1]);
    return c.out.Ok();
  }
  if (sub != "get") {
    if (sub == "rewrite") {
      c.out.Error("ERR The server is running without a config file");
    } else {
      UnknownSubcommand(c, a[1], "CONFIG");
    }
    return;
  }
  if (a.size() < 3) {
    c.out.Error("ERR wrong number of arguments for 'config|get' command");
    return;
  }
  std::vector<std::pair<std::string, std::string>> hits;
  std::set<std::string> seen;
  auto overrides = c.state.ConfigOverrides();
  auto values = ConfigValues(c.state);
  for (auto& [k, v] : values) {
    for (const auto& [ok, ov] : overrides) {
      if (ok == k) v = ov;
    }
  }
  for (const auto& [k, v] : overrides) {
    bool listed = false;
    for (const auto& kv : values) listed = listed || kv.first == k;
    if (!listed) values.emplace_back(k, v);
  }
  for (const auto& [k, v] : values) {
    for (size_t i = 2; i < a.size(); ++i) {
      if (GlobMatch(a[i], k, /*nocase=*/true) && seen.insert(k).second) hits.emplace_back(k, v);
    }
  }
  c.out.Map(hits.size());
  for (const auto& [k, v] : hits) {
    c.out.Bulk(k);
    c.out.Bulk(v);
  }
}

void Info(CommandContext& c, const std::vector<std::string>& a) {
  // Redis 7's groups: `default` leaves out commandstats; `all` and `everything` add it.
  static const std::vector<std::string> kDefault = {"server",      "clients",    "memory",
                                                    "persistence", "stats",      "replication",
                                                    "cpu",         "errorstats", "keyspace"};
  static const std::vector<std::string> kAll = {
      "server",      "clients", "memory",       "persistence", "stats",
      "replication", "cpu",     "commandstats", "errorstats",  "keyspace"};
  std::set<std::string> want;
  if (a.size() == 1) want.insert(kDefault.begin(), kDefault.end());
  for (size_t i = 1; i < a.size(); ++i) {
    std::string n = Lower(a[i]);
    if (n == "all" || n == "everything") {
      want.insert(kAll.begin(), kAll.end());
    } else if (n == "default") {
      want.insert(kDefault.begin(), kDefault.end());
    } else {
      want.insert(n);
    }
  }
  std::string body;
  for (const auto& n : kAll) {
    if (want.count(n) == 0) continue;
    if (!body.empty()) body += "\r\n";
    body += InfoSection(c, n);
  }
  c.out.Verbatim(body);
}

void Time(CommandContext& c, const std::vector<std::string>&) {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  int64_t us = std::chrono::duration_cast<std::chrono::microseconds>(now).count();
  c.out.Array(2);
  c.out.Bulk(std::to_string(us / 1000000));
  c.out.Bulk(std::to_string(us % 1000000));
}

void Multi(CommandContext& c, const std::vector<std::string>&) {
  if (c.session.in_multi) {
    c.out.Error("ERR MULTI calls can not be nested");
    return;
  }
  c.session.in_multi = true;
  c.session.multi_failed = false;
  c.session.queued.clear();
  c.out.Ok();
}

void Discard(CommandContext& c, const std::vector<std::string>&) {
  if (!c.session.in_multi) {
    c.out.Error("ERR DISCARD without MULTI");
    return;
  }
  c.session.in_multi = false;
  c.session.multi_failed = false;
  c.session.queued.clear();
  c.session.watched.clear();
  c.out.Ok();
}

void Exec(CommandContext& c, const std::vector<std::string>&) {
  auto& s = c.session;
  if (!s.in_multi) {
    c.out.Error("ERR EXEC without MULTI");
    return;
  }
  auto queue = std::move(s.queued);
  auto watched = std::move(s.watched);
  bool failed = s.multi_failed;
  s.in_multi = false;
  s.multi_failed = false;
  s.queued.clear();
  s.watched.clear();
  if (failed) {
    c.out.Error("EXECABORT Transaction discarded because of previous errors.");
    return;
  }
  std::vector<const CommandSpec*> specs;
  std::set<uint32_t> shards;
  for (const auto& argv : queue) {
    const CommandSpec* spec = FindCommand(argv[0]);
    specs.push_back(spec);  // validated when queued
    for (auto k : CommandKeys(*spec, argv)) shards.insert(c.store.CommitGroup(k));
  }
  // A watched key must be in the transaction's shard: its version is a condition of the batch.
  bool watch_elsewhere = false;
  for (const auto& w : watched) {
    if (!shards.empty() && shards.count(c.store.CommitGroup(w.key)) == 0) watch_elsewhere = true;
  }
  if (shards.size() > 1 || watch_elsewhere) {
    c.out.Error(
        "CROSSSLOT Keys in request don't hash to the same slot (MULTI/EXEC is atomic within one "
        "shard; use a hash tag {...}). Nothing was executed.");
    return;
  }
  ConflictRetry retry;
  do {
    TxnStore txn(&c.store);
    // WATCH: a key changed (or expired) since it was watched fails EXEC; the versions read here
    // are conditions of the commit, so a change until then is caught too.
    for (const auto& w : watched) {
      auto r = txn.Get(w.key);
      if (!r.ok()) {
        c.out.Error(StoreError(r.status()) + " (nothing was executed)");
        return;
      }
      uint64_t version = r->has_value() ? (*r)->version : 0;
      bool live = false;
      if (r->has_value()) {
        int64_t exp = DecodeValue((*r)->value).expire_at_ms;
        live = exp == 0 || exp > c.state.NowMs();
      }
      if (version != w.version || (w.live && !live)) {
        c.out.NullArray();
        return;
      }
    }
    std::string replies;
    ReplyWriter w(&replies, s.proto);
    w.Array(queue.size());
    for (size_t i = 0; i < queue.size(); ++i) {
      c.dispatcher.Run(s, *specs[i], queue[i], txn, w);
    }
    auto committed = txn.Commit();
    if (!committed.ok()) {
      c.out.Error(committed.status().code() == StatusCode::kNotSupported
                      ? "ERR EXEC: the store cannot commit a multi-key batch: " +
                            committed.status().message() + ". Nothing was executed."
                      : StoreError(committed.status()) + " (nothing was executed)");
      return;
    }
    if (*committed) {
      c.out.set_proto(s.proto);
      c.out.Raw(replies);
      return;
    }
  } while (retry.Again());
  c.out.Error("TRYAGAIN EXEC: keys kept changing under the transaction; nothing was executed");
}

void Wait(CommandContext& c, const std::vector<std::string>& a) {
  int64_t n = 0, timeout = 0;
  if (!ParseInt64(a[1], &n) || !ParseInt64(a[2], &timeout)) {
    c.out.Error(std::string(kErrNotInteger));
    return;
  }
  if (timeout < 0) {
    c.out.Error("ERR timeout is negative");
    return;
  }
  auto r = c.store.DurableReplicas();
  if (!r.ok()) {
    c.out.Error(StoreError(r.status()));
    return;
  }
  c.out.Integer(*r);
}

}  // namespace asymnvm::kv::resp::handlers
