#include "structures/base.h"

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <ostream>

#include "backend/log_format.h"
#include "common/checksum.h"
#include "common/crash_point.h"
#include "common/logging.h"
#include "structures/walk.h"

namespace asymnvm::structures {

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kStack:
      return "stack";
    case Kind::kQueue:
      return "queue";
    case Kind::kHashTable:
      return "hash";
    case Kind::kSkipList:
      return "skiplist";
    case Kind::kBst:
      return "bst";
    case Kind::kBPlusTree:
      return "bptree";
    case Kind::kMvBst:
      return "mvbst";
    case Kind::kMvBPlusTree:
      return "mvbptree";
  }
  return "unknown";
}

Result<Kind> ParseKind(const std::string& name) {
  for (Kind k : kAllKinds) {
    if (name == KindName(k)) return k;
  }
  return Status::InvalidArgument(
      "unknown structure '" + name +
      "' (valid: stack, queue, hash, skiplist, bst, bptree, mvbst, mvbptree)");
}

bool IsSequence(Kind kind) { return kind == Kind::kStack || kind == Kind::kQueue; }
bool IsOrdered(Kind kind) { return !IsSequence(kind) && kind != Kind::kHashTable; }
bool IsMultiVersion(Kind kind) { return kind == Kind::kMvBst || kind == Kind::kMvBPlusTree; }

