// asymnvm-mirror: a mirror of an AsymNVM back-end group (doc/mirror.md).
//
//   asymnvm-mirror --pool PATH [--listen ADDR] [--data-listen ADDR] [--name NAME]
//                  [--coord URI] [--promotion-timeout-ms MS] [--no-promote]
//                  [--serve-listen ADDR] [--serve-log-listen ADDR] [--pm-mode auto|msync|flush]
//                  [--secret-file PATH] [--handshake-timeout-ms MS] [--size SIZE]
//                  [--mirror ADDR]... [--mirror-mode sync|async] [--log-level L] [--config FILE]
//                  [--metrics-listen HOST:PORT]
//                  [--fabric-tls-cert-file F --fabric-tls-key-file F [--fabric-tls-ca-cert-file F]]
//
// Serves a primary (asymnvm-backend --mirror ADDR) that copies its pool here and then forwards
// every persisted range; prints "listening <control address>" and "data <data address>" (and
// "metrics HOST:PORT" with --metrics-listen; the only stdout output), serves until SIGTERM/SIGINT
// and exits 0. Once in sync it registers the ephemeral /asymnvm/groups/<uuid>/mirrors/<name> and
// watches the group's primary node: when it is gone for --promotion-timeout-ms and this mirror is
// in the group's in-sync set, it takes the next term (a CAS on /asymnvm/groups/<uuid>/state),
// starts a back-end on its pool (recovery as after a crash of the primary), registers itself as the
// group's primary and serves front-ends until SIGTERM (stderr: "promoted: term N, listening A, log
// L"). Once promoted it forwards to the mirrors named by --mirror (repeatable; e.g. the old
// primary's rejoin address: an asymnvm-mirror started there later is attached and copied by the
// promoted primary while it serves, the manager retrying every 500 ms), like asymnvm-backend
// --mirror; a SIGTERM then empties the group's in-sync set first (an operator's stop never promotes
// one of them). Exit codes: 0 clean stop, 1 start-up failure (pool, fabric, coordinator, secret) or
// a failed promotion, 2 bad command line.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "asymnvm/coord.h"
#include "asymnvm/metrics.h"
#include "asymnvm/pm.h"
#include "backend/backend.h"
#include "backend/metrics.h"
#include "common/log_options.h"
#include "common/logging.h"
#include "common/service.h"
#include "common/thread_annotations.h"
#include "fabric/tls_flags.h"
#include "mirror/group.h"
#include "mirror/mirror_server.h"
#include "mirror/primary_role.h"
#include "pm/sync_metrics.h"

using namespace asymnvm;

namespace {

void Fenced(const Status& s) {
  std::cerr << "asymnvm-mirror: " << s.message() << "; exiting without acknowledging more (exit "
            << mirror::kExitFenced << ")" << std::endl;
  std::_Exit(mirror::kExitFenced);
}

struct Daemon {
  mirror::MirrorOptions mo;
  backend::BackendOptions bo;  // used when promoted
  std::string coord_uri;
  std::chrono::milliseconds promotion_timeout{3000};
  bool promote = true;

  std::shared_ptr<coord::Coordinator> coordinator;
  std::unique_ptr<mirror::MirrorServer> server;
  std::unique_ptr<backend::Backend> backend;  // after a promotion
  std::unique_ptr<mirror::PrimaryRole> role;  // after a promotion
  std::atomic<mirror::PrimaryRole*> role_ptr{nullptr};
  std::string join;          // --join: the group this mirror announces itself to
  std::string joining_node;  // its ephemeral /…/joining/<name> while not promoted

  // --join UUID: announce this mirror to the group's primary, which attaches it while serving
  // (doc/mirror.md §Joining). Kept while this process is a mirror (a restarted primary attaches
  // it again).
  Status Announce() {
    auto u = pm::UuidFromString(join);
    if (!u.ok()) return u.status();
    const std::string dir = mirror::JoiningPath(*u);
    ASYMNVM_RETURN_IF_ERROR(coordinator->EnsurePath(dir));
    const std::string path = dir + "/" + mirror::NodeComponent(mo.name);
    (void)coordinator->Delete(path);  // a node of an earlier incarnation (ZooKeeper) goes first
    auto c = coordinator->Create(path,
                                 "name " + mo.name + "\naddress " + server->address() + "\npid " +
                                     std::to_string(::getpid()) + "\n",
                                 coord::kEphemeral);
    if (!c.ok()) return c.status();
    joining_node = path;
    return Status::Ok();
  }
  Mutex mu;
  std::condition_variable cv;
  bool synced ASYMNVM_GUARDED_BY(mu) = false;
  std::array<uint8_t, 16> uuid{};
  std::atomic<bool> stop{false};
  std::atomic<bool> promoted{false};
  std::atomic<int> failed_exit{0};
  std::string mirror_node;

