// The fabric: one verbs-shaped network API with two providers (doc/fabric.md).
//
//   soft   a software NIC: per Fabric instance, a thread that owns the process's registered memory
//          and executes every remote peer's one-sided operation; transports tcp://, unix://,
//          inproc://. The default.
//   verbs  libibverbs RC queue pairs on a real RDMA device. Always compiled; Open fails with
//          kNotSupported where no device exists.
//
// Object model (as in verbs): Fabric (device) → ProtectionDomain → MemoryRegion; CompletionQueue;
// SharedReceiveQueue; Listener / Connection (an RC queue pair). All objects created from a Fabric
// must be destroyed before it. A MemoryRegion must outlive every work request that names it.
//
// Semantics every provider keeps:
//  * Per connection, work requests execute at the target in posting order; completions of one
//    connection are delivered in posting order. Many requests may be outstanding (pipelined).
//  * Post() takes a list: one doorbell, one round trip counted however many requests it holds.
//  * An unsignaled request produces no completion unless it fails.
//  * A failed request completes with an error status; the connection then enters kError, and every
//    request behind it completes with kFlushed (as an RC QP does). The target process is unaffected
//    and keeps serving other connections.
//  * kFlush: completes only after every WRITE/SEND this connection landed before it is durable in
//  the
//    target region's persistence domain (for PM regions: persisted through the region's Persister,
//    exactly the landed ranges). The verbs provider implements it as a 1-byte READ (the papers'
//    idiom), the soft NIC persists the pending ranges and then acknowledges.
//  * Remote accesses are validated at the target: unknown rkey, range outside the region, missing
//    access right, misaligned atomic, malformed packet → the request fails at the initiator with
//    kRemoteAccessError / kRemoteInvalidRequest; no byte outside a registered region is touched.
//  * SRQ: messages from all connections consume receive buffers strictly in arrival order. In
//    multi-packet mode one posted buffer receives many messages, each at the next stride-aligned
//    offset; a message that does not fit in the remainder moves to the next buffer.
//  * RNR: a SEND that finds no receive buffer is retried with back-off up to rnr_retry times, then
//    fails with kRnrRetryExceeded. It is never silently dropped.
//
// Thread safety: Post/PostRecv on one Connection or SRQ are serialized internally (callers may post
// from several threads). Poll/Wait on one CompletionQueue must be called by one thread at a time.
// Counters may be read from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "asymnvm/status.h"

namespace asymnvm::pm {
class Persister;
}

namespace asymnvm::fabric {

// ---------------------------------------------------------------------------------------------
// Memory

enum Access : uint32_t {
  kLocalWrite = 1u << 0,
  kRemoteRead = 1u << 1,
  kRemoteWrite = 1u << 2,
  kRemoteAtomic = 1u << 3,
  kAllRemote = kLocalWrite | kRemoteRead | kRemoteWrite | kRemoteAtomic,
};

// What a peer needs to access a region: fixed 32-byte little-endian wire form (doc/fabric.md).
struct RegionDescriptor {
  static constexpr size_t kEncodedSize = 32;
  uint64_t addr = 0;    // remote address of the first byte (the target's address space)
  uint64_t length = 0;  // bytes
  uint32_t rkey = 0;
  uint32_t access = 0;  // Access bits
  uint64_t tag = 0;     // free for the owner (e.g. region id in a pool); carried verbatim

  void EncodeTo(uint8_t* out) const;  // writes kEncodedSize bytes
  // Errors: kCorruption if fewer than kEncodedSize bytes or reserved fields are non-zero.
  static Result<RegionDescriptor> Decode(const uint8_t* data, size_t len);
  bool operator==(const RegionDescriptor&) const = default;
};

struct MemoryRegionOptions {
  uint32_t access = kLocalWrite;
  // Non-null: a PM region. Data the NIC lands in it (WRITE, SEND into a posted buffer, atomics) is
  // persisted through this Persister before a later kFlush on the same connection completes.
  // Null: DRAM; kFlush still orders but has nothing to persist.
  pm::Persister* persister = nullptr;
};

class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;  // deregisters: later remote accesses fail with a bad rkey
  virtual void* addr() const = 0;
  virtual size_t length() const = 0;
  virtual uint32_t lkey() const = 0;
  virtual uint32_t rkey() const = 0;
  virtual uint32_t access() const = 0;
  RegionDescriptor descriptor(uint64_t tag = 0) const {
    return RegionDescriptor{reinterpret_cast<uint64_t>(addr()), length(), rkey(), access(), tag};
  }
};

