// The RESP gateway's command dispatch table and the per-connection session. The table is the one
// source of COMMAND, COMMAND DOCS, COMMAND COUNT and doc/resp.md's compatibility table
// (GenerateCompatibilityTable; a test fails when the committed doc drifts).
//
// Thread safety: the table is immutable. A Session belongs to one connection (one thread).
// GatewayState is shared by every loop thread: its counters are atomics, the rest is set before
// the gateway starts.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/thread_annotations.h"
#include "kv/resp/blocking.h"
#include "kv/resp/protocol.h"
#include "kv/resp/store.h"

namespace asymnvm::kv::resp {

// Command flags (names as COMMAND reports them).
enum CommandFlag : uint32_t {
  kWrite = 1u << 0,     // "write"
  kReadonly = 1u << 1,  // "readonly"
  kFast = 1u << 2,      // "fast"
  kNoAuth = 1u << 3,    // "no_auth": allowed before AUTH
  kLoading = 1u << 4,   // "loading"
  kStale = 1u << 5,     // "stale"
  kNoMulti = 1u << 6,   // "no_multi": runs immediately even inside MULTI
  kAdmin = 1u << 7,     // "admin"
  kNoTxn = 1u << 8,     // refused inside MULTI (whole-keyspace commands); not a Redis flag
  kInline = 1u << 9,    // never touches the store: runs on the event loop, not a worker
  // Reads keys its key positions do not name (SORT's BY and GET patterns): never on the fast
  // path, whose section serves only the named keys' shards (store.h FastPath).
  kUnnamedKeys = 1u << 10,
  kBlocking = 1u << 11,  // "blocking": may park the connection (blocking.h); ends a worker batch
};

struct Session;
struct GatewayState;
class Dispatcher;

// What a handler sees.
struct CommandContext {
  Session& session;
  GatewayState& state;
  Store& store;
  ReplyWriter& out;
  Dispatcher& dispatcher;
};

using Handler = void (*)(CommandContext& c, const std::vector<std::string>& argv);

struct CommandSpec {
  const char* name;  // lower case
  int arity;         // Redis convention: N = exactly N words with the name; -N = at least N
  uint32_t flags;
  int first_key, last_key, key_step;  // key positions in argv (last -1 = to the end); 0 = none
  const char* group;                  // Redis doc group: string, generic, connection, ...
  const char* since;                  // Redis version that added the command
  const char* summary;
  const char* notes;  // our semantics where they differ from Redis ("" when identical)
  Handler handler;
  const char* subcommands = "";  // space-separated, for containers like CLIENT and CONFIG
};

// Commands Redis clients commonly send that the gateway does not implement, and why. They are
// rejected with "-ERR unknown command" like any other and listed in doc/resp.md.
struct UnsupportedSpec {
  const char* name;
  const char* notes;
};

// Every command, sorted by name: the tables of the files below, concatenated. A new file of
// commands adds its own XxxCommandSpecs() here and to CommandTable() (commands.cc).
const std::vector<CommandSpec>& CommandTable();
namespace handlers {
std::vector<CommandSpec> StringCommandSpecs();    // string_commands.cc
std::vector<CommandSpec> KeyspaceCommandSpecs();  // keyspace_commands.cc
std::vector<CommandSpec> BlockingCommandSpecs();  // blocking_commands.cc
std::vector<CommandSpec> SortCommandSpecs();      // sort_command.cc
}  // namespace handlers
// The position of a command in CommandTable() (its INFO commandstats slot).
size_t CommandIndex(const CommandSpec& spec);
const std::vector<UnsupportedSpec>& UnsupportedCommands();
const CommandSpec* FindCommand(std::string_view name);  // case-insensitive

// doc/resp.md's generated section (between the BEGIN/END markers).
std::string GenerateCompatibilityTable();

// A connection as CLIENT LIST and CLIENT INFO report it (doc/resp.md §CLIENT LIST). Its loop
// registers it at accept and removes it at close; whoever runs the connection's commands (its loop
// or a worker, one at a time) updates it in Dispatcher::Execute; CLIENT LIST reads it from any
// loop.
struct ClientRecord {
  uint64_t id = 0;
  int fd = -1;
  std::string addr, laddr;           // "ip:port" of the peer and of our end; fixed at accept
  int64_t created_ms = 0;            // SteadyMs() at accept
  std::atomic<int64_t> last_ms{0};   // SteadyMs() when its last command arrived
  std::atomic<int64_t> multi{-1};    // commands queued in MULTI; -1 outside MULTI
  std::atomic<int> resp{2};          // protocol version (HELLO)
  std::atomic<bool> closing{false};  // QUIT or a fatal error: closes after the reply
  mutable Mutex mu;
  std::string cmd ASYMNVM_GUARDED_BY(mu);  // the last command ("client|list" for a container)
  std::string name ASYMNVM_GUARDED_BY(mu), lib_name ASYMNVM_GUARDED_BY(mu),
      lib_ver ASYMNVM_GUARDED_BY(mu);
};

// Every connected client of the gateway, by id.
class ClientRegistry {
 public:
  void Add(std::shared_ptr<ClientRecord> r);
  void Remove(uint64_t id);
  std::vector<std::shared_ptr<ClientRecord>> All() const;  // in id (connection) order

