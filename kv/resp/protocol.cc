#include "kv/resp/protocol.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace asymnvm::kv::resp {
namespace {

constexpr size_t kMaxLengthLine = 32;  // "*" / "$" + 20 digits + sign + "\r\n" fits easily

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

}  // namespace

void RequestParser::Append(const char* data, size_t len) {
  if (fatal_ || len == 0) return;
  Compact();
  buf_.append(data, len);
}

void RequestParser::Compact() {
  if (pos_ == 0) return;
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  } else if (pos_ >= 4096 && pos_ * 2 >= buf_.size()) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
}

RequestParser::Kind RequestParser::Fail(std::string msg) {
  fatal_ = true;
  message_ = "ERR Protocol error: " + std::move(msg);
  buf_.clear();
  pos_ = 0;
  return Kind::kFatal;
}

int RequestParser::ReadLength(char prefix, int64_t* value) {
  size_t avail = buf_.size() - pos_;
  if (avail == 0) return 0;
  if (buf_[pos_] != prefix) return -1;
  size_t limit = std::min(avail, kMaxLengthLine);
  const char* p = buf_.data() + pos_;
  const void* nl = std::memchr(p, '\n', limit);
  if (nl == nullptr) return avail >= kMaxLengthLine ? -1 : 0;
  size_t line_len = static_cast<const char*>(nl) - p;  // index of '\n'
  if (line_len < 3 || p[line_len - 1] != '\r') return -1;
  size_t i = 1, end = line_len - 1;
  bool neg = false;
  if (p[i] == '-') {
    neg = true;
    ++i;
  }
  if (i == end) return -1;
  uint64_t v = 0;
  for (; i < end; ++i) {
    if (p[i] < '0' || p[i] > '9') return -1;
    uint64_t d = static_cast<uint64_t>(p[i] - '0');
    if (v > (static_cast<uint64_t>(INT64_MAX) - d) / 10) return -1;
    v = v * 10 + d;
  }
  *value = neg ? -static_cast<int64_t>(v) : static_cast<int64_t>(v);
  pos_ += line_len + 1;
  return 1;
}

RequestParser::Kind RequestParser::Next(Request* out) {
  if (fatal_) return Kind::kFatal;
  for (;;) {
    switch (state_) {
      case State::kIdle: {
        Compact();
        if (pos_ == buf_.size()) return Kind::kNeedMore;
        if (buf_[pos_] != '*') {
          bool blank = false;
          Kind k = ParseInline(out, &blank);
          if (blank) continue;
          return k;
        }
        int64_t n = 0;
        int r = ReadLength('*', &n);
        if (r == 0) return Kind::kNeedMore;
        if (r < 0) return Fail("invalid multibulk length");
        if (n <= 0) continue;  // "*0" and "*-1" carry no command (as in Redis)
        if (n > limits_.max_array_len) return Fail("invalid multibulk length");
        cur_.argv.clear();
        cur_.is_inline = false;
        request_bytes_ = 0;
        args_left_ = n;
        cur_.argv.reserve(static_cast<size_t>(std::min<int64_t>(n, 1024)));
        state_ = State::kArgLen;
        continue;
      }
      case State::kArgLen: {
        if (args_left_ == 0) {
          state_ = State::kIdle;
          *out = std::move(cur_);
          cur_ = Request{};
          return Kind::kCommand;
        }
        int64_t len = 0;
        int r = ReadLength('$', &len);
        if (r == 0) return Kind::kNeedMore;
        if (r < 0) {
          if (buf_[pos_] != '$') {
            return Fail(std::string("expected '$', got '") +
                        (std::isprint(static_cast<unsigned char>(buf_[pos_])) ? buf_[pos_] : '?') +
                        "'");
          }
          return Fail("invalid bulk length");
        }
        // Redis: a negative length or one above proto-max-bulk-len is "invalid bulk length"
        // and the connection is closed (the payload is never read).
        if (len < 0 || len > limits_.max_bulk_len) return Fail("invalid bulk length");
        if (request_bytes_ + static_cast<uint64_t>(len) > limits_.max_request_bytes) {
          return Fail("command larger than " + std::to_string(limits_.max_request_bytes) +
                      " bytes");
        }
        bulk_len_ = len;
        state_ = State::kArgBody;
        continue;
      }
      case State::kArgBody: {
        size_t need = static_cast<size_t>(bulk_len_) + 2;
        size_t avail = buf_.size() - pos_;
        if (avail < need) {
          if (buf_.capacity() < pos_ + need) buf_.reserve(pos_ + need);
          return Kind::kNeedMore;
        }
        if (buf_[pos_ + need - 2] != '\r' || buf_[pos_ + need - 1] != '\n') {
          return Fail("bulk payload not terminated by CRLF");
        }
        cur_.argv.emplace_back(buf_.data() + pos_, static_cast<size_t>(bulk_len_));
        request_bytes_ += static_cast<size_t>(bulk_len_);
        pos_ += need;
        --args_left_;
        state_ = State::kArgLen;
        continue;
      }
    }
  }
}

