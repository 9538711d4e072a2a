#include "fabric/oq/executor.h"

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
  s.arrived = true;
  s.length = byte_len;
  s.connection_id = connection_id;
  if (buffer_done) {
    if (b->retire != UINT32_MAX) return Status::Internal("oq executor: buffer retired twice");
    b->retire = RoundUp(offset + byte_len);
  }
  if (&bufs_.front() != b || offset != b->next) out_of_order_++;
  return Status::Ok();
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
