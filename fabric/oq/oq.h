// The Ordered Queue (JUNE BERRY paper §4–5, doc/oq.md; wire format, PM layout,
// executor and recovery in doc/oq.md).
//
// A Server runs N workers. Each worker owns one multi-packet SRQ (stride 64) stocked with
// `buffers_per_worker` receive buffers of `buffer_size` bytes, a listener, and a thread that
// executes the requests landed in its buffers strictly in receive-buffer order (bitmap +
// next-index; completions of different connections may arrive out of order). The application
// registers one Handler; requests carry a type and opaque payload bytes.
//
// A request is *nilext* (no result, e.g. a set) or not (e.g. a get). With policy kOq a nilext
// request commits on the NIC acknowledgement of its SEND (in durable mode: of a FLUSH posted in the
// same doorbell right behind it) and the server sends nothing back; every other request commits
// when the client receives the software response. Non-idempotent requests must never be marked
// nilext (durable recovery may re-execute the nilext request at ReqToExecute).
//
// Policies (same code, for honest comparison): kOq (nilext: commit on NIC ack), kRawRpc (execute,
// then reply, for every request), kDeferred (nilext: reply, then execute; others: execute, reply).
//
// Durable mode: the receive buffers live in a caller-provided PM area (e.g. inside a pm::Pool user
// area). Per worker, ReqToExecute and SRQTail are persisted as self-validating 8-byte words.
// Server::Start recovers: it re-executes every valid nilext request from ReqToExecute to SRQTail in
// queue order (Handler sees ctx.recovering == true), skips non-nilext ones, then serves.
//
// Client: one Client per process, shared by all its threads. It holds one connection per server
// worker. Threads publish requests into the connection's slots; posting is flat-combined (whoever
// takes the connection's post lock posts everything published in one Post), and the thread that
// holds the connection's poll lock (the "owner") waits on the CQ and delivers acknowledgements
// and responses to every slot. See doc/oq.md §Client.
//
// Thread safety: Client methods may be called from any number of threads. Server::stats() from
// any thread; Stop() from one thread. The Handler is called from worker threads: calls for one
// worker are sequential (queue order); calls for different workers are concurrent.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "asymnvm/fabric.h"
#include "asymnvm/pm.h"
#include "asymnvm/status.h"

