// The soft NIC's worker (fabric/soft/soft_internal.h): one epoll thread per worker serves the
// connections assigned to it — reads and executes what arrives, retries held (RNR) requests, and
// persists the landed ranges of every connection stopped at a FLUSH with one drain per persister.
#pragma once

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/thread_annotations.h"
#include "fabric/soft/soft_internal.h"

namespace asymnvm::fabric::soft::internal {

// ---------------------------------------------------------------------------------------------
// NIC worker

class Worker {
 public:
  Worker(RegionTable* regions, std::chrono::microseconds spin) : regions_(regions), spin_(spin) {}
  ~Worker() { Stop(); }

  Status Start() {
    epfd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epfd_ < 0) return Status::IoError("soft NIC: epoll_create1", errno);
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake_fd_ < 0) return Status::IoError("soft NIC: eventfd", errno);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.ptr = nullptr;
    ::epoll_ctl(epfd_, EPOLL_CTL_ADD, wake_fd_, &ev);
    thread_ = std::thread([this] { Loop(); });
    return Status::Ok();
  }

  void Stop() {
    if (thread_.joinable()) {
      {
        MutexLock lock(cmd_mu_);
        stop_ = true;
      }
      Wake();
      thread_.join();
    }
    for (auto& c : conns_) {
      if (!c->dead()) c->Drop();
    }
    flush_waiting_.clear();
    conns_.clear();
    if (wake_fd_ >= 0) ::close(wake_fd_);
    if (epfd_ >= 0) ::close(epfd_);
    wake_fd_ = epfd_ = -1;
  }

  void Add(std::shared_ptr<ConnCore> c) {
    c->worker_ = this;
    MutexLock lock(cmd_mu_);
    adds_.push_back(std::move(c));
    Wake();
  }

  // Synchronously detaches `c`: when this returns the worker no longer touches it.
  void Remove(ConnCore* c) {
    MutexLock lock(cmd_mu_);
    if (!thread_.joinable()) return;
    uint64_t ticket = ++remove_requested_;
    removes_.push_back(c);
    Wake();
    cmd_cv_.wait(lock.native(),
                 [&]() ASYMNVM_REQUIRES(cmd_mu_) { return remove_done_ >= ticket || stop_; });
  }

  void Wake() {
    uint64_t one = 1;
    ssize_t r = ::write(wake_fd_, &one, sizeof one);
    (void)r;
  }

 private:
  void Loop() {
    epoll_event evs[64];
    auto spin_until = Clock::now() + spin_;
    for (;;) {
      int timeout = -1;
      auto now = Clock::now();
      if (now < spin_until || !flush_waiting_.empty()) {
        timeout = 0;
      } else {
        for (auto& c : conns_) {
          if (c->held() && !c->dead()) {
            auto d = c->hold_deadline();
            int ms =
                d <= now
                    ? 0
                    : static_cast<int>(
                          std::chrono::duration_cast<std::chrono::milliseconds>(d - now).count() +
                          1);
            if (timeout < 0 || ms < timeout) timeout = ms;
          }
        }
      }
      int n = ::epoll_wait(epfd_, evs, 64, timeout);
      if (n < 0 && errno != EINTR) {
        LOG_ERROR(kLog, "epoll_wait failed: " << std::strerror(errno));
        return;
      }
      bool wake = false;
      for (int i = 0; i < n; i++) {
        auto* c = static_cast<ConnCore*>(evs[i].data.ptr);
        if (c == nullptr) {
          wake = true;
          continue;
        }
        if (c->dead()) continue;
        if (evs[i].events & EPOLLOUT) c->ch_->OnWritable();
        if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) c->set_readable();
        Service(c);
      }
      if (wake) {
        uint64_t v;
        ssize_t r = ::read(wake_fd_, &v, sizeof v);
        (void)r;
        if (ProcessCommands()) return;
      }
      now = Clock::now();
      for (auto& c : conns_) {
        if (!c->dead() && c->ready_to_retry(now)) Service(c.get());
      }
      CompleteFlushes();
      Reap();
      if (n > 0) spin_until = Clock::now() + spin_;
    }
  }

  void Service(ConnCore* c) {
    const bool was_waiting = c->flush_waiting();
    {
      RegionReadHold regions(regions_);  // taken at the first lookup, released at the end
      c->Service(&regions);
    }
    if (c->want_drop() && !c->dead()) Detach(c);
    if (!was_waiting && c->flush_waiting() && !c->dead()) flush_waiting_.push_back(c);
  }

  // FLUSH group commit: every connection of this worker waiting on a FLUSH has its landed ranges
  // flushed, then each persister is drained once (msync mode: one group-committed sync of the
  // merged ranges instead of one per FLUSH), then each is acknowledged and goes on parsing — which
  // may stop at its next FLUSH: a few rounds, then back to epoll (without blocking while any wait).
  void CompleteFlushes() {
    for (int round = 0; round < 8 && !flush_waiting_.empty(); round++) {
      std::vector<ConnCore*> waiting;
      waiting.swap(flush_waiting_);  // Service below may queue a connection again
      std::erase_if(waiting, [](ConnCore* c) { return c->dead(); });
      {
        RegionReadHold regions(regions_);
        std::vector<pm::Persister*> drain;
        for (ConnCore* c : waiting) c->StagePersist(&regions, &drain);
        for (pm::Persister* p : drain) p->Drain();
      }
      for (ConnCore* c : waiting) {
        c->AckFlush();
        Service(c);
      }
    }
  }

  void Detach(ConnCore* c) {
    ::epoll_ctl(epfd_, EPOLL_CTL_DEL, c->ch_->poll_fd(), nullptr);
    c->Drop();
  }

  // Returns true when the worker must exit.
  bool ProcessCommands() {
    std::vector<std::shared_ptr<ConnCore>> adds;
    std::vector<ConnCore*> removes;
    uint64_t ticket;
    {
      MutexLock lock(cmd_mu_);
      if (stop_) {
        cmd_cv_.notify_all();
        return true;
      }
      adds.swap(adds_);
      removes.swap(removes_);
      ticket = remove_requested_;
    }
    for (auto& c : adds) {
      epoll_event ev{};
      ev.events = c->ch_->edge_triggered() ? (EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET) : EPOLLIN;
      ev.data.ptr = c.get();
      if (::epoll_ctl(epfd_, EPOLL_CTL_ADD, c->ch_->poll_fd(), &ev) != 0) {
        c->EnterError(CompletionStatus::kTransportError,
                      Status::IoError("soft NIC: epoll_ctl", errno));
        c->Drop();
      }
      conns_.push_back(std::move(c));
      Service(conns_.back().get());
    }
    for (ConnCore* c : removes) {
      if (!c->dead()) Detach(c);
    }
    Reap();
    if (!removes.empty()) {
      MutexLock lock(cmd_mu_);
      remove_done_ = ticket;
      cmd_cv_.notify_all();
    }
    return false;
  }

  void Reap() {
    std::erase_if(flush_waiting_, [](ConnCore* c) { return c->dead(); });
    conns_.erase(std::remove_if(conns_.begin(), conns_.end(),
                                [](const std::shared_ptr<ConnCore>& c) { return c->dead(); }),
                 conns_.end());
  }

  RegionTable* regions_;
  const std::chrono::microseconds spin_;
  int epfd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
  Mutex cmd_mu_;
  std::condition_variable cmd_cv_;
  bool stop_ ASYMNVM_GUARDED_BY(cmd_mu_) = false;
  std::vector<std::shared_ptr<ConnCore>> adds_ ASYMNVM_GUARDED_BY(cmd_mu_);
  std::vector<ConnCore*> removes_ ASYMNVM_GUARDED_BY(cmd_mu_);
  uint64_t remove_requested_ ASYMNVM_GUARDED_BY(cmd_mu_) = 0;
  uint64_t remove_done_ ASYMNVM_GUARDED_BY(cmd_mu_) = 0;
  std::vector<std::shared_ptr<ConnCore>> conns_;  // worker thread only
  // Connections stopped at a FLUSH, in arrival order (worker thread only; never dead after Reap).
  std::vector<ConnCore*> flush_waiting_;
};

}  // namespace asymnvm::fabric::soft::internal
