// One front-end's connections to several back-ends (AsymNVM paper §3: "a front-end
// node can access multiple back-end nodes"; §8 data structure partition; doc/frontend.md
// §Clusters).
//
// A Cluster holds one Session per back-end, all with the same front-end id and settings. The
// back-ends are independent: each Session has its own registration, op-log stream, transactions,
// LPN/OPN, page cache and allocator, exactly as a single-back-end Session; nothing is coordinated
// across back-ends (an operation touches one back-end — partitioned structures route each key to
// one partition). Back-ends are identified by their pool's uuid, not their address, so a back-end
// restarted at another address is still recognised.
//
// Recovery of one back-end: Reconnect(i) replaces session i (a new incarnation of the front-end
// id, as after a front-end crash), lets every registered Member re-open its state on the new
// session, then replays that session's op logs not covered by its OPN (Session::Replay). The other
// back-ends' sessions are untouched.
//
// Thread safety: like Session, one thread at a time.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "asymnvm/frontend.h"
#include "asymnvm/status.h"

namespace asymnvm::frontend {

class Cluster {
 public:
  // Something that keeps handles on the cluster's sessions (a partitioned structure). Reconnect(i)
  // calls Detach(i) on every member (drop everything that refers to session i; it is about to be
  // destroyed), then Attach(i, new_session) on every member (re-open on the new session and
  // register replay functions), then replays.
  class Member {
   public:
    virtual ~Member() = default;
    virtual void Detach(size_t index) = 0;
    virtual Status Attach(size_t index, Session& session) = 0;
  };

  // options.backends: one or more addresses; every other field is used for each Session (the
  // page cache budget is per session). Errors: kInvalidArgument (no back-end, the same pool listed
  // twice — named by uuid), the first Session::Open error with the address as context.
  static Result<std::unique_ptr<Cluster>> Open(const SessionOptions& options);
  ~Cluster();  // sessions close in reverse order (each flushes and fences, errors logged)

  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  size_t size() const;
  Session& session(size_t index);  // index < size(); after a failed Reconnect(index), do not call
  const std::string& address(size_t index) const;
  const std::array<uint8_t, 16>& pool_uuid(size_t index) const;
  // The back-end whose pool has `uuid`: kNotFound naming the uuid.
  Result<size_t> IndexOf(const std::array<uint8_t, 16>& uuid) const;

  // Replaces session `index` after its back-end failed or restarted (`address` empty: the same
  // address as before). kFailedPrecondition: the back-end now at that address holds another pool
  // than before (the old session is gone either way; the cluster keeps trying the same index on
  // the next Reconnect). Member Attach errors and replay errors are returned.
  Status Reconnect(size_t index, const std::string& address = "");

  // Members are not owned; a member must Remove itself before it is destroyed.
  void AddMember(Member* member);
  void RemoveMember(Member* member);

  // Every session: Fence (first error returned, all attempted), Replay.
  Status Fence();
  Status Replay();

 private:
  struct Impl;
  explicit Cluster(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "0123abcd-..." (pm::UuidToString) for messages.
std::string UuidString(const std::array<uint8_t, 16>& uuid);

}  // namespace asymnvm::frontend
