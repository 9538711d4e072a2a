// asymnvm-backend: the AsymNVM back-end daemon (doc/backend.md).
//
//   asymnvm-backend --pool PATH [--size SIZE] [--listen ADDR] [--log-listen ADDR]
//                   [--fabric soft|shm|verbs|auto] [--pm-mode auto|msync|flush]
//                   [--secret-file PATH] [--handshake-timeout-ms MS] [--max-pending-handshakes N]
//                   [--log-level L] [--coord URI] [--config FILE] [--metrics-listen HOST:PORT]
//                   [--fabric-tls-cert-file F --fabric-tls-key-file F [--fabric-tls-ca-cert-file
//                   F]]
//
// The cluster secret comes from --secret-file, else ASYMNVM_SECRET_FILE / ASYMNVM_SECRET, else the
// built-in default, which is only accepted for loopback listen addresses (doc/fabric.md).
//
// Liveness (doc/coord.md §Back-end groups): after it starts serving, the daemon registers the
// ephemeral node /asymnvm/groups/<pool-uuid>/primary on the coordinator (`--coord`, default the
// embedded one next to the pool file: dir:<pool dir>/coord; `--coord none` disables it), holding
// its addresses, pid and start time; front-end Sessions find it there when their back-end restarts
// at another address. The node is deleted on SIGTERM/SIGINT (and vanishes with the process).
// Prints "listening <oq address>" and "log <rowan address>" as the first two stdout lines (once
// registered on the coordinator), serves until SIGTERM/SIGINT, then stops cleanly (everything
// acknowledged is already durable) and exits 0.
// Exit codes: 0 clean stop, 1 start-up failure (the message names the pool and the cause: not a
// pool, corrupt, too small, locked by another back-end; the cluster secret: unreadable file,
// default secret on a non-loopback address; or the coordinator: unreachable, or the group's
// primary node held by another live process for 30 s), 2 bad command line, 5 fenced: the group's
// state on the coordinator names another replica (a mirror was promoted in a newer term; this
// pool is stale), at start or while serving (doc/mirror.md). The exit-5 message names the exact
// asymnvm-mirror command that makes this pool a mirror of the new primary; --rejoin runs it
// instead of exiting (exec, same pool, lost or stale: a full copy from the new primary while it
// serves; doc/mirror.md §Rejoin).
//
// Mirrors (doc/mirror.md): --mirror ADDR (repeatable) forwards every persisted range to that
// asymnvm-mirror; --mirror-mode sync (default: acknowledged = on every in-sync mirror) | async;
// --mirror-timeout-ms (drop a mirror that does not acknowledge), --mirror-wait-ms (initial copy),
// --name (replica name in /asymnvm/groups/<uuid>/state).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <thread>

#include "asymnvm/coord.h"
#include "asymnvm/metrics.h"
#include "asymnvm/pm.h"
#include "backend/backend.h"
#include "backend/metrics.h"
#include "backend/registration.h"
#include "common/log_options.h"
#include "common/logging.h"
#include "common/service.h"
#include "fabric/bootstrap.h"
#include "fabric/tls_flags.h"
#include "mirror/group.h"
#include "mirror/primary_role.h"

using namespace asymnvm;

namespace {

// The pool's uuid, read from its superblock (the daemon holds the pool; a read-only look at the
// first 4 KiB is harmless and keeps these changes out of backend/).
Result<std::array<uint8_t, 16>> ReadPoolUuid(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IoError("open " + path, errno);
  std::vector<uint8_t> buf(pm::kSuperblockSize);
  const ssize_t n = ::pread(fd, buf.data(), buf.size(), 0);
  const int e = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(buf.size()))
    return Status::IoError("read superblock of " + path, e);
  pm::Superblock sb;
  ASYMNVM_RETURN_IF_ERROR(pm::DecodeSuperblock(buf.data(), buf.size(), &sb));
  return sb.uuid;
}

