// asymnvm-demo: the project's main job before the back-end existed; kept as the fabric demo.
//
// One process plays both sides of a disaggregated-PM node pair on embedded defaults:
//  * a "back-end" software NIC (Fabric) that owns a PM pool file in the data directory, registers
//    its user area as a PM region (persisted through the pool's Persister) and stocks a
//    multi-packet SRQ with log segments of that region — a proto Rowan b-log;
//  * a "front-end" NIC whose sender threads, each on its own connection, SEND + flush
//    self-describing records (sender, seq, epoch, CRC32C) into the shared SRQ, and drive one-sided
//    WRITE / READ / CAS / fetch-and-add traffic at a counters area of the same region.
// It then checks and prints what happened: records landed per sender and in order, back-to-back
// 64 B-aligned placement across senders, the fabric counters, the pool and the XPLine DLWA of the
// persisted ranges. Re-running on the same data directory reopens the pool and finds the previous
// run's records still valid on PM.
//
// User-area layout (offsets from Pool::user_base()):
//   [0, 4 KiB)        demo header (magic, runs, CRC32C)
//   [4 KiB, 8 KiB)    counters area: 8-byte words, see kWord* in demo.cc
//   [64 KiB, ...)     log segments of kSegmentBytes each
// Record layout: doc in workloads/README.md ("demo record").
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "asymnvm/status.h"

namespace asymnvm::demo {

struct DemoOptions {
  std::string data_dir = "./data";
  std::string fabric = "soft";    // soft | verbs | auto
  std::string transport = "tcp";  // tcp | unix | inproc
  uint32_t records = 500;         // per sender
  uint32_t senders = 4;
  uint64_t pool_size = 64ull << 20;   // bytes, used when the pool is created
  std::string persist_mode = "auto";  // auto | msync | flush
  uint64_t seed = 1;
};

// Runs the demo, printing its story to `out`. Errors carry a message for the user; every check
// that fails is also printed.
Status RunDemo(const DemoOptions& options, std::ostream& out);

}  // namespace asymnvm::demo
