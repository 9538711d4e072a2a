#include "asymnvm/status.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace asymnvm {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kAlreadyExists:
      return "AlreadyExists";
    case StatusCode::kCorruption:
      return "Corruption";
    case StatusCode::kIoError:
      return "IoError";
    case StatusCode::kNotSupported:
      return "NotSupported";
    case StatusCode::kResourceExhausted:
      return "ResourceExhausted";
    case StatusCode::kRemoteAccessError:
      return "RemoteAccessError";
    case StatusCode::kProtocolError:
      return "ProtocolError";
    case StatusCode::kRnrRetryExceeded:
      return "RnrRetryExceeded";
    case StatusCode::kConnectionError:
      return "ConnectionError";
    case StatusCode::kPermissionDenied:
      return "PermissionDenied";
    case StatusCode::kTimedOut:
      return "TimedOut";
    case StatusCode::kAborted:
      return "Aborted";
    case StatusCode::kFailedPrecondition:
      return "FailedPrecondition";
    case StatusCode::kInternal:
      return "Internal";
    case StatusCode::kUnavailable:
      return "Unavailable";
  }
  return "Unknown";
}

std::string_view StatusSubCodeName(StatusSubCode subcode) {
  switch (subcode) {
    case StatusSubCode::kNone:
      return "None";
    case StatusSubCode::kNotPrimary:
      return "NotPrimary";
    case StatusSubCode::kFenced:
      return "Fenced";
    case StatusSubCode::kChecksumMismatch:
      return "ChecksumMismatch";
    case StatusSubCode::kCrossShard:
      return "CrossShard";
    case StatusSubCode::kStaleRead:
      return "StaleRead";
  }
  return "Unknown";
}

Status::Status(StatusCode code, std::string_view message, int sys_errno, bool retryable) {
  if (code != StatusCode::kOk) {
    rep_ = std::make_unique<Rep>(
        Rep{code, std::string(message), sys_errno, retryable, StatusSubCode::kNone});
  }
}

const std::string& Status::message() const {
  static const std::string kEmpty;
  return rep_ ? rep_->message : kEmpty;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return Status();
  Status s(*this);
  s.rep_->message = std::string(context) + ": " + rep_->message;
  return s;
}

Status Status::WithSubCode(StatusSubCode subcode) const& {
  return Status(*this).WithSubCode(subcode);
}

Status Status::WithSubCode(StatusSubCode subcode) && {
  if (rep_) rep_->subcode = subcode;
  return std::move(*this);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(StatusCodeName(rep_->code));
  if (rep_->subcode != StatusSubCode::kNone) {
    s += " (";
    s += StatusSubCodeName(rep_->subcode);
    s += ")";
  }
  s += ": ";
  s += rep_->message;
  if (rep_->sys_errno != 0) {
    s += " (errno " + std::to_string(rep_->sys_errno) + ": " + std::strerror(rep_->sys_errno) + ")";
  }
  return s;
}

namespace internal {

void ResultValueOfError(const Status& status) {
  std::fprintf(stderr, "asymnvm: fatal: Result::value() called on an error: %s\n",
               status.ToString().c_str());
  std::abort();
}

void ResultFromOkStatus() {
  std::fprintf(stderr, "asymnvm: fatal: Result constructed from an OK Status without a value\n");
  std::abort();
}

}  // namespace internal

}  // namespace asymnvm