// The address a fenced replica on `pool` rejoins at as a mirror (doc/mirror.md §Rejoin): `given`,
// else the one of the promoted primary's mirror addresses (the "mirrors A,B" line of its
// registration) that is unix://<absolute pool path>.sock (asymnvm-job's convention), else the only
// one. Empty when none is known (the new primary is not running, or forwards to none).
std::string RejoinAddress(coord::Coordinator& c, const std::array<uint8_t, 16>& uuid,
                          const std::string& pool, const std::string& given) {
  if (!given.empty()) return given;
  auto node = c.Get(mirror::GroupPath(uuid) + "/primary");
  if (!node.ok()) return "";
  std::vector<std::string> addrs;
  const std::string rest = backend::RegistrationField(node->data, "mirrors");
  size_t q = 0;
  while (q <= rest.size()) {
    size_t comma = rest.find(',', q);
    if (comma == std::string::npos) comma = rest.size();
    if (comma > q) addrs.push_back(rest.substr(q, comma - q));
    q = comma + 1;
  }
  const std::string mine =
      "unix://" + std::filesystem::absolute(pool).lexically_normal().string() + ".sock";
  for (const auto& a : addrs) {
    if (a == mine) return a;
  }
  return addrs.size() == 1 ? addrs[0] : "";
}

