// The dispatch table, the dispatcher and the helpers handlers share.
#include "kv/resp/commands.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <unordered_map>

#include "kv/resp/types.h"
#include "kv/resp/value.h"

namespace asymnvm::kv::resp {

namespace h = handlers;

namespace {

std::vector<CommandSpec> CoreCommandSpecs() {
  // name, arity, flags, first/last/step key, group, since, summary, notes, handler, subcommands
  return {
      {"append", 3, kWrite, 1, 1, 1, "string", "2.0.0", "Appends a string to the value of a key.",
       "read-modify-write with a conditional put (retried on a concurrent write); keeps the TTL",
       h::Append},
      {"auth", -2, kNoAuth | kFast | kLoading | kStale | kInline, 0, 0, 0, "connection", "1.0.0",
       "Authenticates the connection.",
       "the password is the cluster secret (`--secret`); a username other than `default` is "
       "refused",
       h::Auth},
      {"client", -2, kNoMulti | kInline, 0, 0, 0, "connection", "2.4.0",
       "A container for client connection commands.",
       "SETNAME, GETNAME, SETINFO (lib-name, lib-ver), ID, INFO, LIST (TYPE, ID; the fields "
       "doc/resp.md §CLIENT LIST names), UNBLOCK; others are errors",
       h::Client, "setname getname setinfo id info list unblock"},
      {"command", -1, kLoading | kStale | kInline, 0, 0, 0, "server", "2.8.13",
       "Returns information about commands.",
       "COMMAND, COMMAND COUNT, COMMAND DOCS [name...], COMMAND INFO [name...], COMMAND LIST, "
       "COMMAND GETKEYS; generated from the dispatch table",
       h::Command, "count docs getkeys info list"},
      {"config", -2, kAdmin | kLoading | kStale | kInline, 0, 0, 0, "server", "2.0.0",
       "A container for server configuration commands.",
       "GET (glob patterns; unknown parameters give an empty array); SET of a Redis parameter is "
       "accepted and remembered but changes nothing (Redis's error for unknown ones); RESETSTAT "
       "clears INFO commandstats/errorstats. `appendonly yes`, `appendfsync always`: every "
       "acknowledged write is durable in PM",
       h::Config, "get set resetstat"},
      {"dbsize", 1, kReadonly | kFast | kNoTxn, 0, 0, 0, "server", "1.0.0",
       "Returns the number of keys in the database.",
       "counts by a full SCAN of every shard (O(N), exact: no key twice, expired keys left out)",
       h::DbSize},
      {"decr", 2, kWrite | kFast, 1, 1, 1, "string", "1.0.0",
       "Decrements the integer value of a key by one.", "as INCR", h::IncrFamily},
      {"decrby", 3, kWrite | kFast, 1, 1, 1, "string", "1.0.0",
       "Decrements a number from the integer value of a key.", "as INCR", h::IncrFamily},
      {"del", -2, kWrite, 1, -1, 1, "generic", "1.0.0", "Deletes one or more keys.",
       "each key deleted on its own (not atomic across keys outside MULTI); a key whose TTL ran "
       "out "
       "but that is still stored counts as deleted",
       h::Del},
      {"discard", 1, kNoMulti | kFast | kLoading | kStale | kInline, 0, 0, 0, "transactions",
       "2.0.0", "Discards a transaction.", "", h::Discard},
      {"echo", 2, kFast | kInline, 0, 0, 0, "connection", "1.0.0", "Returns the given string.", "",
       h::Echo},
      {"exec", 1, kNoMulti | kLoading | kStale, 0, 0, 0, "transactions", "1.2.0",
       "Executes all commands in a transaction.",
       "atomic and serializable within one commit group, also across a server crash (optimistic: "
       "reads "
       "recorded, writes and read versions committed as one conditional batch, re-run on "
       "conflict); keys of different shards of a replicated cluster give `-CROSSSLOT` and nothing "
       "runs",
       h::Exec},
      {"exists", -2, kReadonly | kFast, 1, -1, 1, "generic", "3.0.3",
       "Determines whether one or more keys exist.", "", h::Exists},
      {"expire", -3, kWrite | kFast, 1, 1, 1, "generic", "1.0.0",
       "Sets the expiration time of a key in seconds.",
       "NX/XX/GT/LT supported; the deadline is stored in the value (doc/resp.md §Values and TTL)",
       h::Expire},
      {"flushall", -1, kWrite | kNoTxn, 0, 0, 0, "server", "1.0.0",
       "Removes all keys from all databases.",
       "deletes every key found by a full SCAN (ASYNC and SYNC accepted, both synchronous); not "
       "atomic",
       h::FlushAll},
      {"get", 2, kReadonly | kFast, 1, 1, 1, "string", "1.0.0",
       "Returns the string value of a key.", "", h::Get},
      {"getset", 3, kWrite | kFast, 1, 1, 1, "string", "1.0.0",
       "Returns the previous string value of a key after setting it to a new value.",
       "conditional put on the version read", h::GetSet},
      {"hello", -1, kNoAuth | kFast | kLoading | kStale | kInline, 0, 0, 0, "connection", "6.0.0",
       "Handshakes with the server.",
       "protover 2 or 3 (-NOPROTO otherwise), AUTH and SETNAME options", h::Hello},
      {"incr", 2, kWrite | kFast, 1, 1, 1, "string", "1.0.0",
       "Increments the integer value of a key by one.",
       "read-modify-write with a conditional put (retried on a concurrent write); keeps the TTL",
       h::IncrFamily},
      {"incrby", 3, kWrite | kFast, 1, 1, 1, "string", "1.0.0",
       "Increments the integer value of a key by a number.", "as INCR", h::IncrFamily},
      {"info", -1, kLoading | kStale, 0, 0, 0, "server", "1.0.0",
       "Returns information and statistics about the server.",
       "sections server, clients, memory (the gateway's RSS), persistence, stats, replication, "
       "cpu, commandstats, errorstats, keyspace (keyspace scans the store); `default`, `all`, "
       "`everything` as Redis",
       h::Info},
      {"mget", -2, kReadonly | kFast, 1, -1, 1, "string", "1.0.0",
       "Atomically returns the string values of one or more keys.",
       "one GET per key: not a snapshot across keys outside MULTI", h::MGet},
      {"mset", -3, kWrite, 1, -1, 2, "string", "1.0.1",
       "Atomically creates or modifies the string values of one or more keys.",
       "atomic (one batch) when the keys commit together and fit one batch (64 keys, ~60 KiB); "
       "else one PUT per key, atomic per key",
       h::MSet},
      {"multi", 1, kNoMulti | kFast | kLoading | kStale | kInline, 0, 0, 0, "transactions", "1.2.0",
       "Starts a transaction.", "", h::Multi},
      {"persist", 2, kWrite | kFast, 1, 1, 1, "generic", "2.2.0",
       "Removes the expiration time of a key.", "", h::Persist},
      {"pexpire", -3, kWrite | kFast, 1, 1, 1, "generic", "2.6.0",
       "Sets the expiration time of a key in milliseconds.", "as EXPIRE", h::Expire},
      {"ping", -1, kFast | kStale | kInline, 0, 0, 0, "connection", "1.0.0",
       "Returns the server's liveliness response.", "", h::Ping},
      {"pttl", 2, kReadonly | kFast, 1, 1, 1, "generic", "2.6.0",
       "Returns the expiration time in milliseconds of a key.", "", h::Ttl},
      {"quit", -1, kNoAuth | kFast | kLoading | kStale | kNoMulti | kInline, 0, 0, 0, "connection",
       "1.0.0", "Closes the connection.", "", h::Quit},
      {"scan", -2, kReadonly | kNoTxn, 0, 0, 0, "generic", "2.8.0",
       "Iterates over the key names in the database.",
       "MATCH, COUNT, TYPE (string, hash, list, set); the cursor encodes the shard and the "
       "position "
       "in it; a collection's sub-records are never returned",
       h::Scan},
      {"select", 2, kFast | kLoading | kStale | kInline, 0, 0, 0, "connection", "1.0.0",
       "Changes the selected database.", "only database 0 exists", h::Select},
      {"set", -3, kWrite, 1, 1, 1, "string", "1.0.0",
       "Sets the string value of a key, ignoring its type.",
       "EX, PX, EXAT, PXAT, NX, XX, GET, KEEPTTL. A plain SET (no NX/XX/GET/KEEPTTL) is one "
       "unconditional PUT (a key of this server's own shards: run by the gateway itself and "
       "acknowledged after its group commit); the others read then write conditionally",
       h::Set},
      {"setnx", 3, kWrite | kFast, 1, 1, 1, "string", "1.0.0",
       "Set the string value of a key only when the key doesn't exist.",
       "conditional put on version 0", h::SetNx},
      {"strlen", 2, kReadonly | kFast, 1, 1, 1, "string", "2.2.0",
       "Returns the length of a string value.", "", h::StrLen},
      {"time", 1, kFast | kLoading | kStale | kInline, 0, 0, 0, "server", "2.6.0",
       "Returns the server time.", "", h::Time},
      {"ttl", 2, kReadonly | kFast, 1, 1, 1, "generic", "1.0.0",
       "Returns the expiration time in seconds of a key.", "", h::Ttl},
      {"wait", 3, 0, 0, 0, 0, "generic", "3.0.0",
       "Blocks until the asynchronous replication of all preceding write commands sent by the "
       "connection is completed.",
       "returns at once (replication is synchronous: a write is acknowledged only once every live "
       "backup holds it): the smallest number of synced backups over the shards, re-read from the "
       "coordinator; 0 without replication",
       h::Wait},
  };
}

}  // namespace

const std::vector<CommandSpec>& CommandTable() {
  static const std::vector<CommandSpec> table = [] {
    std::vector<CommandSpec> t = CoreCommandSpecs();
    for (auto more : {h::StringCommandSpecs, h::KeyspaceCommandSpecs, h::BlockingCommandSpecs,
                      h::SortCommandSpecs}) {
      for (auto& spec : more()) t.push_back(spec);
    }
    AppendTypeCommands(&t);  // hashes, lists, sets, sorted sets (type_table.cc)
    std::sort(t.begin(), t.end(), [](const CommandSpec& a, const CommandSpec& b) {
      return std::string_view(a.name) < std::string_view(b.name);
    });
    return t;
  }();
  return table;
}

size_t CommandIndex(const CommandSpec& spec) {
  return static_cast<size_t>(&spec - CommandTable().data());
}

const std::vector<UnsupportedSpec>& UnsupportedCommands() {
  static const std::vector<UnsupportedSpec> list = {
      {"streams (XADD ...)", "not yet"},
      {"pub/sub, scripting (EVAL, FUNCTION LOAD)", "not planned"},
      {"bgsave, bgrewriteaof, replicaof", "persistence and replication are the KV server's own"},
      {"select N (N > 0), swapdb, move", "only database 0"},
      {"client list / kill / pause", "not yet"},
  };
  return list;
}

const CommandSpec* FindCommand(std::string_view name) {
  static const std::unordered_map<std::string, const CommandSpec*> index = [] {
    std::unordered_map<std::string, const CommandSpec*> m;
    for (const auto& c : CommandTable()) m.emplace(c.name, &c);
    return m;
  }();
  if (name.size() > 32) return nullptr;
  std::string lower(name);
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  auto it = index.find(lower);
  return it == index.end() ? nullptr : it->second;
}

namespace {

std::string Upper(std::string_view s) {
  std::string u(s);
  for (char& ch : u) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  return u;
}

std::string EscapeCell(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace

std::string GenerateCompatibilityTable() {
  std::string out =
      "| command | supported | arity | flags | notes |\n"
      "|---|---|---|---|---|\n";
  for (const auto& c : CommandTable()) {
    std::string name = Upper(c.name);
    if (*c.subcommands) name += " (" + Upper(c.subcommands) + ")";
    std::string flags;
    const std::pair<uint32_t, const char*> names[] = {
        {kWrite, "write"},        {kReadonly, "readonly"}, {kFast, "fast"},
        {kNoAuth, "no_auth"},     {kNoMulti, "no_multi"},  {kAdmin, "admin"},
        {kNoTxn, "not in MULTI"}, {kBlocking, "blocking"}};
    for (auto [bit, n] : names) {
      if (c.flags & bit) flags += (flags.empty() ? "" : ", ") + std::string(n);
    }
    out += "| " + EscapeCell(name) + " | yes | " + std::to_string(c.arity) + " | " + flags + " | " +
           EscapeCell(*c.notes ? c.notes : "as Redis") + " |\n";
  }
  for (const auto& u : UnsupportedCommands()) {
    out += "| " + EscapeCell(Upper(u.name)) + " | no | | | " + EscapeCell(u.notes) + " |\n";
  }
  return out;
}

int64_t GatewayState::NowMs() const {
  if (clock_ms != nullptr) return clock_ms();
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string ArityError(std::string_view name) {
  std::string lower(name);
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return "ERR wrong number of arguments for '" + lower + "' command";
}

std::string StoreError(const Status& st) {
  std::string code = "ERR";
  if (st.code() == StatusCode::kUnavailable || st.code() == StatusCode::kConnectionError ||
      st.code() == StatusCode::kTimedOut) {
    code = "TRYAGAIN";
  }
  return code + " store: " + st.ToString();
}

std::vector<std::string_view> CommandKeys(const CommandSpec& spec,
                                          const std::vector<std::string>& argv) {
  std::vector<std::string_view> keys;
  if (spec.first_key <= 0) return keys;
  int last = spec.last_key < 0 ? static_cast<int>(argv.size()) + spec.last_key : spec.last_key;
  for (int i = spec.first_key; i <= last && i < static_cast<int>(argv.size()); i += spec.key_step) {
    keys.push_back(argv[i]);
  }
  return keys;
}

bool ParseInt64(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  size_t i = 0;
  bool neg = false;
  if (s[0] == '-') {
    neg = true;
    i = 1;
    if (s.size() == 1) return false;
  }
  if (s[i] == '0' && s.size() > i + 1) return false;
  if (neg && s[i] == '0') return false;  // "-0"
  uint64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
    uint64_t d = static_cast<uint64_t>(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  if (neg) {
    if (v > static_cast<uint64_t>(INT64_MAX) + 1) return false;
    *out = v == static_cast<uint64_t>(INT64_MAX) + 1 ? INT64_MIN : -static_cast<int64_t>(v);
  } else {
    if (v > static_cast<uint64_t>(INT64_MAX)) return false;
    *out = static_cast<int64_t>(v);
  }
  return true;
}

bool GlobMatch(std::string_view p, std::string_view s, bool nocase) {
  auto low = [nocase](char c) {
    return nocase ? static_cast<char>(std::tolower(static_cast<unsigned char>(c))) : c;
  };
  // Iterative matcher with single-star backtracking (linear-ish, no recursion blow-up).
  size_t pi = 0, si = 0, star_p = std::string_view::npos, star_s = 0;
  while (si < s.size()) {
    if (pi < p.size()) {
      char c = p[pi];
      if (c == '*') {
        while (pi < p.size() && p[pi] == '*') ++pi;
        if (pi == p.size()) return true;
        star_p = pi;
        star_s = si;
        continue;
      }
      if (c == '?') {
        ++pi;
        ++si;
        continue;
      }
      if (c == '[') {
        size_t j = pi + 1;
        bool negate = false;
        if (j < p.size() && p[j] == '^') {
          negate = true;
          ++j;
        }
        bool match = false;
        while (j < p.size() && p[j] != ']') {
          if (p[j] == '\\' && j + 1 < p.size()) {
            ++j;
            if (low(p[j]) == low(s[si])) match = true;
            ++j;
          } else if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
            char a = low(p[j]), b = low(p[j + 2]);
            if (a > b) std::swap(a, b);
            char x = low(s[si]);
            if (x >= a && x <= b) match = true;
            j += 3;
          } else {
            if (low(p[j]) == low(s[si])) match = true;
            ++j;
          }
        }
        if (negate) match = !match;
        if (match) {
          pi = j < p.size() ? j + 1 : j;
          ++si;
          continue;
        }
      } else {
        if (c == '\\' && pi + 1 < p.size()) c = p[pi + 1];
        if (low(c) == low(s[si])) {
          pi += (p[pi] == '\\' && pi + 1 < p.size()) ? 2 : 1;
          ++si;
          continue;
        }
      }
    }
    if (star_p == std::string_view::npos) return false;
    pi = star_p;
    si = ++star_s;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

void ClientRegistry::Add(std::shared_ptr<ClientRecord> r) {
  MutexLock l(mu_);
  const uint64_t id = r->id;
  by_id_[id] = std::move(r);
}

void ClientRegistry::Remove(uint64_t id) {
  MutexLock l(mu_);
  by_id_.erase(id);
}

std::vector<std::shared_ptr<ClientRecord>> ClientRegistry::All() const {
  MutexLock l(mu_);
  std::vector<std::shared_ptr<ClientRecord>> out;
  out.reserve(by_id_.size());
  for (const auto& [id, r] : by_id_) out.push_back(r);
  return out;
}

void GatewayState::CountError(std::string_view reply) {
  if (reply.size() < 2 || reply[0] != '-') return;
  size_t end = reply.find_first_of(" \r", 1);
  std::string code(reply.substr(1, (end == std::string_view::npos ? reply.size() : end) - 1));
  if (code.empty() || code.size() > 64) return;
  MutexLock l(mu_);
  if (error_counts_.size() < 128 || error_counts_.count(code) > 0) error_counts_[code]++;
}

std::vector<std::pair<std::string, int64_t>> GatewayState::ErrorStats() const {
  MutexLock l(mu_);
  return {error_counts_.begin(), error_counts_.end()};
}

void GatewayState::ResetStats() {
  for (auto& st : command_stats) {
    st.calls = 0;
    st.usec = 0;
    st.rejected = 0;
    st.failed = 0;
  }
  MutexLock l(mu_);
  error_counts_.clear();
}

void GatewayState::SetConfig(const std::string& name, const std::string& value) {
  MutexLock l(mu_);
  config_[name] = value;
}

std::vector<std::pair<std::string, std::string>> GatewayState::ConfigOverrides() const {
  MutexLock l(mu_);
  return {config_.begin(), config_.end()};
}

void Dispatcher::Execute(Session& s, std::vector<std::string>& argv, std::string* out) {
  if (argv.empty()) return;
  if (!s.block) state_->total_commands.fetch_add(1, std::memory_order_relaxed);
  ReplyWriter w(out, s.proto);
  const size_t start = out->size();
  const CommandSpec* spec = FindCommand(argv[0]);
  // CLIENT LIST's view (not for a blocked command's re-run: the client sent nothing new): the
  // command now, the session's state once it ran (however it returns).
  struct RecordSync {
    Session& s;
    const CommandSpec* spec;
    ~RecordSync() {
      ClientRecord* r = s.record.get();
      if (r == nullptr) return;
      r->multi.store(s.in_multi ? static_cast<int64_t>(s.queued.size()) : -1,
                     std::memory_order_relaxed);
      r->resp.store(s.proto, std::memory_order_relaxed);
      r->closing.store(s.close_after_reply, std::memory_order_relaxed);
      if (spec != nullptr && (spec->handler == h::Client || spec->handler == h::Hello)) {
        MutexLock l(r->mu);
        r->name = s.name;
        r->lib_name = s.lib_name;
        r->lib_ver = s.lib_ver;
      }
    }
  } record_sync{s, spec};
  if (s.record != nullptr && !s.block) {
    s.record->last_ms.store(SteadyMs(), std::memory_order_relaxed);
    if (spec != nullptr) {
      MutexLock l(s.record->mu);
      s.record->cmd.assign(spec->name);
      if (spec->subcommands[0] != '\0' && argv.size() > 1 && argv[1].size() <= 32) {
        std::string sub = " ";
        for (char ch : argv[1])
          sub.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(ch))));
        sub.push_back(' ');
        std::string words = std::string(" ") + spec->subcommands + " ";
        if (words.find(sub) != std::string::npos) {
          s.record->cmd += "|" + sub.substr(1, sub.size() - 2);
        }
      }
    }
  }
  // A command refused before it runs: Redis counts it as rejected (and its error).
  auto reject = [&](std::string_view msg) {
    if (s.in_multi) s.multi_failed = true;
    w.Error(msg);
    if (spec != nullptr && CommandIndex(*spec) < GatewayState::kMaxCommands) {
      state_->command_stats[CommandIndex(*spec)].rejected.fetch_add(1, std::memory_order_relaxed);
    }
    state_->CountError(std::string_view(*out).substr(start));
  };
  if (spec == nullptr) {
    std::string msg =
        "ERR unknown command '" + argv[0].substr(0, 128) + "', with args beginning with: ";
    for (size_t i = 1; i < argv.size() && msg.size() < 1024; ++i) {
      msg += "'" + argv[i].substr(0, 128) + "' ";
    }
    return reject(msg);
  }
  bool arity_ok = spec->arity >= 0 ? static_cast<int>(argv.size()) == spec->arity
                                   : static_cast<int>(argv.size()) >= -spec->arity;
  if (!arity_ok) return reject(ArityError(argv[0]));
  if (!state_->cluster_secret.empty() && !s.authenticated && !(spec->flags & kNoAuth)) {
    return reject("NOAUTH Authentication required.");
  }
  if (s.in_multi && !(spec->flags & kNoMulti)) {
    if (spec->flags & kNoTxn) return reject("ERR Command not allowed inside a transaction");
    s.queued.push_back(std::move(argv));
    w.Simple("QUEUED");
    return;
  }
  // The keys a write may have fed blocked clients on (EXEC: its queued writes), signalled after
  // it ran — except by a blocked command's re-run that popped nothing (it would wake itself).
  std::vector<std::string> fed;
  if (spec->handler == h::Exec) {
    for (const auto& q : s.queued) {
      const CommandSpec* qs = FindCommand(q[0]);
      if (qs == nullptr || !(qs->flags & kWrite)) continue;
      for (auto& k : WrittenKeys(qs->name, q, CommandKeys(*qs, q))) fed.push_back(std::move(k));
    }
  } else if (spec->flags & kWrite) {
    fed = WrittenKeys(spec->name, argv, CommandKeys(*spec, argv));
  }
  Run(s, *spec, argv, *store_, w);
  if (s.block && s.block->wait) return;
  Signal(std::move(fed));
}

void Dispatcher::Signal(std::vector<std::string> keys) {
  if (defer_signals_) {
    for (auto& k : keys) deferred_.push_back(std::move(k));
    return;
  }
  if (!serve_blocked_) {
    for (const auto& k : keys) state_->blocking.Signal(k);
    return;
  }
  for (auto& k : keys) {
    state_->blocking.Bump(k);
    serve_queue_.push_back(std::move(k));
  }
  if (serving_) return;  // a served client's own writes: the loop below takes them
  serving_ = true;
  // Each key's first client re-runs here; one served feeds its keys (the next in line) back in.
  // Bounded: a client served is unparked, so each round serves a different one.
  for (size_t i = 0; i < serve_queue_.size() && i < 100000; ++i) {
    std::shared_ptr<Parked> p = state_->blocking.ClaimFirst(serve_queue_[i]);
    if (p == nullptr) continue;
    if (p->run(*this)) state_->blocking.Unpark(p);
  }
  serve_queue_.clear();
  serving_ = false;
}

void Dispatcher::FlushSignals() {
  for (const auto& k : deferred_) state_->blocking.Signal(k);
  deferred_.clear();
}

bool EqualsNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  }
  return true;
}

void Dispatcher::ExecuteAll(Session& s, std::vector<std::vector<std::string>>& cmds,
                            std::string* out) {
  auto plain_set = [&](const std::vector<std::string>& a) {
    return a.size() == 3 && EqualsNoCase(a[0], "set") && !s.in_multi &&
           (state_->cluster_secret.empty() || s.authenticated);
  };
  size_t i = 0;
  while (i < cmds.size()) {
    size_t j = i;
    while (j < cmds.size() && plain_set(cmds[j])) j++;
    if (j - i >= 2) {
      if (s.record != nullptr) {
        s.record->last_ms.store(SteadyMs(), std::memory_order_relaxed);
        MutexLock l(s.record->mu);
        s.record->cmd.assign("set");
      }
      std::vector<std::string> encoded;
      encoded.reserve(j - i);
      std::vector<std::pair<std::string_view, std::string_view>> kvs;
      for (size_t k = i; k < j; k++) encoded.push_back(EncodeValue(cmds[k][2], 0));
      for (size_t k = i; k < j; k++) kvs.push_back({cmds[k][1], encoded[k - i]});
      std::vector<Status> st = store_->PutMany(kvs);
      ReplyWriter w(out, s.proto);
      if (const CommandSpec* set = FindCommand("set")) {
        state_->command_stats[CommandIndex(*set)].calls.fetch_add(static_cast<int64_t>(st.size()),
                                                                  std::memory_order_relaxed);
      }
      for (size_t k = 0; k < st.size(); k++) {
        state_->total_commands.fetch_add(1, std::memory_order_relaxed);
        if (st[k].ok()) {
          w.Ok();
        } else {
          w.Error(StoreError(st[k]));
        }
      }
      i = j;
      continue;
    }
    Execute(s, cmds[i], out);
    i++;
    if (s.close_after_reply) break;
  }
}

void Dispatcher::Run(Session& s, const CommandSpec& spec, const std::vector<std::string>& argv,
                     Store& store, ReplyWriter& w) {
  std::string* out = w.buffer();
  const size_t start = out->size();
  const auto t0 = std::chrono::steady_clock::now();
  CommandContext ctx{s, *state_, store, w, *this};
  const bool rerun = s.block != nullptr;  // a blocked command again: Redis counts it once
  spec.handler(ctx, argv);
  const size_t i = CommandIndex(spec);
  if (i < GatewayState::kMaxCommands) {
    auto& st = state_->command_stats[i];
    if (!rerun) st.calls.fetch_add(1, std::memory_order_relaxed);
    st.usec.fetch_add(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
            .count(),
        std::memory_order_relaxed);
    if (out->size() > start && (*out)[start] == '-') {
      st.failed.fetch_add(1, std::memory_order_relaxed);
      state_->CountError(std::string_view(*out).substr(start));
    }
  }
}

}  // namespace asymnvm::kv::resp
