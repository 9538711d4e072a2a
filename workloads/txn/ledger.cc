// Ledgers of committed transactions and the in-doubt resolution (workloads/txn/ledger.h).
#include "workloads/txn/ledger.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>

#include "backend/log_format.h"

namespace asymnvm::txnbench {

Ledger::Ledger(size_t quantities) : totals_(quantities, 0) {}

Ledger::~Ledger() {
  if (fd_ >= 0) ::close(fd_);
}

Result<std::unique_ptr<Ledger>> Ledger::Open(const std::string& path, size_t quantities,
                                             uint64_t frontend_id) {
  auto l = std::make_unique<Ledger>(quantities);
  l->path_ = path;
  std::error_code ec;
  const bool existed =
      std::filesystem::exists(path, ec) && std::filesystem::file_size(path, ec) > 0;
  if (existed) {
    std::ifstream in(path);
    std::string first;
    std::getline(in, first);
    if (first != "id " + std::to_string(frontend_id)) {
      return Status::InvalidArgument(
          path + " is the ledger of another front-end (its first line is \"" + first +
          "\", want \"id " + std::to_string(frontend_id) + "\")");
    }
  }
  l->fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (l->fd_ < 0) return Status::IoError("open " + path + ": " + std::strerror(errno));
  if (!existed) ASYMNVM_RETURN_IF_ERROR(l->Append("id " + std::to_string(frontend_id) + "\n"));
  return l;
}

Status Ledger::Append(const std::string& line) {
  if (fd_ < 0) return Status::Ok();
  const ssize_t n = ::write(fd_, line.data(), line.size());
  if (n != static_cast<ssize_t>(line.size())) {
    return Status::IoError("write " + path_ + ": " +
                           (n < 0 ? std::strerror(errno) : "short write"));
  }
  return Status::Ok();
}

Status Ledger::Pending(const Effect& effect) {
  if (pending_) return Status::InvalidArgument("ledger: a transaction is already pending");
  std::string line = "P";
  for (const auto& [q, d] : effect) {
    if (q >= totals_.size()) {
      return Status::InvalidArgument("ledger: quantity " + std::to_string(q) + " out of range (" +
                                     std::to_string(totals_.size()) + ")");
    }
    line += " " + std::to_string(q) + ":" + std::to_string(d);
  }
  line += "\n";
  ASYMNVM_RETURN_IF_ERROR(Append(line));
  pending_effect_ = effect;
  pending_ = true;
  return Status::Ok();
}

Status Ledger::Committed(uint64_t op_seq) {
  if (!pending_)
    return Status::FailedPrecondition("ledger: Committed without a pending transaction");
  ASYMNVM_RETURN_IF_ERROR(
      Append(op_seq == 0 ? std::string("C\n") : "C " + backend::OpSeqString(op_seq) + "\n"));
  for (const auto& [q, d] : pending_effect_) totals_[q] += d;
  pending_ = false;
  committed_++;
  return Status::Ok();
}

namespace {

Status ParseEffect(const std::string& rest, size_t quantities, Effect* e,
                   const std::string& where) {
  std::istringstream in(rest);
  for (std::string tok; in >> tok;) {
    const size_t colon = tok.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == tok.size()) {
      return Status::Corruption(where + ": malformed effect \"" + tok + "\"");
    }
    try {
      size_t used = 0;
      const unsigned long long q = std::stoull(tok.substr(0, colon), &used);
      if (used != colon) throw std::invalid_argument("q");
      const std::string ds = tok.substr(colon + 1);
      const long long d = std::stoll(ds, &used);
      if (used != ds.size()) throw std::invalid_argument("d");
      if (q >= quantities) {
        return Status::Corruption(where + ": quantity " + std::to_string(q) + " out of range (" +
                                  std::to_string(quantities) + ")");
      }
      e->emplace_back(static_cast<uint32_t>(q), static_cast<int64_t>(d));
    } catch (const std::exception&) {
      return Status::Corruption(where + ": malformed effect \"" + tok + "\"");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<LedgerSet> ReadLedgers(const std::string& dir, size_t quantities) {
  LedgerSet set;
  set.committed.assign(quantities, 0);
  std::map<std::string, int> resolved;
  {
    std::ifstream rin(dir + "/resolved");
    std::string id;
    int v = 0;
    uint64_t n = 0;
    for (std::string line; std::getline(rin, line);) {
      n++;
      std::istringstream ls(line);
      if (!(ls >> id >> v) || (v != 0 && v != 1)) {
        return Status::Corruption("resolved:" + std::to_string(n) + ": malformed \"" +
                                  line.substr(0, 60) + "\"");
      }
      resolved[id] = v;
    }
  }
  // A P without its C: in doubt, unless a check settled it.
  auto doubt = [&](const Effect& e, const std::string& id) {
    auto it = resolved.find(id);
    if (it == resolved.end()) {
      set.in_doubt.push_back(e);
      set.in_doubt_ids.push_back(id);
      return;
    }
    set.resolved++;
    if (it->second == 1) {
      for (const auto& [q, d] : e) set.committed[q] += d;
      set.committed_txns++;
    }
  };
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& de : std::filesystem::directory_iterator(dir, ec)) {
    if (de.path().extension() == ".ledger") files.push_back(de.path());
  }
  if (ec) return Status::IoError("reading " + dir + ": " + ec.message());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream buf;
    buf << in.rdbuf();
    const std::string text = buf.str();
    // Whole lines only: a last line without its newline is torn (the writer died inside it).
    std::vector<std::string> lines;
    for (size_t at = 0; at < text.size();) {
      const size_t nl = text.find('\n', at);
      if (nl == std::string::npos) break;
      lines.push_back(text.substr(at, nl - at));
      at = nl + 1;
    }
    if (lines.empty()) continue;  // created, nothing written yet
    const std::string name = f.filename().string();
    if (lines[0].rfind("id ", 0) != 0) return Status::Corruption(name + ":1: no \"id N\" line");
    try {
      set.frontend_ids.push_back(std::stoull(lines[0].substr(3)));
    } catch (const std::exception&) {
      return Status::Corruption(name + ":1: bad front-end id");
    }
    set.files++;
    bool pending = false;
    Effect cur;
    std::string cur_id;
    for (size_t i = 1; i < lines.size(); i++) {
      const std::string where = name + ":" + std::to_string(i + 1);
      const std::string& l = lines[i];
      if (l == "C" || l.rfind("C ", 0) == 0) {
        if (!pending) return Status::Corruption(where + ": C without a pending transaction");
        for (const auto& [q, d] : cur) set.committed[q] += d;
        set.committed_txns++;
        pending = false;
      } else if (l == "P" || l.rfind("P ", 0) == 0) {
        if (pending) doubt(cur, cur_id);
        cur.clear();
        ASYMNVM_RETURN_IF_ERROR(ParseEffect(l.substr(1), quantities, &cur, where));
        cur_id = where;
        pending = true;
      } else {
        return Status::Corruption(where + ": unknown record \"" + l.substr(0, 40) + "\"");
      }
    }
    if (pending) doubt(cur, cur_id);
  }
  return set;
}

Status WriteResolutions(const std::string& dir, const std::vector<std::string>& ids,
                        const std::vector<int>& outcome) {
  std::string text;
  for (size_t i = 0; i < ids.size() && i < outcome.size(); i++) {
    if (outcome[i] == 0 || outcome[i] == 1)
      text += ids[i] + " " + std::to_string(outcome[i]) + "\n";
  }
  if (text.empty()) return Status::Ok();
  const std::string path = dir + "/resolved";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Status::IoError("open " + path + ": " + std::strerror(errno));
  const ssize_t n = ::write(fd, text.data(), text.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size()))
    return Status::IoError("write " + path + ": " + std::strerror(err));
  return Status::Ok();
}

Status Resolve(const std::vector<int64_t>& measured, const std::vector<int64_t>& initial,
               const std::vector<int64_t>& committed, const std::vector<Effect>& in_doubt,
               const std::function<std::string(uint32_t)>& name, size_t* applied,
               std::vector<int>* outcome) {
  if (measured.size() != initial.size() || committed.size() != initial.size()) {
    return Status::InvalidArgument("Resolve: quantity vectors of different sizes");
  }
  *applied = 0;
  if (outcome != nullptr) outcome->assign(in_doubt.size(), 0);
  const size_t nq = measured.size();
  // What the in-doubt transactions must explain: measured − (initial + committed).
  std::map<uint32_t, int64_t> diff;
  for (size_t q = 0; q < nq; q++) {
    const int64_t d = measured[q] - initial[q] - committed[q];
    if (d != 0) diff[static_cast<uint32_t>(q)] = d;
  }
  // Normalized in-doubt effects (summed per quantity, zero deltas dropped); empty ones cannot
  // change anything and are ignored.
  std::vector<std::map<uint32_t, int64_t>> eff;
  std::vector<size_t> origin;  // eff index → in_doubt index
  for (size_t k = 0; k < in_doubt.size(); k++) {
    const Effect& e = in_doubt[k];
    std::map<uint32_t, int64_t> m;
    for (const auto& [q, d] : e) {
      if (q >= nq) return Status::InvalidArgument("Resolve: quantity out of range");
      m[q] += d;
    }
    for (auto it = m.begin(); it != m.end();) it = it->second == 0 ? m.erase(it) : std::next(it);
    if (!m.empty()) {
      eff.push_back(std::move(m));
      origin.push_back(k);
    }
  }
  // Components: effects that share a quantity are decided together.
  std::vector<size_t> parent(eff.size());
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  std::map<uint32_t, size_t> owner;  // quantity → an effect touching it
  for (size_t i = 0; i < eff.size(); i++) {
    for (const auto& [q, d] : eff[i]) {
      auto [it, fresh] = owner.emplace(q, i);
      if (!fresh) parent[find(i)] = find(it->second);
    }
  }
  auto mismatch = [&](uint32_t q, const std::string& extra) {
    return Status::Corruption(name(q) + " = " + std::to_string(measured[q]) + ", the ledgers say " +
                              std::to_string(initial[q] + committed[q]) + extra);
  };
  // A differing quantity no in-doubt transaction touches cannot be explained.
  for (const auto& [q, d] : diff) {
    if (!owner.count(q)) return mismatch(q, "");
  }
  std::map<size_t, std::vector<size_t>> comps;
  for (size_t i = 0; i < eff.size(); i++) comps[find(i)].push_back(i);
  for (const auto& [root, members] : comps) {
    std::map<uint32_t, int64_t> target;  // the component's quantities: what they must add up to
    for (size_t i : members) {
      for (const auto& [q, d] : eff[i]) {
        auto it = diff.find(q);
        target[q] = it == diff.end() ? 0 : it->second;
      }
    }
    if (members.size() > 20) {
      return Status::ResourceExhausted(
          std::to_string(members.size()) +
          " in-doubt transactions touch the same quantities (at most 20 are resolved)");
    }
    int fits = 0;
    uint64_t chosen = 0;
    for (uint64_t mask = 0; mask < (uint64_t{1} << members.size()) && fits < 2; mask++) {
      std::map<uint32_t, int64_t> sum;
      for (size_t b = 0; b < members.size(); b++) {
        if (mask >> b & 1) {
          for (const auto& [q, d] : eff[members[b]]) sum[q] += d;
        }
      }
      bool eq = true;
      for (const auto& [q, want] : target) {
        auto it = sum.find(q);
        if ((it == sum.end() ? 0 : it->second) != want) {
          eq = false;
          break;
        }
      }
      if (eq) {
        if (fits++ == 0) chosen = mask;
      }
    }
    const bool found = fits > 0;
    if (found) {
      *applied += static_cast<size_t>(__builtin_popcountll(chosen));
      if (outcome != nullptr) {
        for (size_t b = 0; b < members.size(); b++) {
          (*outcome)[origin[members[b]]] = fits > 1 ? -1 : static_cast<int>(chosen >> b & 1);
        }
      }
    }
    if (!found) {
      uint32_t q = target.begin()->first;
      for (const auto& [tq, want] : target) {
        if (want != 0) {
          q = tq;
          break;
        }
      }
      return mismatch(q, " (no combination of the " + std::to_string(members.size()) +
                             " in-doubt transactions touching it explains the difference)");
    }
  }
  return Status::Ok();
}

}  // namespace asymnvm::txnbench
