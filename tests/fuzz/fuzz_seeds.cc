// asymnvm-fuzz-seeds: writes the seed corpus of every libFuzzer target
// (tests/fuzz/corpus/<target>/, doc/fuzz.md) by encoding real messages and records with the
// project's own encoders, in each target's input format (byte 0 = mode, as the target's file
// comment says).
//   asymnvm-fuzz-seeds DIR           write DIR/<target>/<seed> (deterministic)
//   asymnvm-fuzz-seeds --check DIR   exit 1 when a seed in DIR is missing or differs (ctest
//                                    fuzz_seeds_current keeps the checked-in corpus current)
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "alloc/backend_allocator.h"
#include "asymnvm/pm.h"
#include "backend/layout.h"
#include "backend/log_format.h"
#include "backend/naming.h"
#include "backend/rpc.h"
#include "common/coding.h"
#include "fabric/oq/wire.h"
#include "fabric/rowan/entry.h"
#include "fabric/soft/packet.h"
#include "kv/format.h"
#include "kv/wire.h"

using namespace asymnvm;
using Bytes = std::vector<uint8_t>;

namespace {

std::map<std::string, std::map<std::string, Bytes>> g_seeds;

void Seed(const std::string& target, const std::string& name, uint8_t mode, const Bytes& body) {
  Bytes b{mode};
  b.insert(b.end(), body.begin(), body.end());
  g_seeds[target][name] = std::move(b);
}
void SeedRaw(const std::string& target, const std::string& name, const Bytes& b) {
  g_seeds[target][name] = b;
}

Bytes Str(const std::string& s) { return Bytes(s.begin(), s.end()); }
Bytes U16(uint16_t v) {
  Bytes b(2);
  PutLe16(b.data(), v);
  return b;
}
Bytes U32(uint32_t v) {
  Bytes b(4);
  PutLe32(b.data(), v);
  return b;
}
Bytes U64(uint64_t v) {
  Bytes b(8);
  PutLe64(b.data(), v);
  return b;
}
Bytes Cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
Bytes Pattern(size_t n, uint8_t seed) {
  Bytes b(n);
  for (size_t i = 0; i < n; i++) b[i] = static_cast<uint8_t>(seed + i * 7);
  return b;
}

// ---- fabric ----

void Packet() {
  using namespace fabric::soft;
  Bytes w(kRequestHeaderSize);
  EncodeRequestHeader(w.data(), kWireWrite, kFlagSignaled | kFlagNeedsAck, 7, 16, 0x1234, 4096, 0,
                      0);
  const Bytes payload = Pattern(16, 3);
  w.insert(w.end(), payload.begin(), payload.end());
  Bytes r(kRequestHeaderSize);
  EncodeRequestHeader(r.data(), kWireRead, kFlagSignaled, 8, 64, 0x1234, 8192, 0, 0);
  Bytes cas(kRequestHeaderSize);
  EncodeRequestHeader(cas.data(), kWireCompareSwap, kFlagSignaled, 9, 8, 0x1234, 64, 5, 6);
  Bytes resp(kResponseHeaderSize);
  EncodeResponseHeader(resp.data(), kWireReadResp, 0, 8, 8);
  const Bytes rp = Pattern(8, 9);
  resp.insert(resp.end(), rp.begin(), rp.end());
  Bytes ack(kResponseHeaderSize);
  EncodeResponseHeader(ack.data(), kWireAck, 0, 9, 0);
  SeedRaw("packet_fuzz", "write", w);
  SeedRaw("packet_fuzz", "stream", Cat({r, cas, resp, ack}));
}

void Bootstrap() {
  const std::string t = "bootstrap_fuzz";
  Seed(t, "addr-tcp", 0, Str("tcp://127.0.0.1:7000"));
  Seed(t, "addr-tcp6", 0, Str("tcp://[::1]:80"));
  Seed(t, "addr-unix", 0, Str("unix:///tmp/asymnvm.sock"));
  Seed(t, "addr-inproc", 0, Str("inproc://backend-0"));
  // flags 7: honest hello, proof and length; the blob the peer sends.
  const Bytes honest = Cat({Bytes{7, 0}, U32(0), Str("soft-nic-parameters")});
  Seed(t, "server-honest", 1, honest);
  Seed(t, "acceptor-honest", 2, honest);
  Seed(t, "client-honest", 3, honest);
  // Honest hello and proof, a blob length beyond the bytes sent.
  Seed(t, "server-short-blob", 1, Cat({Bytes{3, 0}, U32(4096), Str("abc")}));
  // A wrong proof (zeros) and a refusing verdict.
  Seed(t, "acceptor-bad-proof", 2, Cat({Bytes{5, 0}, U32(0), Bytes(32, 0), Str("x")}));
  Seed(t, "client-refused", 3, Cat({Bytes{7, 1}, U32(0), Str("x")}));
}

void Rowan() {
  const std::string t = "rowan_entry_fuzz";
  constexpr size_t kMtu = 256;
  Bytes seg;
  auto place = [&](const rowan::EntryMeta& m, const Bytes& payload) {
    auto blocks = rowan::EncodeEntry(m, payload, kMtu);
    for (const Bytes& b : *blocks) {
      const size_t at = seg.size();
      seg.resize(at + rowan::BlockFootprint(b.size() - rowan::kBlockHeaderSize), 0);
      std::memcpy(seg.data() + at, b.data(), b.size());
    }
  };
  place({1, 3, 1}, Pattern(40, 1));
  place({1, 3, 2}, Pattern(600, 2));  // three blocks
  seg.resize(seg.size() + 64, 0);     // an empty stride
  place({2, 4, 1}, {});
  Seed(t, "segment", 0, seg);
  // Structured: 3 entries (type, owner, len u16, payload, order), gaps, no damage; then damage.
  const Bytes structured =
      Cat({Bytes{3}, Bytes{1, 0}, U16(30), Pattern(30, 5), Bytes{0}, Bytes{2, 1}, U16(500),
           Pattern(500, 6), Bytes{1}, Bytes{9, 2}, U16(0), Bytes{0}, Bytes{0x05}});
  Seed(t, "structured", 1, structured);
  Seed(t, "structured-damaged", 1, Cat({structured, U16(70), Bytes{0x40}}));
}

void OqWire() {
  const std::string t = "oq_wire_fuzz";
  oq::RequestHeader rh;
  rh.type = 30;
  rh.nilext = true;
  rh.client_id = 5;
  rh.seq = 77;
  rh.worker = 0;
  Bytes req;
  oq::EncodeRequest(rh, Pattern(24, 4), &req);
  Seed(t, "request", 0, req);
  oq::wire::ResponseHeader sh;
  sh.code = StatusCode::kNotFound;
  sh.seq = 77;
  Bytes resp;
  oq::wire::EncodeResponse(sh, Str("naming: no structure named 'x'"), &resp);
  Seed(t, "response", 1, resp);
  Bytes refused;  // an error response with a sub-code (a KV server's not-primary refusal)
  oq::wire::EncodeErrorResponse(Status::Unavailable("kv: not primary for shard 3 (map epoch 2)")
                                    .WithSubCode(StatusSubCode::kNotPrimary),
                                78, 1, &refused);
  Seed(t, "response-subcode", 1, refused);
  oq::wire::ServerHello hello;
  hello.worker = 0;
  hello.info.workers = 2;
  hello.info.durable = true;
  hello.info.max_request = 64 * 1024;
  hello.info.max_response = 64 * 1024;
  hello.flush_target.addr = 4096;
  hello.flush_target.length = 65536;
  hello.flush_target.rkey = 17;
  hello.addresses = {"tcp://127.0.0.1:7001", "tcp://127.0.0.1:7002"};
  Seed(t, "server-hello", 2, oq::wire::EncodeServerHello(hello).value());
  Seed(t, "client-hello", 3, oq::wire::EncodeClientHello({1, 42, 16}));
  Seed(t, "word", 4, U64(oq::wire::EncodeWord(123456)));
  Seed(t, "built-request", 5, Cat({U16(30), Bytes{1}, U64(5), U64(78), U32(1), Pattern(12, 8)}));
}

// ---- back-end ----

void LogFormat() {
  const std::string t = "log_format_fuzz";
  const Bytes params = Pattern(20, 1);
  backend::OpLogRecord r;
  r.frontend_id = 3;
  r.op_seq = 9;
  r.structure_id = 2;
  r.op_type = 1;
  r.payload = params;
  Seed(t, "oplog", 0, backend::EncodeOpLog(r));
  // A transaction the fuzz target's 4 KiB pool accepts (data area [1024, 4096), seq word at 8).
  backend::TxnBuilder b;
  b.Write(1024, Pattern(16, 2));
  b.Write(2048, Pattern(5, 3));
  b.Write(1024, Pattern(16, 4));  // coalesces
  b.WritePointer(3000, 32, 1, 8);
  Seed(t, "txn", 1, b.Finish(3, 4, 9, 8));
  backend::TxnBuilder outside;
  outside.Write(512, Pattern(8, 1));  // outside the data area: refused whole
  Seed(t, "txn-outside", 1, outside.Finish(3, 5, 9, 0));
  // Builder operations: [kind][addr][len][bytes].
  Seed(t, "builder", 2,
       Cat({Bytes{0, 0, 8}, Pattern(8, 1), Bytes{0, 4, 8}, Pattern(8, 2), Bytes{3, 2, 4},
            Bytes{0, 0, 8}, Pattern(8, 3)}));
}

void Rpc() {
  const std::string t = "rpc_fuzz";
  backend::RegisterReply r;
  r.lpn = 10;
  r.opn = 9;
  r.lpn_addr = 8320;
  r.opn_addr = 8328;
  r.rejected_addr = 8336;
  r.naming_begin = 8192;
  r.data_begin = 9195520;
  r.data_end = 67108864;
  r.block_size = 4096;
  r.naming_region = {8192, 262144, 5, fabric::kRemoteRead, 0};
  r.data_region = {9195520, 57913344, 6, fabric::kRemoteRead | fabric::kRemoteWrite, 1};
  r.log_address = "tcp://127.0.0.1:7100";
  for (size_t i = 0; i < r.pool_uuid.size(); i++) r.pool_uuid[i] = static_cast<uint8_t>(i);
  Seed(t, "register-reply", 0, backend::EncodeRegisterReply(r));
  backend::NamingEntry e;
  e.slot = 3;
  e.name = "orders";
  e.type = 3;
  e.params = {48, 65536, 1, 0};
  e.root_addr = 8960;
  e.lock_addr = 8968;
  e.seq_addr = 8976;
  e.aux_addr = 8984;
  backend::PayloadWriter w;
  backend::EncodeNamingEntry(e, &w);
  Seed(t, "naming-entry", 1, w.bytes());
  std::vector<backend::FetchedOp> ops(2);
  ops[0] = {11, 3, 1, Pattern(12, 1)};
  ops[1] = {12, 3, 3, Pattern(30, 2)};
  Seed(t, "fetched-ops", 2, backend::EncodeFetchedOps(ops, true));
  Seed(t, "naming-create", 3, backend::EncodeNamingCreate("orders", 3, {48, 65536, 1, 0}));
  Seed(t, "built-reply", 4,
       Cat({U64(1), U64(2), U64(3), U64(4), U32(4096), U64(8192), U64(4096), U32(3), U64(9),
            Bytes(16, 7), Str("tcp://127.0.0.1:1")}));
}

void Naming() {
  const std::string t = "naming_fuzz";
  std::vector<uint64_t> words((64 + 8 * backend::kNamingSlotSize) / 8, 0);
  auto* base = reinterpret_cast<uint8_t*>(words.data());
  auto ns =
      backend::NamingSpace::Open(base, 64, 8 * backend::kNamingSlotSize, pm::DramPersister(), true);
  if (!ns.ok()) std::exit(1);
  (void)(*ns)->Create("orders", 3, {48, 65536, 1, 0});
  (void)(*ns)->Create("fe:7", backend::kFrontendRecordType, {});
  (void)(*ns)->Create("tmp", 5, {});
  (void)(*ns)->Remove("tmp");
  const Bytes area(base + 64, base + 64 + 8 * backend::kNamingSlotSize);
  // flags (strict), creates, area; then names to create.
  SeedRaw(t, "area-strict",
          Cat({Bytes{1, 2}, area, Bytes{5}, Str("users0"), Bytes{4}, Bytes{5}, Str("orders"),
               Bytes{3}}));
  SeedRaw(t, "area-lenient", Cat({Bytes{0, 1}, area, Bytes{2}, Str("ab"), Bytes{1}}));
}

void Layout() {
  const std::string t = "layout_fuzz";
  backend::LayoutParams p;
  p.oq_bytes = 8 * 65536 + 4096;
  p.rowan_segment = 256 * 1024;
  p.bitmap_bytes = [](uint64_t d, uint32_t b) {
    return alloc::BackendAllocator::BitmapBytes(d, b);
  };
  const uint64_t pool = 64ull << 20;
  auto l = backend::PlanLayout(pool - pm::kSuperblockSize, p);
  Bytes h(backend::kBackendHeaderSize);
  backend::EncodeLayout(*l, h.data());
  h.resize(256);  // the rest of the 4 KiB header is zero
  Seed(t, "header", 0, Cat({U64(pool - pm::kSuperblockSize), h}));
  Seed(t, "plan", 1, Cat({U64(pool), U32(1024), U32(4096), U64(0), U32(1 << 20), U64(p.oq_bytes)}));
  Seed(t, "plan-small-blocks", 1,
       Cat({U64(8ull << 20), U32(64), U32(64), U64(1 << 20), U32(1 << 16), U64(4096)}));
}

void Superblock() {
  pm::Superblock sb;
  sb.pool_size = 64ull << 20;
  for (size_t i = 0; i < sb.uuid.size(); i++) sb.uuid[i] = static_cast<uint8_t>(0xA0 + i);
  sb.layout = "asymnvm-backend";
  sb.create_time_ns = 1700000000000000000ull;
  Bytes b(pm::kSuperblockSize);
  pm::EncodeSuperblock(sb, b.data());
  b.resize(256);  // the fuzz target reads the first 96 bytes' fields; keep seeds small
  SeedRaw("superblock_fuzz", "superblock-head", b);
  Bytes full(pm::kSuperblockSize);
  pm::EncodeSuperblock(sb, full.data());
  SeedRaw("superblock_fuzz", "superblock", full);
}

// ---- allocator ----

void Bitmap() {
  const std::string t = "alloc_bitmap_fuzz";
  constexpr uint32_t kBlock = 64;
  constexpr uint64_t kBlocks = 2000;
  // As alloc/bitmap_fuzz.cc lays it out: 64-byte aligned, its size rounded up to 64.
  const size_t size =
      (alloc::BackendAllocator::BitmapBytes(kBlocks * kBlock, kBlock) + 63) / 64 * 64;
  std::vector<uint64_t> words(size / 8 + 8, 0);
  uint8_t* area =
      reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(words.data()) + 63) / 64 * 64);
  alloc::BackendOptions o;
  o.data_begin = 64 * 1024;
  o.data_size = kBlocks * kBlock;
  o.block_size = kBlock;
  o.bitmap = area;
  o.bitmap_size = size;
  o.persister = pm::DramPersister();
  {
    auto al = alloc::BackendAllocator::Open(o);
    if (!al.ok()) {
      std::fprintf(stderr, "bitmap seed: %s\n", al.status().ToString().c_str());
      std::exit(1);
    }
    for (int i = 0; i < 5; i++) (void)(*al)->AllocSlab();
    auto big = (*al)->AllocLarge(1100 * kBlock);  // spans both chunks (an intent record)
    (void)(*al)->AllocSlab();
    (void)(*al)->Free(*big);
    (void)(*al)->AllocLarge(3 * kBlock);
  }
  Seed(t, "bitmap", 0, Bytes(area, area + size));
  // ops: slab, large, slab, free, large (multi-chunk), then end.
  Seed(t, "ops", 1,
       Cat({Bytes{0}, U16(0), Bytes{1}, U16(200), Bytes{0}, U16(0), Bytes{2}, U16(1), Bytes{1},
            U16(19000)}));
  Seed(t, "ops-damaged", 1,
       Cat({Bytes{0}, U16(0), Bytes{1}, U16(200), Bytes{0xFF}, U16(300), Bytes{0x10}}));
}