  void OnSynced(const std::array<uint8_t, 16>& u, uint64_t) {
    MutexLock lock(mu);
    uuid = u;
    synced = true;
    cv.notify_all();
  }

  void RegisterMirrorNode() {
    if (!coordinator) return;
    const std::string dir = mirror::GroupPath(uuid) + "/mirrors";
    const std::string path = dir + "/" + mirror::NodeComponent(mo.name);
    if (path == mirror_node) return;
    Status s = coordinator->EnsurePath(dir);
    if (s.ok()) {
      auto c = coordinator->Create(path,
                                   "name " + mo.name + "\naddress " + server->address() + "\npid " +
                                       std::to_string(::getpid()) + "\n",
                                   coord::kEphemeral);
      s = c.ok() || c.status().code() == StatusCode::kAlreadyExists ? Status::Ok() : c.status();
    }
    if (!s.ok()) {
      LOG_WARN("mirror", "registering " << path << ": " << s.ToString());
      return;
    }
    mirror_node = path;
  }

  // Returns true when promoted (or stopping).
  bool TryPromote() {
    auto st = server->state();
    if (st.state != "in-sync") {
      LOG_WARN("mirror", "primary gone, but this mirror is " << st.state << ": not promotable");
      return false;
    }
    auto term = mirror::TryPromote(*coordinator, uuid, mo.name);
    if (!term.ok()) {
      LOG_WARN("mirror", "promotion: " << term.status().ToString());
      return false;
    }
    LOG_WARN("mirror",
             "promotion: won term " << *term << "; starting a back-end on " << mo.pool_path);
    server->Stop();  // closes the pool: the back-end opens it as after a crash of the primary
    if (!joining_node.empty()) {
      (void)coordinator->Delete(joining_node);
      joining_node.clear();
    }
    bo.pool_path = mo.pool_path;
    bo.replication.name = mo.name;
    bo.replication.term = *term;
    bo.replication.joinable = true;                 // mirrors announce themselves (--join)
    bo.mirror_wait = std::chrono::milliseconds(0);  // serve at once; mirrors join while serving
    bo.replication.on_insync = [this](const std::array<uint8_t, 16>& u,
                                      const std::vector<std::string>& insync) {
      uint64_t t = 0;
      Status s = mirror::SetInSync(*coordinator, u, mo.name, insync, &t);
      if (s.ok())
        LOG_INFO("mirror", "promoted primary: in-sync set of term " << t << " has " << insync.size()
                                                                    << " mirror(s)");
      return s;
    };
    bo.replication.fenced = Fenced;
    bo.check_term = [this](uint64_t t) {
      mirror::PrimaryRole* r = role_ptr.load();
      if (r == nullptr) {
        return Status::FailedPrecondition("register: group term " + std::to_string(t) +
                                          " given before this replica registered as primary");
      }
      return r->CheckClientTerm(t);
    };
    auto be = backend::Backend::Start(bo);
    if (!be.ok()) {
      LOG_ERROR("mirror",
                "promotion: back-end on " << mo.pool_path << ": " << be.status().ToString());
      failed_exit = 1;
      ::kill(::getpid(), SIGTERM);
      return true;
    }
    backend = std::move(be).value();
    std::string data = "address " + backend->address() + "\nlog " + backend->log_address() +
                       "\npid " + std::to_string(::getpid()) + "\nstarted_unix_ms " +
                       std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(
                                          std::chrono::system_clock::now().time_since_epoch())
                                          .count()) +
                       "\n";
    if (!bo.replication.mirrors.empty()) {
      // The addresses it forwards to: a fenced old primary rejoins at one of them
      // (asymnvm-backend --rejoin, doc/mirror.md §Rejoin).
      std::string list;
      for (const auto& a : bo.replication.mirrors) list += (list.empty() ? "" : ",") + a;
      data += "mirrors " + list + "\n";
    }
    if (!mirror_node.empty()) {
      (void)coordinator->Delete(mirror_node);
      mirror_node.clear();
    }
    role =
        std::make_unique<mirror::PrimaryRole>(coordinator, uuid, mo.name, *term, "asymnvm-mirror");
    Status r = role->Register(data, std::chrono::seconds(30));
    if (!r.ok()) {
      LOG_ERROR("mirror", "promotion: registering the primary: " << r.ToString());
      failed_exit = 1;
      ::kill(::getpid(), SIGTERM);
      return true;
    }
    role_ptr.store(role.get());
    backend::Backend* bp = backend.get();
    role->Start(Fenced, [bp](const std::string& a) { return bp->AddMirror(a); });
    promoted = true;
    std::cerr << "asymnvm-mirror: promoted: term " << *term << ", listening " << backend->address()
              << ", log " << backend->log_address() << std::endl;
    return true;
  }

