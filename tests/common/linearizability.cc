#include "tests/common/linearizability.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <string>
#include <unordered_set>

namespace asymnvm::testing {

std::string DescribeOp(const RegisterOp& op) {
  std::ostringstream s;
  s << "client " << op.client << (op.is_write ? " write(" : " read(") << op.key << ")";
  s << (op.is_write ? " := " : " -> ") << op.value << " [" << op.invoke_ns << ", ";
  if (op.response_ns == kNoResponse) {
    s << "pending]";
  } else {
    s << op.response_ns << "]";
  }
  return s.str();
}

namespace {

// Depth-first search over linearizations of one key's operations.
class KeySearch {
 public:
  KeySearch(std::vector<RegisterOp> ops, uint64_t initial, uint64_t budget)
      : ops_(std::move(ops)), value_(initial), budget_(budget) {
    std::sort(ops_.begin(), ops_.end(),
              [](const RegisterOp& a, const RegisterOp& b) { return a.invoke_ns < b.invoke_ns; });
    done_.assign((ops_.size() + 63) / 64, 0);
    for (const auto& op : ops_) completed_ += op.response_ns != kNoResponse ? 1 : 0;
  }

  // true: linearizable; false: not (or budget exhausted, see exhausted()).
  bool Run() { return Dfs(); }
  bool exhausted() const { return exhausted_; }
  size_t deepest() const { return deepest_; }
  const std::vector<RegisterOp>& ops() const { return ops_; }
  const std::vector<size_t>& stuck() const { return stuck_; }
  uint64_t stuck_value() const { return stuck_value_; }

 private:
  bool Done(size_t i) const { return (done_[i / 64] >> (i % 64)) & 1; }
  void Flip(size_t i) { done_[i / 64] ^= uint64_t{1} << (i % 64); }

  bool Dfs() {
    if (placed_completed_ == completed_) return true;
    if (exhausted_) return false;
    std::string state(reinterpret_cast<const char*>(done_.data()), done_.size() * 8);
    state.append(reinterpret_cast<const char*>(&value_), sizeof(value_));
    if (!visited_.insert(std::move(state)).second) return false;
    if (visited_.size() > budget_) {
      exhausted_ = true;
      return false;
    }
    // An operation may go next only if no unplaced completed operation responded before it was
    // invoked (that one precedes it in real time). Equal timestamps count as concurrent.
    int64_t min_resp = kNoResponse;
    for (size_t i = 0; i < ops_.size(); i++) {
      if (!Done(i) && ops_[i].response_ns < min_resp) min_resp = ops_[i].response_ns;
    }
    std::vector<size_t> candidates;
    for (size_t i = 0; i < ops_.size() && ops_[i].invoke_ns <= min_resp; i++) {
      if (!Done(i)) candidates.push_back(i);
    }
    for (size_t i : candidates) {
      const RegisterOp& op = ops_[i];
      if (!op.is_write && op.value != value_) continue;
      const uint64_t saved = value_;
      if (op.is_write) value_ = op.value;
      Flip(i);
      const bool completed = op.response_ns != kNoResponse;
      placed_completed_ += completed ? 1 : 0;
      const bool ok = Dfs();
      placed_completed_ -= completed ? 1 : 0;
      Flip(i);
      value_ = saved;
      if (ok) return true;
      if (exhausted_) return false;
    }
    if (placed_completed_ >= deepest_) {
      deepest_ = placed_completed_;
      stuck_ = candidates;
      stuck_value_ = value_;
    }
    return false;
  }

  std::vector<RegisterOp> ops_;
  uint64_t value_;
  const uint64_t budget_;
  std::vector<uint64_t> done_;
  size_t completed_ = 0, placed_completed_ = 0, deepest_ = 0;
  std::unordered_set<std::string> visited_;
  bool exhausted_ = false;
  std::vector<size_t> stuck_;
  uint64_t stuck_value_ = 0;
};

}  // namespace

Status CheckRegisterHistory(std::vector<RegisterOp> ops, const CheckOptions& options) {
  std::map<uint64_t, std::vector<RegisterOp>> by_key;
  for (const auto& op : ops) {
    if (op.response_ns < op.invoke_ns) {
      return Status::InvalidArgument("linearizability: response before invocation: " +
                                     DescribeOp(op));
    }
    if (!op.is_write && op.response_ns == kNoResponse) continue;  // a lost read says nothing
    by_key[op.key].push_back(op);
  }
  for (auto& [key, key_ops] : by_key) {
    KeySearch search(std::move(key_ops), options.initial_value, options.max_states_per_key);
    if (search.Run()) continue;
    std::ostringstream s;
    if (search.exhausted()) {
      s << "linearizability: search budget (" << options.max_states_per_key
        << " states) exhausted on key " << key << " with " << search.ops().size()
        << " operations: inconclusive";
      return Status::ResourceExhausted(s.str(), false);
    }
    s << "linearizability: key " << key << " is not linearizable (" << search.ops().size()
      << " operations; longest linearizable prefix places " << search.deepest()
      << " completed ones, register = " << search.stuck_value() << "; none of these can go next:";
    size_t shown = 0;
    for (size_t i : search.stuck()) {
      if (shown++ == 6) {
        s << " ...";
        break;
      }
      s << " {" << DescribeOp(search.ops()[i]) << "}";
    }
    s << ")";
    return Status::FailedPrecondition(s.str());
  }
  return Status::Ok();
}

}  // namespace asymnvm::testing
