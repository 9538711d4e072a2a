#include "kv/resp/server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/logging.h"
#include "common/thread_annotations.h"
#include "kv/resp/commands.h"
#include "kv/resp/tls.h"

namespace asymnvm::kv::resp {

class Loop;

namespace {

constexpr const char* kLog = "resp";
constexpr size_t kReadChunk = 64 << 10;
constexpr int kReadsPerEvent = 16;    // fairness between connections of one loop
constexpr size_t kMaxPending = 1024;  // parsed, not yet run commands per connection
constexpr size_t kMaxBatch = 256;     // commands per worker batch

// One parsed input event waiting to run.
struct Pending {
  enum Kind { kCommand, kFatal } kind = kCommand;
  std::vector<std::string> argv;  // kCommand
  std::string message;            // kFatal
  bool slow = false;  // a fast-path section found a key not served locally: take the workers
};

struct Conn {
  int fd = -1;
  Loop* loop = nullptr;
  std::unique_ptr<Transport> io;  // every byte in and out of the connection (plain or TLS)
  RequestParser parser;
  Session session;  // touched by a worker only while `busy`
  std::deque<Pending> pending;
  std::string out;
  size_t out_off = 0;
  bool reading = true;    // EPOLLIN armed
  bool writing = false;   // EPOLLOUT armed
  bool closing = false;   // close once `out` is flushed
  bool busy = false;      // a batch is with the workers, or the connection waits for the fast path
  bool dead = false;      // closed while busy: drop the batch's output
  bool detached = false;  // removed from epoll (peer hung up while busy)
  bool revisit = false;   // queued to read input TLS already decrypted (Loop::revisit_)
  // A blocking pop that found nothing (session.block waits): registered with the gateway's
  // BlockingKeys while parked; busy stays set, so no further command of the connection runs.
  std::shared_ptr<Parked> parked;
  bool rerun_in_flight = false;  // the loop sent the blocked command to a worker again
  bool awaiting = false;         // its deadline passed while a worker had it: decided on completion
  int64_t deadline_ms = 0;       // BlockRequest::deadline_ms, for the loop's timers
  int64_t next_check_ms = 0;     // the next re-check for writes made elsewhere (first in line only)
  int64_t check_interval_ms = 0;
  std::optional<WakeReason> unblock;  // CLIENT UNBLOCK arrived while a re-run was in flight
  explicit Conn(const ParserLimits& l) : parser(l) {}
};

struct Job {
  std::shared_ptr<Conn> conn;
  std::vector<std::vector<std::string>> commands;
  std::string out;
};

// "ip:port" of the socket's peer, or (local) of its own end.
std::string PeerName(int fd, bool local = false) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  int r = local ? getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len)
                : getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  if (r != 0) return "?";
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  return std::string(host) + ":" + std::to_string(port);
}

// Runs connections' command batches on threads that may block in the store.
class WorkerPool {
 public:
  WorkerPool(GatewayState* state) : state_(state) {}
  ~WorkerPool() { Stop(); }

  Status Start(int n, const std::function<Result<std::unique_ptr<Store>>()>& factory,
               std::function<void(Job*)> done) {
    done_ = std::move(done);
    for (int i = 0; i < n; ++i) {
      auto st = factory();
      if (!st.ok()) return st.status().WithContext("RESP gateway store");
      stores_.push_back(std::move(st).value());
    }
    for (int i = 0; i < n; ++i) {
      threads_.emplace_back([this, i] { Run(stores_[i].get()); });
    }
    return Status::Ok();
  }
  void Submit(Job* job) {
    {
      MutexLock l(mu_);
      queue_.push_back(job);
    }
    cv_.notify_one();
  }
  void Stop() {
    {
      MutexLock l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
    MutexLock l(mu_);  // uncontended: the threads are gone
    for (Job* j : queue_) delete j;
    queue_.clear();
  }

 private:
  void Run(Store* store) {
    Dispatcher dispatcher(state_, store);
    dispatcher.ServeBlockedHere();  // writes serve the clients blocked on their keys (blocking.h)
    for (;;) {
      Job* job = nullptr;
      {
        MutexLock l(mu_);
        cv_.wait(l.native(), [&]() ASYMNVM_REQUIRES(mu_) { return stop_ || !queue_.empty(); });
        if (stop_) return;
        job = queue_.front();
        queue_.pop_front();
      }
      dispatcher.ExecuteAll(job->conn->session, job->commands, &job->out);
      done_(job);
    }
  }

  GatewayState* state_;
  std::function<void(Job*)> done_;
  std::vector<std::unique_ptr<Store>> stores_;
  std::vector<std::thread> threads_;
  Mutex mu_;
  std::condition_variable cv_;
  std::deque<Job*> queue_ ASYMNVM_GUARDED_BY(mu_);
  bool stop_ ASYMNVM_GUARDED_BY(mu_) = false;
};

}  // namespace

