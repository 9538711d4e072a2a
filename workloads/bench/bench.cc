#include "workloads/bench/bench.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <thread>

#include "common/logging.h"
#include "tools/ctl.h"

namespace asymnvm::bench {

Result<Json> DaemonStatus(const std::string& address) {
  ASYMNVM_ASSIGN_OR_RETURN(std::string text,
                           tools::FetchStatus(address, std::chrono::milliseconds(10000)));
  return Json::parse(text);
}

SuiteRegistry& SuiteRegistry::Instance() {
  static SuiteRegistry* registry = new SuiteRegistry();
  return *registry;
}

bool SuiteRegistry::Add(SuiteInfo info) {
  suites_.push_back(std::move(info));
  return true;
}

unsigned MachineCores() {
  unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

Json MakeRecord(const std::string& variant, Json config) {
  Json r = Json::object();
  r["variant"] = variant;
  r["config"] = std::move(config);
  r["ops_per_sec"] = nullptr;
  r["p50_us"] = nullptr;
  r["p99_us"] = nullptr;
  r["round_trips_per_op"] = nullptr;
  r["bytes_per_op"] = nullptr;
  return r;
}

Report::Report(std::string suite) : suite_(std::move(suite)) {}

Json Report::ToJson() const {
  Json j = Json::object();
  j["suite"] = suite_;
  j["machine"] = machine_;
  j["results"] = Json::array();
  for (const Json& r : results_) j["results"].push_back(r);
  for (auto it = extra_.begin(); it != extra_.end(); ++it) j[it.key()] = it.value();
  return j;
}

namespace {

std::string FormatScalar(const Json& v, int precision) {
  if (v.is_null()) return "-";
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer() || v.is_number_unsigned()) return v.dump();
  if (v.is_number_float()) {
    double d = v.get<double>();
    std::ostringstream os;
    if (std::fabs(d) >= 1e6) {
      os << std::fixed << std::setprecision(0) << d;
    } else {
      os << std::fixed << std::setprecision(precision) << d;
    }
    return os.str();
  }
  return v.dump();
}

std::string CsvEscape(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

// Union of config keys over all records, in first-seen order.
std::vector<std::string> ConfigKeys(const std::vector<Json>& results) {
  std::vector<std::string> keys;
  for (const Json& r : results) {
    if (!r.contains("config") || !r["config"].is_object()) continue;
    for (auto it = r["config"].begin(); it != r["config"].end(); ++it) {
      if (std::find(keys.begin(), keys.end(), it.key()) == keys.end()) keys.push_back(it.key());
    }
  }
  return keys;
}

}  // namespace

void Report::PrintTable(std::ostream& out) const {
  for (const std::string& h : header_) out << h << "\n";
  // Columns: variant, config keys except those already in the variant name, metrics, extras.
  std::vector<std::string> cfg = ConfigKeys(results_);
  struct Col {
    std::string header;
    std::function<std::string(const Json&)> get;
  };
  std::vector<Col> cols;
  cols.push_back({"variant", [](const Json& r) { return r.value("variant", std::string("?")); }});
  for (const std::string& k : cfg) {
    if (k == "provider" || k == "transport" || k == "op") continue;  // part of the variant name
    cols.push_back({k, [k](const Json& r) {
                      if (!r.contains("config") || !r["config"].contains(k))
                        return std::string("-");
                      return FormatScalar(r["config"][k], 0);
                    }});
  }
  auto metric = [](const std::string& field, int precision) {
    return [field, precision](const Json& r) {
      return r.contains(field) ? FormatScalar(r[field], precision) : std::string("-");
    };
  };
  cols.push_back({"ops/s", metric("ops_per_sec", 0)});
  cols.push_back({"p50 us", metric("p50_us", 2)});
  cols.push_back({"p99 us", metric("p99_us", 2)});
  cols.push_back({"rt/op", metric("round_trips_per_op", 3)});
  cols.push_back({"B/op", metric("bytes_per_op", 1)});
  for (const Column& c : columns_) cols.push_back({c.header, metric(c.field, c.precision)});

  std::vector<std::vector<std::string>> rows;
  for (const Json& r : results_) {
    std::vector<std::string> row;
    if (r.value("skipped", false)) {
      row.push_back(r.value("variant", std::string("?")) + ": skipped (" +
                    r.value("reason", std::string("")) + ")");
      rows.push_back(row);
      continue;
    }
    for (const Col& c : cols) row.push_back(c.get(r));
    rows.push_back(row);
  }
  std::vector<size_t> width(cols.size());
  for (size_t i = 0; i < cols.size(); i++) width[i] = cols[i].header.size();
  for (const auto& row : rows) {
    if (row.size() != cols.size()) continue;
    for (size_t i = 0; i < row.size(); i++) width[i] = std::max(width[i], row[i].size());
  }
  auto print_row = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size(); i++) {
      if (i == 0) {
        out << std::left << std::setw(static_cast<int>(width[i])) << row[i];
      } else {
        out << "  " << std::right << std::setw(static_cast<int>(width[i])) << row[i];
      }
    }
    out << "\n";
  };
  std::vector<std::string> head;
  for (const Col& c : cols) head.push_back(c.header);
  print_row(head);
  size_t total = 0;
  for (size_t w : width) total += w + 2;
  out << std::string(total > 2 ? total - 2 : total, '-') << "\n";
  for (const auto& row : rows) {
    if (row.size() == cols.size()) {
      print_row(row);
    } else {
      out << row[0] << "\n";
    }
  }
  for (const std::string& n : notes_) out << n << "\n";
  out.flush();
}