 private:
  mutable Mutex mu_;
  std::map<uint64_t, std::shared_ptr<ClientRecord>> by_id_ ASYMNVM_GUARDED_BY(mu_);
};

struct GatewayState {
  std::string cluster_secret;  // empty: AUTH not required
  std::string run_id;          // 40 hex characters, fixed for the process
  int64_t start_unix_ms = 0;
  uint16_t port = 0;
  std::string version = "0.1.0";
  int loop_threads = 1;
  int64_t max_clients = 10000;
  int64_t proto_max_bulk_len = 512LL << 20;
  std::atomic<int64_t> connected_clients{0};
  std::atomic<int64_t> total_connections{0};
  std::atomic<int64_t> total_commands{0};
  std::atomic<int64_t> rejected_connections{0};
  std::atomic<uint64_t> next_client_id{1};
  std::atomic<int64_t> fast_path_commands{0};  // run by a loop against a co-located primary
  std::atomic<int64_t> fast_path_commits{0};   // the group commits that acknowledged them
  // INFO commandstats / errorstats (Redis's counters): per command (CommandIndex) calls, time,
  // calls refused before running (rejected) and calls that replied an error (failed); per error
  // code (the reply's first word) its count.
  struct CommandStat {
    std::atomic<int64_t> calls{0}, usec{0}, rejected{0}, failed{0};
  };
  static constexpr size_t kMaxCommands = 512;
  CommandStat command_stats[kMaxCommands];
  void CountError(std::string_view reply);  // reply: "-CODE message\r\n"
  std::vector<std::pair<std::string, int64_t>> ErrorStats() const;
  void ResetStats();
  // CONFIG SET values of parameters that have no effect here (remembered for CONFIG GET).
  void SetConfig(const std::string& name, const std::string& value);
  std::vector<std::pair<std::string, std::string>> ConfigOverrides() const;
  // The clock EXPIRE/TTL and TIME read (Unix ms); tests inject a fake. nullptr: the system clock.
  int64_t (*clock_ms)() = nullptr;
  int64_t NowMs() const;
  // Clients parked by blocking pops, and the wake-ups of their keys (blocking.h).
  BlockingKeys blocking;
  // Connected clients (CLIENT LIST).
  ClientRegistry clients;

