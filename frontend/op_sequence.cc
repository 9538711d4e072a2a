// op_seq / OPN bookkeeping of a Session (frontend/op_sequence.h).
#include "frontend/op_sequence.h"

#include <algorithm>

namespace asymnvm::frontend {

void OpSequence::Registered(uint64_t opn, uint64_t aux, bool ops_to_replay) {
  registered_ = sent_ = pending_ = max_logged_ = opn;
  next_ = first_ = std::max(opn, aux) + 1;
  replayed_upto_ = 0;
  open_.clear();
  replay_ = ops_to_replay ? Replay::kToFetch : Replay::kNone;
}

void OpSequence::Advance() {
  uint64_t c = open_.empty() ? max_logged_ : open_.begin()->first - 1;
  if (replay_ == Replay::kToFetch) c = std::min(c, registered_);
  pending_ = std::max(pending_, c);
}

void OpSequence::Opened(uint64_t seq, uint32_t structure) {
  open_[seq] = structure;
  max_logged_ = std::max(max_logged_, seq);
}

void OpSequence::Covered(uint64_t seq) {
  max_logged_ = std::max(max_logged_, seq);
  Advance();
}

void OpSequence::Close(uint32_t structure, uint64_t upto) {
  for (auto it = open_.begin(); it != open_.end() && it->first <= upto;) {
    it = it->second == structure ? open_.erase(it) : std::next(it);
  }
  Advance();
}

std::vector<uint32_t> OpSequence::OpenOthers(uint32_t structure) const {
  std::vector<uint32_t> others;
  for (const auto& [seq, sid] : open_) {
    if (sid != structure && std::find(others.begin(), others.end(), sid) == others.end()) {
      others.push_back(sid);
    }
  }
  return others;
}

bool OpSequence::HasOpen(uint32_t structure) const {
  for (const auto& [seq, sid] : open_) {
    if (sid == structure) return true;
  }
  return false;
}

std::vector<const RecoveredOp*> OpSequence::BeginReplay(const std::vector<RecoveredOp>& ops) {
  const uint64_t done = std::max(registered_, replayed_upto_);
  std::vector<const RecoveredOp*> todo;
  for (const RecoveredOp& op : ops) {
    if (op.op_seq <= done || op.op_seq >= first_) continue;
    max_logged_ = std::max(max_logged_, op.op_seq);
    if (op.op_type != kLockAheadOpType) open_[op.op_seq] = op.structure_id;
    todo.push_back(&op);
  }
  // The ops to replay hold the OPN back from here on (open), each passed once re-executed.
  if (replay_ == Replay::kToFetch) replay_ = Replay::kReplaying;
  return todo;
}

void OpSequence::Replaying(uint64_t seq) { next_ = std::max(next_, seq + 1); }

void OpSequence::Replayed(uint64_t seq) {
  open_.erase(seq);
  replayed_upto_ = std::max(replayed_upto_, seq);
  Advance();
}

}  // namespace asymnvm::frontend
