// Status and Result<T>: how every AsymNVM call reports failure.
//
// No exceptions cross component boundaries. A Status is a code, an optional sub-code, a
// "context: cause" message, an optional errno / provider code, and a retryable bit. Result<T>
// holds either a value or a non-OK Status. Both are cheap to move; an OK Status allocates nothing.
//
// Callers decide on code() and subcode(), never on message() text: the message is for people
// (logs, error replies) and may be reworded or prefixed with context at any layer.
//
// Thread safety: values; distinct objects may be used from distinct threads freely.
#pragma once

#include <cassert>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace asymnvm {

enum class StatusCode : uint8_t {
  kOk = 0,
  kInvalidArgument,     // the caller passed something malformed (bad flag, bad size, bad address)
  kNotFound,            // a named thing does not exist
  kAlreadyExists,       // creating something that exists
  kCorruption,          // a persistent record or packet failed validation (checksum, magic, bounds)
  kIoError,             // the OS refused (open, mmap, socket, ...); errno() says why
  kNotSupported,        // the provider / device cannot do this (e.g. no RDMA device)
  kResourceExhausted,   // queue full, pool full, out of receive buffers; often retryable
  kRemoteAccessError,   // the peer's NIC rejected a one-sided access (key, bounds, rights)
  kProtocolError,       // malformed or unexpected packet / handshake
  kRnrRetryExceeded,    // receiver not ready: no receive buffer after all retries
  kConnectionError,     // the connection is in the error state, closed, or the peer died
  kPermissionDenied,    // authentication failed
  kTimedOut,            // a bounded wait ran out
  kAborted,             // an operation was cancelled (e.g. flushed from an errored queue)
  kFailedPrecondition,  // the object is in the wrong state for this call
  kInternal,            // a bug: an invariant that should hold did not
  kUnavailable,         // the service is not reachable now (e.g. a back-end that did not come
                        // back within SessionOptions::reconnect_deadline); retry later
};

std::string_view StatusCodeName(StatusCode code);

// Why a failure happened, more precisely than its StatusCode, for the callers that must act on it
// (as RocksDB's Status::SubCode). kNone unless a producer sets one (Status::WithSubCode). The code
// still says what kind of failure it is; the sub-code never changes that. It survives
// WithContext and copies, and crosses the Ordered Queue wire with the code (doc/oq.md, Response),
// so a client decides on what a server meant, not on the server's wording.
enum class StatusSubCode : uint8_t {
  kNone = 0,
  // With kUnavailable, from a KV server: it is not the primary of the request's shard (at its map
  // epoch), so nothing was applied; the client re-reads the shard map and resends.
  kNotPrimary,
  // This process, server or session lost its lease, term or ownership (a newer one took over): it
  // must not acknowledge anything more. From a KV server (kUnavailable): the request was refused
  // before anything was applied. In a front-end Session (kFailedPrecondition): every later call
  // fails with it.
  kFenced,
  // With kCorruption: the record's fields passed every other check; its checksum did not match
  // (a torn or partly overwritten record whose header may still be worth naming).
  kChecksumMismatch,
  // With kInvalidArgument: one atomic request names keys of different shards (Redis CROSSSLOT).
  kCrossShard,
  // With kAborted: a concurrent writer changed what a read-only pass read; the caller starts
  // over (nothing was written).
  kStaleRead,
};
inline constexpr StatusSubCode kLastStatusSubCode = StatusSubCode::kStaleRead;