class ProtectionDomain {
 public:
  virtual ~ProtectionDomain() = default;
  // Errors: kInvalidArgument (null/zero-length, unknown access bits), kResourceExhausted,
  // kIoError (verbs: ibv_reg_mr failed).
  virtual Result<std::unique_ptr<MemoryRegion>> RegisterMemory(
      void* addr, size_t length, const MemoryRegionOptions& options) = 0;
};

// ---------------------------------------------------------------------------------------------
// Work requests and completions

enum class Opcode : uint8_t {
  kWrite = 1,
  kRead = 2,
  kCompareSwap = 3,  // 8-byte, 8-byte aligned; local buffer receives the original value
  kFetchAdd = 4,     // 8-byte, 8-byte aligned; local buffer receives the original value
  kSend = 5,
  kFlush = 6,  // remote persistence barrier, see the header comment
  kRecv = 7,   // only in completions
};
const char* OpcodeName(Opcode op);

struct WorkRequest {
  uint64_t wr_id = 0;
  Opcode opcode = Opcode::kWrite;
  bool signaled = true;
  // WRITE/SEND only: payload copied at Post time (local_mr may be null); length <= max_inline.
  bool inline_data = false;
  // Local buffer: source of WRITE/SEND; destination of READ; 8-byte destination of the original
  // value for atomics (may be null for atomics: the result is then discarded). Must lie inside
  // local_mr unless inline. kFlush ignores it.
  void* local_addr = nullptr;
  uint32_t length = 0;
  const MemoryRegion* local_mr = nullptr;
  // Target of WRITE/READ/atomics; for kFlush any address of a region of the target with
  // kRemoteRead (verbs reads 1 byte there). SEND ignores them.
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;
  uint64_t compare_add = 0;  // CAS: expected value; FAA: addend
  uint64_t swap = 0;         // CAS: new value
};

struct RecvRequest {
  uint64_t wr_id = 0;
  void* addr = nullptr;
  uint32_t length = 0;
  const MemoryRegion* mr = nullptr;  // must cover [addr, addr + length) and have kLocalWrite
};

enum class CompletionStatus : uint8_t {
  kSuccess = 0,
  kLocalProtectionError,  // local buffer outside local_mr / missing kLocalWrite
  kLocalLengthError,      // message larger than the receive buffer (non multi-packet)
  kRemoteAccessError,     // target rejected: bad rkey, bounds, rights
  kRemoteInvalidRequest,  // target rejected: misaligned atomic, malformed packet, bad opcode
  kRnrRetryExceeded,      // receiver not ready after all retries
  kTransportError,        // connection lost / peer died / fault injected
  kFlushed,               // not executed: the connection was already in the error state
  kGeneralError,
};
const char* CompletionStatusName(CompletionStatus s);

struct Completion {
  uint64_t wr_id = 0;
  Opcode opcode = Opcode::kWrite;
  CompletionStatus status = CompletionStatus::kSuccess;
  uint32_t byte_len = 0;       // READ: bytes read; RECV: message length
  uint64_t connection_id = 0;  // the connection this completion belongs to (sender, for RECV)
  uint32_t offset = 0;         // RECV: offset of the message in the buffer named by wr_id
  bool buffer_done = false;    // RECV: the buffer named by wr_id will receive nothing more
};

// ---------------------------------------------------------------------------------------------
// Queues

struct CompletionQueueOptions {
  uint32_t capacity = 4096;
  // Ring mode: when full, the oldest entry is overwritten (counted in overwritten()); the provider
  // never blocks or errors on a full ring. Without ring mode a full CQ is an overrun: further
  // completions are lost, the CQ reports kResourceExhausted from Poll, and connections using it
  // enter the error state — size CQs for the outstanding signaled requests, as with verbs.
  bool ring = false;
};

class CompletionQueue {
 public:
  virtual ~CompletionQueue() = default;
  // Non-blocking. Returns the number of completions written to `out` (0..out.size()), or
  // kResourceExhausted after an overrun (non-ring).
  virtual Result<size_t> Poll(std::span<Completion> out) = 0;
  // Adaptive: spins briefly, then sleeps until a completion arrives or `timeout` passes.
  // Returns 0 on timeout.
  virtual Result<size_t> Wait(std::span<Completion> out, std::chrono::microseconds timeout) = 0;
  virtual uint64_t overwritten() const = 0;  // ring mode only
  virtual uint32_t capacity() const = 0;
};

struct SrqOptions {
  uint32_t max_wr = 1024;  // receive buffers that may be posted at once
  bool multi_packet = false;
  uint32_t stride = 64;  // multi-packet: messages start at multiples of this in a buffer
  // verbs fallback for multi_packet: each posted buffer is carved into slots of this size.
  uint32_t fallback_slot_size = 4096;
};