namespace asymnvm::oq {

enum class Policy : uint8_t { kOq = 0, kRawRpc = 1, kDeferred = 2 };
const char* PolicyName(Policy p);                     // "oq" | "rawrpc" | "deferred"
Result<Policy> ParsePolicy(const std::string& name);  // kInvalidArgument on anything else

inline constexpr uint32_t kRequestHeaderSize = 40;  // doc/oq.md §Wire format
inline constexpr uint32_t kResponseHeaderSize = 32;
inline constexpr uint32_t kMaxWorkers = 63;

// What the handler learns about a request besides its payload.
struct RequestContext {
  uint32_t worker = 0;
  uint16_t type = 0;
  bool nilext = false;
  uint64_t client_id = 0;
  uint64_t seq = 0;  // the client's request sequence number (per connection)
  // Queue position: (buffer post sequence << 16) | (offset / stride). Strictly increasing in
  // execution order within a worker, also across restarts of a durable server.
  uint64_t position = 0;
  bool recovering = false;  // true while Server::Start re-executes requests found in PM
};

// Executes one request. `response` is empty on entry; whatever it holds on return is sent back
// (non-nilext requests, or every request under kRawRpc/kDeferred; at most max_response bytes,
// longer ones are replaced by a kInternal error). A non-OK Status is sent to the client instead
// of the response (code and message), or, for a nilext request under kOq, counted and logged.
// For a durable server the handler must make its effects durable before returning.
using Handler = std::function<Status(const RequestContext& ctx, std::span<const uint8_t> payload,
                                     std::vector<uint8_t>* response)>;

struct ServerOptions {
  fabric::Fabric* fabric = nullptr;        // required
  fabric::ProtectionDomain* pd = nullptr;  // required
  // Worker 0 listens here; worker k > 0 derives its address (tcp: same host, port 0; unix: path
  // + ".wK"; inproc: name + "-wK"). Clients only need worker 0's address().
  std::string listen_address = "tcp://127.0.0.1:0";
  // Addresses of workers 1, 2, ... (so a firewall can name every port): when not empty it must
  // hold at least workers - 1 addresses (more are ignored); empty: derived as above.
  std::vector<std::string> worker_listen_addresses;
  uint32_t workers = 1;              // 1..kMaxWorkers
  uint32_t buffer_size = 64 * 1024;  // bytes per receive buffer; multiple of 4096
  uint32_t buffers_per_worker = 16;  // >= 2
  uint32_t stride = 64;              // multi-packet stride; power of two, 64..4096
  uint32_t max_request = 8 * 1024;   // largest request incl. header; <= buffer_size
  uint32_t max_response = 8 * 1024;  // largest response payload
  Policy policy = Policy::kOq;
  // Durable mode: buffers and worker headers in [pm_area, pm_area + pm_area_size), which must be
  // at least DurableAreaSize(...) bytes, 4 KiB aligned, persisted through `persister`.
  bool durable = false;
  uint8_t* pm_area = nullptr;
  size_t pm_area_size = 0;
  pm::Persister* persister = nullptr;
  // Durable mode, optional. A handler whose effects become durable later than its return (the
  // back-end's redo log with checkpoints, doc/backend.md) sets both:
  //  * rte_persister persists the ReqToExecute word instead of `persister` (e.g. one that does
  //    not sync: the handler then restores the word from its own checkpoint before Start);
  //  * before_recycle(worker, rte) runs on the worker thread before the buffers holding requests
  //    at queue positions < rte (all executed) are zeroed and re-posted — in Retire and at the
  //    end of recovery — and must make those requests' effects durable before it returns.
  pm::Persister* rte_persister = nullptr;
  std::function<void(uint32_t worker, uint64_t rte)> before_recycle;
  // Optional, any mode: runs on the worker thread before it posts the software responses of the
  // requests it executed (a group of them: one call per batch of responses) and must make those
  // requests' effects durable — a handler may then defer its syncs to it (group commit). False:
  // it could not, and those responses are dropped (never sent; the clients' outcome is unknown).
  std::function<bool(uint32_t worker)> before_respond;
  std::chrono::milliseconds accept_poll{100};  // how often acceptors check for Stop
};

// Bytes of PM a durable server needs: 4 KiB header page + workers × buffers × buffer_size.
size_t DurableAreaSize(uint32_t workers, uint32_t buffers_per_worker, uint32_t buffer_size);

struct WorkerStats {
  uint64_t executed = 0;  // requests handed to the Handler (recovery included)
  uint64_t nilext = 0;
  uint64_t non_nilext = 0;
  uint64_t responses = 0;           // software responses posted
  uint64_t responses_failed = 0;    // ... of which Post failed (the client's connection died)
  uint64_t rejected = 0;            // corrupt / short / oversized / wrong-worker requests
  uint64_t handler_errors = 0;      // Handler returned non-OK
  uint64_t buffers_retired = 0;     // receive buffers consumed and re-posted
  uint64_t out_of_order = 0;        // completions that arrived ahead of next-index
  uint64_t recovered_executed = 0;  // nilext requests re-executed by recovery
  uint64_t recovered_skipped = 0;   // non-nilext requests recovery skipped
  uint64_t recv_errors = 0;         // receive completions with an error status
};

struct ServerStats {
  uint64_t executed = 0;  // sum over workers
  uint64_t connections = 0;
  uint64_t rnr_seen = 0;  // RNR events at the server NIC (no receive buffer), all connections
  std::vector<WorkerStats> workers;
};

class Server {
 public:
  // Validates options, formats or recovers the durable area (recovery runs the Handler before
  // Start returns), creates fabric objects and starts workers and acceptors.
  // Errors: kInvalidArgument (missing/ill-sized option, area too small or misaligned, a durable
  // area of another geometry), kCorruption (durable header or a worker word fails its check),
  // fabric errors (Listen, CreateSrq, RegisterMemory) with context.
  static Result<std::unique_ptr<Server>> Start(const ServerOptions& options, Handler handler);
  ~Server();  // Stop()