std::string Key::ToString() const {
  if (is_int_) return std::to_string(int_);
  static const char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  const size_t shown = std::min<size_t>(bytes_.size(), 64);
  for (size_t i = 0; i < shown; i++) {
    const auto c = static_cast<unsigned char>(bytes_[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  out += '"';
  if (shown < bytes_.size()) out += "... (" + std::to_string(bytes_.size()) + " bytes)";
  return out;
}

std::ostream& operator<<(std::ostream& os, const Key& key) { return os << key.ToString(); }

Status Map::DeleteBatch(std::span<const Key> keys, uint64_t* deleted) {
  if (deleted) *deleted = 0;
  for (const Key& k : keys) {  // every key checked before any Delete
    if (k.is_int() != (key_size() == 0) ||
        (!k.is_int() && (k.bytes().empty() || k.bytes().size() > key_size()))) {
      return Status::InvalidArgument(internal::Describe(kind(), structure().name) + ": bad key " +
                                     k.ToString() + " for key_size " + std::to_string(key_size()));
    }
  }
  for (const Key& k : keys) {
    Status st = Delete(k);
    if (st.ok()) {
      if (deleted) ++*deleted;
    } else if (st.code() != StatusCode::kNotFound) {
      return st;
    }
  }
  return Status::Ok();
}

Status Map::PutBatch(std::span<const KeyValue> kvs) {
  // Validate everything first: a bad entry fails the call before any Put.
  for (const KeyValue& kv : kvs) {
    const Key& k = kv.first;
    if (k.is_int() != (key_size() == 0) ||
        (!k.is_int() && (k.bytes().empty() || k.bytes().size() > key_size()))) {
      return Status::InvalidArgument(internal::Describe(kind(), structure().name) + ": bad key " +
                                     k.ToString() + " for key_size " + std::to_string(key_size()));
    }
    if (kv.second.size() > value_size()) {
      return Status::InvalidArgument(internal::Describe(kind(), structure().name) + ": value of " +
                                     std::to_string(kv.second.size()) +
                                     " bytes exceeds value_size " + std::to_string(value_size()));
    }
  }
  for (const KeyValue& kv : kvs) ASYMNVM_RETURN_IF_ERROR(Put(kv.first, kv.second));
  return Status::Ok();
}

namespace internal {
namespace {

// Open handles per (session, structure id): Session::Replay reaches the handle through it.
std::mutex g_registry_mu;
std::map<std::pair<const frontend::Session*, uint32_t>, Base*>& Registry() {
  static auto* r = new std::map<std::pair<const frontend::Session*, uint32_t>, Base*>();
  return *r;
}

}  // namespace

std::string Describe(Kind kind, const std::string& name) {
  return std::string(KindName(kind)) + " '" + name + "'";
}

void EncodeSlot(std::span<const uint8_t> value, std::span<uint8_t> slot) {
  std::memset(slot.data(), 0, slot.size());
  PutU32(slot.data(), static_cast<uint32_t>(value.size()));
  if (!value.empty()) std::memcpy(slot.data() + 4, value.data(), value.size());
}

Status DecodeSlot(std::span<const uint8_t> slot, uint32_t value_size, Value* out) {
  if (slot.size() < 4) return Status::Corruption("value slot shorter than its length field");
  const uint32_t len = GetU32(slot.data());
  if (len > value_size || 4 + static_cast<size_t>(len) > slot.size()) {
    return Status::Corruption("value slot length " + std::to_string(len) + " exceeds value_size " +
                              std::to_string(value_size));
  }
  if (out) out->assign(slot.data() + 4, slot.data() + 4 + len);
  return Status::Ok();
}

void EncodeKeySlot(const Key& key, uint32_t key_size, uint8_t* slot) {
  if (key_size == 0) {
    PutU64(slot, key.u64());
    return;
  }
  const std::string_view b = key.bytes();
  std::memset(slot, 0, KeySlotBytes(key_size));
  const uint16_t len = static_cast<uint16_t>(b.size());
  std::memcpy(slot, &len, 2);
  std::memcpy(slot + 2, b.data(), b.size());
}

Status DecodeKeySlot(const uint8_t* slot, uint32_t key_size, Key* key) {
  if (key_size == 0) {
    *key = Key(GetU64(slot));
    return Status::Ok();
  }
  uint16_t len;
  std::memcpy(&len, slot, 2);
  if (len == 0 || len > key_size) {
    return Status::Corruption("key slot length " + std::to_string(len) + " outside 1.." +
                              std::to_string(key_size));
  }
  *key = Key(std::string_view(reinterpret_cast<const char*>(slot) + 2, len));
  return Status::Ok();
}

uint64_t KeyHash(const Key& key, uint64_t seed) {
  if (key.is_int()) {
    const uint64_t k = key.u64();
    return Hash64(&k, sizeof k, seed);
  }
  return Hash64(key.bytes().data(), key.bytes().size(), seed);
}

namespace {

size_t KeyParamBytes(const Key& key) { return key.is_int() ? 8 : 2 + key.bytes().size(); }

void PutKeyParam(const Key& key, uint8_t* p) {
  if (key.is_int()) {
    PutU64(p, key.u64());
    return;
  }
  const uint16_t len = static_cast<uint16_t>(key.bytes().size());
  std::memcpy(p, &len, 2);
  std::memcpy(p + 2, key.bytes().data(), len);
}

// Reads one key of the op-log encoding at params[*at]; advances *at past it.
Status GetKeyParam(std::span<const uint8_t> params, uint32_t key_size, size_t* at, Key* key) {
  const size_t left = params.size() - *at;
  if (key_size == 0) {
    if (left < 8) return Status::Corruption("op log parameters: key truncated");
    *key = Key(GetU64(params.data() + *at));
    *at += 8;
    return Status::Ok();
  }
  if (left < 2) return Status::Corruption("op log parameters: key length truncated");
  uint16_t len;
  std::memcpy(&len, params.data() + *at, 2);
  if (len == 0 || len > key_size || left - 2 < len) {
    return Status::Corruption("op log parameters: key length " + std::to_string(len) +
                              " outside 1.." + std::to_string(key_size) + " or truncated");
  }
  *key = Key(std::string_view(reinterpret_cast<const char*>(params.data()) + *at + 2, len));
  *at += 2 + len;
  return Status::Ok();
}

}  // namespace

std::vector<uint8_t> EncodeKeyValue(const Key& key, std::span<const uint8_t> value) {
  const size_t kb = KeyParamBytes(key);
  std::vector<uint8_t> p(kb + 4 + value.size());
  PutKeyParam(key, p.data());
  PutU32(p.data() + kb, static_cast<uint32_t>(value.size()));
  if (!value.empty()) std::memcpy(p.data() + kb + 4, value.data(), value.size());
  return p;
}

Status DecodeKeyValue(std::span<const uint8_t> params, uint32_t key_size, Key* key, Value* value) {
  size_t at = 0;
  ASYMNVM_RETURN_IF_ERROR(GetKeyParam(params, key_size, &at, key));
  if (params.size() - at < 4) return Status::Corruption("op log parameters: no value length");
  const uint32_t len = GetU32(params.data() + at);
  at += 4;
  if (params.size() - at != len) {
    return Status::Corruption("op log parameters: value length does not match");
  }
  if (value) value->assign(params.begin() + static_cast<ptrdiff_t>(at), params.end());
  return Status::Ok();
}

std::vector<uint8_t> EncodeVector(std::span<const KeyValue> kvs) {
  size_t n = 4;
  for (const KeyValue& kv : kvs) n += KeyParamBytes(kv.first) + 4 + kv.second.size();
  std::vector<uint8_t> p(n);
  PutU32(p.data(), static_cast<uint32_t>(kvs.size()));
  size_t at = 4;
  for (const KeyValue& kv : kvs) {
    PutKeyParam(kv.first, p.data() + at);
    at += KeyParamBytes(kv.first);
    PutU32(p.data() + at, static_cast<uint32_t>(kv.second.size()));
    if (!kv.second.empty()) std::memcpy(p.data() + at + 4, kv.second.data(), kv.second.size());
    at += 4 + kv.second.size();
  }
  return p;
}

Status DecodeVector(std::span<const uint8_t> params, uint32_t key_size,
                    std::vector<KeyValue>* out) {
  out->clear();
  if (params.size() < 4) return Status::Corruption("vector op log shorter than its count");
  const uint32_t n = GetU32(params.data());
  const size_t min_entry = key_size == 0 ? 12 : 7;
  if (n == 0 || n > params.size() / min_entry) {
    return Status::Corruption("vector op log: count " + std::to_string(n) + " does not fit " +
                              std::to_string(params.size()) + " bytes");
  }
  size_t at = 4;
  out->reserve(n);
  for (uint32_t i = 0; i < n; i++) {
    Key key;
    Status st = GetKeyParam(params, key_size, &at, &key);
    if (!st.ok()) {
      return Status::Corruption("vector op log: entry " + std::to_string(i) + ": " + st.message());
    }
    if (params.size() - at < 4)
      return Status::Corruption("vector op log: entry " + std::to_string(i) + " truncated");
    const uint32_t len = GetU32(params.data() + at);
    at += 4;
    if (params.size() - at < len) {
      return Status::Corruption("vector op log: entry " + std::to_string(i) + " value truncated");
    }
    if (!out->empty() && out->back().first >= key) {
      return Status::Corruption("vector op log: keys not strictly ascending at entry " +
                                std::to_string(i));
    }
    out->emplace_back(std::move(key), Value(params.begin() + static_cast<ptrdiff_t>(at),
                                            params.begin() + static_cast<ptrdiff_t>(at + len)));
    at += len;
  }
  if (at != params.size())
    return Status::Corruption("vector op log: trailing bytes after the last entry");
  return Status::Ok();
}

std::vector<KeyValue> SortedUnique(std::span<const KeyValue> kvs) {
  std::vector<size_t> order(kvs.size());
  for (size_t i = 0; i < order.size(); i++) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return kvs[a].first < kvs[b].first; });
  std::vector<KeyValue> out;
  out.reserve(order.size());
  for (size_t i = 0; i < order.size(); i++) {
    if (i + 1 < order.size() && kvs[order[i + 1]].first == kvs[order[i]].first)
      continue;  // a later one wins
    out.push_back(kvs[order[i]]);
  }
  return out;
}

Result<frontend::Structure> Base::Resolve(frontend::Session& s, Kind kind, const std::string& name,
                                          Options* o, uint64_t default_param) {
  if (o->value_size == 0 || o->value_size > kMaxValueSize) {
    return Status::InvalidArgument("value_size must be 1.." + std::to_string(kMaxValueSize) +
                                   " bytes, got " + std::to_string(o->value_size));
  }
  if (o->key_size > kMaxKeySize || (IsSequence(kind) && o->key_size != 0)) {
    return Status::InvalidArgument(IsSequence(kind)
                                       ? std::string("key_size must be 0 for a sequence")
                                       : "key_size must be 0 (integer keys) or 1.." +
                                             std::to_string(kMaxKeySize) + " bytes, got " +
                                             std::to_string(o->key_size));
  }
  if (o->param == 0) o->param = default_param;
  const bool create = o->access == Access::kWriter && o->create;
  Result<frontend::Structure> r = Status::Internal("unset");
  if (create) {
    std::array<uint64_t, 4> params{o->value_size, o->param, kLayoutVersion, o->key_size};
    r = s.CreateRoot(name, static_cast<uint32_t>(kind), params);
    if (!r.ok() && r.status().code() == StatusCode::kAlreadyExists) {
      auto other = s.OpenRoot(name);
      std::string what = other.ok() ? std::string(KindName(static_cast<Kind>(other->type))) : "?";
      return Status::FailedPrecondition("type mismatch: '" + name + "' is a " + what + ", not a " +
                                        KindName(kind));
    }
  } else {
    r = s.OpenRoot(name);
    if (!r.ok() && r.status().code() == StatusCode::kNotFound) {
      return Status::NotFound("no structure named '" + name + "'");
    }
  }
  if (!r.ok()) return r.status();
  if (r->type != static_cast<uint32_t>(kind)) {
    return Status::FailedPrecondition("type mismatch: '" + name + "' is a " +
                                      KindName(static_cast<Kind>(r->type)) + ", not a " +
                                      KindName(kind));
  }
  if (r->params[2] != kLayoutVersion || r->params[0] == 0 || r->params[0] > kMaxValueSize ||
      r->params[3] > kMaxKeySize) {
    return Status::Corruption(Describe(kind, name) + ": naming entry has unknown layout version " +
                              std::to_string(r->params[2]) + ", value size " +
                              std::to_string(r->params[0]) + " or key size " +
                              std::to_string(r->params[3]));
  }
  o->value_size = static_cast<uint32_t>(r->params[0]);
  o->key_size = static_cast<uint32_t>(r->params[3]);
  o->param = r->params[1];
  return r;
}

Base::Base(frontend::Session& s, frontend::Structure st, Kind kind, const Options& options)
    : s_(s), st_(std::move(st)), kind_(kind), opt_(options) {
  std::lock_guard<std::mutex> l(g_registry_mu);
  // A reader handle opened next to a writer handle of the same structure in one session (the
  // block walk of an online reclaim, structures/walk.h) does not displace the writer: replays and
  // the reconnect hook look the writer up.
  auto [it, inserted] = Registry().emplace(std::make_pair(&s_, st_.id), this);
  if (!inserted && (writer() || !it->second->writer())) it->second = this;
}

Base::~Base() {
  {
    std::lock_guard<std::mutex> l(g_registry_mu);
    auto it = Registry().find({&s_, st_.id});
    if (it != Registry().end() && it->second == this) Registry().erase(it);
  }
  if (closer_set_) s_.SetOpCloser(st_.id, nullptr);
  if (writer()) {
    Status st = s_.Fence();
    if (!st.ok())
      LOG_WARN("structures", Describe(kind_, st_.name) << ": sync at close: " << st.ToString());
  }
  if (locked_) {
    Status st = s_.WriterUnlock(st_);
    if (!st.ok())
      LOG_WARN("structures", Describe(kind_, st_.name) << ": unlock at close: " << st.ToString());
  }
}

void Base::KeepsOpsOpen(std::function<Status()> close) {
  s_.SetOpCloser(st_.id, std::move(close));
  closer_set_ = true;
}

Status Base::AcquireWriterLock() {
  if (!writer() || locked_ || !opt_.lock_at_open) return Status::Ok();
  Status st = s_.WriterLock(st_);
  if (!st.ok()) {
    if (st.code() == StatusCode::kTimedOut) {
      return Status::TimedOut(Describe(kind_, st_.name) + ": another writer holds the lock");
    }
    return st;
  }
  locked_ = true;
  return Status::Ok();
}

Result<uint64_t> Base::EnsureAnchor(std::span<const uint8_t> init) {
  ASYMNVM_ASSIGN_OR_RETURN(uint64_t root, s_.ReadWord(st_.root_addr));
  if (root != 0) return root;
  if (!writer()) return Status::NotFound(Describe(kind_, st_.name) + " is not initialized yet");
  ASYMNVM_ASSIGN_OR_RETURN(uint64_t a, s_.Malloc(init.size()));
  ASYMNVM_RETURN_IF_ERROR(s_.Write(a, init, &st_));
  ASYMNVM_ASSIGN_OR_RETURN(uint64_t old, s_.CompareSwap(st_.root_addr, 0, a));
  if (old == 0) return a;
  ASYMNVM_RETURN_IF_ERROR(s_.Free(a));
  return old;
}

Status Base::Read(uint64_t addr, std::span<uint8_t> out, bool cached) {
  return cached ? s_.Read(addr, out, st_.page_size) : s_.ReadRemote(addr, out);
}

Result<uint64_t> Base::ReadU64(uint64_t addr, bool cached) {
  uint8_t w[8];
  ASYMNVM_RETURN_IF_ERROR(Read(addr, w, cached));
  return GetU64(w);
}

// Values shorter than this are sent inline: splitting a write around a pointer costs two entry
// headers (32 B) and the pointer body (16 B).
constexpr size_t kMinPointerValue = 48;

Status Base::Write(uint64_t addr, std::span<const uint8_t> data) {
  if (op_value_.size() >= kMinPointerValue && data.size() >= op_value_.size()) {
    const auto it =
        std::search(data.begin(), data.end(),
                    std::boyer_moore_horspool_searcher(op_value_.begin(), op_value_.end()));
    if (it != data.end()) {
      const size_t at = static_cast<size_t>(it - data.begin());
      const size_t n = op_value_.size();
      if (at > 0) ASYMNVM_RETURN_IF_ERROR(s_.MemLog(addr, data.first(at)));
      ASYMNVM_RETURN_IF_ERROR(
          s_.MemLogFromOp(addr + at, data.subspan(at, n), op_value_seq_, op_value_offset_));
      if (at + n < data.size()) {
        ASYMNVM_RETURN_IF_ERROR(s_.MemLog(addr + at + n, data.subspan(at + n)));
      }
      return Status::Ok();
    }
  }
  return s_.MemLog(addr, data);
}

Status Base::WriteU64(uint64_t addr, uint64_t v) {
  uint8_t w[8];
  PutU64(w, v);
  return s_.MemLog(addr, w);
}

Status Base::Update(uint16_t op_type, std::span<const uint8_t> params,
                    const std::function<Status()>& body, size_t value_from) {
  ASYMNVM_RETURN_IF_ERROR(CheckWritable());
  if (in_txn_) return body();  // the transaction logs and commits
  ASYMNVM_ASSIGN_OR_RETURN(const uint64_t seq, s_.OpLog(st_, op_type, params));
  if (value_from != 0 && value_from < params.size() && seq != 0) {
    op_value_ = params.subspan(value_from);
    op_value_seq_ = seq;
    op_value_offset_ = static_cast<uint32_t>(value_from);
  }
  Status st = body();
  op_value_ = {};
  ASYMNVM_RETURN_IF_ERROR(st);
  return s_.TxWrite(st_);
}

Status Base::PutVector(std::span<const KeyValue> kvs, const VectorGather& gather,
                       const VectorKeyBound& bound) {
  ASYMNVM_RETURN_IF_ERROR(CheckWritable());
  for (const KeyValue& kv : kvs) {
    ASYMNVM_RETURN_IF_ERROR(CheckKey(kv.first));
    ASYMNVM_RETURN_IF_ERROR(CheckValue(kv.second));
  }
  return CutAndApply(SortedUnique(kvs), gather, bound, kOpPutVector);
}

Status Base::DeleteVector(std::span<const Key> keys, const VectorGather& gather,
                          const VectorKeyBound& bound) {
  ASYMNVM_RETURN_IF_ERROR(CheckWritable());
  std::vector<KeyValue> kvs;
  kvs.reserve(keys.size());
  for (const Key& k : keys) {
    ASYMNVM_RETURN_IF_ERROR(CheckKey(k));
    kvs.emplace_back(k, Value{});
  }
  return CutAndApply(SortedUnique(kvs), gather, bound, kOpDeleteVector);
}

Status Base::CutAndApply(std::span<const KeyValue> sorted, const VectorGather& gather,
                         const VectorKeyBound& bound, uint16_t op_type) {
  constexpr size_t kAnchorSlack = 64;  // the anchor words every plan may add
  size_t begin = 0;
  while (begin < sorted.size()) {
    size_t end = begin, bytes = 4;
    double writes = kAnchorSlack;
    while (end < sorted.size()) {
      const double w = bound ? static_cast<double>(bound(sorted[end])) : vector_pair_bytes_;
      if (end > begin &&
          (bytes + KeyValueValueOffset(sorted[end].first) + sorted[end].second.size() >
               kVectorPayloadMax ||
           writes + w > static_cast<double>(VectorWriteBudget()))) {
        break;
      }
      bytes += KeyValueValueOffset(sorted[end].first) + sorted[end].second.size();
      writes += w;
      end++;
    }
    ASYMNVM_RETURN_IF_ERROR(
        ApplyVectorRun(sorted.subspan(begin, end - begin), false, gather, false, op_type));
    begin = end;
  }
  return Status::Ok();
}

Status Base::PutVectorAtomic(std::span<const KeyValue> kvs, const VectorGather& gather,
                             const std::function<Status(const KeyValue&)>& each) {
  ASYMNVM_RETURN_IF_ERROR(CheckWritable());
  for (const KeyValue& kv : kvs) {
    ASYMNVM_RETURN_IF_ERROR(CheckKey(kv.first));
    ASYMNVM_RETURN_IF_ERROR(CheckValue(kv.second));
  }
  const std::vector<KeyValue> sorted = SortedUnique(kvs);
  if (sorted.empty()) return Status::Ok();
  if (in_txn_) {
    for (const KeyValue& kv : sorted) ASYMNVM_RETURN_IF_ERROR(each(kv));
    return Status::Ok();
  }
  return ApplyVectorRun(sorted, /*replay=*/false, gather, /*atomic=*/true);
}

Status Base::ApplyVectorRun(std::span<const KeyValue> run, bool replay, const VectorGather& gather,
                            bool atomic, uint16_t op_type) {
  VectorPlan plan;
  auto abandon = [&]() {
    for (uint64_t a : plan.allocs) (void)s_.Free(a);
  };
  Status st = gather(run, &plan);
  if (!st.ok()) {
    abandon();
    return st;
  }
  const size_t budget = VectorWriteBudget();
  if (!atomic && !replay && run.size() > 1 && plan.bytes > budget) {
    // Too many writes for one transaction: nothing is logged yet, so cut the run into parts
    // expected to fit (by this plan's bytes per pair) and gather them anew.
    abandon();
    const size_t parts =
        std::min(run.size(), std::max<size_t>(2, (plan.bytes * 5 / 4 + budget - 1) / budget));
    size_t at = 0;
    for (size_t k = 0; k < parts; k++) {
      const size_t n = run.size() / parts + (k < run.size() % parts ? 1 : 0);
      ASYMNVM_RETURN_IF_ERROR(ApplyVectorRun(run.subspan(at, n), false, gather, false, op_type));
      at += n;
    }
    return Status::Ok();
  }
  // naive has no op log: an atomic run's memory logs still travel as one transaction (the
  // grouped writes of multi-structure transactions), not one write each.
  const bool group = atomic && level() == frontend::Level::kNaive;
  if (group) s_.SetGroupWrites(true);
  // Writes beyond one transaction (only an atomic run, or the replay of one, has them) go out in
  // parts that keep the operation open (Session::TxWritePart): its op log stays above the OPN
  // until Update's TxWrite, so a crash in between replays the whole run.
  const size_t part_limit =
      s_.max_transaction_bytes() - backend::kTxnHeaderSize - backend::kTxnCommitSize;
  st = Update(op_type, EncodeVector(run), [&]() -> Status {
    size_t part = 0;
    for (size_t i = 0; i < plan.writes.size(); i++) {
      // Crash tests kill here: the op log is durable, half of the memory logs are buffered (a
      // vector delete also reaches a point of its own, so a test can stop in one, not a put).
      if (i == plan.writes.size() / 2) {
        ASYMNVM_CRASH_POINT("structures.vector.mid_writes");
        if (op_type == kOpDeleteVector) ASYMNVM_CRASH_POINT("structures.vector_delete.mid_writes");
      }
      const size_t fp = backend::kTxnEntryHeaderSize + (plan.writes[i].second.size() + 7) / 8 * 8;
      if (part > 0 && part + fp > part_limit) {
        ASYMNVM_RETURN_IF_ERROR(s_.TxWritePart(st_));
        // Crash tests kill here too: part of the run's memory logs are sent, the rest are not.
        ASYMNVM_CRASH_POINT("structures.vector.after_part");
        part = 0;
      }
      ASYMNVM_RETURN_IF_ERROR(Write(plan.writes[i].first, plan.writes[i].second));
      part += fp;
    }
    return Status::Ok();
  });
  if (group) s_.SetGroupWrites(false);
  if (!st.ok()) {
    abandon();
    return st;
  }
  vector_pair_bytes_ = static_cast<double>(plan.bytes) / static_cast<double>(run.size());
  if (plan.commit) plan.commit();
  for (uint64_t a : plan.frees) ASYMNVM_RETURN_IF_ERROR(s_.Free(a));
  return Status::Ok();
}

Status Base::ReplayVector(const frontend::RecoveredOp& op, const VectorGather& gather) {
  std::vector<KeyValue> run;
  Status st = DecodeVector(op.payload, ksize(), &run);
  if (!st.ok()) return Status::Corruption(Describe(kind_, st_.name) + ": " + st.message());
  for (const KeyValue& kv : run) {
    if (kv.second.size() > vsize() || (op.op_type == kOpDeleteVector && !kv.second.empty()))
      return Status::Corruption(Describe(kind_, st_.name) + ": replayed value too long");
  }
  return ApplyVectorRun(run, true, gather, false, op.op_type);
}

Status Base::Query(const std::function<Status()>& body) {
  if (writer()) return body();
  return s_.ReadConsistent(st_, body);
}

Status Base::CheckWritable() const {
  if (!writer())
    return Status::FailedPrecondition(Describe(kind_, st_.name) + ": read-only handle");
  return Status::Ok();
}

Status Base::ReplayMapOp(const frontend::RecoveredOp& op, const VectorGather& gather_put,
                         const VectorGather& gather_delete,
                         const std::function<Status(const Key&, std::span<const uint8_t>)>& put,
                         const std::function<Status(const Key&)>& del) {
  if (op.op_type == kOpPutVector) return ReplayVector(op, gather_put);
  if (op.op_type == kOpDeleteVector && gather_delete) return ReplayVector(op, gather_delete);
  if (op.op_type == kOpPut || op.op_type == kOpDelete) {
    Key key;
    Value v;
    Status st = DecodeKeyValue(op.payload, ksize(), &key, &v);
    if (!st.ok()) return Status::Corruption(Describe(kind_, st_.name) + ": " + st.message());
    if (op.op_type == kOpDelete) return del(key);
    if (v.size() > vsize()) {
      return Status::Corruption(Describe(kind_, st_.name) + ": replayed value of " +
                                std::to_string(v.size()) + " bytes exceeds value_size " +
                                std::to_string(vsize()));
    }
    return put(key, v);
  }
  return Status::Corruption(Describe(kind_, st_.name) + ": unknown op type " +
                            std::to_string(op.op_type));
}

Status Base::CheckValue(std::span<const uint8_t> value) const {
  if (value.size() > opt_.value_size) {
    return Status::InvalidArgument(Describe(kind_, st_.name) + ": value of " +
                                   std::to_string(value.size()) + " bytes exceeds value_size " +
                                   std::to_string(opt_.value_size));
  }
  return Status::Ok();
}

Status Base::CheckKey(const Key& key) const {
  if (opt_.key_size == 0) {
    if (key.is_int()) return Status::Ok();
    return Status::InvalidArgument(Describe(kind_, st_.name) +
                                   " has integer keys; got the byte key " + key.ToString());
  }
  if (key.is_int()) {
    return Status::InvalidArgument(Describe(kind_, st_.name) + " has byte-string keys (key_size " +
                                   std::to_string(opt_.key_size) + "); got the integer key " +
                                   key.ToString());
  }
  if (key.bytes().empty() || key.bytes().size() > opt_.key_size) {
    return Status::InvalidArgument(Describe(kind_, st_.name) + ": key of " +
                                   std::to_string(key.bytes().size()) + " bytes outside 1.." +
                                   std::to_string(opt_.key_size));
  }
  return Status::Ok();
}

Status Base::CheckScanFrom(const Key& from) const {
  if ((opt_.key_size == 0) == from.is_int()) return Status::Ok();
  return CheckKey(from);  // the mismatch message
}

Status Base::SyncBase() { return s_.Fence(); }

std::vector<Base*> WriterHandles(const frontend::Session* s) {
  std::vector<Base*> out;
  std::lock_guard<std::mutex> l(g_registry_mu);
  for (auto it = Registry().lower_bound({s, 0}); it != Registry().end() && it->first.first == s;
       ++it) {
    if (it->second->writer()) out.push_back(it->second);
  }
  return out;
}

Base* LookupHandle(const frontend::Session* s, uint32_t id) {
  std::lock_guard<std::mutex> l(g_registry_mu);
  auto it = Registry().find({s, id});
  return it == Registry().end() ? nullptr : it->second;
}

}  // namespace internal

void RegisterReplays(frontend::Session& session) {
  for (Kind k : kAllKinds) {
    session.RegisterReplay(
        static_cast<uint32_t>(k),
        [](frontend::Session& s, const frontend::Structure& st,
           const frontend::RecoveredOp& op) -> Status {
          internal::Base* b = internal::LookupHandle(&s, st.id);
          if (b == nullptr) {
            return Status::FailedPrecondition("replay: structure '" + st.name +
                                              "' has no open handle in this session");
          }
          return b->ReplayOp(op);
        });
  }
  // After a reconnection, before the replay: every writer handle of this session re-reads its
  // state (the old connection's unapplied transactions are gone; the replay redoes their ops).
  frontend::Session* sp = &session;
  session.SetReconnectHook([sp]() -> Status {
    for (internal::Base* b : internal::WriterHandles(sp)) {
      Status st = b->Resync();
      if (!st.ok()) return st.WithContext("structure '" + b->st().name + "'");
    }
    return Status::Ok();
  });
  // After a replay (the restart of a crashed writer, a dead writer's take-over — the adopter
  // below calls Replay on the recovery session): free what the crashed incarnations journaled
  // and no structure reaches (structures/walk.h; doc/alloc.md §Leaks across crashes).
  session.SetReclaimer(
      [](frontend::Session& s) -> Status { return ReclaimDeadAllocations(s).status(); });
  // A dead writer's structures (Session::SetAdopter): open each in the recovery session (taking
  // the lock under the dead writer's id), replay, close (sync + unlock) — what a restarted writer
  // does. Types that are not a kind (a partition map's own entry) have no op logs to replay.
  session.SetAdopter([](frontend::Session& recovery,
                        const std::vector<frontend::Structure>& structures) -> Status {
    RegisterReplays(recovery);
    return internal::AdoptStructures(recovery, structures, {}, [&] { return recovery.Replay(); });
  });
}

Status internal::AdoptStructures(frontend::Session& recovery,
                                 const std::vector<frontend::Structure>& structures,
                                 const std::vector<uint32_t>& skip,
                                 const std::function<Status()>& replay) {
  std::vector<std::unique_ptr<Handle>> handles;
  for (const frontend::Structure& st : structures) {
    if (std::find(skip.begin(), skip.end(), st.id) != skip.end()) continue;
    const Kind* k = std::find_if(std::begin(kAllKinds), std::end(kAllKinds),
                                 [&](Kind x) { return static_cast<uint32_t>(x) == st.type; });
    if (k == std::end(kAllKinds)) continue;
    Options o;
    o.create = false;
    auto h = Open(recovery, *k, st.name, o);
    if (!h.ok()) return h.status().WithContext("opening '" + st.name + "' to replay it");
    handles.push_back(std::move(*h));
  }
  // On failure the handles close without unlocking (the session refuses to release a lock while
  // op logs of the dead writer are not replayed): its structures stay locked, not exposed.
  ASYMNVM_RETURN_IF_ERROR(replay());
  handles.clear();  // each syncs and releases its lock
  return recovery.Fence();
}

}  // namespace asymnvm::structures