std::string_view StatusSubCodeName(StatusSubCode subcode);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string_view message, int sys_errno = 0, bool retryable = false);

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string_view m) { return {StatusCode::kInvalidArgument, m}; }
  static Status NotFound(std::string_view m) { return {StatusCode::kNotFound, m}; }
  static Status AlreadyExists(std::string_view m) { return {StatusCode::kAlreadyExists, m}; }
  static Status Corruption(std::string_view m) { return {StatusCode::kCorruption, m}; }
  static Status IoError(std::string_view m, int e = 0) { return {StatusCode::kIoError, m, e}; }
  static Status NotSupported(std::string_view m) { return {StatusCode::kNotSupported, m}; }
  static Status ResourceExhausted(std::string_view m, bool retryable = true) {
    return {StatusCode::kResourceExhausted, m, 0, retryable};
  }
  static Status RemoteAccessError(std::string_view m) {
    return {StatusCode::kRemoteAccessError, m};
  }
  static Status ProtocolError(std::string_view m) { return {StatusCode::kProtocolError, m}; }
  static Status RnrRetryExceeded(std::string_view m) { return {StatusCode::kRnrRetryExceeded, m}; }
  static Status ConnectionError(std::string_view m) { return {StatusCode::kConnectionError, m}; }
  static Status PermissionDenied(std::string_view m) { return {StatusCode::kPermissionDenied, m}; }
  static Status TimedOut(std::string_view m) { return {StatusCode::kTimedOut, m, 0, true}; }
  static Status Aborted(std::string_view m) { return {StatusCode::kAborted, m}; }
  static Status FailedPrecondition(std::string_view m) {
    return {StatusCode::kFailedPrecondition, m};
  }
  static Status Internal(std::string_view m) { return {StatusCode::kInternal, m}; }
  static Status Unavailable(std::string_view m) { return {StatusCode::kUnavailable, m, 0, true}; }

  bool ok() const { return rep_ == nullptr; }
  StatusCode code() const { return rep_ ? rep_->code : StatusCode::kOk; }
  StatusSubCode subcode() const { return rep_ ? rep_->subcode : StatusSubCode::kNone; }
  const std::string& message() const;
  int sys_errno() const { return rep_ ? rep_->sys_errno : 0; }
  bool retryable() const { return rep_ ? rep_->retryable : false; }

  // Returns a copy whose message is "context: <old message>" (code, sub-code, errno and
  // retryable unchanged).
  Status WithContext(std::string_view context) const;
  // Returns a copy carrying `subcode` (an OK Status stays OK: it has no sub-code).
  Status WithSubCode(StatusSubCode subcode) const&;
  Status WithSubCode(StatusSubCode subcode) &&;
  // "CodeName: message (errno N: strerror)"; with a sub-code "CodeName (SubCodeName): message ...".
  std::string ToString() const;

  Status(const Status& o) : rep_(o.rep_ ? std::make_unique<Rep>(*o.rep_) : nullptr) {}
  Status& operator=(const Status& o) {
    if (this != &o) rep_ = o.rep_ ? std::make_unique<Rep>(*o.rep_) : nullptr;
    return *this;
  }
  Status(Status&&) noexcept = default;
  Status& operator=(Status&&) noexcept = default;

 private:
  struct Rep {
    StatusCode code;
    std::string message;
    int sys_errno;
    bool retryable;
    StatusSubCode subcode = StatusSubCode::kNone;
  };
  std::unique_ptr<Rep> rep_;
};

namespace internal {
// Fatal invariant checks of Result, in every build type: print what happened (with the Status) to
// stderr and abort. value() on an error and a Result built from an OK Status are bugs in the
// caller; continuing would read an empty optional (undefined behaviour) or lose the error.
[[noreturn]] void ResultValueOfError(const Status& status);
[[noreturn]] void ResultFromOkStatus();
}  // namespace internal

// A value or an error. Access value() only when ok(): value() on an error aborts the process
// with the Status printed, in every build type (as does constructing a Result from an OK Status).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT(runtime/explicit)
  Result(Status status) : status_(std::move(status)) {  // NOLINT(runtime/explicit)
    if (__builtin_expect(status_.ok(), 0)) internal::ResultFromOkStatus();
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & {
    CheckOk();
    return *value_;
  }
  const T& value() const& {
    CheckOk();
    return *value_;
  }
  T&& value() && {
    CheckOk();
    return std::move(*value_);
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }

 private:
  void CheckOk() const {
    if (__builtin_expect(!value_.has_value(), 0)) internal::ResultValueOfError(status_);
  }

  std::optional<T> value_;
  Status status_;
};

}  // namespace asymnvm

// Propagate a non-OK Status from an expression returning Status.
#define ASYMNVM_RETURN_IF_ERROR(expr) \
  do {                                \
    ::asymnvm::Status _st = (expr);   \
    if (!_st.ok()) return _st;        \
  } while (0)

#define ASYMNVM_CONCAT_INNER(a, b) a##b
#define ASYMNVM_CONCAT(a, b) ASYMNVM_CONCAT_INNER(a, b)
// ASYMNVM_ASSIGN_OR_RETURN(auto x, MakeX());
#define ASYMNVM_ASSIGN_OR_RETURN(lhs, expr)                                                   \
  auto ASYMNVM_CONCAT(_res_, __LINE__) = (expr);                                              \
  if (!ASYMNVM_CONCAT(_res_, __LINE__).ok()) return ASYMNVM_CONCAT(_res_, __LINE__).status(); \
  lhs = std::move(ASYMNVM_CONCAT(_res_, __LINE__)).value()