  std::string address() const;  // worker 0's listen address (what clients connect to)
  ServerStats stats() const;
  // Stops accepting, closes connections, joins threads. Requests landed but not yet executed stay
  // in PM (durable) and are recovered by the next Start. Idempotent.
  void Stop();

 private:
  struct Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

struct ClientOptions {
  fabric::Fabric* fabric = nullptr;        // required
  fabric::ProtectionDomain* pd = nullptr;  // required
  std::string server_address;              // Server::address()
  // SEND + FLUSH in one doorbell; Submit commits on the FLUSH ack. Also switched on when the
  // server reports it is durable (handshake).
  bool durable = false;
  // Durable servers: whether a Call (non-nilext; it commits on its response) is also FLUSHed. The
  // server makes a Call's effects durable itself before responding and recovery never re-executes
  // a non-nilext request, so its landing needs no FLUSH — except where the server's persisted
  // ranges are mirrored byte for byte (an asymnvm-backend with mirrors: the mirror's copy of the
  // receive buffers must match), hence true by default; kv::Client sets false (one sync less per
  // GET in msync mode).
  bool flush_calls = true;
  uint64_t client_id = 0;       // 0: chosen at random
  uint32_t window = 32;         // outstanding requests per connection (slots)
  uint32_t rnr_retry = 100000;  // soft: RNR holds before failing (verbs caps at 7 = ∞)
  std::chrono::milliseconds timeout{5000};  // connect, and each Submit/Call
};

// Learned from worker 0 at Connect (doc/oq.md §Handshake).
struct ServerInfo {
  Policy policy = Policy::kOq;
  bool durable = false;
  uint32_t workers = 0;
  uint32_t max_request = 0;   // bytes incl. header
  uint32_t max_response = 0;  // payload bytes
};

class Client {
 public:
  // Connects to every worker of the server at options.server_address.
  // Errors: kInvalidArgument (missing option, window 0), kProtocolError (peer is not an OQ server
  // or sent impossible parameters), fabric connect errors (kTimedOut, kConnectionError, ...).
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options);
  ~Client();

  const ServerInfo& server() const;
  uint64_t client_id() const;

  // A nilext request. Returns when committed: on the NIC ack (kOq), plus the software response
  // (kRawRpc / kDeferred). Errors: kInvalidArgument (worker out of range, payload too large),
  // kTimedOut (not committed within options.timeout; outcome unknown), kConnectionError /
  // kRnrRetryExceeded (the connection failed; outcome unknown; the connection stays failed),
  // and any error the server reports in a software response (e.g. kCorruption, handler errors).
  // A connection error with Status::retryable() set means the request certainly was not sent
  // (the connection had failed before it was posted, or the post was refused): a caller may send
  // it again — to a new connection — even when it is not idempotent.
  Status Submit(uint32_t worker, uint16_t type, std::span<const uint8_t> payload);
  // Several nilext requests (any workers), posted together — one doorbell per connection for as
  // many as half the window allows at once — and awaited together. One status per request, as
  // Submit would have returned it; requests to one worker stay in order.
  struct Outgoing {
    uint32_t worker = 0;
    uint16_t type = 0;
    std::span<const uint8_t> payload;
  };
  std::vector<Status> SubmitMany(std::span<const Outgoing> requests);
  // A pipelined Submit: the request is posted now (same order, same doorbell rules) and
  // AwaitSubmit later returns what Submit would have (its deadline runs from the post). Each
  // outstanding one holds a slot of the worker's window until awaited; every ticket must be
  // awaited before the next Submit that would need its slot (a caller keeps fewer than `window`
  // outstanding per worker) and before the Client is destroyed, or dropped with the Client.
  struct Ticket {
    uint32_t worker = 0;
    uint32_t slot = 0;
    std::chrono::steady_clock::time_point deadline;
  };
  Result<Ticket> SubmitAsync(uint32_t worker, uint16_t type, std::span<const uint8_t> payload);
  Status AwaitSubmit(const Ticket& ticket);
  // A non-nilext request: returns the handler's response. Errors as Submit.
  Status Call(uint32_t worker, uint16_t type, std::span<const uint8_t> payload,
              std::vector<uint8_t>* response);

