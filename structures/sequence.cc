// Stack and queue (AsymNVM paper §8.1; doc/structures.md "Stack and queue").
//
// PM layout. Anchor (32 B, the root word points at it): magic u64 | head u64 | tail u64 |
// count u64. Node: next u64 | value slot (u32 length | bytes, padded to 8). The stack pushes and
// pops at head; the queue enqueues at tail and dequeues at head.
//
// Annulment (§8.1, optimize at rcb): a push is made durable by its op log alone and kept in DRAM
// as pending; a pop that finds a pending push takes it (for the queue only when the persistent
// part is empty, to keep FIFO order) and neither ever produces memory logs. Pending pushes are
// materialized — nodes linked in DRAM, one memory log per node plus one for the anchor, all in
// one transaction — when the pending set fills, on Sync, Count, Verify and close. The session's
// OPN does not pass a pending push until then (no tx_write in between), so a crash replays it.
#include <deque>

#include "structures/base.h"
#include "structures/kinds.h"

namespace asymnvm::structures::internal {
namespace {

constexpr uint64_t kMagic = 0x5145534d564e5941ull;  // "AYNVMSEQ"
constexpr uint16_t kOpPush = 1, kOpPop = 2;
constexpr uint64_t kHead = 8, kTail = 16, kCount = 24, kAnchorBytes = 32;
constexpr size_t kPendingBytes = 16 * 1024;  // memory logs of one materialization

class LinkedSequence final : public Sequence, public Base {
 public:
  LinkedSequence(frontend::Session& s, frontend::Structure st, Kind kind, const Options& o)
      : Base(s, std::move(st), kind, o), lifo_(kind == Kind::kStack) {
    node_bytes_ = 8 + SlotBytes(vsize());
    max_pending_ = std::max<size_t>(1, std::min<size_t>(256, kPendingBytes / node_bytes_));
    // Pending pushes keep their op logs open; another structure's op materializes them first.
    if (writer())
      KeepsOpsOpen([this] { return pending_.empty() ? s_.TxWrite(st_) : Materialize(); });
  }
  ~LinkedSequence() override {
    if (writer()) {
      Status st = Materialize();
      if (!st.ok())
        LOG_WARN("structures", Describe(kind_, st_.name) << ": close: " << st.ToString());
    }
  }

  Status Init() {
    ASYMNVM_RETURN_IF_ERROR(AcquireWriterLock());
    uint8_t init[kAnchorBytes] = {};
    PutU64(init, kMagic);
    ASYMNVM_ASSIGN_OR_RETURN(anchor_, EnsureAnchor(init));
    uint64_t magic = 0;
    ASYMNVM_RETURN_IF_ERROR(Query([&]() -> Status {
      ASYMNVM_ASSIGN_OR_RETURN(magic, ReadU64(anchor_));
      return Status::Ok();
    }));
    if (magic != kMagic) {
      return Status::Corruption(Describe(kind_, st_.name) + ": anchor has a bad magic");
    }
    return Status::Ok();
  }

  Kind kind() const override { return kind_; }
  const frontend::Structure& structure() const override { return st_; }
  uint32_t value_size() const override { return vsize(); }

  Status Push(std::span<const uint8_t> value) override {
    ASYMNVM_RETURN_IF_ERROR(CheckWritable());
    ASYMNVM_RETURN_IF_ERROR(CheckValue(value));
    return DoPush(value, /*replay=*/false);
  }

  Status Pop(Value* value) override {
    ASYMNVM_RETURN_IF_ERROR(CheckWritable());
    return DoPop(value, /*replay=*/false);
  }

  Status Peek(Value* value) override {
    if (writer()) ASYMNVM_RETURN_IF_ERROR(LoadAnchor());
    if (writer() && !pending_.empty() && (lifo_ || persistent_count_ == 0)) {
      if (value) *value = lifo_ ? pending_.back() : pending_.front();
      return Status::Ok();
    }
    return Query([&]() -> Status {
      ASYMNVM_ASSIGN_OR_RETURN(uint64_t head, ReadU64(anchor_ + kHead));
      if (head == 0) return Status::NotFound(Describe(kind_, st_.name) + " is empty");
      return ReadValue(head, value);
    });
  }

  Result<uint64_t> Count() override {
    ASYMNVM_RETURN_IF_ERROR(Materialize());
    uint64_t n = 0;
    ASYMNVM_RETURN_IF_ERROR(Query([&]() -> Status {
      ASYMNVM_ASSIGN_OR_RETURN(n, ReadU64(anchor_ + kCount));
      return Status::Ok();
    }));
    return n;
  }

