// The soft NIC's TLS channel (fabric/soft/tls_channel.h).
#include "fabric/soft/tls_channel.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/logging.h"
#include "common/thread_annotations.h"

namespace asymnvm::fabric::soft {
namespace {

constexpr char kLog[] = "fabric.tls";

class TlsChannel final : public Channel {
 public:
  TlsChannel(int fd, std::unique_ptr<TlsStream> tls) : fd_(fd), tls_(std::move(tls)) {
    int fl = ::fcntl(fd_, F_GETFL);
    ::fcntl(fd_, F_SETFL, fl | O_NONBLOCK);
  }
  ~TlsChannel() override {
    {
      MutexLock lock(mu_);
      tls_.reset();
    }
    ::close(fd_);
  }

  int poll_fd() const override { return fd_; }
  bool edge_triggered() const override { return true; }

  bool Send(const uint8_t* data, size_t len) override {
    MutexLock lock(mu_);
    if (broken_ || want_shut_wr_) return false;
    if (tls_->Write(data, len) != TlsStream::Io::kOk) {
      Broke("send");
      return false;
    }
    return true;
  }

  ReadStatus Read(uint8_t* out, size_t cap, size_t* n) override {
    MutexLock lock(mu_);
    switch (tls_->Read(out, cap, n)) {
      case TlsStream::Io::kOk:
        return ReadStatus::kData;
      case TlsStream::Io::kAgain:
        return ReadStatus::kWouldBlock;
      case TlsStream::Io::kEof:
        return ReadStatus::kEof;
      case TlsStream::Io::kError:
        if (!broken_) LOG_WARN(kLog, "fd " << fd_ << ": " << tls_->error());
        broken_ = true;
        return ReadStatus::kError;
    }
    return ReadStatus::kError;
  }

  void OnWritable() override {
    MutexLock lock(mu_);
    FlushLocked();
  }

  void ShutdownWrite() override {
    MutexLock lock(mu_);
    if (!want_shut_wr_) {
      want_shut_wr_ = true;
      tls_->CloseNotify();
    }
    FlushLocked();
  }

  void Shutdown() override {
    MutexLock lock(mu_);
    broken_ = true;
    ::shutdown(fd_, SHUT_RDWR);
  }

 private:
  void FlushLocked() ASYMNVM_REQUIRES(mu_) {
    if (broken_) return;
    if (tls_->Flush() == TlsStream::Io::kError) {
      Broke("write");
      return;
    }
    if (want_shut_wr_ && !shut_wr_ && !tls_->wants_write()) {
      shut_wr_ = true;
      ::shutdown(fd_, SHUT_WR);
    }
  }

  void Broke(const char* what) ASYMNVM_REQUIRES(mu_) {
    if (!broken_) LOG_DEBUG(kLog, "fd " << fd_ << ": " << what << ": " << tls_->error());
    broken_ = true;
  }

  const int fd_;
  Mutex mu_;
  std::unique_ptr<TlsStream> tls_ ASYMNVM_GUARDED_BY(mu_);
  bool broken_ ASYMNVM_GUARDED_BY(mu_) = false;
  bool want_shut_wr_ ASYMNVM_GUARDED_BY(mu_) = false;
  bool shut_wr_ ASYMNVM_GUARDED_BY(mu_) = false;
};

}  // namespace

std::unique_ptr<Channel> MakeStreamChannel(int fd, std::unique_ptr<TlsStream> tls) {
  if (tls == nullptr) return MakeSocketChannel(fd);
  return std::make_unique<TlsChannel>(fd, std::move(tls));
}

}  // namespace asymnvm::fabric::soft