class Loop {
 public:
  // listen_fd / tls_listen_fd: -1 when that port is off.
  Loop(GatewayState* state, const ServerOptions* opts, int listen_fd, int tls_listen_fd,
       WorkerPool* pool)
      : state_(state),
        opts_(opts),
        listen_fd_(listen_fd),
        tls_listen_fd_(tls_listen_fd),
        pool_(pool),
        fast_(opts->fast_path.get()),
        dispatcher_(state, &no_store_) {}
  ~Loop() {
    for (auto& c : parked_) state_->blocking.Unpark(c->parked);
    for (auto& [fd, c] : conns_) {
      ::close(fd);
      state_->clients.Remove(c->session.id);
      state_->connected_clients.fetch_sub(1);
    }
    for (Job* j : done_) delete j;
    if (wake_fd_ >= 0) ::close(wake_fd_);
    if (ep_ >= 0) ::close(ep_);
  }

  Status Init() {
    ep_ = epoll_create1(EPOLL_CLOEXEC);
    if (ep_ < 0) return Status::IoError("epoll_create1", errno);
    wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd_ < 0) return Status::IoError("eventfd", errno);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = wake_fd_;
    if (epoll_ctl(ep_, EPOLL_CTL_ADD, wake_fd_, &ev) != 0)
      return Status::IoError("epoll_ctl", errno);
    for (int lfd : {listen_fd_, tls_listen_fd_}) {
      if (lfd < 0) continue;
      ev.events = EPOLLIN | EPOLLEXCLUSIVE;
      ev.data.fd = lfd;
      if (epoll_ctl(ep_, EPOLL_CTL_ADD, lfd, &ev) != 0) return Status::IoError("epoll_ctl", errno);
    }
    return Status::Ok();
  }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  void Stop() {
    stop_.store(true);
    Wake();
    if (thread_.joinable()) thread_.join();
  }
  // Called by a worker when a batch finished (any thread).
  void Complete(Job* job) {
    {
      MutexLock l(done_mu_);
      done_.push_back(job);
    }
    Wake();
  }
  // Called by BlockingKeys (any thread, its lock held): a parked connection should re-run its
  // command, or was unblocked by CLIENT UNBLOCK.
  void PostBlockEvent(std::weak_ptr<Conn> c, WakeReason why) {
    {
      MutexLock l(done_mu_);
      block_events_.push_back({std::move(c), why});
    }
    Wake();
  }

 private:
  // A Store for commands the loop runs itself: they never call it.
  struct NoStore final : Store {
    Status Bug() const { return Status::Internal("an inline command reached the store"); }
    Result<std::optional<StoredValue>> Get(std::string_view) override { return Bug(); }
    Result<uint64_t> Put(std::string_view, std::string_view) override { return Bug(); }
    Result<std::optional<uint64_t>> PutIf(std::string_view, std::string_view, uint64_t) override {
      return Bug();
    }
    Result<std::optional<int64_t>> Incr(std::string_view, int64_t) override { return Bug(); }
    Result<bool> Delete(std::string_view) override { return Bug(); }
    Result<ScanPage> Scan(uint64_t, size_t) override { return Bug(); }
    uint32_t CommitGroup(std::string_view) override { return 0; }
    Result<bool> CommitBatch(const std::vector<BatchWrite>&) override { return Bug(); }
    Result<int64_t> DurableReplicas() override { return Bug(); }
  };

  void Wake() {
    uint64_t one = 1;
    ssize_t r = ::write(wake_fd_, &one, sizeof one);
    (void)r;
  }

  void Run() {
    // OpenSSL writes to the socket with write(2) (no MSG_NOSIGNAL): a peer that reset the
    // connection must give EPIPE, not kill the process. Blocked, a SIGPIPE stays pending on this
    // thread and is never delivered.
    sigset_t pipe_set;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, nullptr);
    std::vector<epoll_event> events(128);
    while (!stop_.load()) {
      // Connections waiting for the fast path: collect what else is ready without blocking, so
      // that one section (one sync) covers them all, then run it. The same for connections with
      // input TLS already decrypted (epoll does not see it).
      const int timeout = fast_ready_.empty() && revisit_.empty() ? NextTimerMs() : 0;
      int n = epoll_wait(ep_, events.data(), static_cast<int>(events.size()), timeout);
      if (n < 0) {
        if (errno == EINTR) continue;
        LOG_ERROR(kLog, "epoll_wait: " << std::strerror(errno));
        return;
      }
      for (int i = 0; i < n; ++i) {
        int fd = events[i].data.fd;
        if (fd == wake_fd_) {
          uint64_t v;
          ssize_t r = ::read(wake_fd_, &v, sizeof v);
          (void)r;
          Completions();
          BlockEvents();
          continue;
        }
        if (fd == listen_fd_ || fd == tls_listen_fd_) {
          Accept(fd);
          continue;
        }
        auto it = conns_.find(fd);
        if (it == conns_.end()) continue;
        std::shared_ptr<Conn> c = it->second;
        uint32_t e = events[i].events;
        bool alive = true;
        if (e & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
          alive = OnReadable(*c, (e & (EPOLLHUP | EPOLLERR)) != 0);
        }
        // EPOLLOUT: output to flush, or a TLS read (the handshake) waiting to write.
        if (alive && (e & EPOLLOUT)) {
          alive = c->io->ReadWantsWrite() ? OnReadable(*c, false) : Flush(*c);
        }
        if (!alive) Close(*c);
      }
      Revisit();
      RunFast();
      if (!parked_.empty()) Timers();
    }
  }

  // Whether the command may run on the fast path: a command on keys (outside MULTI) whose keys
  // all recently were on shards this process is the primary of. The section decides for good.
  bool FastCandidate(const Session& s, const Pending& p) const {
    if (fast_ == nullptr || p.kind != Pending::kCommand || p.argv.empty() || p.slow || s.in_multi) {
      return false;
    }
    const CommandSpec* spec = FindCommand(p.argv[0]);
    if (spec == nullptr || spec->first_key <= 0 ||
        (spec->flags & (kInline | kNoTxn | kUnnamedKeys | kBlocking))) {
      return false;
    }
    // While a client of this gateway is parked in a blocking pop, writes take the workers: a
    // worker serves the parked client a write woke before the write's own reply leaves (Redis 7
    // re-runs a blocked command before the pusher's next command; blocking.h), which a section,
    // whose wake-ups go out after its commit, would not.
    if ((spec->flags & kWrite) && state_->blocking.blocked() > 0) return false;
    auto keys = CommandKeys(*spec, p.argv);
    if (keys.empty()) return false;
    for (auto k : keys) {
      if (!fast_->Likely(k)) return false;
    }
    return true;
  }

  // One fast-path section for every connection waiting for it: their leading fast commands run
  // against the co-located primary, one commit makes them durable, then the replies go out.
  void RunFast() {
    if (fast_ready_.empty()) return;
    std::vector<std::shared_ptr<Conn>> ready;
    ready.swap(fast_ready_);
    struct Staged {
      Conn* c;
      std::string out;
      size_t commands = 0;
    };
    std::vector<Staged> staged;
    staged.reserve(ready.size());
    Status committed;
    {
      std::unique_ptr<FastSection> section = fast_->Begin();
      Dispatcher d(state_, &section->store());
      d.DeferSignals();  // blocked clients are woken once the writes committed
      for (auto& cp : ready) {
        Conn& c = *cp;
        staged.push_back({&c, {}, 0});
        if (c.dead) continue;
        Staged& st = staged.back();
        while (!c.pending.empty() && st.commands < kMaxBatch) {
          Pending& p = c.pending.front();
          if (!FastCandidate(c.session, p)) break;
          const CommandSpec* spec = FindCommand(p.argv[0]);
          bool served = true;
          for (auto k : CommandKeys(*spec, p.argv)) served = served && section->Serves(k);
          if (!served) {
            p.slow = true;  // Serves() updated the hint: the next ones go to the workers at once
            break;
          }
          d.Execute(c.session, p.argv, &st.out);
          c.pending.pop_front();
          st.commands++;
        }
      }
      committed = section->Commit();
      d.FlushSignals();
    }  // the section ends (the primary's workers run again) before the replies go out
    state_->fast_path_commits.fetch_add(1, std::memory_order_relaxed);
    for (size_t i = 0; i < staged.size(); i++) {
      Staged& st = staged[i];
      Conn& c = *st.c;
      c.busy = false;
      if (c.dead) continue;
      state_->fast_path_commands.fetch_add(static_cast<int64_t>(st.commands),
                                           std::memory_order_relaxed);
      if (committed.ok()) {
        c.out += st.out;
      } else {
        // The writes' outcome is unknown: no command of the section may report success.
        ReplyWriter w(&c.out, c.session.proto);
        for (size_t k = 0; k < st.commands; k++) w.Error(StoreError(committed));
      }
      bool alive = Pump(c) && Flush(c);
      if (!alive) Close(c);
    }
  }

  void Completions() {
    std::vector<Job*> jobs;
    {
      MutexLock l(done_mu_);
      jobs.swap(done_);
    }
    for (Job* job : jobs) {
      std::shared_ptr<Conn> c = std::move(job->conn);
      std::string out = std::move(job->out);
      delete job;
      c->rerun_in_flight = false;
      c->awaiting = false;
      if (c->dead) continue;
      c->out += out;
      if (c->session.block && StaysBlocked(c)) {
        // Parked; the replies of the batch's commands before the blocking one still go out.
        if (!Flush(*c)) Close(*c);
        continue;
      }
      c->busy = false;
      if (c->session.close_after_reply) {
        c->closing = true;
        c->pending.clear();
      }
      bool alive = Pump(*c) && Flush(*c);
      if (!alive) Close(*c);
    }
  }

  void Accept(int lfd) {
    const bool tls = lfd == tls_listen_fd_;
    for (;;) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      int fd = accept4(lfd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
          LOG_WARN(kLog, "accept: " << std::strerror(errno));
        }
        return;
      }
      state_->total_connections.fetch_add(1);
      if (state_->connected_clients.load() >= opts_->max_clients) {
        // (On the TLS port a plaintext reply would be garbage to the client: just close.)
        static const char kMsg[] = "-ERR max number of clients reached\r\n";
        if (!tls) {
          ssize_t r = ::send(fd, kMsg, sizeof kMsg - 1, MSG_NOSIGNAL);
          (void)r;
        }
        ::close(fd);
        state_->rejected_connections.fetch_add(1);
        continue;
      }
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      auto c = std::make_shared<Conn>(opts_->limits);
      if (tls) {
        auto io = opts_->tls->NewServerTransport(fd);
        if (!io.ok()) {
          LOG_WARN(kLog, "TLS connection: " << io.status().ToString());
          ::close(fd);
          continue;
        }
        c->io = std::move(io).value();
      } else {
        c->io = Transport::Plain(fd);
      }
      c->fd = fd;
      c->loop = this;
      c->session.id = state_->next_client_id.fetch_add(1);
      c->session.peer = PeerName(fd);
      auto rec = std::make_shared<ClientRecord>();
      rec->id = c->session.id;
      rec->fd = fd;
      rec->addr = c->session.peer;
      rec->laddr = PeerName(fd, /*local=*/true);
      rec->created_ms = SteadyMs();
      rec->last_ms.store(rec->created_ms);
      c->session.record = rec;
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.fd = fd;
      if (epoll_ctl(ep_, EPOLL_CTL_ADD, fd, &ev) != 0) {
        LOG_WARN(kLog, "epoll_ctl add: " << std::strerror(errno));
        ::close(fd);
        continue;
      }
      state_->connected_clients.fetch_add(1);
      state_->clients.Add(std::move(rec));
      conns_.emplace(fd, std::move(c));
    }
  }

  // Reads what is available and runs or dispatches complete commands. false: close now.
  // `hangup`: EPOLLHUP/EPOLLERR, reported even while input is paused — read to learn the error.
  bool OnReadable(Conn& c, bool hangup) {
    bool eof = false;
    char buf[kReadChunk];
    Transport& io = *c.io;
    for (int i = 0; i < kReadsPerEvent && !c.closing &&
                    (c.reading || hangup || io.ReadWantsWrite() || io.WriteWantsRead());
         ++i) {
      const Transport::IoResult r = io.Read(buf, sizeof buf);
      if (r.io == Transport::Io::kOk) {
        c.parser.Append(buf, r.n);
        if (!Pump(c)) return false;
        // A short plain read emptied the socket; TLS returns one record (<= 16 KiB) per read.
        if (!io.tls() && r.n < sizeof buf) break;
        if (c.pending.size() >= kMaxPending) break;
        continue;
      }
      if (r.io == Transport::Io::kEof) {
        eof = true;
        break;
      }
      if (r.io == Transport::Io::kAgain) break;
      // ECONNRESET and friends; on TLS a failed handshake (no or a refused client certificate,
      // not TLS at all) or a protocol error, worth a line.
      if (io.tls()) LOG_INFO(kLog, "closing " << c.session.peer << ": " << io.error());
      return false;
    }
    if (eof) {
      // The peer will send nothing more: answer what it sent, then close. While a batch is in
      // flight, stop watching the socket (a hung-up socket stays readable: no busy polling); the
      // batch's completion flushes and closes.
      c.closing = true;
      if (c.parked) return false;  // blocked: close (and unpark) now; a re-run's outcome is dropped
      if (c.busy) {
        epoll_ctl(ep_, EPOLL_CTL_DEL, c.fd, nullptr);
        c.reading = c.writing = false;
        c.detached = true;
        return true;
      }
    }
    return Flush(c);
  }

  // Moves parsed commands into `pending` (bounded), then runs what can run now. false: close.
  bool Pump(Conn& c) {
    while (c.pending.size() < kMaxPending) {
      Request req;
      auto k = c.parser.Next(&req);
      if (k == RequestParser::Kind::kNeedMore) break;
      Pending p;
      if (k == RequestParser::Kind::kCommand) {
        p.argv = std::move(req.argv);
      } else {
        p.kind = Pending::kFatal;
        p.message = c.parser.message();
      }
      c.pending.push_back(std::move(p));
      if (k == RequestParser::Kind::kFatal) break;
    }
    while (!c.busy && !c.pending.empty()) {
      Pending& p = c.pending.front();
      if (p.kind != Pending::kCommand) {
        // A protocol error: the reply, then the connection closes (as Redis).
        ReplyWriter(&c.out, c.session.proto).Error(p.message);
        LOG_INFO(kLog, "closing " << c.session.peer << ": " << p.message);
        c.closing = true;
        c.pending.clear();
        return true;
      }
      if (RunsInline(c.session, p.argv)) {
        dispatcher_.Execute(c.session, p.argv, &c.out);
        c.pending.pop_front();
        if (c.session.close_after_reply) {
          c.closing = true;
          c.pending.clear();
        }
        continue;
      }
      auto it = conns_.find(c.fd);
      if (FastCandidate(c.session, p)) {
        // Runs at the end of this loop pass, with every other connection's fast commands.
        c.busy = true;
        fast_ready_.push_back(it->second);
        break;
      }
      // A batch of this connection's consecutive commands goes to a worker (up to the next one
      // the fast path may run).
      auto* job = new Job;
      job->conn = it->second;
      while (!c.pending.empty() && c.pending.front().kind == Pending::kCommand &&
             job->commands.size() < kMaxBatch &&
             (job->commands.empty() || !FastCandidate(c.session, c.pending.front()))) {
        job->commands.push_back(std::move(c.pending.front().argv));
        c.pending.pop_front();
        if (IsBlocking(job->commands.back())) break;  // it may park: run nothing behind it
      }
      c.busy = true;
      pool_->Submit(job);
    }
    return true;
  }

  static bool IsBlocking(const std::vector<std::string>& argv) {
    const CommandSpec* spec = FindCommand(argv[0]);
    return spec != nullptr && (spec->flags & kBlocking);
  }

  // --- Blocking pops (blocking.h). A parked connection stays busy; its command re-runs on a
  // worker when BlockingKeys wakes it or (first in a key's line) on the re-check timer.

  // After the connection's blocking command ran (c->session.block set): whether it stays parked.
  // Otherwise the block is over (served, replied an error, timed out, unblocked, or the peer left)
  // and the caller resumes the connection. The loop owns the session here: no claim is out.
  bool StaysBlocked(const std::shared_ptr<Conn>& cp) {
    Conn& c = *cp;
    BlockRequest& b = *c.session.block;
    if (!b.wait || c.closing) {
      EndBlock(c);
      return false;
    }
    const int64_t now = SteadyMs();
    if (c.unblock || (b.deadline_ms != 0 && now >= b.deadline_ms)) {
      ReplyUnblocked(c, c.unblock.value_or(WakeReason::kTimeout));
      EndBlock(c);
      return false;
    }
    // Copied first: once parked or released, a worker may claim the session.
    const std::vector<std::string> keys = b.keys;
    const std::vector<uint64_t> seqs = b.seqs;
    c.deadline_ms = b.deadline_ms;
    if (!c.parked) {
      auto p = std::make_shared<Parked>();
      p->client_id = c.session.id;
      p->keys = b.keys;
      p->wake = [this, w = std::weak_ptr<Conn>(cp)](WakeReason why) { PostBlockEvent(w, why); };
      p->run = [this, w = std::weak_ptr<Conn>(cp)](Dispatcher& d) { return ServeOnWorker(w, d); };
      c.parked = p;
      parked_.push_back(cp);
      c.check_interval_ms = kRecheckFirstMs;
      c.next_check_ms = now + c.check_interval_ms;
      state_->blocking.Park(p);
    } else {
      state_->blocking.Release(c.parked);
    }
    // A write that ran meanwhile (its signal may have come before the client was parked).
    for (size_t i = 0; i < keys.size(); ++i) {
      if (state_->blocking.Seq(keys[i]) != seqs[i]) {
        if (state_->blocking.TryClaim(c.parked)) Rerun(cp);
        break;
      }
    }
    return true;
  }

  // Parked::run, on the worker that claimed the client: its command again, the outcome to its loop
  // as a completed batch. Whether it was served.
  bool ServeOnWorker(const std::weak_ptr<Conn>& w, Dispatcher& d) {
    std::shared_ptr<Conn> c = w.lock();
    if (!c) return true;  // gone
    auto* job = new Job;
    job->conn = c;
    std::vector<std::string> argv = c->session.block->argv;
    d.Execute(c->session, argv, &job->out);
    const bool served = !c->session.block->wait;
    Complete(job);
    return served;
  }

  // Sends the blocked command to a worker again; the caller holds the claim.
  void Rerun(const std::shared_ptr<Conn>& c) {
    c->rerun_in_flight = true;
    auto* job = new Job;
    job->conn = c;
    job->commands.push_back(c->session.block->argv);
    pool_->Submit(job);
  }

  void ReplyUnblocked(Conn& c, WakeReason why) {
    ReplyWriter w(&c.out, c.session.proto);
    if (why == WakeReason::kError) {
      w.Error("UNBLOCKED client unblocked via CLIENT UNBLOCK");
    } else {
      w.NullArray();  // Redis's reply to a timed-out blocking command, whatever its type
    }
  }

  // Forgets the connection's registration (safe while a re-run is in flight: the session is not
  // touched).
  void Unpark(Conn& c) {
    if (!c.parked) return;
    state_->blocking.Unpark(c.parked);
    c.parked.reset();
    for (size_t i = 0; i < parked_.size(); ++i) {
      if (parked_[i].get() == &c) {
        parked_[i] = std::move(parked_.back());
        parked_.pop_back();
        break;
      }
    }
  }

  void EndBlock(Conn& c) {
    Unpark(c);
    c.session.block.reset();
    c.unblock.reset();
  }

  void Resume(Conn& c) {
    c.busy = false;
    bool alive = Pump(c) && Flush(c);
    if (!alive) Close(c);
  }

  void BlockEvents() {
    std::vector<BlockEvent> events;
    {
      MutexLock l(done_mu_);
      events.swap(block_events_);
    }
    for (auto& e : events) {
      std::shared_ptr<Conn> c = e.conn.lock();
      if (!c || c->dead || !c->parked) continue;
      if (e.why == WakeReason::kRetry) {
        if (state_->blocking.TryClaim(c->parked)) Rerun(c);
        continue;
      }
      if (!state_->blocking.TryClaim(c->parked)) {
        c->unblock = e.why;  // decided when the run in flight completes (it may be served)
        continue;
      }
      ReplyUnblocked(*c, e.why);
      EndBlock(*c);
      Resume(*c);
    }
  }

  // Deadlines and re-checks of parked connections.
  void Timers() {
    const int64_t now = SteadyMs();
    std::vector<std::shared_ptr<Conn>> due;
    for (auto& c : parked_) {
      if (c->rerun_in_flight || c->awaiting) continue;
      if ((c->deadline_ms != 0 && now >= c->deadline_ms) || now >= c->next_check_ms) {
        due.push_back(c);
      }
    }
    for (auto& c : due) {
      if (c->dead || !c->parked) continue;
      if (c->deadline_ms != 0 && now >= c->deadline_ms) {
        if (!state_->blocking.TryClaim(c->parked)) {
          c->awaiting = true;  // a worker runs it: its completion decides
          continue;
        }
        ReplyUnblocked(*c, WakeReason::kTimeout);
        EndBlock(*c);
        Resume(*c);
        continue;
      }
      c->check_interval_ms = std::min(c->check_interval_ms * 2, kRecheckMaxMs);
      c->next_check_ms = now + c->check_interval_ms;
      // Only the first in a line re-checks: the others are served in turn after it (FIFO).
      if (state_->blocking.IsFirst(*c->parked) && state_->blocking.TryClaim(c->parked)) Rerun(c);
    }
  }

  // epoll_wait's timeout: until the nearest deadline or re-check of a parked connection.
  int NextTimerMs() const {
    if (parked_.empty()) return -1;
    const int64_t now = SteadyMs();
    int64_t next = INT64_MAX;
    for (const auto& c : parked_) {
      if (c->rerun_in_flight || c->awaiting) continue;
      next = std::min(next, c->next_check_ms);
      if (c->deadline_ms != 0) next = std::min(next, c->deadline_ms);
    }
    if (next == INT64_MAX) return -1;
    return static_cast<int>(std::clamp<int64_t>(next - now, 0, 1000));
  }

  bool RunsInline(const Session& s, const std::vector<std::string>& argv) {
    const CommandSpec* spec = FindCommand(argv[0]);
    if (spec == nullptr) return true;  // an error reply
    if (spec->flags & kInline) return true;
    return s.in_multi && !(spec->flags & kNoMulti);  // just queued
  }

  // Writes pending output; arms EPOLLOUT / disarms EPOLLIN as needed. false: close now.
  bool Flush(Conn& c) {
    Transport& io = *c.io;
    while (c.out_off < c.out.size()) {
      const Transport::IoResult w = io.Write(c.out.data() + c.out_off, c.out.size() - c.out_off);
      if (w.io == Transport::Io::kOk && w.n > 0) {
        c.out_off += w.n;
        continue;
      }
      if (w.io == Transport::Io::kAgain) {
        // A TLS write waiting for input (renegotiation is off: not expected) while the connection
        // reads no more would wait forever, or spin on a readable socket: drop it.
        if (io.WriteWantsRead() && c.closing) return false;
        break;
      }
      if (io.tls() && w.io == Transport::Io::kError) {
        LOG_INFO(kLog, "closing " << c.session.peer << ": " << io.error());
      }
      return false;
    }
    if (c.out_off == c.out.size()) {
      c.out.clear();
      c.out_off = 0;
      if (c.closing && !c.busy && c.pending.empty()) return false;
    } else if (c.out_off > (1 << 20)) {
      c.out.erase(0, c.out_off);
      c.out_off = 0;
    }
    size_t unsent = c.out.size() - c.out_off;
    bool want_write = unsent > 0 || io.ReadWantsWrite();
    bool want_read =
        (!c.closing && unsent <= opts_->max_output_bytes && c.pending.size() < kMaxPending) ||
        io.WriteWantsRead();
    if (c.detached) return !want_write;  // cannot wait for writability: give up on the rest
    if (want_write != c.writing || want_read != c.reading) {
      epoll_event ev{};
      ev.events = (want_read ? static_cast<uint32_t>(EPOLLIN | EPOLLRDHUP) : 0u) |
                  (want_write ? static_cast<uint32_t>(EPOLLOUT) : 0u);
      ev.data.fd = c.fd;
      if (epoll_ctl(ep_, EPOLL_CTL_MOD, c.fd, &ev) != 0) return false;
      c.writing = want_write;
      c.reading = want_read;
    }
    // Input TLS decrypted but the connection did not take (fairness, a full pipeline, paused
    // reading): epoll will not report it, so the loop comes back at the end of this pass.
    if (c.reading && !c.closing && !c.revisit && io.HasBufferedInput()) {
      auto it = conns_.find(c.fd);
      if (it != conns_.end()) {
        c.revisit = true;
        revisit_.push_back(it->second);
      }
    }
    return true;
  }

  void Revisit() {
    if (revisit_.empty()) return;
    std::vector<std::shared_ptr<Conn>> conns;
    conns.swap(revisit_);
    for (auto& cp : conns) {
      Conn& c = *cp;
      c.revisit = false;
      if (c.dead || !c.reading) continue;
      if (!OnReadable(c, false)) Close(c);
    }
  }

  void Close(Conn& c) {
    if (c.dead) return;
    c.dead = true;
    int fd = c.fd;
    Unpark(c);
    epoll_ctl(ep_, EPOLL_CTL_DEL, fd, nullptr);
    c.io->Shutdown();  // TLS: close_notify, if it can go without waiting
    ::close(fd);
    state_->clients.Remove(c.session.id);
    state_->connected_clients.fetch_sub(1);
    conns_.erase(fd);  // a batch in flight keeps the Conn alive until it completes
  }

  GatewayState* state_;
  const ServerOptions* opts_;
  int listen_fd_;
  int tls_listen_fd_;
  WorkerPool* pool_;
  FastPath* fast_;
  // Connections whose next commands wait for this pass's fast-path section (each is busy).
  std::vector<std::shared_ptr<Conn>> fast_ready_;
  // Connections with decrypted TLS input to read at the end of this pass (Conn::revisit).
  std::vector<std::shared_ptr<Conn>> revisit_;
  // Parked connections (blocking pops), and the wake-ups BlockingKeys posted for them.
  std::vector<std::shared_ptr<Conn>> parked_;
  struct BlockEvent {
    std::weak_ptr<Conn> conn;
    WakeReason why;
  };
  NoStore no_store_;
  Dispatcher dispatcher_;
  int ep_ = -1;
  int wake_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::unordered_map<int, std::shared_ptr<Conn>> conns_;
  Mutex done_mu_;
  std::vector<Job*> done_ ASYMNVM_GUARDED_BY(done_mu_);
  std::vector<BlockEvent> block_events_ ASYMNVM_GUARDED_BY(done_mu_);
};

