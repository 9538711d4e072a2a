// The soft NIC's channel over TLS (doc/fabric.md §TLS): a stream socket whose bytes go through a
// TlsStream (fabric/tls.h) that the handshake (fabric/bootstrap.h) already set up. Same contract
// as every Channel (fabric/soft/channel.h): Send never blocks and queues ciphertext the socket
// cannot take; Read returns kWouldBlock only after the socket said EAGAIN and no decrypted byte
// is left, so the edge-triggered NIC loop loses no edge; OnWritable writes what is queued.
// Thread safety: one mutex serializes the session (Send from any thread, Read from the NIC).
#pragma once

#include <memory>

#include "fabric/soft/channel.h"
#include "fabric/tls.h"

namespace asymnvm::fabric::soft {

// Takes ownership of the connected socket `fd`; `tls` null: plain (MakeSocketChannel).
std::unique_ptr<Channel> MakeStreamChannel(int fd, std::unique_ptr<TlsStream> tls);

}  // namespace asymnvm::fabric::soft
