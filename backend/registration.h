// The text of a back-end group's coordinator nodes (doc/coord.md §Back-end groups, doc/mirror.md):
// "key value" lines, e.g. /asymnvm/groups/<uuid>/primary = "address A\nlog L\npid P\nterm N\n…".
// Shared by the SDK (reconnection), the daemons and the group role.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace asymnvm::backend {

// The value of the first "key value" line of `data` ("" when absent).
std::string RegistrationField(const std::string& data, std::string_view key);
// The "term N" of a registration (0 when absent or malformed: nothing is checked then).
uint64_t RegistrationTerm(const std::string& data);

}  // namespace asymnvm::backend
