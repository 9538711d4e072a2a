#include "workloads/driver/runner.h"

namespace asymnvm::driver {

std::vector<uint8_t> ValueFor(uint64_t key, uint64_t version, size_t len) {
  std::vector<uint8_t> v(len);
  uint64_t x = key * 0x9E3779B97F4A7C15ull ^ version;
  for (size_t i = 0; i < len; i++) {
    x ^= x >> 29;
    x *= 0xBF58476D1CE4E5B9ull;
    v[i] = static_cast<uint8_t>(x >> 56);
  }
  return v;
}

structures::Key MapKey(uint64_t key, uint32_t key_size) {
  if (key_size == 0) return structures::Key(key);
  std::string k = "user" + std::to_string(key);
  if (k.size() > key_size) k.resize(key_size);
  return structures::Key(k);
}

Result<RunResult> Run(structures::Handle& h, const RunConfig& c,
                      const std::function<void(uint64_t)>& progress) {
  ASYMNVM_ASSIGN_OR_RETURN(workloads::Mix mix, workloads::ParseMix(c.mix));
  ASYMNVM_ASSIGN_OR_RETURN(workloads::OpChooser chooser, workloads::OpChooser::Create(mix));
  ASYMNVM_ASSIGN_OR_RETURN(auto keys,
                           workloads::MakeKeyGenerator(c.distribution, c.key_space, c.theta));
  ASYMNVM_ASSIGN_OR_RETURN(workloads::ValueSizeGenerator sizes,
                           workloads::ValueSizeGenerator::Create(c.value_size));
  workloads::Rng rng(c.seed);
  RunResult r;
  r.next_insert = c.next_insert;
  r.latency.Reserve(static_cast<size_t>(std::min<uint64_t>(c.ops, 1u << 24)));
  const bool seq = structures::IsSequence(h.kind());
  auto* q = seq ? static_cast<structures::Sequence*>(&h) : nullptr;
  auto* m = seq ? nullptr : static_cast<structures::Map*>(&h);
  const uint32_t key_size = m ? m->key_size() : 0;
  const uint32_t vmax = h.value_size();
  std::vector<uint8_t> value;
  structures::Value got;
  const size_t vec = seq ? 1 : std::max<uint32_t>(1, c.vector);
  std::vector<structures::KeyValue> pending;
  // Sends the pending vector; every write in it gets the vector's latency.
  auto send_vector = [&]() -> Status {
    if (pending.empty()) return Status::Ok();
    const auto t0 = bench::Clock::now();
    Status st = m->PutBatch(pending);
    const uint64_t ns = bench::ElapsedNs(t0, bench::Clock::now());
    if (!st.ok()) return st.WithContext("vector of " + std::to_string(pending.size()) + " writes");
    for (size_t k = 0; k < pending.size(); k++) r.latency.Add(ns);
    pending.clear();
    return Status::Ok();
  };
  const auto start = bench::Clock::now();
  const auto deadline = start + c.max_time;
  for (uint64_t i = 0; i < c.ops; i++) {
    const workloads::Op op = chooser.Next(rng);
    const bool read = op == workloads::Op::kRead || op == workloads::Op::kScan;
    uint64_t keynum;
    if (!read && c.fresh_inserts) {
      keynum = r.next_insert++;
    } else {
      keynum = keys->Next(rng) % c.key_space;
    }
    const uint64_t key = workloads::KeyNumToKey(keynum, c.hashed_keys);
    if (!read)
      value = ValueFor(key, i + c.seed,
                       std::min<uint64_t>(std::max<uint64_t>(1, sizes.Next(rng)), vmax));
    if (vec > 1 && !read) {
      pending.emplace_back(MapKey(key, key_size), value);
      r.writes++;
      r.ops++;
      if (pending.size() >= vec) ASYMNVM_RETURN_IF_ERROR(send_vector());
      if ((i & 1023) == 1023) {
        if (progress) progress(i + 1);
        if (bench::Clock::now() > deadline) break;
      }
      continue;
    }
    if (vec > 1) ASYMNVM_RETURN_IF_ERROR(send_vector());  // a read sees every earlier write
    const auto t0 = bench::Clock::now();
    Status st;
    if (seq) {
      st = read ? q->Peek(&got) : q->Push(value);
    } else {
      const structures::Key mk = MapKey(key, key_size);
      st = read ? m->Get(mk, &got) : m->Put(mk, value);
    }
    const auto t1 = bench::Clock::now();
    if (!st.ok()) {
      if (st.code() != StatusCode::kNotFound)
        return st.WithContext("operation " + std::to_string(i));
      r.not_found++;
    }
    r.latency.Add(bench::ElapsedNs(t0, t1));
    (read ? r.reads : r.writes)++;
    r.ops++;
    if ((i & 1023) == 1023) {
      if (progress) progress(i + 1);
      if (t1 > deadline) break;
    }
  }
  ASYMNVM_RETURN_IF_ERROR(send_vector());
  ASYMNVM_RETURN_IF_ERROR(h.Sync());
  r.seconds = static_cast<double>(bench::ElapsedNs(start, bench::Clock::now())) / 1e9;
  return r;
}

}  // namespace asymnvm::driver