struct Server::Impl {
  ServerOptions opts;
  GatewayState state;
  int listen_fd = -1;
  int tls_listen_fd = -1;
  uint16_t port = 0;
  uint16_t tls_port = 0;
  std::unique_ptr<WorkerPool> pool;
  std::vector<std::unique_ptr<Loop>> loops;
  bool stopped = false;

  ~Impl() {
    if (listen_fd >= 0) ::close(listen_fd);
    if (tls_listen_fd >= 0) ::close(tls_listen_fd);
  }
};

namespace {

Result<int> Listen(const std::string& addr, uint16_t port, uint16_t* bound) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::IoError("socket", errno);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) {
    ::close(fd);
    return Status::InvalidArgument("bind address '" + addr + "' is not an IPv4 address");
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    int e = errno;
    ::close(fd);
    return Status::IoError("bind " + addr + ":" + std::to_string(port) + ": " + std::strerror(e),
                           e);
  }
  if (::listen(fd, 1024) != 0) {
    int e = errno;
    ::close(fd);
    return Status::IoError("listen", e);
  }
  socklen_t len = sizeof sa;
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  *bound = ntohs(sa.sin_port);
  return fd;
}

std::string RandomRunId() {
  std::random_device rd;
  static const char kHex[] = "0123456789abcdef";
  std::string s(40, '0');
  for (char& ch : s) ch = kHex[rd() % 16];
  return s;
}

}  // namespace

