#include "backend/registration.h"

namespace asymnvm::backend {

std::string RegistrationField(const std::string& data, std::string_view key) {
  size_t pos = 0;
  while (pos < data.size()) {
    size_t end = data.find('\n', pos);
    if (end == std::string::npos) end = data.size();
    std::string_view line(data.data() + pos, end - pos);
    if (line.size() > key.size() && line.starts_with(key) && line[key.size()] == ' ') {
      return std::string(line.substr(key.size() + 1));
    }
    pos = end + 1;
  }
  return "";
}

uint64_t RegistrationTerm(const std::string& data) {
  const std::string t = RegistrationField(data, "term");
  if (t.empty() || t.size() > 19 || t.find_first_not_of("0123456789") != std::string::npos) {
    return 0;
  }
  return std::stoull(t);
}

}  // namespace asymnvm::backend