  // Test hook: sends `raw` bytes verbatim as a request to `worker` and waits for the NIC ack
  // (or FLUSH ack when durable). Used to exercise the server's validation of bad requests.
  Status TEST_SendRaw(uint32_t worker, std::span<const uint8_t> raw);
  // Test hook: like Call, but sends `raw` verbatim, whose header must carry `seq` = the value
  // returned by TEST_NextSeq(worker) to match the response.
  uint64_t TEST_NextSeq(uint32_t worker);
  Status TEST_CallRaw(uint32_t worker, std::span<const uint8_t> raw,
                      std::vector<uint8_t>* response);

  fabric::Counters counters() const;  // summed over this client's connections

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Request encoding (exposed for tests and tools). EncodeRequest appends a full request (header +
// payload, checksum filled) to *out. ValidateRequest checks one request in `bytes` (which may hold
// trailing bytes): kCorruption (size below header, size beyond `bytes`, bad checksum, unknown
// version) or kInvalidArgument (size above max_request).
struct RequestHeader {
  uint64_t checksum = 0;
  uint32_t size = 0;
  uint16_t type = 0;
  bool nilext = false;
  uint64_t client_id = 0;
  uint64_t seq = 0;
  uint32_t worker = 0;
};
void EncodeRequest(const RequestHeader& h, std::span<const uint8_t> payload,
                   std::vector<uint8_t>* out);
Result<RequestHeader> ValidateRequest(std::span<const uint8_t> bytes, uint32_t max_request);

// ---- Read-only inspection of a durable area no server holds (asymnvm-ctl check; a back-end
// before Server::Start, whose recovery zeroes the buffers). Nothing is written. ----

// One landing between a worker's ReqToExecute and its SRQTail, in queue order: a request
// recovery would re-execute (valid) or a run of strides holding bytes but no valid request.
struct LandedRequest {
  uint32_t worker = 0;
  uint64_t post_seq = 0;     // of the receive buffer
  uint32_t offset = 0;       // within the buffer
  uint64_t area_offset = 0;  // from the start of the area
  bool valid = false;        // ValidateRequest passed: `header` is verified
  RequestHeader header;
  std::string error;  // !valid: what ValidateRequest said about the first stride
  // !valid and an unfinished landing: nothing valid landed after it in its buffer and the NIC
  // had not moved on to the next buffer (first word zero). The normal state after a crash: the
  // request was never acknowledged (the FLUSH behind it completes only after it landed).
  bool tail = false;
  std::span<const uint8_t> bytes;  // valid: the request; else from `offset` to the buffer's end
};

struct DurableAreaScan {
  uint32_t workers = 0, buffers_per_worker = 0, buffer_size = 0, stride = 0;
  std::vector<uint64_t> req_to_execute, srq_tail;  // per worker (positions as in doc/oq.md)
  std::vector<LandedRequest> landed;
};

// Walks every worker's buffers from ReqToExecute to SRQTail exactly as Server::Start's recovery
// does (requests validated with ValidateRequest against `max_request`; 0: the area's buffer
// size). kNotFound: blank area (not
// formatted); kCorruption: header or a worker word fails its check or is inconsistent;
// kInvalidArgument: the area is smaller than the geometry in its header.
Result<DurableAreaScan> ScanDurableArea(std::span<const uint8_t> area, uint32_t max_request);

}  // namespace asymnvm::oq