class SharedReceiveQueue {
 public:
  virtual ~SharedReceiveQueue() = default;
  // Errors: kInvalidArgument (buffer outside mr, no kLocalWrite, length < stride),
  // kResourceExhausted (more than max_wr outstanding).
  virtual Status PostRecv(std::span<const RecvRequest> buffers) = 0;
  virtual uint32_t posted() const = 0;  // buffers posted and not yet done
  // true when multi-packet placement is done as specified (soft); false when the provider
  // emulates it with fixed-size slots (verbs: one message per slot, offsets are slot offsets).
  virtual bool multi_packet_native() const = 0;
};

// ---------------------------------------------------------------------------------------------
// Counters (per connection, and summed per Fabric). Definitions: doc/fabric.md.

struct Counters {
  uint64_t writes = 0, reads = 0, compare_swaps = 0, fetch_adds = 0, sends = 0, flushes = 0;
  uint64_t recvs = 0;              // messages received (target side)
  uint64_t round_trips = 0;        // doorbells: Post calls that sent at least one request
  uint64_t bytes_out = 0;          // wire bytes sent, headers included
  uint64_t bytes_in = 0;           // wire bytes received, headers included
  uint64_t payload_bytes = 0;      // WRITE/SEND/READ payload bytes initiated
  uint64_t rnr_events = 0;         // RNR NAKs seen (initiator) or issued (target)
  uint64_t errors = 0;             // requests completed with an error (either side)
  uint64_t remote_ops_served = 0;  // one-sided requests this endpoint's NIC executed as target

  Counters& operator+=(const Counters& o);
  Counters operator-(const Counters& o) const;
};

// ---------------------------------------------------------------------------------------------
// Connections

struct ConnectionOptions {
  CompletionQueue* send_cq = nullptr;  // required
  CompletionQueue* recv_cq = nullptr;  // required when receiving (own RQ or SRQ)
  SharedReceiveQueue* srq = nullptr;   // receive through an SRQ instead of the connection's own RQ
  uint32_t max_send_wr = 256;          // outstanding requests; Post beyond it: kResourceExhausted
  uint32_t max_recv_wr = 256;
  uint32_t max_inline = 256;
  uint32_t rnr_retry = 7;                     // RNR retries before kRnrRetryExceeded
  std::chrono::microseconds rnr_backoff{50};  // first back-off; doubles per retry
  std::vector<uint8_t> private_data;          // <= 1024 bytes handed to the peer at set-up
  // Connect: connect + handshake. Accept: how long to wait for an authenticated peer (each peer's
  // handshake has its own deadline, FabricOptions::handshake_timeout, across Accept calls).
  std::chrono::milliseconds timeout{5000};
};

enum class ConnectionState : uint8_t { kConnected, kError, kClosed };

class Connection {
 public:
  virtual ~Connection() = default;  // closes; outstanding requests complete with kFlushed
  // Validates every request before posting any (kInvalidArgument / kResourceExhausted leave the
  // queue untouched). kConnectionError when the connection is in the error state.
  virtual Status Post(std::span<const WorkRequest> wrs) = 0;
  // Own receive queue (no SRQ). Errors as SharedReceiveQueue::PostRecv; kFailedPrecondition with
  // SRQ.
  virtual Status PostRecv(std::span<const RecvRequest> buffers) = 0;
  virtual ConnectionState state() const = 0;
  virtual Status error() const = 0;  // why it entered kError (OK otherwise)
  virtual uint64_t id() const = 0;   // unique per Fabric; appears in completions
  virtual const std::vector<uint8_t>& peer_private_data() const = 0;
  virtual std::string peer_address() const = 0;
  virtual Counters counters() const = 0;
  virtual void Close() = 0;
};

class Listener {
 public:
  virtual ~Listener() = default;
  // The bound address, with a port chosen by the OS resolved (e.g. "tcp://127.0.0.1:40123").
  virtual std::string address() const = 0;
  // Waits for the next authenticated peer. kTimedOut when none arrives within options.timeout.
  virtual Result<std::unique_ptr<Connection>> Accept(const ConnectionOptions& options) = 0;
};

// ---------------------------------------------------------------------------------------------
// The fabric (one NIC)

struct Capabilities {
  bool multi_packet_srq_native = false;
  bool atomics = true;
  uint32_t max_inline = 0;
  uint32_t max_message = 0;             // largest SEND / WRITE / READ in one request
  std::vector<std::string> transports;  // e.g. {"tcp", "unix", "inproc"}
};

