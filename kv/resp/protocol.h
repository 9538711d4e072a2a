// RESP (REdis Serialization Protocol) wire layer of the KV server's Redis gateway: an incremental
// request parser (multibulk and inline commands, partial input, pipelining) and a reply encoder for
// RESP2 and RESP3. Byte layouts, limits and error texts: doc/resp.md.
//
// Thread safety: a RequestParser or ReplyWriter belongs to one connection and is used by one thread
// at a time. Nothing here does I/O.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace asymnvm::kv::resp {

// Limits a hostile or buggy peer runs into. As in Redis (networking.c), exceeding one and a
// malformed frame (bad length digits, wrong type byte, over-long inline line, unbalanced quotes)
// are answered at once with Redis's "Protocol error" text and the connection is closed: the
// payload behind an oversized length is never waited for.
struct ParserLimits {
  int64_t max_bulk_len = 512LL << 20;       // proto-max-bulk-len (Redis default 512 MiB)
  int64_t max_array_len = 1 << 20;          // arguments per command
  size_t max_inline_len = 64 << 10;         // an inline command line, without its "\r\n"
  size_t max_request_bytes = 512ULL << 20;  // all arguments of one command together
};

struct Request {
  std::vector<std::string> argv;
  bool is_inline = false;
};

class RequestParser {
 public:
  enum class Kind {
    kNeedMore,  // no complete command buffered: append more input
    kCommand,   // *out holds a command
    kFatal,     // the stream cannot be parsed further: reply message() and close
  };

  explicit RequestParser(ParserLimits limits = {}) : limits_(limits) {}

  // Appends received bytes (ignored after kFatal).
  void Append(const char* data, size_t len);

  // Extracts the next event; call until kNeedMore. After kFatal every call returns kFatal.
  Kind Next(Request* out);

  // The error text (without the leading '-' or "\r\n") of kFatal.
  const std::string& message() const { return message_; }

  // Bytes buffered and not yet consumed (for the per-connection input limit and INFO).
  size_t buffered() const { return buf_.size() - pos_; }

 private:
  enum class State { kIdle, kArgLen, kArgBody };
  Kind ParseInline(Request* out, bool* blank);
  Kind Fail(std::string msg);
  // Reads one "<prefix><int>\r\n" line at pos_; returns 0 need more, 1 parsed, -1 malformed.
  int ReadLength(char prefix, int64_t* value);
  void Compact();

  ParserLimits limits_;
  std::string buf_;
  size_t pos_ = 0;
  State state_ = State::kIdle;
  bool fatal_ = false;
  std::string message_;
  // Current multibulk command.
  int64_t args_left_ = 0;
  int64_t bulk_len_ = 0;
  size_t request_bytes_ = 0;
  Request cur_;
};

// Splits an inline command line the way redis-cli and Redis do ("double quotes" with \n \r \t \b
// \a \\ \" \xHH escapes, 'single quotes' with \'). Returns false on unbalanced quotes.
bool SplitInlineArgs(std::string_view line, std::vector<std::string>* out);

// Appends RESP2 or RESP3 replies to a buffer. RESP3 types degrade to their RESP2 forms when the
// connection speaks RESP2 (map → flat array, set → array, null → $-1 / *-1, double → bulk,
// boolean → integer, verbatim → bulk).
class ReplyWriter {
 public:
  explicit ReplyWriter(std::string* out, int proto = 2) : out_(out), proto_(proto) {}
  int proto() const { return proto_; }
  std::string* buffer() const { return out_; }
  void set_proto(int p) { proto_ = p; }

  void Simple(std::string_view s);    // +s ; CR/LF in s are replaced by spaces
  void Error(std::string_view s);     // -s ; s starts with its code ("ERR ...", "WRONGTYPE ...")
  void Integer(int64_t v);            // :v
  void Bulk(std::string_view s);      // $len s
  void Null();                        // RESP3 _ ; RESP2 $-1
  void NullArray();                   // RESP3 _ ; RESP2 *-1
  void Array(size_t n);               // *n, then n replies
  void Map(size_t n);                 // RESP3 %n ; RESP2 *2n, then 2n replies
  void Set(size_t n);                 // RESP3 ~n ; RESP2 *n
  void Double(double v);              // RESP3 ,v ; RESP2 bulk
  void Bool(bool v);                  // RESP3 #t/#f ; RESP2 :1/:0
  void Verbatim(std::string_view s);  // RESP3 =len txt:s ; RESP2 bulk
  void Ok() { out_->append("+OK\r\n"); }
  void Raw(std::string_view encoded) { out_->append(encoded); }  // already-encoded replies

 private:
  std::string* out_;
  int proto_;
};

}  // namespace asymnvm::kv::resp
