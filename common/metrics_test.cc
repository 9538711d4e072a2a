#include "asymnvm/metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace asymnvm::metrics {
namespace {

// GET /metrics over a plain socket (what a Prometheus scrape sends).
std::string HttpGet(const std::string& hostport) {
  const size_t colon = hostport.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(hostport.substr(colon + 1))));
  inet_pton(AF_INET, hostport.substr(0, colon).c_str(), &sa.sin_addr);
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    if (fd >= 0) ::close(fd);
    return "";
  }
  const std::string req = "GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n";
  (void)!::write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

TEST(Metrics, RenderTextFormat) {
  Writer w;
  w.Counter("asymnvm_x_total", "things", 3, {{"kind", "a"}});
  w.Counter("asymnvm_x_total", "things", 4, {{"kind", "b"}});
  w.Gauge("asymnvm_y_bytes", "size", 1.5);
  w.Histogram("asymnvm_z_seconds", "latency", {0.001, 0.01}, {2, 3, 1}, 0.5);
  const std::string t = Render(w.families());
  EXPECT_NE(t.find("# TYPE asymnvm_x_total counter"), std::string::npos) << t;
  EXPECT_NE(t.find("asymnvm_x_total{kind=\"a\"} 3"), std::string::npos) << t;
  EXPECT_NE(t.find("asymnvm_x_total{kind=\"b\"} 4"), std::string::npos) << t;
  EXPECT_NE(t.find("asymnvm_y_bytes 1.5"), std::string::npos) << t;
  // Cumulative buckets, +Inf = count.
  EXPECT_NE(t.find("asymnvm_z_seconds_bucket{le=\"0.001\"} 2"), std::string::npos) << t;
  EXPECT_NE(t.find("asymnvm_z_seconds_bucket{le=\"0.01\"} 5"), std::string::npos) << t;
  EXPECT_NE(t.find("asymnvm_z_seconds_bucket{le=\"+Inf\"} 6"), std::string::npos) << t;
  EXPECT_NE(t.find("asymnvm_z_seconds_count 6"), std::string::npos) << t;
  EXPECT_NE(t.find("asymnvm_z_seconds_sum 0.5"), std::string::npos) << t;
}

TEST(Metrics, LatencyBuckets) {
  LatencyHistogram h;
  h.Record(500);         // 0.5 µs -> le 1e-06
  h.Record(1000);        // 1 µs   -> le 1e-06
  h.Record(3000);        // 3 µs   -> le 4e-06
  h.Record(4000);        // 4 µs   -> le 4e-06
  h.Record(5000000000);  // 5 s    -> +Inf
  const auto b = h.Buckets();
  ASSERT_EQ(b.size(), LatencyHistogram::kBounds + 1u);
  EXPECT_EQ(b[0], 2u);
  EXPECT_EQ(b[2], 2u);
  EXPECT_EQ(b[LatencyHistogram::kBounds], 1u);
  EXPECT_EQ(h.count(), 5u);
  EXPECT_NEAR(h.sum_seconds(), 5.0000085, 1e-9);
}

TEST(Metrics, RequestMetricsByType) {
  RequestMetrics r({{1, "put"}, {2, "get"}});
  r.Record(1, 2000, 10, 0, true);
  r.Record(1, 2000, 10, 0, false);
  r.Record(2, 1000, 5, 100, true);
  r.Record(9, 1000, 0, 0, true);  // unnamed
  Writer w;
  r.Write(w, "asymnvm_t");
  const std::string t = Render(w.families());
  EXPECT_NE(t.find("asymnvm_t_requests_total{type=\"put\"} 2"), std::string::npos) << t;
  EXPECT_NE(t.find("asymnvm_t_request_errors_total{type=\"put\"} 1"), std::string::npos) << t;
  EXPECT_NE(t.find("asymnvm_t_request_bytes_total{type=\"put\"} 20"), std::string::npos) << t;
  EXPECT_NE(t.find("asymnvm_t_response_bytes_total{type=\"get\"} 100"), std::string::npos) << t;
  EXPECT_NE(t.find("asymnvm_t_requests_total{type=\"other\"} 1"), std::string::npos) << t;
  EXPECT_NE(t.find("asymnvm_t_request_duration_seconds_count{type=\"get\"} 1"), std::string::npos)
      << t;
}

TEST(Metrics, ExposerServesScrapes) {
  auto e = Exposer::Start("127.0.0.1:0");
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  int calls = 0;
  (*e)->Add([&calls](Writer& w) { w.Counter("asymnvm_scrapes_total", "scrapes", ++calls); });
  const std::string addr = (*e)->address();
  EXPECT_NE(addr.find("127.0.0.1:"), std::string::npos);
  EXPECT_EQ(addr.find(":0"), std::string::npos) << "ephemeral port not resolved: " << addr;
  std::string body = HttpGet(addr);
  EXPECT_NE(body.find("200 OK"), std::string::npos) << body;
  EXPECT_NE(body.find("asymnvm_scrapes_total 1"), std::string::npos) << body;
  body = HttpGet(addr);
  EXPECT_NE(body.find("asymnvm_scrapes_total 2"), std::string::npos) << body;
  // The port is taken now: a second exposer fails with a clear error.
  auto taken = Exposer::Start(addr);
  ASSERT_FALSE(taken.ok());
  EXPECT_NE(taken.status().message().find(addr), std::string::npos) << taken.status().ToString();
  e->reset();
  EXPECT_EQ(HttpGet(addr), "");  // stopped
}

TEST(Metrics, BadAddress) {
  for (const char* a : {"", "9464", "host:", ":9464", "h:99999", "h:12x"}) {
    auto e = Exposer::Start(a);
    ASSERT_FALSE(e.ok()) << a;
    EXPECT_EQ(e.status().code(), StatusCode::kInvalidArgument) << a;
  }
}

}  // namespace
}  // namespace asymnvm::metrics