  Status List(size_t limit, std::vector<Value>* out) override {
    ASYMNVM_RETURN_IF_ERROR(Materialize());
    return Query([&]() -> Status {
      out->clear();
      uint8_t a[kAnchorBytes];
      ASYMNVM_RETURN_IF_ERROR(Read(anchor_, a));
      const uint64_t count = GetU64(a + kCount);
      std::vector<uint8_t> node(node_bytes_);
      for (uint64_t at = GetU64(a + kHead), n = 0; at != 0 && out->size() < limit; n++) {
        if (n >= count) {
          return Status::Corruption(Describe(kind_, st_.name) + ": more nodes than the count " +
                                    std::to_string(count));
        }
        ASYMNVM_RETURN_IF_ERROR(Read(at, node));
        Value v;
        ASYMNVM_RETURN_IF_ERROR(DecodeSlot(std::span<const uint8_t>(node).subspan(8), vsize(), &v));
        out->push_back(std::move(v));
        at = GetU64(node.data());
      }
      return Status::Ok();
    });
  }

  Status Sync() override {
    ASYMNVM_RETURN_IF_ERROR(Materialize());
    return writer() ? SyncBase() : Status::Ok();
  }

  Status Verify() override {
    ASYMNVM_RETURN_IF_ERROR(Materialize());
    return Query([&]() -> Status {
      uint8_t a[kAnchorBytes];
      ASYMNVM_RETURN_IF_ERROR(Read(anchor_, a));
      const std::string what = Describe(kind_, st_.name);
      if (GetU64(a) != kMagic) return Status::Corruption(what + ": anchor magic");
      const uint64_t head = GetU64(a + kHead), tail = GetU64(a + kTail), count = GetU64(a + kCount);
      uint64_t n = 0, last = 0;
      for (uint64_t at = head; at != 0; n++) {
        if (n >= count)
          return Status::Corruption(what + ": more nodes than the count " + std::to_string(count));
        std::vector<uint8_t> node(node_bytes_);
        ASYMNVM_RETURN_IF_ERROR(Read(at, node));
        Status st = DecodeSlot(std::span<const uint8_t>(node).subspan(8), vsize(), nullptr);
        if (!st.ok())
          return Status::Corruption(what + ": node " + std::to_string(n) + ": " + st.message());
        last = at;
        at = GetU64(node.data());
      }
      if (n != count) {
        return Status::Corruption(what + ": " + std::to_string(n) + " nodes, count says " +
                                  std::to_string(count));
      }
      if (!lifo_ && tail != last) return Status::Corruption(what + ": tail is not the last node");
      return Status::Ok();
    });
  }

  // Pending pushes are dropped (their op logs are replayed) and the anchor re-read when next used.
  Status Resync() override {
    pending_.clear();
    anchor_loaded_ = false;
    return Status::Ok();
  }

  Status ReplayOp(const frontend::RecoveredOp& op) override {
    Status st;
    if (op.op_type == kOpPush) {
      Key key;
      Value v;
      ASYMNVM_RETURN_IF_ERROR(DecodeKeyValue(op.payload, 0, &key, &v));
      st = DoPush(v, /*replay=*/true);
    } else if (op.op_type == kOpPop) {
      st = DoPop(nullptr, /*replay=*/true);
    } else {
      return Status::Corruption(Describe(kind_, st_.name) + ": unknown op type " +
                                std::to_string(op.op_type));
    }
    ASYMNVM_RETURN_IF_ERROR(st);
    return Materialize();
  }

 private:
  bool Annul() const { return opt_.optimize && level() == frontend::Level::kRcb; }

  Status DoPush(std::span<const uint8_t> value, bool replay) {
    auto params = EncodeKeyValue(0, value);
    ASYMNVM_RETURN_IF_ERROR(s_.OpLog(st_, kOpPush, params).status());
    pending_.emplace_back(value.begin(), value.end());
    if (!Annul() || replay || pending_.size() >= max_pending_) return Materialize();
    return Status::Ok();
  }

  Status DoPop(Value* value, bool replay) {
    ASYMNVM_RETURN_IF_ERROR(LoadAnchor());
    // Annul a pending push when that is what the pop would remove.
    if (!pending_.empty() && (lifo_ || persistent_count_ == 0)) {
      ASYMNVM_RETURN_IF_ERROR(s_.OpLog(st_, kOpPop, {}).status());
      if (value) *value = lifo_ ? pending_.back() : pending_.front();
      if (lifo_) {
        pending_.pop_back();
      } else {
        pending_.pop_front();
      }
      if (pending_.empty()) return s_.TxWrite(st_);  // OPN may pass: nothing is pending
      return Status::Ok();
    }
    // A tx_write now would let the OPN pass the pending pushes: link them first.
    ASYMNVM_RETURN_IF_ERROR(Materialize());
    if (head_ == 0) return Status::NotFound(Describe(kind_, st_.name) + " is empty");
    std::vector<uint8_t> node(node_bytes_);
    ASYMNVM_RETURN_IF_ERROR(Read(head_, node));
    if (value)
      ASYMNVM_RETURN_IF_ERROR(
          DecodeSlot(std::span<const uint8_t>(node).subspan(8), vsize(), value));
    const uint64_t old = head_;
    ASYMNVM_RETURN_IF_ERROR(s_.OpLog(st_, kOpPop, {}).status());
    head_ = GetU64(node.data());
    if (head_ == 0) tail_ = 0;
    persistent_count_--;
    ASYMNVM_RETURN_IF_ERROR(WriteAnchor());
    ASYMNVM_RETURN_IF_ERROR(s_.TxWrite(st_));
    return s_.Free(old);
  }

