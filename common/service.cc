#include "common/service.h"

#include <systemd/sd-daemon.h>

#include <string>

namespace asymnvm {

void NotifyReady(std::string_view status) {
  std::string msg = "READY=1\nSTATUS=";
  for (char c : status) msg += c == '\n' ? ' ' : c;
  (void)sd_notify(0, msg.c_str());
}

void NotifyStopping() { (void)sd_notify(0, "STOPPING=1"); }

}  // namespace asymnvm