RequestParser::Kind RequestParser::ParseInline(Request* out, bool* blank) {
  {
    size_t avail = buf_.size() - pos_;
    if (avail == 0) return Kind::kNeedMore;
    const char* p = buf_.data() + pos_;
    const void* nl = std::memchr(p, '\n', avail);
    if (nl == nullptr) {
      if (avail > limits_.max_inline_len + 1) return Fail("too big inline request");
      return Kind::kNeedMore;
    }
    size_t line_len = static_cast<const char*>(nl) - p;
    std::string_view line(p, line_len);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > limits_.max_inline_len) return Fail("too big inline request");
    std::vector<std::string> args;
    bool balanced = SplitInlineArgs(line, &args);
    pos_ += line_len + 1;
    if (!balanced) return Fail("unbalanced quotes in request");
    if (args.empty()) {  // blank line (telnet users send these): nothing to run
      *blank = true;
      return Kind::kNeedMore;
    }
    out->argv = std::move(args);
    out->is_inline = true;
    return Kind::kCommand;
  }
}

bool SplitInlineArgs(std::string_view line, std::vector<std::string>* out) {
  out->clear();
  size_t i = 0, n = line.size();
  for (;;) {
    while (i < n && IsSpace(line[i])) ++i;
    if (i >= n) return true;
    std::string cur;
    bool inq = false, insq = false, done = false;
    while (!done) {
      if (inq) {
        if (i >= n) return false;
        char c = line[i];
        if (c == '\\' && i + 3 < n && line[i + 1] == 'x' && HexDigit(line[i + 2]) >= 0 &&
            HexDigit(line[i + 3]) >= 0) {
          cur.push_back(static_cast<char>(HexDigit(line[i + 2]) * 16 + HexDigit(line[i + 3])));
          i += 3;
        } else if (c == '\\' && i + 1 < n) {
          ++i;
          switch (line[i]) {
            case 'n':
              cur.push_back('\n');
              break;
            case 'r':
              cur.push_back('\r');
              break;
            case 't':
              cur.push_back('\t');
              break;
            case 'b':
              cur.push_back('\b');
              break;
            case 'a':
              cur.push_back('\a');
              break;
            default:
              cur.push_back(line[i]);
              break;
          }
        } else if (c == '"') {
          // A closing quote must be followed by a space or the end.
          if (i + 1 < n && !IsSpace(line[i + 1])) return false;
          done = true;
        } else {
          cur.push_back(c);
        }
      } else if (insq) {
        if (i >= n) return false;
        char c = line[i];
        if (c == '\\' && i + 1 < n && line[i + 1] == '\'') {
          ++i;
          cur.push_back('\'');
        } else if (c == '\'') {
          if (i + 1 < n && !IsSpace(line[i + 1])) return false;
          done = true;
        } else {
          cur.push_back(c);
        }
      } else {
        if (i >= n) {
          done = true;
          break;
        }
        char c = line[i];
        if (IsSpace(c)) {
          done = true;
        } else if (c == '"') {
          inq = true;
        } else if (c == '\'') {
          insq = true;
        } else {
          cur.push_back(c);
        }
      }
      if (i < n) ++i;
    }
    out->push_back(std::move(cur));
  }
}

void ReplyWriter::Simple(std::string_view s) {
  out_->push_back('+');
  for (char c : s) out_->push_back(c == '\r' || c == '\n' ? ' ' : c);
  out_->append("\r\n");
}

void ReplyWriter::Error(std::string_view s) {
  out_->push_back('-');
  for (char c : s) out_->push_back(c == '\r' || c == '\n' ? ' ' : c);
  out_->append("\r\n");
}

void ReplyWriter::Integer(int64_t v) {
  out_->push_back(':');
  out_->append(std::to_string(v));
  out_->append("\r\n");
}

void ReplyWriter::Bulk(std::string_view s) {
  out_->push_back('$');
  out_->append(std::to_string(s.size()));
  out_->append("\r\n");
  out_->append(s);
  out_->append("\r\n");
}

void ReplyWriter::Null() { out_->append(proto_ >= 3 ? "_\r\n" : "$-1\r\n"); }

void ReplyWriter::NullArray() { out_->append(proto_ >= 3 ? "_\r\n" : "*-1\r\n"); }

void ReplyWriter::Array(size_t n) {
  out_->push_back('*');
  out_->append(std::to_string(n));
  out_->append("\r\n");
}

void ReplyWriter::Map(size_t n) {
  out_->push_back(proto_ >= 3 ? '%' : '*');
  out_->append(std::to_string(proto_ >= 3 ? n : 2 * n));
  out_->append("\r\n");
}

void ReplyWriter::Set(size_t n) {
  out_->push_back(proto_ >= 3 ? '~' : '*');
  out_->append(std::to_string(n));
  out_->append("\r\n");
}

void ReplyWriter::Double(double v) {
  std::string s;
  if (std::isnan(v)) {
    s = "nan";
  } else if (std::isinf(v)) {
    s = v > 0 ? "inf" : "-inf";
  } else {
    char b[64];
    std::snprintf(b, sizeof b, "%.17g", v);
    s = b;
  }
  if (proto_ >= 3) {
    out_->push_back(',');
    out_->append(s);
    out_->append("\r\n");
  } else {
    Bulk(s);
  }
}

void ReplyWriter::Bool(bool v) {
  if (proto_ >= 3) {
    out_->append(v ? "#t\r\n" : "#f\r\n");
  } else {
    Integer(v ? 1 : 0);
  }
}

void ReplyWriter::Verbatim(std::string_view s) {
  if (proto_ >= 3) {
    out_->push_back('=');
    out_->append(std::to_string(s.size() + 4));
    out_->append("\r\ntxt:");
    out_->append(s);
    out_->append("\r\n");
  } else {
    Bulk(s);
  }
}

}  // namespace asymnvm::kv::resp
