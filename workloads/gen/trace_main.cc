// asymnvm-trace: Twitter cache traces (doc/workloads.md "Twitter cache traces").
//
//   asymnvm-trace gen --cluster 12|19|27|31 [--ops N] [--keys K] [--clients C] [--seed S] [-o FILE]
//   asymnvm-trace stat FILE... [--json]
//
// gen writes a synthetic trace with the cluster's published statistics in the public format
// (stdout by default); stat reads traces in that format (real or generated) and prints what they
// hold: requests, the operation mix, mean key and value sizes, distinct keys, clients, duration and
// the fitted Zipf exponent. Exit codes: 0 ok; 1 failure (unreadable or malformed trace, naming
// FILE:LINE); 2 bad command line.
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "workloads/gen/twitter_trace.h"

using namespace asymnvm;
using namespace asymnvm::workloads;

int main(int argc, char** argv) {
  CLI::App app{
      "asymnvm-trace: Twitter cache traces — generate (statistically similar to the clusters "
      "JUNE BERRY uses) and inspect"};
  app.footer("Exit codes: 0 ok; 1 failure; 2 bad command line.");
  app.require_subcommand(1);
  int cluster = 0;
  uint64_t ops = 10000, keys = 100000, clients = 16, seed = 1;
  std::string out;
  auto* gen = app.add_subcommand("gen", "write a synthetic trace for a cluster");
  gen->add_option("--cluster", cluster, "12 | 19 | 27 | 31")
      ->required()
      ->check(CLI::IsMember({12, 19, 27, 31}));
  gen->add_option("--ops", ops, "requests (default 10000)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  gen->add_option("--keys", keys, "key space (default 100000)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{100000000}));
  gen->add_option("--clients", clients, "client ids (default 16)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20));
  gen->add_option("--seed", seed, "seed (default 1)");
  gen->add_option("-o,--output", out, "output file (default stdout)");
  std::vector<std::string> files;
  bool json = false;
  auto* stat = app.add_subcommand("stat", "statistics of traces in the public format");
  stat->add_option("files", files, "trace files")->required();
  stat->add_flag("--json", json, "one JSON object per file");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (*gen) {
    auto p = TwitterCluster(cluster);
    if (!p.ok()) {
      std::cerr << "asymnvm-trace: " << p.status().message() << "\n";
      return 2;
    }
    auto g = TraceGenerator::Create(*p, keys, clients, seed);
    if (!g.ok()) {
      std::cerr << "asymnvm-trace: " << g.status().message() << "\n";
      return 2;
    }
    std::ofstream file;
    if (!out.empty()) {
      file.open(out);
      if (!file) {
        std::cerr << "asymnvm-trace: cannot write " << out << "\n";
        return 1;
      }
    }
    std::ostream& o = out.empty() ? std::cout : file;
    for (uint64_t i = 0; i < ops; i++) o << FormatTraceLine((*g)->Next()) << "\n";
    o.flush();
    if (!o) {
      std::cerr << "asymnvm-trace: write failed\n";
      return 1;
    }
    return 0;
  }
  int rc = 0;
  for (const auto& f : files) {
    auto r = TraceReader::Open(f);
    if (!r.ok()) {
      std::cerr << "asymnvm-trace: " << r.status().message() << "\n";
      rc = 1;
      continue;
    }
    TraceStatsBuilder b;
    TraceRecord rec;
    Status bad = Status::Ok();
    for (;;) {
      auto more = (*r)->Next(&rec);
      if (!more.ok()) {
        bad = more.status();
        break;
      }
      if (!*more) break;
      b.Add(rec);
    }
    if (!bad.ok()) {
      std::cerr << "asymnvm-trace: " << bad.message() << "\n";
      rc = 1;
      continue;
    }
    const TraceStats s = b.Finish();
    nlohmann::json ops_json = nlohmann::json::object();
    for (int i = 0; i < kTraceOps; i++) {
      if (s.per_op[i]) ops_json[TraceOpName(static_cast<TraceOp>(i))] = s.per_op[i];
    }
    if (json) {
      std::cout << nlohmann::json{{"file", f},
                                  {"requests", s.requests},
                                  {"ops", ops_json},
                                  {"write_ratio", s.write_ratio()},
                                  {"mean_key_size", s.mean_key_size},
                                  {"mean_value_size", s.mean_value_size},
                                  {"distinct_keys", s.distinct_keys},
                                  {"clients", s.clients},
                                  {"duration_s", s.duration_s},
                                  {"zipf_alpha", s.zipf_alpha}}
                       .dump()
                << "\n";
    } else {
      std::cout << f << ": " << s.requests << " requests (" << ops_json.dump() << "), writes "
                << s.write_ratio() * 100 << " %, key " << s.mean_key_size << " B, value "
                << s.mean_value_size << " B, " << s.distinct_keys << " distinct keys, " << s.clients
                << " clients, " << s.duration_s << " s, Zipf alpha " << s.zipf_alpha << "\n";
    }
  }
  return rc;
}