 private:
  mutable Mutex mu_;
  std::map<std::string, int64_t> error_counts_ ASYMNVM_GUARDED_BY(mu_);
  std::map<std::string, std::string> config_ ASYMNVM_GUARDED_BY(mu_);
};

struct Session {
  uint64_t id = 0;
  int proto = 2;
  bool authenticated = false;
  bool close_after_reply = false;  // QUIT, or a fatal protocol error
  std::string name, lib_name, lib_ver;
  std::string peer;  // "ip:port"
  // MULTI state.
  bool in_multi = false;
  bool multi_failed = false;  // a command was refused while queueing: EXEC aborts
  std::vector<std::vector<std::string>> queued;
  // WATCH: each key's version when watched and whether it was live (not expired) then. EXEC
  // fails (null reply) when one changed or expired since; EXEC, DISCARD and UNWATCH forget them.
  struct Watched {
    std::string key;
    uint64_t version = 0;
    bool live = false;
  };
  std::vector<Watched> watched;
  // A blocking command that found nothing to pop (blocking.h): set by its handler, kept while the
  // connection is parked, cleared by the loop when it is served, times out or is unblocked.
  std::shared_ptr<BlockRequest> block;
  // What CLIENT LIST shows of this connection (null for a session no loop registered).
  std::shared_ptr<ClientRecord> record;
};

class Dispatcher {
 public:
  Dispatcher(GatewayState* state, Store* store) : state_(state), store_(store) {}

  // Runs (or queues, inside MULTI) one command and appends its reply to *out.
  void Execute(Session& s, std::vector<std::string>& argv, std::string* out);
  // A connection's consecutive commands, as Execute one by one, except that a run of plain
  // `SET key value` commands (no options, outside MULTI, authenticated) is written with one
  // Store::PutMany — a pipeline's SETs travel together. Stops after a command that closes the
  // connection (QUIT).
  void ExecuteAll(Session& s, std::vector<std::vector<std::string>>& cmds, std::string* out);

  // Runs one command with an explicit store (EXEC runs its queue over a transaction overlay).
  void Run(Session& s, const CommandSpec& spec, const std::vector<std::string>& argv, Store& store,
           ReplyWriter& w);

  Store& store() { return *store_; }
  // Wake-ups of blocked clients (the keys a write ran on) are sent after each command, or, once
  // deferred, held until FlushSignals (the fast path: after its section committed). A worker's
  // dispatcher (ServeBlockedHere) serves them itself, before the write's reply leaves (Redis's
  // order); others post them to the blocked clients' loops.
  void DeferSignals() { defer_signals_ = true; }
  void FlushSignals();
  void ServeBlockedHere() { serve_blocked_ = true; }

 private:
  void Signal(std::vector<std::string> keys);

