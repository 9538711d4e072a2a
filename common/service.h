// Readiness and stop notifications for a service manager (systemd units with Type=notify;
// doc/operations.md §Services), through libsystemd's sd_notify. Without $NOTIFY_SOCKET (not
// started by systemd) every call does nothing.
#pragma once

#include <string_view>

namespace asymnvm {

// READY=1 with a STATUS= line (e.g. the addresses served): call once the daemon serves.
void NotifyReady(std::string_view status);
// STOPPING=1: call when a stop signal arrived.
void NotifyStopping();

}  // namespace asymnvm