Result<std::unique_ptr<Server>> Server::Start(ServerOptions options) {
  if (options.loop_threads < 1 || options.loop_threads > 256) {
    return Status::InvalidArgument("loop_threads must be 1..256");
  }
  if (options.workers < 1 || options.workers > 4096) {
    return Status::InvalidArgument("workers must be 1..4096");
  }
  if (!options.store_factory) return Status::InvalidArgument("no store factory");
  if (!options.listen_plain && !options.tls) {
    return Status::InvalidArgument("neither a plain nor a TLS port to listen on");
  }
  auto impl = std::make_unique<Impl>();
  impl->opts = std::move(options);
  auto& o = impl->opts;
  auto listen = [&o](uint16_t port, uint16_t* bound) -> Result<int> {
    auto fd = Listen(o.bind_address, port, bound);
    if (!fd.ok()) {
      if (!o.fallback_to_ephemeral || fd.status().sys_errno() != EADDRINUSE) return fd.status();
      LOG_INFO(kLog, "port " << port << " is taken; listening on an ephemeral port");
      fd = Listen(o.bind_address, 0, bound);
    }
    return fd;
  };
  if (o.listen_plain) {
    auto fd = listen(o.port, &impl->port);
    if (!fd.ok()) return fd.status();
    impl->listen_fd = *fd;
  }
  if (o.tls) {
    auto fd = listen(o.tls_port, &impl->tls_port);
    if (!fd.ok()) return fd.status().WithContext("TLS port");
    impl->tls_listen_fd = *fd;
  }
  auto& st = impl->state;
  st.cluster_secret = o.cluster_secret;
  st.run_id = RandomRunId();
  st.start_unix_ms = st.NowMs();
  st.port = impl->port;
  st.version = o.version;
  st.loop_threads = o.loop_threads;
  st.max_clients = o.max_clients;
  st.proto_max_bulk_len = o.limits.max_bulk_len;
  impl->pool = std::make_unique<WorkerPool>(&st);
  for (int i = 0; i < o.loop_threads; ++i) {
    auto loop =
        std::make_unique<Loop>(&st, &o, impl->listen_fd, impl->tls_listen_fd, impl->pool.get());
    ASYMNVM_RETURN_IF_ERROR(loop->Init());
    impl->loops.push_back(std::move(loop));
  }
  ASYMNVM_RETURN_IF_ERROR(impl->pool->Start(o.workers, o.store_factory,
                                            [](Job* job) { job->conn->loop->Complete(job); }));
  for (auto& l : impl->loops) l->Start();
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Server::~Server() { Stop(); }

uint16_t Server::port() const { return impl_->port; }
uint16_t Server::tls_port() const { return impl_->tls_port; }
const GatewayState& Server::state() const { return impl_->state; }

void Server::Stop() {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  // Loops first (no new batches), then the workers; completed batches of stopped loops are freed
  // by the loops' destructors.
  for (auto& l : impl_->loops) l->Stop();
  impl_->pool->Stop();
  impl_->loops.clear();
  impl_->pool.reset();
}

}  // namespace asymnvm::kv::resp