// Default adaptive-polling spin: 50 µs on machines with at least 4 hardware threads, 0 (block at
// once) on smaller ones, where a spinning NIC thread steals the core the peer needs — measured on
// 2 cores: small-op latency 5.7–9.4x the ping-pong floor with 50 µs, 1.3–2.4x with 0. The
// environment variable ASYMNVM_SPIN_US overrides both.
std::chrono::microseconds DefaultSpin();

// The built-in cluster secret: fine on one machine (loopback, unix://, inproc://), refused for a
// listener on any other address (CheckListenSecret).
inline constexpr char kDefaultClusterSecret[] = "asymnvm";

struct FabricOptions {
  std::string provider = "soft";  // "soft" | "verbs" | "auto" (verbs if a device exists)
  // Connection set-up is authenticated with the cluster secret (doc/fabric.md §Cluster secret).
  // Fabric::Open resolves it (ResolveClusterSecret): secret_file when set, else cluster_secret when
  // changed from the default, else the environment (ASYMNVM_SECRET_FILE, then ASYMNVM_SECRET),
  // else the built-in default.
  std::string cluster_secret = kDefaultClusterSecret;
  std::string secret_file;  // file holding the secret (one trailing newline ignored)
  // Server side of the handshake (soft provider; doc/fabric.md §Handshake): each accepted peer
  // must finish within handshake_timeout; at most max_pending_handshakes run at once (beyond,
  // the oldest is closed); refused peers are logged at most handshake_log_per_second a second.
  std::chrono::milliseconds handshake_timeout{5000};
  uint32_t max_pending_handshakes = 256;
  uint32_t handshake_log_per_second = 5;
  // TLS on the soft (and shm) provider's tcp:// connections (doc/fabric.md §TLS): on when
  // tls_cert_file is set; unix:// and inproc:// (this host) ignore it. Every node presents its
  // certificate (PEM chain) and key (unencrypted PEM); with tls_verify_peer the peer's certificate
  // must chain to tls_ca_cert_file (PEM bundle, then required). The cluster-secret handshake runs
  // inside TLS, bound to the session, and stays what authenticates a peer. Both sides of a
  // connection must agree: a TLS node and a plain one fail the handshake with an error saying so.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_ca_cert_file;
  bool tls_verify_peer = true;
  uint32_t nic_threads = 1;                        // soft: software NIC threads
  std::chrono::microseconds spin = DefaultSpin();  // adaptive polling: spin, then block
  std::string device;                              // verbs: device name ("" = first)
  uint8_t port = 1;                                // verbs: port number
  int gid_index = 0;                               // verbs
};

// The secret `o` names (see FabricOptions). Errors: kInvalidArgument (unreadable or empty file).
Result<std::string> ResolveClusterSecret(const FabricOptions& o);
// true for unix://, inproc:// and tcp:// addresses whose host resolves only to loopback addresses.
bool IsLoopbackAddress(const std::string& address);
// kFailedPrecondition (with what to do) when `address` is not loopback and `secret` is the built-in
// default. Every listener of the soft provider checks it; daemons check it before starting.
Status CheckListenSecret(const std::string& address, const std::string& secret);

class Fabric {
 public:
  // Errors: kInvalidArgument (unknown provider), kNotSupported (verbs without a device; the
  // message says so), kIoError.
  static Result<std::unique_ptr<Fabric>> Open(const FabricOptions& options);

  virtual ~Fabric() = default;
  virtual std::string provider() const = 0;  // "soft" or "verbs"
  virtual Capabilities capabilities() const = 0;
  virtual Result<std::unique_ptr<ProtectionDomain>> AllocPd() = 0;
  virtual Result<std::unique_ptr<CompletionQueue>> CreateCq(const CompletionQueueOptions& o) = 0;
  virtual Result<std::unique_ptr<SharedReceiveQueue>> CreateSrq(ProtectionDomain* pd,
                                                                const SrqOptions& o) = 0;
  // address: "tcp://HOST:PORT" (port 0 = any), "unix:///path", "inproc://name".
  virtual Result<std::unique_ptr<Listener>> Listen(ProtectionDomain* pd,
                                                   const std::string& address) = 0;
  virtual Result<std::unique_ptr<Connection>> Connect(ProtectionDomain* pd,
                                                      const std::string& address,
                                                      const ConnectionOptions& options) = 0;
  virtual Counters counters() const = 0;  // sum over this fabric's connections, live and closed
};

}  // namespace asymnvm::fabric