  // Links every pending push into PM in one operation.
  Status Materialize() {
    if (!writer()) return Status::Ok();
    if (pending_.empty()) return Status::Ok();
    ASYMNVM_RETURN_IF_ERROR(LoadAnchor());
    std::vector<uint64_t> addrs;
    for (size_t i = 0; i < pending_.size(); i++) {
      auto a = s_.Malloc(node_bytes_);
      if (!a.ok()) {
        for (uint64_t x : addrs) (void)s_.Free(x);
        return a.status();
      }
      addrs.push_back(*a);
    }
    std::vector<uint8_t> node(node_bytes_);
    const size_t n = pending_.size();
    for (size_t i = 0; i < n; i++) {
      uint64_t next;
      if (lifo_) {
        // pending_[n-1] becomes the new head; each node points at the one pushed before it.
        next = i == 0 ? head_ : addrs[i - 1];
      } else {
        next = i + 1 < n ? addrs[i + 1] : 0;
      }
      PutU64(node.data(), next);
      EncodeSlot(pending_[i], std::span<uint8_t>(node).subspan(8));
      ASYMNVM_RETURN_IF_ERROR(Write(addrs[i], node));
    }
    if (lifo_) {
      head_ = addrs[n - 1];
    } else {
      if (tail_ != 0) {
        ASYMNVM_RETURN_IF_ERROR(WriteU64(tail_, addrs[0]));
      } else {
        head_ = addrs[0];
      }
      tail_ = addrs[n - 1];
    }
    persistent_count_ += n;
    pending_.clear();
    ASYMNVM_RETURN_IF_ERROR(WriteAnchor());
    return s_.TxWrite(st_);
  }

  Status LoadAnchor() {
    if (anchor_loaded_) return Status::Ok();
    uint8_t a[kAnchorBytes];
    ASYMNVM_RETURN_IF_ERROR(Read(anchor_, a));
    head_ = GetU64(a + kHead);
    tail_ = GetU64(a + kTail);
    persistent_count_ = GetU64(a + kCount);
    anchor_loaded_ = true;
    return Status::Ok();
  }

  Status WriteAnchor() {
    uint8_t a[kAnchorBytes - 8];
    PutU64(a, head_);
    PutU64(a + 8, tail_);
    PutU64(a + 16, persistent_count_);
    return Write(anchor_ + kHead, a);
  }

  Status ReadValue(uint64_t node_addr, Value* value) {
    std::vector<uint8_t> slot(SlotBytes(vsize()));
    ASYMNVM_RETURN_IF_ERROR(Read(node_addr + 8, slot));
    return DecodeSlot(slot, vsize(), value);
  }

  const bool lifo_;
  uint64_t anchor_ = 0;
  uint32_t node_bytes_ = 0;
  size_t max_pending_ = 1;
  // The writer's view of the anchor (it holds the lock, so nobody else changes it).
  bool anchor_loaded_ = false;
  uint64_t head_ = 0, tail_ = 0, persistent_count_ = 0;
  std::deque<Value> pending_;
};

Result<std::unique_ptr<Sequence>> OpenLinked(frontend::Session& s, Kind kind,
                                             const std::string& name, Options o) {
  ASYMNVM_ASSIGN_OR_RETURN(frontend::Structure st, Base::Resolve(s, kind, name, &o, 0));
  auto h = std::make_unique<LinkedSequence>(s, std::move(st), kind, o);
  ASYMNVM_RETURN_IF_ERROR(h->Init());
  return std::unique_ptr<Sequence>(std::move(h));
}

}  // namespace

Result<std::unique_ptr<Sequence>> OpenStack(frontend::Session& s, const std::string& name,
                                            Options o) {
  return OpenLinked(s, Kind::kStack, name, o);
}
Result<std::unique_ptr<Sequence>> OpenQueue(frontend::Session& s, const std::string& name,
                                            Options o) {
  return OpenLinked(s, Kind::kQueue, name, o);
}

}  // namespace asymnvm::structures::internal
