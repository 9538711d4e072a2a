// asymnvm-oq-server: the OQ demo key-value server (doc/oq.md §Demo server).
//
//   asymnvm-oq-server [--listen ADDR] [--workers N] [--policy oq|rawrpc|deferred]
//                     [--durable --pool PATH [--size BYTES] [--pm-mode auto|msync|flush]]
//                     [--buffer-size BYTES] [--buffers N]
//
// Prints the bound address (worker 0) as the first line of stdout, serves until SIGTERM/SIGINT,
// then prints a stats line to stderr and exits 0. Bad arguments: exit 2; start-up failure: exit 1.
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>

#include "asymnvm/fabric.h"
#include "asymnvm/pm.h"
#include "common/logging.h"
#include "fabric/oq/kv_store.h"
#include "fabric/oq/oq.h"

using namespace asymnvm;

int main(int argc, char** argv) {
  CLI::App app{"asymnvm-oq-server: Ordered Queue demo key-value server"};
  std::string listen = "tcp://127.0.0.1:0", policy = "oq", pool_path, size_text = "64M";
  std::string buffer_size_text = "64K", pm_mode = "auto", log_level = "info";
  uint32_t workers = 1, buffers = 16;
  bool durable = false;
  app.add_option("--listen", listen, "listen address (worker 0)")->capture_default_str();
  app.add_option("--workers", workers, "worker threads")
      ->check(CLI::Range(1u, oq::kMaxWorkers))
      ->capture_default_str();
  app.add_option("--policy", policy, "execution policy")
      ->check(CLI::IsMember({"oq", "rawrpc", "deferred"}))
      ->capture_default_str();
  app.add_flag("--durable", durable, "receive buffers and the table in a PM pool");
  app.add_option("--pool", pool_path, "pool file (durable)");
  app.add_option("--size", size_text, "pool size when creating it")->capture_default_str();
  app.add_option("--pm-mode", pm_mode, "PM persistence mode")
      ->check(CLI::IsMember({"auto", "msync", "flush"}))
      ->capture_default_str();
  app.add_option("--buffer-size", buffer_size_text, "bytes per receive buffer")
      ->capture_default_str();
  app.add_option("--buffers", buffers, "receive buffers per worker")
      ->check(CLI::Range(2u, 65536u))
      ->capture_default_str();
  fabric::FabricOptions fo;
  uint32_t handshake_ms = 5000;
  app.add_option("--secret-file", fo.secret_file,
                 "file holding the cluster secret (default: ASYMNVM_SECRET_FILE, ASYMNVM_SECRET, "
                 "or the built-in one, loopback only)");
  app.add_option("--handshake-timeout-ms", handshake_ms, "per-peer connection set-up deadline")
      ->check(CLI::Range(1u, 600000u))
      ->capture_default_str();
  app.add_option("--max-pending-handshakes", fo.max_pending_handshakes,
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
  auto fail_args = [](const std::string& m) {
    std::cerr << "asymnvm-oq-server: " << m << "\n";
    return 2;
  };
  auto pol = oq::ParsePolicy(policy);
  if (!pol.ok()) return fail_args(pol.status().message());
  auto bsize = pm::ParseSize(buffer_size_text);
  if (!bsize.ok()) return fail_args("--buffer-size: " + bsize.status().message());
  if (*bsize < 4096 || *bsize > (1u << 20) || *bsize % 4096 != 0) {
    return fail_args("--buffer-size must be a multiple of 4 KiB in 4K..1M");
  }
  auto psize = pm::ParseSize(size_text);
  if (!psize.ok()) return fail_args("--size: " + psize.status().message());
  auto mode = pm::ParsePersistMode(pm_mode);
  if (!mode.ok()) return fail_args("--pm-mode: " + mode.status().message());
  if (durable && pool_path.empty()) return fail_args("--durable needs --pool PATH");
  if (!durable && !pool_path.empty()) return fail_args("--pool needs --durable");
  LogLevel level;
  if (ParseLogLevel(log_level, &level)) SetLogLevel(level);
  fo.handshake_timeout = std::chrono::milliseconds(handshake_ms);
  {
    auto secret = fabric::ResolveClusterSecret(fo);
    if (!secret.ok()) {
      std::cerr << "asymnvm-oq-server: " << secret.status().message() << "\n";
      return 1;
    }
    Status st = fabric::CheckListenSecret(listen, *secret);
    if (!st.ok()) {
      std::cerr << "asymnvm-oq-server: " << st.message() << "\n";
      return 1;
    }
  }

  // Block the stop signals before any thread starts, then sigwait for them.
  sigset_t stop_set;
  sigemptyset(&stop_set);
  sigaddset(&stop_set, SIGTERM);
  sigaddset(&stop_set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_set, nullptr);

  auto fabric = fabric::Fabric::Open(fo);
  if (!fabric.ok()) {
    std::cerr << "asymnvm-oq-server: " << fabric.status().ToString() << "\n";
    return 1;
  }
  auto pd = (*fabric)->AllocPd();
  if (!pd.ok()) {
    std::cerr << "asymnvm-oq-server: " << pd.status().ToString() << "\n";
    return 1;
  }
  oq::ServerOptions so;
  so.fabric = fabric->get();
  so.pd = pd->get();
  so.listen_address = listen;
  so.workers = workers;
  so.buffers_per_worker = buffers;
  so.buffer_size = static_cast<uint32_t>(*bsize);
  so.max_request = std::min<uint32_t>(so.buffer_size, 8 * 1024);
  so.policy = *pol;
  std::unique_ptr<pm::Pool> pool;
  std::unique_ptr<oq::KvStore> kv;
  if (durable) {
    pm::PoolOptions po;
    po.mode = *mode;
    po.layout = "asymnvm-oq";
    auto p = pm::Pool::OpenOrCreate(pool_path, *psize, po);
    if (!p.ok()) {
      std::cerr << "asymnvm-oq-server: " << p.status().ToString() << "\n";
      return 1;
    }
    pool = std::move(p).value();
    size_t oq_bytes = oq::DurableAreaSize(workers, buffers, so.buffer_size);
    oq_bytes = (oq_bytes + 4095) / 4096 * 4096;
    if (oq_bytes + 64 * 1024 > pool->user_size()) {
      std::cerr << "asymnvm-oq-server: pool of " << pool->size() << " bytes too small for "
                << oq_bytes << " bytes of receive buffers plus the table\n";
      return 2;
    }
    so.durable = true;
    so.pm_area = pool->user_base();
    so.pm_area_size = oq_bytes;
    so.persister = pool->persister();
    auto k = oq::KvStore::OpenDurable(pool->user_base() + oq_bytes, pool->user_size() - oq_bytes,
                                      pool->persister());
    if (!k.ok()) {
      std::cerr << "asymnvm-oq-server: " << k.status().ToString() << "\n";
      return 1;
    }
    kv = std::move(k).value();
  } else {
    kv = oq::KvStore::OpenDram();
  }
  auto server = oq::Server::Start(so, kv->handler());
  if (!server.ok()) {
    std::cerr << "asymnvm-oq-server: " << server.status().ToString() << "\n";
    return 1;
  }
  std::cout << (*server)->address() << std::endl;
  int sig = 0;
  sigwait(&stop_set, &sig);
  (*server)->Stop();
  auto st = (*server)->stats();
  std::cerr << "asymnvm-oq-server: stopped (signal " << sig << "): executed " << st.executed
            << ", connections " << st.connections << ", rnr " << st.rnr_seen << ", recovery skips "
            << kv->skipped_reexecutions() << "\n";
  server->reset();
  return 0;
}
