// asymnvm-bench: a registry of benchmark suites sharing one command line, one report format and
// one set of outputs (human table, JSON per doc/tools.md, CSV).
//
//   asymnvm-bench SUITE [suite options] [--quick] [--duration S] [--ops N] [--seed N]
//                 [--json FILE] [--csv FILE] [--log-level L]
//
// A suite is a class deriving from Suite, registered once with ASYMNVM_REGISTER_SUITE in its own
// .cc file (compiled into the asymnvm-bench executable, so registration is never dropped by the
// linker). It declares its options on its CLI11 subcommand and fills a Report: one record per
// variant × configuration with `variant`, `config`, `ops_per_sec`, `p50_us`, `p99_us`,
// `round_trips_per_op`, `bytes_per_op`, plus its own fields.
//
// Exit codes: 0 success, 1 the run failed (the message says why), 2 bad command line.
// Thread safety: the registry is filled during static initialization and read-only afterwards.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "asymnvm/status.h"

namespace CLI {
class App;
}

namespace asymnvm::bench {

using Json = nlohmann::ordered_json;

// A back-end's (or mirror's) status JSON: kStatus over the OQ, fetched as `asymnvm-ctl status`
// does (tools::FetchStatus), 10 s timeout.
Result<Json> DaemonStatus(const std::string& address);

inline constexpr int kExitOk = 0;
inline constexpr int kExitRunFailed = 1;
inline constexpr int kExitUsage = 2;

// Options every suite accepts.
struct CommonOptions {
  std::string json_path;  // --json FILE
  std::string csv_path;   // --csv FILE
  bool quick = false;     // --quick: the whole suite in well under a minute
  double duration_s = 0;  // --duration: seconds per measurement (0 = the suite's default)
  uint64_t ops = 0;       // --ops: cap on operations per measurement (0 = no cap)
  uint64_t seed = 42;     // --seed: every random choice derives from it
  std::string log_level = "warn";
};

// One extra table column: header and the top-level record field it shows.
struct Column {
  std::string header;
  std::string field;
  int precision = 2;
};

// What a suite produces. Records are JSON objects; the table and CSV are derived from them.
class Report {
 public:
  explicit Report(std::string suite);

  const std::string& suite() const { return suite_; }
  Json& machine() { return machine_; }
  // Suite-specific top-level fields (e.g. "summary"); written after "results".
  Json& extra() { return extra_; }
  void Add(Json record) { results_.push_back(std::move(record)); }
  const std::vector<Json>& results() const { return results_; }
  // Header lines printed above the table; note lines below it.
  void AddHeader(std::string line) { header_.push_back(std::move(line)); }
  void AddNote(std::string line) { notes_.push_back(std::move(line)); }
  void set_columns(std::vector<Column> extra_columns) { columns_ = std::move(extra_columns); }

  Json ToJson() const;
  void PrintTable(std::ostream& out) const;
  Status WriteJson(const std::string& path) const;
  Status WriteCsv(const std::string& path) const;

 private:
  std::string suite_;
  Json machine_ = Json::object();
  Json extra_ = Json::object();
  std::vector<Json> results_;
  std::vector<std::string> header_;
  std::vector<std::string> notes_;
  std::vector<Column> columns_;
};

class Suite {
 public:
  virtual ~Suite() = default;
  // Declares the suite's own options on its subcommand (bound to members of the suite).
  virtual void AddOptions(CLI::App* cmd) = 0;
  // Validates option combinations after parsing; kInvalidArgument → exit code 2.
  virtual Status Validate(const CommonOptions& common) { return Status::Ok(); }
  // Runs the measurements and fills `report` (machine, records, header/notes).
  virtual Status Run(const CommonOptions& common, Report* report) = 0;
};

struct SuiteInfo {
  std::string name;
  std::string description;
  std::function<std::unique_ptr<Suite>()> make;
};

class SuiteRegistry {
 public:
  static SuiteRegistry& Instance();
  bool Add(SuiteInfo info);
  const std::vector<SuiteInfo>& suites() const { return suites_; }

 private:
  std::vector<SuiteInfo> suites_;
};

// The whole command line: parse, run the chosen suite, print, write files. Returns the exit code.
int RunBenchCli(int argc, char** argv);

// Helpers shared by suites.
unsigned MachineCores();
// A record with the convention's fields filled in order (metrics may be filled later).
Json MakeRecord(const std::string& variant, Json config);

}  // namespace asymnvm::bench

#define ASYMNVM_REGISTER_SUITE(ident, name, description, SuiteClass)         \
  static const bool ident = ::asymnvm::bench::SuiteRegistry::Instance().Add( \
      {name, description,                                                    \
       [] { return std::unique_ptr<::asymnvm::bench::Suite>(new SuiteClass()); }})