Status Report::WriteJson(const std::string& path) const {
  std::ofstream f(path, std::ios::trunc);
  if (!f) return Status::IoError("--json " + path + ": cannot open for writing", errno);
  f << ToJson().dump(2) << "\n";
  f.close();
  if (!f) return Status::IoError("--json " + path + ": write failed", errno);
  return Status::Ok();
}

Status Report::WriteCsv(const std::string& path) const {
  std::ofstream f(path, std::ios::trunc);
  if (!f) return Status::IoError("--csv " + path + ": cannot open for writing", errno);
  std::vector<std::string> cfg = ConfigKeys(results_);
  std::vector<std::string> fields;
  for (const Json& r : results_) {
    for (auto it = r.begin(); it != r.end(); ++it) {
      if (it.key() == "variant" || it.key() == "config" || it.value().is_structured()) continue;
      if (std::find(fields.begin(), fields.end(), it.key()) == fields.end()) {
        fields.push_back(it.key());
      }
    }
  }
  f << "variant";
  for (const std::string& k : cfg) f << "," << k;
  for (const std::string& k : fields) f << "," << k;
  f << "\n";
  auto cell = [](const Json& v) {
    if (v.is_null()) return std::string();
    if (v.is_string()) return CsvEscape(v.get<std::string>());
    return v.dump();
  };
  for (const Json& r : results_) {
    f << CsvEscape(r.value("variant", std::string()));
    for (const std::string& k : cfg) {
      f << ",";
      if (r.contains("config") && r["config"].contains(k)) f << cell(r["config"][k]);
    }
    for (const std::string& k : fields) {
      f << ",";
      if (r.contains(k)) f << cell(r[k]);
    }
    f << "\n";
  }
  f.close();
  if (!f) return Status::IoError("--csv " + path + ": write failed", errno);
  return Status::Ok();
}

namespace {

void AddCommonOptions(CLI::App* cmd, CommonOptions* o) {
  cmd->add_option("--json", o->json_path, "Write the results as one JSON object to FILE")
      ->type_name("FILE");
  cmd->add_option("--csv", o->csv_path, "Write the results as CSV to FILE")->type_name("FILE");
  cmd->add_flag("--quick", o->quick, "Short run (well under a minute)");
  cmd->add_option("--duration", o->duration_s,
                  "Seconds per measurement (default: the suite's; --quick shortens it)")
      ->check(CLI::PositiveNumber)
      ->type_name("SECONDS");
  cmd->add_option("--ops", o->ops, "Cap on operations per measurement (0 = no cap)")
      ->type_name("N");
  cmd->add_option("--seed", o->seed, "Seed for every random choice")->type_name("N");
  cmd->add_option("--log-level", o->log_level, "debug|info|warn|error|off")
      ->check(CLI::IsMember({"debug", "info", "warn", "error", "off"}));
}

}  // namespace

int RunBenchCli(int argc, char** argv) {
  CLI::App app{
      "asymnvm-bench: AsymNVM benchmark suites. Prints a human table; --json/--csv write the "
      "results (doc/tools.md).",
      "asymnvm-bench"};
  app.require_subcommand(1, 1);
  app.footer("Run 'asymnvm-bench SUITE --help' for a suite's options.");
  CommonOptions common;
  struct Entry {
    CLI::App* cmd;
    std::unique_ptr<Suite> suite;
  };
  std::vector<Entry> entries;
  for (const SuiteInfo& info : SuiteRegistry::Instance().suites()) {
    CLI::App* cmd = app.add_subcommand(info.name, info.description);
    AddCommonOptions(cmd, &common);
    std::unique_ptr<Suite> suite = info.make();
    suite->AddOptions(cmd);
    entries.push_back({cmd, std::move(suite)});
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitUsage;
  }
  Entry* chosen = nullptr;
  for (Entry& e : entries) {
    if (e.cmd->parsed()) chosen = &e;
  }
  if (chosen == nullptr) {
    std::cerr << "asymnvm-bench: no suite given\n" << app.help();
    return kExitUsage;
  }
  LogLevel level;
  if (ParseLogLevel(common.log_level, &level)) SetLogLevel(level);
  const std::string name = chosen->cmd->get_name();
  Status st = chosen->suite->Validate(common);
  if (!st.ok()) {
    std::cerr << "asymnvm-bench " << name << ": " << st.message() << "\n";
    return st.code() == StatusCode::kInvalidArgument ? kExitUsage : kExitRunFailed;
  }
  Report report(name);
  report.machine()["cores"] = MachineCores();
  st = chosen->suite->Run(common, &report);
  if (!st.ok()) {
    std::cerr << "asymnvm-bench " << name << ": failed: " << st.ToString() << "\n";
    return kExitRunFailed;
  }
  report.PrintTable(std::cout);
  if (!common.json_path.empty()) {
    st = report.WriteJson(common.json_path);
    if (!st.ok()) {
      std::cerr << "asymnvm-bench: " << st.ToString() << "\n";
      return kExitRunFailed;
    }
    std::cout << "JSON written to " << common.json_path << "\n";
  }
  if (!common.csv_path.empty()) {
    st = report.WriteCsv(common.csv_path);
    if (!st.ok()) {
      std::cerr << "asymnvm-bench: " << st.ToString() << "\n";
      return kExitRunFailed;
    }
    std::cout << "CSV written to " << common.csv_path << "\n";
  }
  return kExitOk;
}

}  // namespace asymnvm::bench