  GatewayState* state_;
  Store* store_;
  bool defer_signals_ = false;
  std::vector<std::string> deferred_;
  bool serve_blocked_ = false;
  bool serving_ = false;                  // inside Signal's serving loop: queue, do not recurse
  std::vector<std::string> serve_queue_;  // keys still to serve (FIFO)
};

// Error texts shared by handlers (Redis's wording, so clients recognise them).
inline constexpr std::string_view kErrSyntax = "ERR syntax error";
inline constexpr std::string_view kErrNotInteger = "ERR value is not an integer or out of range";
std::string ArityError(std::string_view name);
std::string StoreError(const Status& st);                   // "-ERR ..." text for a store failure
bool EqualsNoCase(std::string_view a, std::string_view b);  // ASCII case-insensitive

// Key positions of argv under spec (for MULTI/EXEC's shard check).
std::vector<std::string_view> CommandKeys(const CommandSpec& spec,
                                          const std::vector<std::string>& argv);

// Parses a whole decimal int64 the way Redis does (no spaces, no '+', no leading zeros).
bool ParseInt64(std::string_view s, int64_t* out);
// Redis glob matching (*, ?, [a-z], [^x], \x), optionally case-insensitive.
bool GlobMatch(std::string_view pattern, std::string_view s, bool nocase = false);

// Handlers, grouped by file.
namespace handlers {
// conn_commands.cc
void Ping(CommandContext&, const std::vector<std::string>&);
void Echo(CommandContext&, const std::vector<std::string>&);
void Quit(CommandContext&, const std::vector<std::string>&);
void Hello(CommandContext&, const std::vector<std::string>&);
void Auth(CommandContext&, const std::vector<std::string>&);
void Select(CommandContext&, const std::vector<std::string>&);
void Client(CommandContext&, const std::vector<std::string>&);
void Command(CommandContext&, const std::vector<std::string>&);
void Config(CommandContext&, const std::vector<std::string>&);
void Info(CommandContext&, const std::vector<std::string>&);
void Time(CommandContext&, const std::vector<std::string>&);
void Multi(CommandContext&, const std::vector<std::string>&);
void Exec(CommandContext&, const std::vector<std::string>&);
void Discard(CommandContext&, const std::vector<std::string>&);
// data_commands.cc
void Get(CommandContext&, const std::vector<std::string>&);
void Set(CommandContext&, const std::vector<std::string>&);
void SetNx(CommandContext&, const std::vector<std::string>&);
void MGet(CommandContext&, const std::vector<std::string>&);
void MSet(CommandContext&, const std::vector<std::string>&);
void Del(CommandContext&, const std::vector<std::string>&);
void Exists(CommandContext&, const std::vector<std::string>&);
void IncrFamily(CommandContext&, const std::vector<std::string>&);
void Append(CommandContext&, const std::vector<std::string>&);
void StrLen(CommandContext&, const std::vector<std::string>&);
void GetSet(CommandContext&, const std::vector<std::string>&);
void Scan(CommandContext&, const std::vector<std::string>&);
void DbSize(CommandContext&, const std::vector<std::string>&);
void FlushAll(CommandContext&, const std::vector<std::string>&);
void Expire(CommandContext&, const std::vector<std::string>&);
void Ttl(CommandContext&, const std::vector<std::string>&);
void Persist(CommandContext&, const std::vector<std::string>&);
void Wait(CommandContext&, const std::vector<std::string>&);
// string_commands.cc
void GetEx(CommandContext&, const std::vector<std::string>&);
void GetDel(CommandContext&, const std::vector<std::string>&);
void SetEx(CommandContext&, const std::vector<std::string>&);
void IncrByFloat(CommandContext&, const std::vector<std::string>&);
void GetRange(CommandContext&, const std::vector<std::string>&);
void SetRange(CommandContext&, const std::vector<std::string>&);
void GetBit(CommandContext&, const std::vector<std::string>&);
void SetBit(CommandContext&, const std::vector<std::string>&);
void BitCount(CommandContext&, const std::vector<std::string>&);
void MSetNx(CommandContext&, const std::vector<std::string>&);
void Lcs(CommandContext&, const std::vector<std::string>&);
// keyspace_commands.cc
void Rename(CommandContext&, const std::vector<std::string>&);
void RenameNx(CommandContext&, const std::vector<std::string>&);
void Copy(CommandContext&, const std::vector<std::string>&);
void Keys(CommandContext&, const std::vector<std::string>&);
void Type(CommandContext&, const std::vector<std::string>&);
void RandomKey(CommandContext&, const std::vector<std::string>&);
void Touch(CommandContext&, const std::vector<std::string>&);
void Object(CommandContext&, const std::vector<std::string>&);
void Memory(CommandContext&, const std::vector<std::string>&);
void ExpireTime(CommandContext&, const std::vector<std::string>&);
void Watch(CommandContext&, const std::vector<std::string>&);
void Unwatch(CommandContext&, const std::vector<std::string>&);
void Function(CommandContext&, const std::vector<std::string>&);
void Save(CommandContext&, const std::vector<std::string>&);
void Shutdown(CommandContext&, const std::vector<std::string>&);
// blocking_commands.cc
void BPop(CommandContext&, const std::vector<std::string>&);    // BLPOP BRPOP
void BLMove(CommandContext&, const std::vector<std::string>&);  // BLMOVE BRPOPLPUSH
void LMPop(CommandContext&, const std::vector<std::string>&);   // LMPOP BLMPOP
void BZPop(CommandContext&, const std::vector<std::string>&);   // BZPOPMIN BZPOPMAX
void BZMPop(CommandContext&, const std::vector<std::string>&);
void ClientUnblock(CommandContext&, const std::vector<std::string>&);  // CLIENT UNBLOCK
}  // namespace handlers

}  // namespace asymnvm::kv::resp
