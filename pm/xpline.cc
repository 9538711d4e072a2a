// The XPLine write-combining model (doc/pm-layout.md "XPLine model").
#include <algorithm>

#include "asymnvm/pm.h"

namespace asymnvm::pm {

XPLineModel::XPLineModel(size_t buffer_bytes, size_t line_bytes)
    : capacity_lines_(line_bytes == 0 ? 1 : std::max<size_t>(1, buffer_bytes / line_bytes)),
      line_bytes_(line_bytes == 0 ? 256 : line_bytes) {
  lines_.reserve(capacity_lines_);
}

void XPLineModel::OnPersist(uint64_t offset, uint64_t length) {
  if (length == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  requested_ += length;
  uint64_t first = offset / line_bytes_;
  uint64_t last = (offset + length - 1) / line_bytes_;
  for (uint64_t line_no = first; line_no <= last; ++line_no) {
    ++clock_;
    auto hit = std::find_if(lines_.begin(), lines_.end(),
                            [&](const Line& l) { return l.line_no == line_no; });
    if (hit != lines_.end()) {
      hit->last_use = clock_;
      continue;
    }
    if (lines_.size() == capacity_lines_) {
      auto lru = std::min_element(lines_.begin(), lines_.end(), [](const Line& a, const Line& b) {
        return a.last_use < b.last_use;
      });
      media_ += line_bytes_;
      *lru = Line{line_no, clock_};
    } else {
      lines_.push_back(Line{line_no, clock_});
    }
  }
}

void XPLineModel::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  media_ += static_cast<uint64_t>(lines_.size()) * line_bytes_;
  lines_.clear();
}

uint64_t XPLineModel::requested_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requested_;
}

uint64_t XPLineModel::media_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return media_;
}

double XPLineModel::dlwa() const {
  std::lock_guard<std::mutex> lock(mu_);
  return requested_ == 0 ? 0.0 : static_cast<double>(media_) / static_cast<double>(requested_);
}

void XPLineModel::Reset() {
  std::lock_guard<std::mutex> lock(mu_);
  lines_.clear();
  clock_ = 0;
  requested_ = 0;
  media_ = 0;
}

}  // namespace asymnvm::pm