// asymnvm-mirror next to this binary (installed) or in the build tree (../mirror/).
std::string MirrorBinary() {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return "asymnvm-mirror";
  self[n] = 0;
  const auto dir = std::filesystem::path(self).parent_path();
  for (auto p : {dir / "asymnvm-mirror", dir / ".." / "mirror" / "asymnvm-mirror"}) {
    if (::access(p.c_str(), X_OK) == 0) return p.lexically_normal().string();
  }
  return "asymnvm-mirror";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"asymnvm-backend: AsymNVM back-end daemon (owns a PM pool, serves front-ends)"};
  app.set_config("--config", "", "read options from a TOML/INI file (key = value)");
  backend::BackendOptions o;
  std::string size_text = "256M", pm_mode = "auto", log_level = "info", provider = "soft";
  std::string segment_text = "1M", reclaim_us = "5000";
  app.add_option("--pool", o.pool_path, "pool file (created when missing)")->required();
  app.add_option("--size", size_text, "pool size when creating it (K/M/G suffixes)")
      ->capture_default_str();
  app.add_option("--listen", o.listen_address, "request (Ordered Queue) address; port 0 = any")
      ->capture_default_str();
  app.add_option("--log-listen", o.log_listen_address, "operation-log (Rowan b-log) address")
      ->capture_default_str();
  app.add_option("--fabric", provider, "fabric provider")
      ->check(CLI::IsMember({"soft", "shm", "verbs", "auto"}))
      ->capture_default_str();
  app.add_option("--pm-mode", pm_mode, "PM persistence mode")
      ->check(CLI::IsMember({"auto", "msync", "flush"}))
      ->capture_default_str();
  app.add_option("--naming-slots", o.naming_slots, "naming-space slots (new pools)")
      ->check(CLI::Range(16u, 1u << 20))
      ->capture_default_str();
  app.add_option("--block-size", o.block_size, "allocator slab size (new pools)")
      ->check(CLI::Range(64u, 1u << 30))
      ->capture_default_str();
  app.add_option("--log-segment", segment_text, "b-log segment size (new pools)")
      ->capture_default_str();
  app.add_option("--checkpoint-ms", o.checkpoint_interval,
                 "redo-log mode (pool not PM): background checkpoint interval");
  app.add_option("--reclaim-us", o.reclaim_delay, "lazy reclamation delay (n + l, microseconds)")
      ->capture_default_str();
  uint32_t handshake_ms = 5000;
  app.add_option("--secret-file", o.fabric.secret_file,
                 "file holding the cluster secret (default: ASYMNVM_SECRET_FILE, ASYMNVM_SECRET, "
                 "or the built-in one, loopback only)");
  fabric::AddFabricTlsFlags(app, &o.fabric);
  app.add_option("--handshake-timeout-ms", handshake_ms, "per-peer connection set-up deadline")
      ->check(CLI::Range(1u, 600000u))
      ->capture_default_str();
  app.add_option("--max-pending-handshakes", o.fabric.max_pending_handshakes,
                 "connection set-ups in progress at once (beyond: the oldest is closed)")
      ->check(CLI::Range(1u, 65536u))
      ->capture_default_str();
  std::string coord_uri;
  app.add_option("--coord", coord_uri,
                 "coordinator URI (dir:PATH | zk:HOST:PORT[,...][/chroot] | none); default "
                 "dir:<pool dir>/coord");
  std::vector<std::string> mirrors;
  std::string mirror_mode = "sync", name;
  uint32_t mirror_timeout_ms = 3000, mirror_wait_ms = 30000;
  app.add_option("--mirror", mirrors,
                 "control address of an asymnvm-mirror (repeatable); every persisted range is "
                 "forwarded to it (doc/mirror.md)");
  app.add_option("--mirror-mode", mirror_mode,
                 "sync: an update is acknowledged once every in-sync mirror has it (RPO 0); "
                 "async: mirrors lag (measured loss window, doc/mirror.md)")
      ->check(CLI::IsMember({"sync", "async"}))
      ->capture_default_str();
  app.add_option("--mirror-timeout-ms", mirror_timeout_ms,
                 "a mirror that does not acknowledge a barrier this long is dropped")
      ->check(CLI::Range(1u, 600000u))
      ->capture_default_str();
  app.add_option("--mirror-wait-ms", mirror_wait_ms,
                 "at start, wait this long for every mirror's full copy before serving")
      ->check(CLI::Range(0u, 3600000u))
      ->capture_default_str();
  app.add_option("--name", name, "replica name in the group state (default host:pool path)");
  bool rejoin = false;
  std::string rejoin_listen;
  app.add_flag("--rejoin", rejoin,
               "when fenced (a mirror was promoted), become a mirror of the new primary on this "
               "pool instead of exiting 5 (exec asymnvm-mirror; full copy while it serves)");
  uint32_t rejoin_wait_ms = 60000;
  app.add_option("--rejoin-wait-ms", rejoin_wait_ms,
                 "--rejoin with a lost pool: wait this long for a mirror's promotion")
      ->check(CLI::Range(0u, 3600000u))
      ->capture_default_str();
  app.add_option("--rejoin-listen", rejoin_listen,
                 "the mirror's control address with --rejoin (default: the new primary's mirror "
                 "address unix://<pool>.sock, or its only one)");
  std::string rejoin_data_listen;
  app.add_option("--rejoin-data-listen", rejoin_data_listen,
                 "the mirror's replication-stream address with --rejoin (set it where a firewall "
                 "names ports; default: the mirror's own default)");
  bool test_skip_mirror_flush = false;
  app.add_flag("--TEST-skip-mirror-flush", test_skip_mirror_flush,
               "tests only: barriers do not wait for the mirrors' FLUSH (loses data)")
      ->group("");  // hidden
  std::string metrics_listen;
  app.add_option("--metrics-listen", metrics_listen,
                 "serve Prometheus metrics (GET /metrics) at HOST:PORT; off unless given "
                 "(doc/operations.md)");
  app.add_option("--log-level", log_level, "debug|info|warn|error|off")
      ->check(CLI::IsMember({"debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  std::string log_format = "text";
  AddLogFormatOption(app, &log_format);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  auto usage = [](const std::string& m) {
    std::cerr << "asymnvm-backend: " << m << "\n";
    return 2;
  };
  auto size = pm::ParseSize(size_text);
  if (!size.ok()) return usage("--size: " + size.status().message());
  o.pool_size = *size;
  auto seg = pm::ParseSize(segment_text);
  if (!seg.ok() || *seg < 4096 || *seg % 4096 != 0 || *seg > (1u << 30)) {
    return usage("--log-segment must be a multiple of 4 KiB up to 1G");
  }
  o.log_segment = static_cast<uint32_t>(*seg);
  if ((o.block_size & (o.block_size - 1)) != 0) return usage("--block-size must be a power of two");
  auto mode = pm::ParsePersistMode(pm_mode);
  if (!mode.ok()) return usage(mode.status().message());
  o.persist_mode = *mode;
  o.fabric.provider = provider;
  o.fabric.handshake_timeout = std::chrono::milliseconds(handshake_ms);
  LogLevel level;
  ParseLogLevel(log_level, &level);
  SetLogLevel(level);
  ApplyLogFormat(log_format);

  {
    auto secret = fabric::ResolveClusterSecret(o.fabric);
    if (!secret.ok()) {
      std::cerr << "asymnvm-backend: " << secret.status().message() << "\n";
      return 1;
    }
    for (const auto& a : {o.listen_address, o.log_listen_address}) {
      Status st = fabric::CheckListenSecret(a, *secret);
      if (!st.ok()) {
        std::cerr << "asymnvm-backend: " << st.message() << "\n";
        return 1;
      }
    }
  }

  // Bound before anything else starts, so a taken port is a start-up error; collectors join once
  // the back-end serves (a scrape before that returns only the process facts).
  std::unique_ptr<metrics::Exposer> exposer;
  if (!metrics_listen.empty()) {
    auto e = metrics::Exposer::Start(metrics_listen);
    if (!e.ok()) {
      std::cerr << "asymnvm-backend: --metrics-listen: " << e.status().message() << "\n";
      return 1;
    }
    exposer = std::move(e).value();
    exposer->Add([](metrics::Writer& w) { metrics::WriteProcessInfo(w, "backend"); });
  }

  sigset_t stop_set;
  sigemptyset(&stop_set);
  sigaddset(&stop_set, SIGTERM);
  sigaddset(&stop_set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_set, nullptr);

  if (name.empty()) name = mirror::DefaultReplicaName(o.pool_path);
  if (coord_uri.empty()) {
    coord_uri = "dir:" + (std::filesystem::absolute(o.pool_path).parent_path() / "coord").string();
  }
  // The command that makes this pool a mirror of the group's primary (doc/mirror.md §Rejoin):
  // --join lets the primary attach it while serving, whether or not it lists the address.
  auto rejoin_command = [&](const std::array<uint8_t, 16>& uuid, const std::string& addr) {
    std::vector<std::string> margs = {MirrorBinary(),
                                      "--pool",
                                      o.pool_path,
                                      "--listen",
                                      addr,
                                      "--join",
                                      pm::UuidToString(uuid),
                                      "--name",
                                      name,
                                      "--coord",
                                      coord_uri,
                                      "--pm-mode",
                                      pm_mode,
                                      "--log-level",
                                      log_level,
                                      "--log-format",
                                      log_format};
    if (!rejoin_data_listen.empty()) {
      margs.push_back("--data-listen");
      margs.push_back(rejoin_data_listen);
    }
    // Promoted again later, it serves where this back-end served (the same host's ports).
    if (fabric::IsFixedAddress(o.listen_address)) {
      margs.push_back("--serve-listen");
      margs.push_back(o.listen_address);
    }
    if (fabric::IsFixedAddress(o.log_listen_address)) {
      margs.push_back("--serve-log-listen");
      margs.push_back(o.log_listen_address);
    }
    if (!o.fabric.secret_file.empty()) {
      margs.push_back("--secret-file");
      margs.push_back(o.fabric.secret_file);
    }
    fabric::AppendFabricTlsFlags(o.fabric, &margs);
    return margs;
  };
  auto exec_rejoin = [&](const std::vector<std::string>& margs) {
    std::vector<std::string> args = margs;
    std::vector<char*> argv2;
    for (auto& a : args) argv2.push_back(a.data());
    argv2.push_back(nullptr);
    pthread_sigmask(SIG_UNBLOCK, &stop_set, nullptr);
    ::execv(args[0].c_str(), argv2.data());
    std::cerr << "asymnvm-backend: exec " << args[0] << ": " << std::strerror(errno) << "\n";
    return 1;
  };
  auto joined = [](const std::vector<std::string>& v) {
    std::string cmd;
    for (const auto& a : v) cmd += (cmd.empty() ? "" : " ") + a;
    return cmd;
  };
  const std::string default_rejoin_address =
      "unix://" + std::filesystem::absolute(o.pool_path).lexically_normal().string() + ".sock";

  // Fencing (doc/mirror.md §Promotion): a group whose state names another replica was taken over
  // by a promoted mirror; this pool is stale and must not serve.
  std::shared_ptr<coord::Coordinator> group_coord;
  uint64_t term = 0;
  if (coord_uri != "none") {
    auto c = coord::Coordinator::Open(coord_uri);
    if (!c.ok()) {
      std::cerr << "asymnvm-backend: coordinator " << coord_uri << ": " << c.status().ToString()
                << "\n";
      return 1;
    }
    group_coord = std::move(c).value();
    if (rejoin && ::access(o.pool_path.c_str(), F_OK) != 0) {
      // A lost pool: its group is recorded under the replica's name (written when it served or
      // was in sync). Wait for a mirror's promotion, then become a mirror of the new primary.
      auto uuid = mirror::LookupReplica(*group_coord, name);
      if (!uuid.ok()) {
        std::cerr << "asymnvm-backend: --rejoin: " << o.pool_path
                  << " does not exist and the coordinator names no group for replica " << name
                  << " (" << uuid.status().ToString()
                  << "); serving a fresh pool here would be a new, empty back-end. To make this "
                     "path a mirror of a group's primary run: asymnvm-mirror --pool "
                  << o.pool_path << " --listen ADDR --join GROUP-UUID --coord " << coord_uri
                  << "\n";
        return 1;
      }
      const auto deadline =
          std::chrono::steady_clock::now() + std::chrono::milliseconds(rejoin_wait_ms);
      for (;;) {
        Status f = mirror::CheckPrimary(*group_coord, *uuid, name, &term);
        if (f.code() == StatusCode::kFailedPrecondition) {
          const std::string addr = rejoin_listen.empty() ? default_rejoin_address : rejoin_listen;
          auto margs = rejoin_command(*uuid, addr);
          std::cerr << "asymnvm-backend: " << o.pool_path << " is lost; " << f.message()
                    << "; rejoining as a mirror of the new primary: " << joined(margs) << std::endl;
          group_coord.reset();
          return exec_rejoin(margs);
        }
        if (!f.ok() && f.code() != StatusCode::kNotFound) {
          std::cerr << "asymnvm-backend: coordinator " << coord_uri << ": " << f.ToString() << "\n";
          return 1;
        }
        if (std::chrono::steady_clock::now() >= deadline) {
          std::cerr << "asymnvm-backend: --rejoin: " << o.pool_path << " is lost and group "
                    << pm::UuidToString(*uuid)
                    << " still names this replica as its primary after --rejoin-wait-ms "
                    << rejoin_wait_ms
                    << ": no mirror was promoted (none in sync?); the acknowledged data of this "
                       "group is only where a mirror holds it\n";
          return 1;
        }
        LOG_WARN("backend", "--rejoin: " << o.pool_path
                                         << " is lost and the group still names this replica; "
                                            "waiting for a mirror's promotion");
        auto node = group_coord->Get(mirror::GroupPath(*uuid) + "/state");
        (void)group_coord->WaitForChange(
            mirror::GroupPath(*uuid) + "/state",
            node.ok() ? node->version : coord::Coordinator::kNoNode,
            std::min(deadline, coord::Clock::now() + std::chrono::milliseconds(500)));
      }
    }
    if (::access(o.pool_path.c_str(), F_OK) == 0) {
      auto uuid = ReadPoolUuid(o.pool_path);
      if (uuid.ok()) {
        Status f = mirror::CheckPrimary(*group_coord, *uuid, name, &term);
        if (f.code() == StatusCode::kFailedPrecondition) {
          std::string addr = RejoinAddress(*group_coord, *uuid, o.pool_path, rejoin_listen);
          if (addr.empty()) addr = default_rejoin_address;
          auto margs = rejoin_command(*uuid, addr);
          if (rejoin) {
            std::cerr << "asymnvm-backend: " << o.pool_path << ": " << f.message()
                      << "; rejoining as a mirror of the new primary: " << joined(margs)
                      << std::endl;
            group_coord.reset();
            return exec_rejoin(margs);
          }
          std::cerr << "asymnvm-backend: " << o.pool_path << ": " << f.message() << " (exit "
                    << mirror::kExitFenced << "). To rejoin as a mirror of the new primary (a "
                    << "copy of what differs while it serves), run: " << joined(margs)
                    << "  (or start this daemon again with --rejoin)\n";
          return mirror::kExitFenced;
        }
        if (!f.ok()) {
          std::cerr << "asymnvm-backend: coordinator " << coord_uri << ": " << f.ToString() << "\n";
          return 1;
        }
        if (term != 0 && !mirrors.empty()) {
          // A restart: the mirrors are caught up again; none counts until then.
          Status r = mirror::SetInSync(*group_coord, *uuid, name, {}, &term);
          if (!r.ok()) {
            std::cerr << "asymnvm-backend: " << r.ToString() << "\n";
            return r.code() == StatusCode::kFailedPrecondition ? mirror::kExitFenced : 1;
          }
        }
      }
    }
  }
  o.replication.mirrors = mirrors;
  o.replication.joinable = group_coord != nullptr;  // mirrors may announce themselves
  o.replication.async = mirror_mode == "async";
  o.replication.TEST_skip_mirror_flush = test_skip_mirror_flush;
  o.replication.timeout = std::chrono::milliseconds(mirror_timeout_ms);
  o.replication.name = name;
  o.replication.term = term;
  o.mirror_wait = std::chrono::milliseconds(mirror_wait_ms);
  if (group_coord) {
    o.replication.on_insync = [group_coord, name](const std::array<uint8_t, 16>& uuid,
                                                  const std::vector<std::string>& insync) {
      uint64_t t = 0;
      Status s = mirror::SetInSync(*group_coord, uuid, name, insync, &t);
      if (s.ok()) {
        std::string list;
        for (const auto& n : insync) list += (list.empty() ? "" : ",") + n;
        LOG_INFO("backend", "group in-sync set (term " << t << "): {" << list << "}");
      }
      return s;
    };
  }
  auto fenced = [](const Status& s) {
    std::cerr << "asymnvm-backend: " << s.message() << "; exiting without acknowledging more (exit "
              << mirror::kExitFenced << ")" << std::endl;
    std::_Exit(mirror::kExitFenced);
  };
  o.replication.fenced = fenced;
  // The group role exists once the pool (and so its uuid) does, i.e. after Start; a registration
  // carrying a term before that is refused (nobody can have learned one from this process yet).
  std::atomic<mirror::PrimaryRole*> role_ptr{nullptr};
  o.check_term = [&role_ptr](uint64_t t) {
    mirror::PrimaryRole* r = role_ptr.load();
    if (r == nullptr) {
      return Status::FailedPrecondition("register: group term " + std::to_string(t) +
                                        " given before this back-end registered in its group");
    }
    return r->CheckClientTerm(t);
  };
  auto be = backend::Backend::Start(o);
  if (!be.ok()) {
    std::cerr << "asymnvm-backend: " << be.status().ToString() << "\n";
    return 1;
  }
  LOG_INFO("backend", "serving " << o.pool_path << ": " << (*be)->layout().Describe());
  std::unique_ptr<mirror::PrimaryRole> role;
  if (group_coord) {
    auto uuid = ReadPoolUuid(o.pool_path);
    if (!uuid.ok()) {
      std::cerr << "asymnvm-backend: " << uuid.status().ToString() << "\n";
      (*be)->Stop();
      return 1;
    }
    role = std::make_unique<mirror::PrimaryRole>(group_coord, *uuid, name, term, "asymnvm-backend");
    const std::string data = "address " + (*be)->address() + "\nlog " + (*be)->log_address() +
                             "\npid " + std::to_string(::getpid()) + "\nstarted_unix_ms " +
                             std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count()) +
                             "\n";
    Status reg = role->Register(data, std::chrono::seconds(30));
    if (!reg.ok()) {
      std::cerr << "asymnvm-backend: coordinator " << coord_uri << ": " << reg.ToString()
                << "; another back-end serves this pool\n";
      role.reset();
      (*be)->Stop();
      return 1;
    }
    role_ptr.store(role.get());
    backend::Backend* bp = be->get();
    role->Start(fenced, [bp](const std::string& a) { return bp->AddMirror(a); });
    LOG_INFO("backend", "registered " << mirror::GroupPath(*uuid) << "/primary at " << coord_uri
                                      << " (term " << role->term() << ")");
  }
  if (exposer) {
    const backend::Backend* bp = be->get();
    const mirror::PrimaryRole* rp = role.get();
    exposer->Add([bp, rp](metrics::Writer& w) {
      backend::WriteMetrics(*bp, w);
      if (rp != nullptr) {
        w.Gauge("asymnvm_backend_group_term",
                "Term of the back-end group this primary serves (rises with each promotion)",
                static_cast<double>(rp->term()));
      }
    });
  }
  std::cout << "listening " << (*be)->address() << "\nlog " << (*be)->log_address()
            << (exposer ? "\nmetrics " + exposer->address() : "") << std::endl;
  NotifyReady("serving " + o.pool_path + " at " + (*be)->address());
  int sig = 0;
  sigwait(&stop_set, &sig);
  NotifyStopping();
  exposer.reset();  // no scrape reads the back-end while it stops
  if (role) {
    // An operator's stop is not a failure: empty the in-sync set first so no mirror takes over
    // (they are caught up when this primary starts again); then unregister.
    role->Stop(/*clear_insync=*/true);
  }
  (*be)->Stop();
  role_ptr.store(nullptr);
  role.reset();
  auto st = (*be)->stats();
  std::cerr << "asymnvm-backend: stopped (signal " << sig << "): " << st.txns_applied
            << " txns applied, " << st.txns_rejected << " rejected, " << st.requests
            << " requests, " << st.cpu_seconds << " s CPU, " << st.pm_syncs << " pm syncs ("
            << (st.redo ? "redo log, " : "direct, ") << st.checkpoints << " checkpoints)\n";
  return 0;
}
