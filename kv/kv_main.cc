// asymnvm-kv: the Rowan-KV server daemon (doc/kv.md).
//
//   asymnvm-kv --pool PATH [--size SIZE] [--listen ADDR] [--workers N] [--shards N]
//              [--segment-size SIZE] [--pm-mode auto|msync|flush] [--gc-threshold F]
//              [--coord URI|none] [--cluster NAME] [--log-listen ADDR] [--blog-size SIZE]
//              [--rf N] [--initial-servers N] [--rdmp on|off] [--rdmp-listen ADDR]
//              [--replication rowan|rpc|rwrite|batch|share] [--rlog-listen ADDR]
//              [--secret-file PATH] [--log-level L] [--config FILE]
//              [--rebalance-threshold F] [--rebalance-period-ms N] [--rebalance-*]
//              [--metrics-listen HOST:PORT] [--tls-port PORT --tls-cert-file F --tls-key-file F
//              [--tls-ca-cert-file F] [--tls-auth-clients yes|no|optional]]
//              [--fabric-tls-cert-file F --fabric-tls-key-file F [--fabric-tls-ca-cert-file F]]
//
// With a coordinator (default: dir:<pool dir>/coord) the server joins the replicated cluster
// <cluster> (doc/kv.md §Replication); with --coord none it serves every shard of its pool alone.
// Prints "listening <oq address>" and "log <b-log address>" (then "rdmp <address>" for the
// server-bypass endpoint, "resp HOST:PORT" for the Redis gateway, doc/resp.md, "tls HOST:PORT"
// for its TLS port (doc/resp.md §TLS), and "metrics
// HOST:PORT" with --metrics-listen, doc/operations.md; all in one write)
// as the first stdout lines once it serves (registered as
// /asymnvm/kv/<cluster>/servers/<pool-uuid>, ephemeral), serves until SIGTERM/SIGINT, then stops
// cleanly (everything acknowledged is already durable) and exits 0. Exit codes: 0 clean stop, 1
// start-up failure (message names the pool or the coordinator and the cause), 2 bad command line.
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "asymnvm/coord.h"
#include "asymnvm/metrics.h"
#include "common/log_options.h"
#include "common/logging.h"
#include "common/service.h"
#include "fabric/tls_flags.h"
#include "kv/resp/commands.h"
#include "kv/resp/gateway.h"
#include "kv/resp/tls.h"
#include "kv/server.h"
#include "pm/sync_metrics.h"

using namespace asymnvm;