// ---- Rowan-KV ----

void Kv() {
  const std::string t = "kv_fuzz";
  kv::wire::Request r;
  r.type = kv::wire::kPut;
  r.shard = 3;
  r.key = "user:42";
  r.value = "alice";
  Bytes put;
  kv::wire::EncodeRequest(r, &put);
  Seed(t, "put", 0, Cat({U16(kv::wire::kPut), put}));
  kv::wire::Request scan;
  scan.type = kv::wire::kScan;
  scan.arg1 = 0;
  scan.arg2 = 100;
  Bytes sc;
  kv::wire::EncodeRequest(scan, &sc);
  Seed(t, "scan", 0, Cat({U16(kv::wire::kScan), sc}));
  kv::wire::Response resp;
  resp.version = 7;
  resp.count = 1;
  Bytes rb;
  kv::wire::EncodeResponseHeader(resp, &rb);
  Seed(t, "response", 1, Cat({rb, Str("alice")}));
  kv::format::ServerHeader h;
  h.workers = 2;
  h.shards = 64;
  h.segment_size = 1 << 20;
  h.segments = 16;
  h.oq_buffers = 8;
  h.oq_buffer_size = 65536;
  h.generation_bound = 2048;
  Bytes page(kv::format::kHeaderPage);
  kv::format::EncodeServerHeader(h, page.data());
  page.resize(512);  // the rest of the page is zero
  Seed(t, "header-page", 2, page);
  kv::format::SegmentHeader sh;
  sh.generation = 5;
  sh.owner = 1;
  Bytes seg(kv::format::kSegmentHeaderSize);
  kv::format::EncodeSegmentHeader(sh, seg.data());
  Seed(t, "segment-header", 3, seg);
  Bytes log;
  for (int i = 0; i < 3; i++) {
    kv::format::EntryHeader e;
    e.type = i == 2 ? kv::format::EntryType::kDelete : kv::format::EntryType::kPut;
    e.key_len = 6;
    e.value_len = i == 2 ? 0 : 20;
    e.shard = 1;
    e.version = 10 + i;
    e.generation = 5;
    const std::string key = "key:0" + std::to_string(i);
    const std::string value = i == 2 ? "" : std::string(20, static_cast<char>('a' + i));
    const size_t at = log.size();
    log.resize(at + kv::format::EntryFootprint(e.key_len, e.value_len), 0);
    kv::format::EncodeEntry(e, key, value, log.data() + at);
  }
  Seed(t, "tlog", 4, Cat({U64(5), log}));
}