  void Watch() {
    {
      MutexLock lock(mu);
      while (!synced && !stop.load()) cv.wait_for(lock.native(), std::chrono::milliseconds(200));
    }
    if (stop.load() || !coordinator || !promote) return;
    RegisterMirrorNode();
    const std::string path = mirror::GroupPath(uuid) + "/primary";
    bool absent = false;
    // A primary is registered only once it serves, i.e. after this mirror's first copy: until
    // the node was seen, its absence counts only after a much longer wait (a restarted mirror
    // whose primary is gone must still be promotable).
    bool seen = false;
    coord::Clock::time_point absent_since{};
    while (!stop.load()) {
      RegisterMirrorNode();
      auto node = coordinator->Get(path);
      const auto now = coord::Clock::now();
      if (node.ok()) {
        absent = false;
        seen = true;
        (void)coordinator->WaitForChange(path, node->version, now + std::chrono::milliseconds(250));
        continue;
      }
      if (node.status().code() != StatusCode::kNotFound) {
        LOG_WARN("mirror", "watching " << path << ": " << node.status().ToString());
        MutexLock lock(mu);
        cv.wait_for(lock.native(), std::chrono::milliseconds(250));
        continue;
      }
      if (!absent) {
        absent = true;
        absent_since = now;
        LOG_WARN("mirror", path << " is gone; promotion in " << promotion_timeout.count()
                                << " ms unless it returns");
      }
      const auto timeout = seen ? promotion_timeout
                                : std::max<std::chrono::milliseconds>(promotion_timeout * 10,
                                                                      std::chrono::seconds(10));
      if (now - absent_since >= timeout) {
        if (TryPromote()) return;
        absent_since = now;  // not promotable now: look again after another timeout
        continue;
      }
      const auto until = std::min(absent_since + timeout, now + std::chrono::milliseconds(250));
      (void)coordinator->WaitForChange(path, coord::Coordinator::kNoNode, until);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "asymnvm-mirror: a mirror of an AsymNVM back-end (receives its primary's stream; "
      "promoted when the primary is gone)"};
  app.set_config("--config", "", "read options from a TOML/INI file (key = value)");
  Daemon d;
  std::string pm_mode = "auto", log_level = "info", size_text;
  uint32_t handshake_ms = 5000, promotion_ms = 3000;
  app.add_option("--pool", d.mo.pool_path, "mirror pool file (created with the primary's size)")
      ->required();
  app.add_option("--size", size_text, "ignored: the pool takes its primary's size");
  app.add_option("--listen", d.mo.listen_address, "control address (a primary's --mirror)")
      ->capture_default_str();
  app.add_option("--data-listen", d.mo.data_listen_address, "address of the primary's stream")
      ->capture_default_str();
  app.add_option("--name", d.mo.name, "replica name in the group state (default host:pool path)");
  app.add_option("--coord", d.coord_uri,
                 "coordinator URI (dir:PATH | zk:... | none); default dir:<pool dir>/coord");
  app.add_option("--promotion-timeout-ms", promotion_ms,
                 "promote after the primary's registration is gone this long")
      ->check(CLI::Range(1u, 3600000u))
      ->capture_default_str();
  bool no_promote = false;
  std::string mirror_mode = "sync";
  app.add_option("--mirror", d.bo.replication.mirrors,
                 "once promoted, forward to this asymnvm-mirror (repeatable; attached and copied "
                 "while serving, retried every 500 ms until it answers)");
  app.add_option("--mirror-mode", mirror_mode, "once promoted: sync (RPO 0) | async")
      ->check(CLI::IsMember({"sync", "async"}))
      ->capture_default_str();
  app.add_flag("--no-promote", no_promote, "never promote this mirror");
  app.add_flag("--TEST-crash-sim", d.mo.crash_sim,
               "tests only: pm crash simulation on the pool; SIGUSR1 = power loss of this "
               "machine (every line not persisted by an acknowledged FLUSH is lost), exit 9")
      ->group("");  // hidden
  app.add_option("--join", d.join,
                 "announce this mirror to the primary of group UUID, which attaches it while "
                 "serving (no --mirror needed on the primary; needs a coordinator)");
  app.add_option("--serve-listen", d.bo.listen_address, "requests address once promoted")
      ->capture_default_str();
  app.add_option("--serve-log-listen", d.bo.log_listen_address, "op-log address once promoted")
      ->capture_default_str();
  app.add_option("--pm-mode", pm_mode, "PM persistence mode")
      ->check(CLI::IsMember({"auto", "msync", "flush"}))
      ->capture_default_str();
  app.add_option("--secret-file", d.mo.fabric.secret_file, "file holding the cluster secret");
  fabric::AddFabricTlsFlags(app, &d.mo.fabric);
  app.add_option("--handshake-timeout-ms", handshake_ms, "per-peer connection set-up deadline")
      ->check(CLI::Range(1u, 600000u))
      ->capture_default_str();
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
  auto mode = pm::ParsePersistMode(pm_mode);
  if (!mode.ok()) {
    std::cerr << "asymnvm-mirror: " << mode.status().message() << "\n";
    return 2;
  }
  d.mo.persist_mode = *mode;
  d.bo.persist_mode = *mode;
  d.mo.fabric.handshake_timeout = std::chrono::milliseconds(handshake_ms);
  d.bo.fabric = d.mo.fabric;
  d.promotion_timeout = std::chrono::milliseconds(promotion_ms);
  d.promote = !no_promote;
  d.bo.replication.async = mirror_mode == "async";
  if (d.mo.name.empty()) d.mo.name = mirror::DefaultReplicaName(d.mo.pool_path);
  LogLevel level;
  ParseLogLevel(log_level, &level);
  SetLogLevel(level);
  ApplyLogFormat(log_format);
  {
    auto secret = fabric::ResolveClusterSecret(d.mo.fabric);
    if (!secret.ok()) {
      std::cerr << "asymnvm-mirror: " << secret.status().message() << "\n";
      return 1;
    }
    for (const auto& a : {d.mo.listen_address, d.mo.data_listen_address, d.bo.listen_address,
                          d.bo.log_listen_address}) {
      Status st = fabric::CheckListenSecret(a, *secret);
      if (!st.ok()) {
        std::cerr << "asymnvm-mirror: " << st.message() << "\n";
        return 1;
      }
    }
  }
  std::unique_ptr<metrics::Exposer> exposer;
  if (!metrics_listen.empty()) {
    auto e = metrics::Exposer::Start(metrics_listen);
    if (!e.ok()) {
      std::cerr << "asymnvm-mirror: --metrics-listen: " << e.status().message() << "\n";
      return 1;
    }
    exposer = std::move(e).value();
    exposer->Add([](metrics::Writer& w) { metrics::WriteProcessInfo(w, "mirror"); });
  }
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t stop_set;
  sigemptyset(&stop_set);
  sigaddset(&stop_set, SIGTERM);
  sigaddset(&stop_set, SIGINT);
  if (d.mo.crash_sim) sigaddset(&stop_set, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &stop_set, nullptr);

  if (d.coord_uri != "none") {
    if (d.coord_uri.empty()) {
      std::filesystem::path dir = std::filesystem::absolute(d.mo.pool_path).parent_path();
      d.coord_uri = "dir:" + (dir / "coord").string();
    }
    auto c = coord::Coordinator::Open(d.coord_uri);
    if (!c.ok()) {
      std::cerr << "asymnvm-mirror: coordinator " << d.coord_uri << ": " << c.status().ToString()
                << "\n";
      return 1;
    }
    d.coordinator = std::move(c).value();
  }
  Daemon* dp = &d;
  d.mo.on_synced = [dp](const std::array<uint8_t, 16>& u, uint64_t t) { dp->OnSynced(u, t); };
  auto server = mirror::MirrorServer::Start(d.mo);
  if (!server.ok()) {
    std::cerr << "asymnvm-mirror: " << server.status().ToString() << "\n";
    return 1;
  }
  d.server = std::move(server).value();
  {
    // A mirror restarted in sync (its pool holds everything it acknowledged) may be promoted
    // if its primary is gone and the group state still lists it.
    auto st = d.server->state();
    if (st.state == "in-sync" && st.has_uuid) d.OnSynced(st.uuid, st.term);
  }
  if (!d.join.empty()) {
    Status a = d.coordinator ? d.Announce()
                             : Status::InvalidArgument("--join needs a coordinator (--coord)");
    if (!a.ok()) {
      std::cerr << "asymnvm-mirror: --join " << d.join << ": " << a.ToString() << "\n";
      d.server->Stop();
      return a.code() == StatusCode::kInvalidArgument ? 2 : 1;
    }
  }
  std::thread watcher([dp] { dp->Watch(); });
  if (exposer) {
    // The mirror's status (what `asymnvm-ctl status` prints) and, once promoted, the back-end's.
    exposer->Add([dp](metrics::Writer& w) {
      const auto j = nlohmann::json::parse(dp->server->StatusJson());
      const std::string state = j.value("state", "");
      for (const char* s : {"empty", "syncing", "in-sync"}) {
        w.Gauge("asymnvm_mirror_state", "State of this mirror's copy (one-hot)", state == s ? 1 : 0,
                {{"state", s}});
      }
      w.Gauge("asymnvm_mirror_term", "Group term of the copy", j.value("term", 0.0));
      w.Counter("asymnvm_mirror_hellos_total", "Full-copy starts by a primary",
                j.value("hellos", 0.0));
      w.Counter("asymnvm_mirror_synced_total", "Copies the primary reported complete",
                j.value("syncs", 0.0));
      w.Counter("asymnvm_mirror_received_bytes_total", "Wire bytes received from the primary",
                j.value("bytes_in", 0.0));
      w.Counter("asymnvm_mirror_remote_ops_total", "One-sided writes/flushes the NIC served",
                j.value("remote_ops_served", 0.0));
      pm::WriteSyncMetrics(w, "mirror", j.value("pm_syncs", 0.0), j.value("pm_sync_bytes", 0.0));
      const bool promoted = dp->promoted.load();
      w.Counter("asymnvm_mirror_promotions_total", "Failovers: this mirror promoted to primary",
                promoted ? 1 : 0);
      if (promoted) backend::WriteMetrics(*dp->backend, w);
    });
  }
  std::cout << "listening " << d.server->address() << "\ndata " << d.server->data_address()
            << (exposer ? "\nmetrics " + exposer->address() : "") << std::endl;
  NotifyReady("mirror " + d.mo.pool_path + " at " + d.server->address());
  int sig = 0;
  sigwait(&stop_set, &sig);
  NotifyStopping();
  exposer.reset();
  if (sig == SIGUSR1) {
    // --TEST-crash-sim: the machine loses power. Whatever the watcher does meanwhile, nothing is
    // acknowledged after this point and the process ends without any clean-up.
    uint64_t dropped = 0;
    Status s = d.server->TEST_PowerLoss(static_cast<uint64_t>(::getpid()), 0.0, &dropped);
    std::cerr << "asymnvm-mirror: simulated power loss: " << dropped << " unpersisted lines lost"
              << (s.ok() ? "" : " (" + s.ToString() + ")") << std::endl;
    std::_Exit(9);
  }
  d.stop = true;
  d.cv.notify_all();
  watcher.join();
  if (d.backend) {
    // As asymnvm-backend on SIGTERM: an operator's stop must not promote one of our mirrors.
    if (d.role) d.role->Stop(/*clear_insync=*/true);
    d.backend->Stop();
    d.role_ptr.store(nullptr);
    d.role.reset();
  }
  if (d.coordinator && !d.joining_node.empty()) (void)d.coordinator->Delete(d.joining_node);
  d.server->Stop();
  if (d.coordinator) d.coordinator->Close();
  std::cerr << "asymnvm-mirror: stopped (signal " << sig << ")"
            << (d.promoted ? " after serving as the promoted primary" : "") << "\n";
  return d.failed_exit.load();
}
