// The op_seq / OPN bookkeeping of a Session (doc/frontend.md "Decisions", "Replay before the OPN
// moves"): which op_seq the next op log gets, which op logs are still open (their memory logs are
// not in a transaction yet), and the OPN a transaction may carry — never past an open op, nor past
// an earlier session's op logs that are still to be replayed. Pure state, no I/O: the Session
// sends, this decides the numbers. Not thread-safe (a Session is used by one thread at a time).
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "asymnvm/frontend.h"

namespace asymnvm::frontend {

class OpSequence {
 public:
  // After a registration: the back-end's OPN, its aux word (incarnation << 32: this session's
  // op_seqs start above every earlier session's) and whether op logs of this id lie past the OPN
  // (an earlier session's, to replay: the OPN stays at `opn` until Replay has taken them).
  void Registered(uint64_t opn, uint64_t aux, bool ops_to_replay);

  // The op_seq of the next op log (then call Opened or Covered).
  uint64_t Take() { return next_++; }
  // An op log whose memory logs will follow (open until Close).
  void Opened(uint64_t seq, uint32_t structure);
  // An op log with no memory logs (a lock-ahead op): covered at once.
  void Covered(uint64_t seq);
  // The ops of `structure` up to `upto` have their memory logs in the batch now.
  void Close(uint32_t structure, uint64_t upto);
  // The structures other than `structure` with open ops, in op order (each closed before an op
  // log of `structure`, so a transaction's ops are exactly those up to its OPN).
  std::vector<uint32_t> OpenOthers(uint32_t structure) const;
  bool HasOpen(uint32_t structure) const;
  bool IsOpen(uint64_t seq) const { return open_.count(seq) != 0; }
  bool empty() const { return open_.empty(); }

  // Replay: of `ops` (fetched, sorted by op_seq), those to re-execute — past the registered OPN
  // and what this connection already re-executed, before this session's first op — now open
  // (lock-ahead ops only covered). The OPN then passes each once Replayed.
  std::vector<const RecoveredOp*> BeginReplay(const std::vector<RecoveredOp>& ops);
  // Re-executing op `seq` starts (op_seqs of this session continue after it).
  void Replaying(uint64_t seq);
  // Op `seq` was re-executed and its memory logs are in the batch.
  void Replayed(uint64_t seq);
  // Every op of BeginReplay was re-executed.
  void EndReplay() { replay_ = Replay::kNone; }

  // The OPN the next transaction carries; SentOpn after it was sent.
  uint64_t opn() const { return pending_; }
  bool OpnUnsent() const { return pending_ > sent_; }
  uint64_t OpnToSend(uint64_t opn) const { return opn > sent_ ? opn : sent_; }
  void Sent(uint64_t opn) { sent_ = opn; }

  uint64_t registered_opn() const { return registered_; }
  uint64_t next() const { return next_; }
  uint64_t first() const { return first_; }
  uint64_t max_logged() const { return max_logged_; }
  // Op logs of an earlier session of this id not yet all re-executed: no writer lock may go.
  bool replay_pending() const { return replay_ != Replay::kNone; }

 private:
  void Advance();

  uint64_t registered_ = 0;  // the OPN at registration
  uint64_t first_ = 1;       // this session's first op_seq (earlier ones: crashed sessions')
  uint64_t next_ = 1;
  uint64_t replayed_upto_ = 0;  // re-executed on this connection (a 2nd Replay skips them)
  // kToFetch: ops of an earlier session lie past the registered OPN and are not open yet (the
  // OPN stays at registered_); kReplaying: BeginReplay opened them (each holds the OPN back
  // until Replayed); kNone: nothing of an earlier session left.
  enum class Replay { kNone, kToFetch, kReplaying };
  Replay replay_ = Replay::kNone;
  uint64_t pending_ = 0;               // the OPN the next transaction carries
  uint64_t sent_ = 0;                  // the OPN of the last transaction sent
  std::map<uint64_t, uint32_t> open_;  // op_seq → structure id
  uint64_t max_logged_ = 0;
};

}  // namespace asymnvm::frontend
