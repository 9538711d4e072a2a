// OrderedExecutor: per-worker bookkeeping that turns out-of-order receive completions of a
// multi-packet SRQ into execution strictly in receive-buffer order (juneberry §5.1 "bitmap + idx",
// extended to multi-packet buffers; doc/oq.md §Executor).
//
// The caller registers buffers in post order (AddBuffer), feeds every successful RECV completion
// (OnCompletion) and then drains Next(): it yields the message at next-index of the oldest buffer
// when that slot has arrived, advancing by the stride-rounded length, and yields a "retired" event
// for the oldest buffer once its retire offset (from a buffer_done completion) is reached, after
// which the caller may re-post the buffer (AddBuffer again).
//
// Thread safety: none; one worker thread owns it. Pure bookkeeping (no I/O): unit-tested with
// synthetic completions.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "asymnvm/status.h"

namespace asymnvm::oq {

class OrderedExecutor {
 public:
  struct Event {
    enum Kind : uint8_t { kMessage, kRetired } kind = kMessage;
    uint64_t buffer_id = 0;
    uint32_t offset = 0;  // kMessage: where the message starts
    uint32_t length = 0;  // kMessage: byte_len of its completion
    uint64_t connection_id = 0;
    uint32_t used = 0;  // kRetired: bytes of the buffer that were used (retire offset)
  };

  explicit OrderedExecutor(uint32_t stride) : stride_(stride) {}

  // Registers a posted buffer (post order). `id` must not be registered already.
  void AddBuffer(uint64_t id, uint32_t length);
  // Feeds a successful RECV completion. byte_len == 0 with buffer_done is the retire marker (offset
  // = bytes used). Errors (the completion is ignored): kInternal for an unknown buffer, an offset
  // that is misaligned or outside the buffer, a duplicate slot, or a second retire marker.
  Status OnCompletion(uint64_t buffer_id, uint32_t offset, uint32_t byte_len, bool buffer_done,
                      uint64_t connection_id);
  // The next event in queue order, or false when the next slot has not arrived yet.
  bool Next(Event* out);

  size_t buffers() const { return bufs_.size(); }
  uint64_t out_of_order() const { return out_of_order_; }  // completions ahead of next-index
  // Next-index: oldest buffer id and the offset to execute next (valid when buffers() > 0).
  uint64_t head_buffer() const { return bufs_.front().id; }
  uint32_t head_offset() const { return bufs_.front().next; }

 private:
  struct Slot {
    uint32_t length = 0;
    bool arrived = false;
    uint64_t connection_id = 0;
  };
  struct Buf {
    uint64_t id = 0;
    uint32_t length = 0;
    uint32_t next = 0;             // next-index (bytes)
    uint32_t retire = UINT32_MAX;  // known retire offset
    std::vector<Slot> slots;       // one per stride: the bitmap (+ lengths)
  };
  Buf* Find(uint64_t id);
  void AdvanceArrival();
  uint32_t RoundUp(uint32_t v) const { return (v + stride_ - 1) / stride_ * stride_; }

  uint32_t stride_;
  std::deque<Buf> bufs_;
  uint64_t out_of_order_ = 0;
  // Arrival cursor: everything before (arr_id_, arr_off_) in queue order has arrived.
  bool arr_valid_ = false;
  uint64_t arr_id_ = 0;
  uint32_t arr_off_ = 0;
};

}  // namespace asymnvm::oq
