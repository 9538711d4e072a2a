// Socket and in-process byte channels for the soft NIC (doc/fabric.md §Transports).
#include "fabric/soft/channel.h"

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "common/thread_annotations.h"

namespace asymnvm::fabric::soft {
namespace {

class SocketChannel final : public Channel {
 public:
  explicit SocketChannel(int fd) : fd_(fd) {
    int fl = ::fcntl(fd_, F_GETFL);
    ::fcntl(fd_, F_SETFL, fl | O_NONBLOCK);
  }
  ~SocketChannel() override { ::close(fd_); }

  int poll_fd() const override { return fd_; }
  bool edge_triggered() const override { return true; }

  bool Send(const uint8_t* data, size_t len) override {
    MutexLock lock(mu_);
    if (broken_ || shut_wr_) return false;
    size_t done = 0;
    if (pending_.size() == pending_start_) {
      while (done < len) {
        ssize_t r = ::send(fd_, data + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r > 0) {
          done += static_cast<size_t>(r);
        } else if (r < 0 && errno == EINTR) {
          continue;
        } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
          break;
        } else {
          broken_ = true;
          return false;
        }
      }
    }
    if (done < len) pending_.insert(pending_.end(), data + done, data + len);
    return true;
  }

  ReadStatus Read(uint8_t* out, size_t cap, size_t* n) override {
    for (;;) {
      ssize_t r = ::recv(fd_, out, cap, MSG_DONTWAIT);
      if (r > 0) {
        *n = static_cast<size_t>(r);
        return ReadStatus::kData;
      }
      if (r == 0) return ReadStatus::kEof;
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return ReadStatus::kWouldBlock;
      return ReadStatus::kError;
    }
  }

  void OnWritable() override {
    MutexLock lock(mu_);
    FlushLocked();
  }

  void ShutdownWrite() override {
    MutexLock lock(mu_);
    want_shut_wr_ = true;
    FlushLocked();
  }

  void Shutdown() override {
    MutexLock lock(mu_);
    broken_ = true;
    ::shutdown(fd_, SHUT_RDWR);
  }

 private:
  void FlushLocked() {
    while (!broken_ && pending_start_ < pending_.size()) {
      ssize_t r = ::send(fd_, pending_.data() + pending_start_, pending_.size() - pending_start_,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r > 0) {
        pending_start_ += static_cast<size_t>(r);
      } else if (r < 0 && errno == EINTR) {
        continue;
      } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
      } else {
        broken_ = true;
        return;
      }
    }
    pending_.clear();
    pending_start_ = 0;
    if (want_shut_wr_ && !shut_wr_) {
      shut_wr_ = true;
      ::shutdown(fd_, SHUT_WR);
    }
  }

  const int fd_;
  Mutex mu_;
  std::vector<uint8_t> pending_;
  size_t pending_start_ = 0;
  bool broken_ = false;
  bool want_shut_wr_ = false;
  bool shut_wr_ = false;
};

class InprocChannel final : public Channel {
 public:
  InprocChannel(std::shared_ptr<InprocPipe> in, std::shared_ptr<InprocPipe> out)
      : in_(std::move(in)), out_(std::move(out)) {}
  ~InprocChannel() override { Shutdown(); }

  int poll_fd() const override { return in_->efd; }
  bool edge_triggered() const override { return false; }

  bool Send(const uint8_t* data, size_t len) override {
    bool was_empty;
    {
      MutexLock lock(out_->mu);
      if (out_->closed) return false;
      was_empty = out_->buf.size() == out_->start;
      out_->buf.insert(out_->buf.end(), data, data + len);
    }
    if (was_empty) Signal(out_->efd);
    return true;
  }

  ReadStatus Read(uint8_t* out, size_t cap, size_t* n) override {
    if (TryTake(out, cap, n)) return ReadStatus::kData;
    uint64_t v;
    ssize_t r = ::read(in_->efd, &v, sizeof v);  // reset, then re-check: no lost wake-up
    (void)r;
    if (TryTake(out, cap, n)) return ReadStatus::kData;
    MutexLock lock(in_->mu);
    return in_->closed ? ReadStatus::kEof : ReadStatus::kWouldBlock;
  }

  void OnWritable() override {}

  void ShutdownWrite() override {
    {
      MutexLock lock(out_->mu);
      if (out_->closed) return;
      out_->closed = true;
    }
    Signal(out_->efd);
  }

  void Shutdown() override {
    for (auto* p : {in_.get(), out_.get()}) {
      {
        MutexLock lock(p->mu);
        p->closed = true;
      }
      Signal(p->efd);
    }
  }

 private:
  static void Signal(int efd) {
    uint64_t one = 1;
    ssize_t r = ::write(efd, &one, sizeof one);
    (void)r;
  }

  bool TryTake(uint8_t* out, size_t cap, size_t* n) {
    MutexLock lock(in_->mu);
    size_t avail = in_->buf.size() - in_->start;
    if (avail == 0) return false;
    size_t k = avail < cap ? avail : cap;
    std::memcpy(out, in_->buf.data() + in_->start, k);
    in_->start += k;
    if (in_->start == in_->buf.size()) {
      in_->buf.clear();
      in_->start = 0;
    }
    *n = k;
    return true;
  }

  std::shared_ptr<InprocPipe> in_;
  std::shared_ptr<InprocPipe> out_;
};

Mutex& RegistryMu() {
  static Mutex mu;
  return mu;
}
std::map<std::string, std::shared_ptr<InprocListenerState>>& Registry() {
  static auto* m = new std::map<std::string, std::shared_ptr<InprocListenerState>>();
  return *m;
}

}  // namespace

InprocPipe::InprocPipe() { efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); }
InprocPipe::~InprocPipe() {
  if (efd >= 0) ::close(efd);
}

std::unique_ptr<Channel> MakeSocketChannel(int fd) { return std::make_unique<SocketChannel>(fd); }

std::unique_ptr<Channel> MakeInprocChannel(std::shared_ptr<InprocPipe> in,
                                           std::shared_ptr<InprocPipe> out) {
  return std::make_unique<InprocChannel>(std::move(in), std::move(out));
}

Status RegisterInproc(const std::string& name, std::shared_ptr<InprocListenerState> state) {
  MutexLock lock(RegistryMu());
  auto [it, inserted] = Registry().emplace(name, std::move(state));
  if (!inserted) return Status::AlreadyExists("inproc://" + name + ": name in use");
  return Status::Ok();
}

void UnregisterInproc(const std::string& name) {
  MutexLock lock(RegistryMu());
  Registry().erase(name);
}

std::shared_ptr<InprocListenerState> FindInproc(const std::string& name) {
  MutexLock lock(RegistryMu());
  auto it = Registry().find(name);
  return it == Registry().end() ? nullptr : it->second;
}

bool SecretsEqual(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); i++) {
    diff = static_cast<uint8_t>(diff | (static_cast<uint8_t>(a[i]) ^ static_cast<uint8_t>(b[i])));
  }
  return diff == 0;
}

}  // namespace asymnvm::fabric::soft