int Write(const std::filesystem::path& dir) {
  for (const auto& [target, seeds] : g_seeds) {
    std::filesystem::create_directories(dir / target);
    for (const auto& [name, bytes] : seeds) {
      std::ofstream out(dir / target / name, std::ios::binary | std::ios::trunc);
      out.write(reinterpret_cast<const char*>(bytes.data()),
                static_cast<std::streamsize>(bytes.size()));
      if (!out) {
        std::fprintf(stderr, "cannot write %s\n", (dir / target / name).c_str());
        return 1;
      }
    }
  }
  return 0;
}

int Check(const std::filesystem::path& dir) {
  int bad = 0;
  for (const auto& [target, seeds] : g_seeds) {
    for (const auto& [name, bytes] : seeds) {
      std::ifstream in(dir / target / name, std::ios::binary);
      if (!in.is_open()) {
        std::fprintf(stderr, "missing seed %s/%s\n", target.c_str(), name.c_str());
        bad++;
        continue;
      }
      const Bytes have((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (have != bytes) {
        std::fprintf(stderr, "seed %s/%s differs from what the encoders make now\n", target.c_str(),
                     name.c_str());
        bad++;
      }
    }
  }
  if (bad)
    std::fprintf(stderr, "%d seed(s) out of date: run asymnvm-fuzz-seeds %s\n", bad, dir.c_str());
  return bad ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const bool check = argc == 3 && std::strcmp(argv[1], "--check") == 0;
  if (argc != 2 && !check) {
    std::fprintf(stderr, "usage: asymnvm-fuzz-seeds [--check] DIR\n");
    return 2;
  }
  Packet();
  Bootstrap();
  Rowan();
  OqWire();
  LogFormat();
  Rpc();
  Naming();
  Layout();
  Superblock();
  Bitmap();
  Kv();
  return check ? Check(argv[2]) : Write(argv[1]);
}
