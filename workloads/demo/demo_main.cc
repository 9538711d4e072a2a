// asymnvm-demo: flags → DemoOptions → RunDemo (workloads/demo/demo.h). Exit codes: 0 success,
// 1 the demo failed (message on stderr), 2 bad command line.
#include <CLI/CLI.hpp>
#include <iostream>

#include "asymnvm/pm.h"
#include "common/logging.h"
#include "workloads/demo/demo.h"

int main(int argc, char** argv) {
  asymnvm::demo::DemoOptions o;
  std::string pool_size = "64M";
  std::string log_level = "warn";
  CLI::App app{
      "asymnvm-demo: a software-NIC back-end on a PM pool in the data directory; front-end sender "
      "threads SEND+flush records into its multi-packet SRQ (a proto Rowan b-log) and drive "
      "one-sided WRITE/READ/CAS/FAA traffic; prints what happened.",
      "asymnvm-demo"};
  app.add_option("--data-dir", o.data_dir, "Directory of the PM pool file (created if missing)")
      ->capture_default_str();
  app.add_option("--fabric", o.fabric, "Fabric provider")
      ->check(CLI::IsMember({"soft", "shm", "verbs", "auto"}))
      ->capture_default_str();
  app.add_option("--transport", o.transport, "soft transport (tcp on 127.0.0.1:0)")
      ->check(CLI::IsMember({"tcp", "unix", "inproc"}))
      ->capture_default_str();
  app.add_option("--records", o.records, "Records per sender")
      ->check(CLI::Range(1u, 1000000u))
      ->capture_default_str();
  app.add_option("--senders", o.senders, "Sender threads (one connection each)")
      ->check(CLI::Range(1u, 64u))
      ->capture_default_str();
  app.add_option("--pool-size", pool_size, "Pool size when creating it (e.g. 64M, 1G)")
      ->capture_default_str();
  app.add_option("--persist-mode", o.persist_mode,
                 "auto | msync | flush (see include/asymnvm/pm.h)")
      ->check(CLI::IsMember({"auto", "msync", "flush"}))
      ->capture_default_str();
  app.add_option("--seed", o.seed, "Seed for record sizes and payloads")->capture_default_str();
  app.add_option("--log-level", log_level, "debug|info|warn|error|off")
      ->check(CLI::IsMember({"debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  auto size = asymnvm::pm::ParseSize(pool_size);
  if (!size.ok()) {
    std::cerr << "asymnvm-demo: --pool-size: " << size.status().message() << "\n";
    return 2;
  }
  o.pool_size = *size;
  asymnvm::LogLevel level;
  if (asymnvm::ParseLogLevel(log_level, &level)) asymnvm::SetLogLevel(level);

  asymnvm::Status st = asymnvm::demo::RunDemo(o, std::cout);
  if (!st.ok()) {
    std::cerr << "asymnvm-demo: " << st.ToString() << "\n";
    return 1;
  }
  return 0;
}