namespace {

// asymnvm-kv's Prometheus collector (doc/operations.md §Metrics): the server's stats, its
// requests by type, and the Redis gateway's counters.
void WriteKvMetrics(const kv::Server& server, const kv::resp::Server* gateway, metrics::Writer& w) {
  const kv::ServerStats s = server.stats();
  auto c = [&](const std::string& name, const char* help, uint64_t v) {
    w.Counter("asymnvm_kv_" + name, help, static_cast<double>(v));
  };
  auto g = [&](const std::string& name, const char* help, uint64_t v) {
    w.Gauge("asymnvm_kv_" + name, help, static_cast<double>(v));
  };
  g("keys", "Live keys in this server's pool (its shards, primary and backup)", s.store.keys);
  g("tombstones", "Deleted keys not yet cleaned", s.store.tombstones);
  g("segments", "Log segments of the store", s.store.segments);
  g("free_segments", "Free log segments", s.store.free_segments);
  g("live_bytes", "Footprint of the live entries", s.store.live_bytes);
  c("appended_bytes_total", "Entry bytes appended (cleaner copies included)",
    s.store.appended_bytes);
  c("gc_copied_bytes_total", "Bytes the cleaner copied", s.store.gc_copied_bytes);
  c("gc_segments_freed_total", "Segments the cleaner freed", s.store.gc_segments_freed);
  c("rejected_requests_total", "Malformed or misrouted requests answered with an error",
    s.rejected);
  c("nilext_dropped_total", "Nil-externalizing requests that failed (no reply channel)",
    s.nilext_dropped);
  pm::WriteSyncMetrics(w, "kv", static_cast<double>(s.pm_syncs),
                       static_cast<double>(s.pm_sync_bytes));
  g("shard_map_epoch", "Epoch of the shard map this server follows (cluster mode)", s.map_epoch);
  c("backup_digested_total", "B-log entries applied as a backup", s.digested);
  c("catchups_total", "Joining backups brought in sync by this server", s.catchups);
  c("replicated_writes_total", "Writes this primary replicated to its backups",
    s.replicated_writes);
  c("replication_round_trips_total", "Replication doorbells, summed over the backups",
    s.replication_round_trips);
  c("replication_bytes_total", "Replication wire bytes (both directions)", s.replication_bytes);
  c("promotions_total", "Shards taken up as primary (failover, move, spreading back)",
    s.promotions);
  c("fenced_refusals_total", "Requests refused because the coordinator lease had lapsed",
    s.fenced_refusals);
  c("backups_removed_total", "Backups removed from led shards after a failed or late replication",
    s.backups_removed);
  w.Gauge("asymnvm_kv_lease_age_seconds",
          "Since the coordinator last confirmed this server's shard map (0: no lease)",
          static_cast<double>(s.lease_age_ms) / 1000.0);
  g("shards_led", "Shards this server leads as primary", s.led_shards.size());
  for (const auto& [shard, synced] : s.led_shards) {
    w.Gauge("asymnvm_kv_synced_backups", "Synced backups of a shard this server leads",
            static_cast<double>(synced), {{"shard", std::to_string(shard)}});
  }
  c("rdmp_reserved_total", "Server-bypass slots reserved", s.rdmp_reserved);
  c("rdmp_published_total", "Server-bypass slots published", s.rdmp_published);
  c("rdmp_revoked_total", "Server-bypass connections revoked", s.rdmp_revoked);
  server.request_metrics().Write(w, "asymnvm_kv");
  if (gateway != nullptr) {
    const kv::resp::GatewayState& st = gateway->state();
    w.Gauge("asymnvm_resp_connected_clients", "Redis clients connected now",
            static_cast<double>(st.connected_clients.load()));
    w.Counter("asymnvm_resp_connections_total", "Redis connections accepted",
              static_cast<double>(st.total_connections.load()));
    w.Counter("asymnvm_resp_rejected_connections_total", "Redis connections refused (maxclients)",
              static_cast<double>(st.rejected_connections.load()));
    w.Counter("asymnvm_resp_fast_path_commands_total",
              "Commands run by a gateway loop on this server's own shards",
              static_cast<double>(st.fast_path_commands.load()));
    w.Counter("asymnvm_resp_fast_path_commits_total", "Group commits of the fast path",
              static_cast<double>(st.fast_path_commits.load()));
    const auto& table = kv::resp::CommandTable();
    // INFO commandstats' counters (one place): run calls plus calls refused before running.
    for (size_t i = 0; i < table.size() && i < kv::resp::GatewayState::kMaxCommands; i++) {
      const auto& cs = st.command_stats[i];
      const int64_t n =
          cs.calls.load(std::memory_order_relaxed) + cs.rejected.load(std::memory_order_relaxed);
      if (n == 0) continue;  // ~200 commands: only those used
      w.Counter("asymnvm_resp_commands_total", "Redis commands called, by name",
                static_cast<double>(n), {{"command", std::string(table[i].name)}});
    }
    w.Counter("asymnvm_resp_commands_all_total", "Redis commands processed (all names)",
              static_cast<double>(st.total_commands.load()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"asymnvm-kv: Rowan-KV server (log-structured PM key-value store)"};
  app.set_config("--config", "", "read options from a TOML/INI file (key = value)");
  kv::ServerOptions o;
  std::string size_text = "256M", segment_text = "4M", pm_mode = "auto", log_level = "info";
  std::string coord_uri, cluster = "default";
  uint32_t handshake_ms = 5000;
  int resp_port = 6379, resp_threads = 1, resp_workers = 16, resp_kv_clients = 8;
  std::string resp_bind = "127.0.0.1", resp_fast_path = "on";
  app.add_option("--pool", o.pool_path, "pool file (created when missing)")->required();
  app.add_option("--size", size_text, "pool size when creating it (K/M/G suffixes)")
      ->capture_default_str();
  app.add_option("--listen", o.listen_address, "request (Ordered Queue) address; port 0 = any")
      ->capture_default_str();
  app.add_option("--workers", o.workers, "worker threads, one t-log each (new pools)")
      ->check(CLI::Range(1u, 32u))
      ->capture_default_str();
  std::string oq_policy = "oq";
  app.add_option(
         "--oq-policy", oq_policy,
         "when a nilext PUT commits: oq (the NIC's acknowledgement, default) | rawrpc (after "
         "execution) | deferred (reply before execution) — the JUNE BERRY baselines")
      ->check(CLI::IsMember({"oq", "rawrpc", "deferred"}));
  std::string replication = "rowan";
  app.add_option("--replication", replication,
                 "how primaries replicate PUTs to backups (new pools; every server of a cluster "
                 "the same): rowan (default) | rpc | rwrite | batch | share — the Rowan paper's "
                 "baselines (doc/kv.md)")
      ->check(CLI::IsMember({"rowan", "rpc", "rwrite", "batch", "share"}))
      ->capture_default_str();
  app.add_option("--rlog-listen", o.remote_log_listen,
                 "remote-log endpoint of the baselines (default: derived from --listen)");
  app.add_option("--shards", o.shards, "shards (new pools)")
      ->check(CLI::Range(1u, 65536u))
      ->capture_default_str();
  app.add_option("--segment-size", segment_text, "log segment size (new pools)")
      ->capture_default_str();
  app.add_option("--pm-mode", pm_mode, "PM persistence mode")
      ->check(CLI::IsMember({"auto", "msync", "flush"}))
      ->capture_default_str();
  app.add_option("--gc-threshold", o.gc_threshold, "clean segments whose live fraction is below")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  app.add_option("--fabric", o.fabric.provider, "fabric provider")
      ->check(CLI::IsMember({"soft", "shm", "verbs", "auto"}))
      ->capture_default_str();
  app.add_option("--secret-file", o.fabric.secret_file,
                 "file holding the cluster secret (default: ASYMNVM_SECRET_FILE, ASYMNVM_SECRET, "
                 "or the built-in one, loopback only)");
  fabric::AddFabricTlsFlags(app, &o.fabric);
  app.add_option("--handshake-timeout-ms", handshake_ms, "per-peer connection set-up deadline")
      ->check(CLI::Range(1u, 600000u))
      ->capture_default_str();
  app.add_option("--coord", coord_uri,
                 "coordinator URI (dir:PATH | zk:HOST:PORT[,...][/chroot] | none); default "
                 "dir:<pool dir>/coord");
  app.add_option("--cluster", cluster, "cluster name under the coordinator")->capture_default_str();
  std::string blog_text = "16M";
  bool xpline = false;
  app.add_flag("--xpline", xpline,
               "model the XPLine write-combining buffer over every persisted range and print the "
               "DLWA in the stop line");
  std::string rdmp = "on";
  app.add_option("--rdmp", rdmp, "RDMP server-bypass for large values: on|off")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  app.add_option("--rdmp-listen", o.rdmp_listen,
                 "server-bypass endpoint (default: derived from --listen)");
  app.add_option("--oq-worker-listen", o.oq_worker_listen,
                 "addresses of the request queue's workers beyond the first (one per extra "
                 "worker; default: port 0 of --listen's host, which a firewall cannot name)");
  int64_t rdmp_timeout_ms = 10000;
  app.add_option("--rdmp-reservation-timeout-ms", rdmp_timeout_ms,
                 "a server-bypass slot not published within this revokes its client's connection")
      ->check(CLI::Range(int64_t{10}, int64_t{3600000}))
      ->capture_default_str();
  o.rowan_listen.clear();
  app.add_option("--log-listen", o.rowan_listen,
                 "b-log (Rowan receiver) address for replication; default: derived from --listen");
  app.add_option("--blog-size", blog_text, "b-log area size (new pools)")->capture_default_str();
  app.add_option("--rf", o.rf, "replication factor of a new cluster (0: min(3, servers))")
      ->check(CLI::Range(0u, 16u))
      ->capture_default_str();
  auto* initial_opt = app.add_option("--initial-servers", o.initial_servers,
                                     "the first shard map waits for this many servers (default: "
                                     "--rf when given, else 1)")
                          ->check(CLI::Range(1u, 1024u));
  app.add_option("--rebalance-threshold", o.rebalance.threshold,
                 "resharding: move a shard off a server whose load exceeds this x the mean "
                 "(> 1; 0 = off)")
      ->capture_default_str();
  app.add_option("--rebalance-period-ms", o.rebalance.period_ms,
                 "resharding: statistics period and decision interval (10 .. 3600000)")
      ->capture_default_str();
  app.add_option("--rebalance-cooldown-ms", o.rebalance.cooldown_ms,
                 "resharding: a moved shard stays put this long (0: 10 periods)")
      ->capture_default_str();
  app.add_option("--rebalance-min-ops", o.rebalance.min_ops_per_sec,
                 "resharding: no move below this cluster-wide request rate (per second)")
      ->capture_default_str();
  app.add_option("--rebalance-move-timeout-ms", o.rebalance.move_timeout_ms,
                 "resharding: a move not committed by then is rolled back")
      ->capture_default_str();
  app.add_option("--rebalance-swap-delay-ms", o.rebalance.swap_delay_ms,
                 "resharding (tests): the primary waits this long after its target is synced")
      ->capture_default_str();
  app.add_option("--rejoin-backoff-ms", o.rejoin_backoff_ms,
                 "a backup its primary removed while alive (failed replication) rejoins that "
                 "shard after this delay, doubled per removal up to 8x; 0 = at once")
      ->check(CLI::Range(0u, 3600000u))
      ->capture_default_str();
  app.add_option("--backup-timeout-ms", o.backup_timeout_ms,
                 "a backup that has not acknowledged a write within this leaves the shard "
                 "(doc/kv.md §Failure model)")
      ->check(CLI::Range(1u, 600000u))
      ->capture_default_str();
  app.add_option("--session-timeout-ms", o.session_timeout_ms,
                 "ZooKeeper session timeout asked for (the lease is 2/3 of it)")
      ->check(CLI::Range(400u, 600000u))
      ->capture_default_str();
  bool no_spread = false;
  app.add_flag("--no-spread-primaries", no_spread,
               "do not move primaries back onto returning servers");
  std::string metrics_listen;
  app.add_option("--metrics-listen", metrics_listen,
                 "serve Prometheus metrics (GET /metrics) at HOST:PORT; off unless given "
                 "(doc/operations.md)");
  app.add_option("--log-level", log_level, "debug|info|warn|error|off")
      ->check(CLI::IsMember({"debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  std::string log_format = "text";
  AddLogFormatOption(app, &log_format);
  app.add_option("--resp-port", resp_port,
                 "Redis (RESP) gateway port; taken: an ephemeral one (printed); 0 = ephemeral; "
                 "-1 = no gateway (doc/resp.md)")
      ->check(CLI::Range(-1, 65535))
      ->capture_default_str();
  app.add_option("--resp-bind", resp_bind, "Redis gateway bind address (IPv4)")
      ->capture_default_str();
  app.add_option("--resp-workers", resp_workers,
                 "Redis gateway threads running commands against the store (they block on it)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--resp-kv-clients", resp_kv_clients,
                 "KV clients the gateway's workers share round-robin")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  // One loop by default: with the fast path a loop pass is one group commit, and one loop
  // batches every connection into it (as Redis's single thread does); two loops split the
  // connections into smaller commits (doc/resp.md §Measured).
  app.add_option("--resp-threads", resp_threads, "Redis gateway event-loop threads")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  app.add_option("--resp-fast-path", resp_fast_path,
                 "on: the gateway executes commands on this server's own shards itself "
                 "(doc/resp.md §Fast path); off: every command through the KV client")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  // TLS on the Redis gateway, as Redis's options (doc/resp.md §TLS).
  int tls_port = -1;
  kv::resp::TlsOptions tls_options;
  std::string tls_auth_clients = "yes";
  app.add_option("--tls-port", tls_port,
                 "Redis gateway TLS port, in addition to --resp-port (-1 disables that one); "
                 "0 = ephemeral; taken: an ephemeral one (printed as \"tls HOST:PORT\"); off "
                 "unless given")
      ->check(CLI::Range(0, 65535));
  app.add_option("--tls-cert-file", tls_options.cert_file,
                 "PEM certificate (chain) of the TLS port");
  app.add_option("--tls-key-file", tls_options.key_file, "PEM private key (unencrypted) of it");
  app.add_option("--tls-ca-cert-file", tls_options.ca_cert_file,
                 "PEM CA bundle that client certificates must chain to");
  app.add_option("--tls-auth-clients", tls_auth_clients,
                 "yes: clients need a certificate signed by the CA; no: none asked for; optional: "
                 "verified if presented")
      ->check(CLI::IsMember({"yes", "no", "optional"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  auto usage = [](const std::string& m) {
    std::cerr << "asymnvm-kv: " << m << "\n";
    return 2;
  };
  o.spread_primaries = !no_spread;
  o.on_fenced = [](const Status&) {
    // A new session would make this server a new member, which a restart does properly: it
    // rejoins as a backup and is caught up (doc/kv.md §Fencing; systemd's Restart= does it).
    LOG_ERROR("kv", "exiting (status 5) so that a restart rejoins this server as a backup");
    std::fflush(nullptr);
    std::_Exit(5);
  };
  o.oq_policy = oq::ParsePolicy(oq_policy).value();               // checked by CLI11
  o.replication = kv::ParseReplicationMode(replication).value();  // checked by CLI11
  auto size = pm::ParseSize(size_text);
  if (!size.ok()) return usage("--size: " + size.status().message());
  o.pool_size = *size;
  auto seg = pm::ParseSize(segment_text);
  if (!seg.ok() || *seg % 4096 != 0 || *seg > (1u << 30)) {
    return usage("--segment-size must be a multiple of 4 KiB up to 1G");
  }
  o.segment_size = static_cast<uint32_t>(*seg);
  auto blog = pm::ParseSize(blog_text);
  if (!blog.ok() || *blog % 4096 != 0 || (*blog != 0 && *blog < (4u << 20))) {
    return usage("--blog-size must be 0 or a multiple of 4 KiB of at least 4M");
  }
  o.blog_size = *blog;
  auto mode = pm::ParsePersistMode(pm_mode);
  if (!mode.ok()) return usage(mode.status().message());
  o.pm_mode = *mode;
  if (coord::ValidatePath("/" + cluster).code() != StatusCode::kOk) {
    return usage("--cluster must be 1..200 characters of [A-Za-z0-9_.:-]");
  }
  if (Status rb = o.rebalance.Validate(); !rb.ok()) {
    return usage("--rebalance-*: " + rb.message());
  }
  o.fabric.handshake_timeout = std::chrono::milliseconds(handshake_ms);
  // The TLS context first: a bad certificate or key stops the start before the pool opens.
  std::shared_ptr<const kv::resp::TlsContext> tls;
  if (tls_port >= 0) {
    if (tls_options.cert_file.empty() || tls_options.key_file.empty()) {
      return usage("--tls-port needs --tls-cert-file and --tls-key-file");
    }
    tls_options.auth_clients = kv::resp::ParseTlsAuthClients(tls_auth_clients).value();  // checked
    auto ctx = kv::resp::TlsContext::Create(tls_options);
    if (!ctx.ok()) {
      std::cerr << "asymnvm-kv: TLS: " << ctx.status().message() << "\n";
      return 1;
    }
    tls = std::move(ctx).value();
  }
  LogLevel level;
  ParseLogLevel(log_level, &level);
  SetLogLevel(level);
  ApplyLogFormat(log_format);
  {
    auto secret = fabric::ResolveClusterSecret(o.fabric);
    if (!secret.ok()) {
      std::cerr << "asymnvm-kv: " << secret.status().message() << "\n";
      return 1;
    }
    Status st = fabric::CheckListenSecret(o.listen_address, *secret);
    if (!st.ok()) {
      std::cerr << "asymnvm-kv: " << st.message() << "\n";
      return 1;
    }
  }

  std::unique_ptr<metrics::Exposer> exposer;
  if (!metrics_listen.empty()) {
    auto e = metrics::Exposer::Start(metrics_listen);
    if (!e.ok()) {
      std::cerr << "asymnvm-kv: --metrics-listen: " << e.status().message() << "\n";
      return 1;
    }
    exposer = std::move(e).value();
    exposer->Add([](metrics::Writer& w) { metrics::WriteProcessInfo(w, "kv"); });
  }

  sigset_t stop_set;
  sigemptyset(&stop_set);
  sigaddset(&stop_set, SIGTERM);
  sigaddset(&stop_set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_set, nullptr);

  if (coord_uri != "none") {
    if (coord_uri.empty()) {
      std::filesystem::path dir = std::filesystem::absolute(o.pool_path).parent_path();
      coord_uri = "dir:" + (dir / "coord").string();
    }
    o.coordinator = coord_uri;
  }
  o.cluster = cluster;
  // The replication factor is fixed when the first map is made: with --rf N it waits for N.
  if (initial_opt->count() == 0 && o.rf > 0) o.initial_servers = o.rf;
  if (o.rowan_listen.empty()) o.rowan_listen = kv::DerivedAddress(o.listen_address, "blog");
  o.rdmp = rdmp == "on";
  o.rdmp_reservation_timeout = std::chrono::milliseconds(rdmp_timeout_ms);
  pm::XPLineModel model;
  if (xpline) o.observer = &model;
  auto server = kv::Server::Start(o);
  if (!server.ok()) {
    std::cerr << "asymnvm-kv: " << server.status().ToString() << "\n";
    return 1;
  }
  std::unique_ptr<kv::resp::Server> gateway;
  if (resp_port >= 0 || tls) {
    kv::resp::KvGatewayOptions g;
    g.client.fabric = o.fabric;
    if (!o.coordinator.empty()) {
      g.client.coordinator = o.coordinator;  // routes every key to its shard's primary
      g.client.cluster = cluster;
    } else {
      g.client.servers = {(*server)->address()};
    }
    g.server.bind_address = resp_bind;
    g.server.listen_plain = resp_port >= 0;
    g.server.port = static_cast<uint16_t>(std::max(resp_port, 0));
    g.server.tls = tls;
    g.server.tls_port = static_cast<uint16_t>(std::max(tls_port, 0));
    g.server.loop_threads = resp_threads;
    g.server.workers = resp_workers;
    g.kv_clients = resp_kv_clients;
    // The fast path onto this server's own shards (doc/resp.md §Fast path).
    if (resp_fast_path == "on") g.local = server->get();
    auto secret = fabric::ResolveClusterSecret(o.fabric);
    // A configured cluster secret is the AUTH password; the built-in one (loopback only) is not.
    if (secret.ok() && *secret != fabric::kDefaultClusterSecret) g.server.cluster_secret = *secret;
    if (g.server.cluster_secret.empty() && resp_bind.rfind("127.", 0) != 0) {
      std::cerr << "asymnvm-kv: --resp-bind " << resp_bind
                << " is not loopback: configure a cluster secret (--secret-file) first\n";
      (*server)->Stop();
      return 1;
    }
    auto gw = kv::resp::StartKvGateway(std::move(g));
    if (!gw.ok()) {
      std::cerr << "asymnvm-kv: " << gw.status().ToString() << "\n";
      (*server)->Stop();
      return 1;
    }
    gateway = std::move(gw).value();
  }
  if (exposer) {
    const kv::Server* sp = server->get();
    const kv::resp::Server* gp = gateway.get();
    exposer->Add([sp, gp](metrics::Writer& w) { WriteKvMetrics(*sp, gp, w); });
  }
  // One write: a parent that reads only the first line and closes the pipe must not make a
  // later line raise SIGPIPE.
  std::cout << "listening " << (*server)->address() << "\nlog " << (*server)->rowan_address()
            << ((*server)->rdmp_address().empty() ? "" : "\nrdmp " + (*server)->rdmp_address())
            << (gateway && resp_port >= 0
                    ? "\nresp " + resp_bind + ":" + std::to_string(gateway->port())
                    : "")
            << (gateway && tls ? "\ntls " + resp_bind + ":" + std::to_string(gateway->tls_port())
                               : "")
            << (exposer ? "\nmetrics " + exposer->address() : "") << std::endl;
  NotifyReady("serving " + o.pool_path + " at " + (*server)->address());
  int sig = 0;
  sigwait(&stop_set, &sig);
  NotifyStopping();
  exposer.reset();  // no scrape reads the server while it stops
  if (gateway) gateway->Stop();
  (*server)->Stop();
  auto st = (*server)->stats();
  std::cerr << "asymnvm-kv: stopped (signal " << sig << "): " << st.requests << " requests, "
            << st.rejected << " rejected, " << st.store.keys << " keys, "
            << st.store.gc_segments_freed << " segments cleaned, " << st.pm_syncs << " pm syncs, "
            << st.replicated_writes << " replicated writes, " << st.replication_round_trips
            << " replication round trips, " << st.replication_bytes << " replication bytes";
  if (xpline) {
    model.Finish();
    std::cerr << ", dlwa " << model.dlwa() << " (requested " << model.requested_bytes()
              << " B, media " << model.media_bytes() << " B)";
  }
  std::cerr << "\n";
  return 0;
}
