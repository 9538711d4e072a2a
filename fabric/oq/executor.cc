#include "fabric/oq/executor.h"

#include <algorithm>
#include <string>

namespace asymnvm::oq {

void OrderedExecutor::AddBuffer(uint64_t id, uint32_t length) {
  Buf b;
  b.id = id;
  b.length = length;
  b.slots.resize(length / stride_);
  bufs_.push_back(std::move(b));
}

OrderedExecutor::Buf* OrderedExecutor::Find(uint64_t id) {
  for (auto& b : bufs_) {
    if (b.id == id) return &b;
  }
  return nullptr;
}

Status OrderedExecutor::OnCompletion(uint64_t buffer_id, uint32_t offset, uint32_t byte_len,
                                     bool buffer_done, uint64_t connection_id) {
  Buf* b = Find(buffer_id);
  if (b == nullptr) {
    return Status::Internal("oq executor: completion for unknown buffer " +
                            std::to_string(buffer_id));
  }
  if (byte_len == 0 && buffer_done && offset <= b->length) {
    // Retire marker: offset = bytes used (the end of the last message, not stride-rounded).
    if (b->retire != UINT32_MAX) return Status::Internal("oq executor: buffer retired twice");
    b->retire = std::min(RoundUp(offset), b->length);
    AdvanceArrival();
    return Status::Ok();
  }
  if (offset % stride_ != 0 || offset > b->length ||
      (byte_len > 0 && uint64_t{offset} + byte_len > b->length)) {
    return Status::Internal("oq executor: completion at offset " + std::to_string(offset) +
                            " length " + std::to_string(byte_len) + " outside buffer " +
                            std::to_string(buffer_id));
  }
  if (byte_len == 0) {
    if (!buffer_done) return Status::Internal("oq executor: empty completion without buffer_done");
    if (b->retire != UINT32_MAX) return Status::Internal("oq executor: buffer retired twice");
    b->retire = offset;
    return Status::Ok();
  }
  Slot& s = b->slots[offset / stride_];
  if (s.arrived) {
    return Status::Internal("oq executor: duplicate completion at offset " +
                            std::to_string(offset));
  }
  AdvanceArrival();
  const bool in_order = arr_valid_ && arr_id_ == buffer_id && arr_off_ == offset;
  s.arrived = true;
  s.length = byte_len;
  s.connection_id = connection_id;
  if (buffer_done) {
    if (b->retire != UINT32_MAX) return Status::Internal("oq executor: buffer retired twice");
    b->retire = RoundUp(offset + byte_len);
  }
  if (!in_order) out_of_order_++;  // an earlier slot is still missing
  AdvanceArrival();
  return Status::Ok();
}

void OrderedExecutor::AdvanceArrival() {
  if (bufs_.empty()) return;
  if (!arr_valid_ || Find(arr_id_) == nullptr) {
    arr_valid_ = true;
    arr_id_ = bufs_.front().id;
    arr_off_ = bufs_.front().next;
  }
  while (true) {
    size_t i = 0;
    while (i < bufs_.size() && bufs_[i].id != arr_id_) i++;
    Buf& b = bufs_[i];
    if (arr_off_ >= b.length || (b.retire != UINT32_MAX && arr_off_ >= b.retire)) {
      if (i + 1 >= bufs_.size()) return;
      arr_id_ = bufs_[i + 1].id;
      arr_off_ = 0;
      continue;
    }
    const Slot& s = b.slots[arr_off_ / stride_];
    if (!s.arrived) return;
    arr_off_ = RoundUp(arr_off_ + s.length);
  }
}

bool OrderedExecutor::Next(Event* out) {
  if (bufs_.empty()) return false;
  Buf& b = bufs_.front();
  if (b.next >= b.length || (b.retire != UINT32_MAX && b.next >= b.retire)) {
    out->kind = Event::kRetired;
    out->buffer_id = b.id;
    out->used = b.retire == UINT32_MAX ? b.length : std::min(b.retire, b.length);
    out->offset = 0;
    out->length = 0;
    out->connection_id = 0;
    bufs_.pop_front();
    return true;
  }
  Slot& s = b.slots[b.next / stride_];
  if (!s.arrived) return false;
  out->kind = Event::kMessage;
  out->buffer_id = b.id;
  out->offset = b.next;
  out->length = s.length;
  out->connection_id = s.connection_id;
  out->used = 0;
  b.next = RoundUp(b.next + s.length);
  return true;
}

}  // namespace asymnvm::oq
