// asymnvm-backend: the AsymNVM back-end daemon (doc/backend.md).
//
//   asymnvm-backend --pool PATH [--size SIZE] [--listen ADDR] [--log-listen ADDR]
//                   [--fabric soft|verbs|auto] [--pm-mode auto|msync|flush]
//                   [--secret-file PATH] [--handshake-timeout-ms MS] [--max-pending-handshakes N]
//                   [--log-level L] [--config FILE]
//
// The cluster secret comes from --secret-file, else ASYMNVM_SECRET_FILE / ASYMNVM_SECRET, else the
// built-in default, which is only accepted for loopback listen addresses (doc/fabric.md).
//
// Prints "listening <oq address>" and "log <rowan address>" as the first two stdout lines, serves
// until SIGTERM/SIGINT, then stops cleanly (everything acknowledged is already durable) and exits 0.
// Exit codes: 0 clean stop, 1 start-up failure (the message names the pool and the cause: not a
// pool, corrupt, too small, locked by another back-end; or the cluster secret: unreadable file,
// default secret on a non-loopback address), 2 bad command line.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <iostream>

#include "asymnvm/pm.h"
#include "backend/backend.h"
#include "common/logging.h"

using namespace asymnvm;

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
      ->check(CLI::IsMember({"soft", "verbs", "auto"}))
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
  app.add_option("--handshake-timeout-ms", handshake_ms, "per-peer connection set-up deadline")
      ->check(CLI::Range(1u, 600000u))
      ->capture_default_str();
  app.add_option("--max-pending-handshakes", o.fabric.max_pending_handshakes,
                 "connection set-ups in progress at once (beyond: the oldest is closed)")
      ->check(CLI::Range(1u, 65536u))
      ->capture_default_str();
  app.add_option("--log-level", log_level, "debug|info|warn|error|off")
      ->check(CLI::IsMember({"debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
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

  sigset_t stop_set;
  sigemptyset(&stop_set);
  sigaddset(&stop_set, SIGTERM);
  sigaddset(&stop_set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_set, nullptr);

  auto be = backend::Backend::Start(o);
  if (!be.ok()) {
    std::cerr << "asymnvm-backend: " << be.status().ToString() << "\n";
    return 1;
  }
  std::cout << "listening " << (*be)->address() << "\nlog " << (*be)->log_address() << std::endl;
  LOG_INFO("backend", "serving " << o.pool_path << ": " << (*be)->layout().Describe());
  int sig = 0;
  sigwait(&stop_set, &sig);
  (*be)->Stop();
  auto st = (*be)->stats();
  std::cerr << "asymnvm-backend: stopped (signal " << sig << "): " << st.txns_applied
            << " txns applied, " << st.txns_rejected << " rejected, " << st.requests
            << " requests, " << st.cpu_seconds << " s CPU, " << st.pm_syncs << " pm syncs ("
            << (st.redo ? "redo log, " : "direct, ") << st.checkpoints << " checkpoints)\n";
  return 0;
}
