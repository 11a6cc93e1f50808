// Unit tests of common/response.hpp (respond, refuse, send_whole, send_some) and of what http.hpp gained for files.
#include "common/response.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using namespace std::chrono_literals;

// sendfile() has no MSG_NOSIGNAL: like every server (start_process()), the test process ignores SIGPIPE.
struct IgnoreSigpipe {
  IgnoreSigpipe() { ::signal(SIGPIPE, SIG_IGN); }
} const kIgnoreSigpipe;

// The head without its Date line, which changes every second.
std::string without_date(std::string head) {
  std::size_t at = head.find("\r\nDate: ");
  if (at != std::string::npos) head.erase(at, head.find("\r\n", at + 2) - at);
  return head;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(HttpForFiles, TheFixedResponseIsUnchanged) {
  std::string expected = "HTTP/1.1 200 OK\r\nServer: psp\r\nContent-Type: text/plain\r\nContent-Length: 1024\r\n"
                         "Connection: keep-alive\r\n";
  EXPECT_EQ(without_date(http::status_and_headers(200, 1024, true)), expected);
  std::string not_modified = without_date(http::status_and_headers(304, std::nullopt, false, "", "X: y\r\n"));
  EXPECT_EQ(not_modified, "HTTP/1.1 304 Not Modified\r\nServer: psp\r\nX: y\r\nConnection: close\r\n");
  for (int status : {301, 304, 403, 404, 500}) EXPECT_STRNE(http::reason_phrase(status), "Error") << status;
}

TEST(HttpForFiles, TheParserKeepsIfModifiedSince) {
  http::Parse p = http::parse_request("GET / HTTP/1.1\r\nHost: a\r\nIf-Modified-Since: x\r\n"
                                      "if-modified-since:  Sun, 06 Nov 1994 08:49:37 GMT \r\n\r\n");
  ASSERT_EQ(p.status, http::Parse::kComplete);
  EXPECT_EQ(p.request.if_modified_since, "Sun, 06 Nov 1994 08:49:37 GMT");  // the last one, trimmed
  EXPECT_EQ(http::parse_request("GET / HTTP/1.1\r\nHost: a\r\n\r\n").request.if_modified_since, "");
}

class Served : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/psp-response-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    std::ofstream(dir_ + "/a.txt") << "hello";
    ASSERT_EQ(::mkdir((dir_ + "/sub").c_str(), 0755), 0);
    opts_.root = dir_;
    opts_.root_fd = ::open(dir_.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
    ASSERT_GE(opts_.root_fd, 0);
    struct stat st {};
    ASSERT_EQ(::stat((dir_ + "/a.txt").c_str(), &st), 0);
    mtime_ = st.st_mtime;
  }
  void TearDown() override {
    ::close(opts_.root_fd);
    std::system(("rm -rf '" + dir_ + "'").c_str());
  }

  static http::Request get(const std::string& target, bool keep_alive = true, bool head_only = false) {
    http::Request r;
    r.target = target;
    r.keep_alive = keep_alive;
    r.head_only = head_only;
    return r;
  }

  std::string dir_;
  Options opts_;
  std::time_t mtime_ = 0;
};

TEST_F(Served, WithoutRootTheFixedBody) {
  Options fixed;
  Outgoing out = respond(fixed, get("/a.txt"));
  EXPECT_EQ(without_date(out.head), without_date(http::response(get("/a.txt"))));
  EXPECT_FALSE(out.file.valid());
  EXPECT_EQ(out.left, 0);
  EXPECT_TRUE(out.keep_alive);
  EXPECT_FALSE(respond(fixed, get("/", false)).keep_alive);
}

TEST_F(Served, AFileIsHeadersThenTheFile) {
  Outgoing out = respond(opts_, get("/a.txt"));
  EXPECT_EQ(out.head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  for (std::string h : {"\r\nContent-Type: text/plain; charset=utf-8\r\n", "\r\nContent-Length: 5\r\n",
                        "\r\nConnection: keep-alive\r\n"})
    EXPECT_TRUE(has(out.head, h)) << h;
  EXPECT_TRUE(has(out.head, "\r\nLast-Modified: " + files::format_http_date(mtime_) + "\r\n"));
  EXPECT_EQ(out.head.size(), out.head.find("\r\n\r\n") + 4);  // the body is the file, not in head
  EXPECT_TRUE(out.file.valid());
  EXPECT_EQ(out.offset, 0);
  EXPECT_EQ(out.left, 5);
  EXPECT_TRUE(out.keep_alive);
  EXPECT_FALSE(out.done());
  EXPECT_TRUE(has(respond(opts_, get("/a.txt", false)).head, "\r\nConnection: close\r\n"));
}

TEST_F(Served, HeadHasTheSameHeadersAndNoFile) {
  Outgoing out = respond(opts_, get("/a.txt", true, true));
  EXPECT_EQ(without_date(out.head), without_date(respond(opts_, get("/a.txt")).head));
  EXPECT_FALSE(out.file.valid());
  EXPECT_EQ(out.left, 0);
}

TEST_F(Served, NotModifiedSinceIs304) {
  http::Request r = get("/a.txt");
  r.if_modified_since = files::format_http_date(mtime_);
  Outgoing out = respond(opts_, r);
  EXPECT_EQ(out.head.rfind("HTTP/1.1 304 Not Modified\r\n", 0), 0u);
  EXPECT_TRUE(has(out.head, "\r\nLast-Modified: "));
  EXPECT_FALSE(has(out.head, "Content-Length"));
  EXPECT_FALSE(out.file.valid());
  EXPECT_TRUE(out.keep_alive);
  r.if_modified_since = files::format_http_date(mtime_ + 3600);
  EXPECT_EQ(respond(opts_, r).head.rfind("HTTP/1.1 304 ", 0), 0u);
  r.head_only = true;
  EXPECT_EQ(respond(opts_, r).head.rfind("HTTP/1.1 304 ", 0), 0u);
  r.head_only = false;
  for (std::string older_or_bad : {files::format_http_date(mtime_ - 1), std::string("garbage"), std::string("")}) {
    r.if_modified_since = older_or_bad;
    EXPECT_EQ(respond(opts_, r).head.rfind("HTTP/1.1 200 ", 0), 0u) << older_or_bad;
  }
}

// Ranges and validators (files.hpp has the parsing; here, what respond() makes of it). a.txt is "hello".
TEST_F(Served, ARangeIs206FromItsOffset) {
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/a.txt").c_str(), &st), 0);
  const std::string etag = files::entity_tag(st.st_size, st.st_mtim);
  http::Request r = get("/a.txt");
  EXPECT_TRUE(has(respond(opts_, r).head, "\r\nAccept-Ranges: bytes\r\nETag: " + etag + "\r\n"));
  r.range = "bytes=1-3";
  Outgoing part = respond(opts_, r);
  EXPECT_EQ(part.head.rfind("HTTP/1.1 206 Partial Content\r\n", 0), 0u) << part.head;
  const std::vector<std::string> fields = {"\r\nContent-Length: 3\r\n", "\r\nContent-Range: bytes 1-3/5\r\n",
                                           "\r\nETag: " + etag + "\r\n", "\r\nConnection: keep-alive\r\n",
                                           "\r\nContent-Type: text/plain; charset=utf-8\r\n"};
  for (const std::string& h : fields)
    EXPECT_TRUE(has(part.head, h)) << h;
  EXPECT_TRUE(part.file.valid());
  EXPECT_EQ(part.offset, 1);
  EXPECT_EQ(part.left, 3);
  r.range = "bytes=-2";
  part = respond(opts_, r);
  EXPECT_TRUE(has(part.head, "\r\nContent-Range: bytes 3-4/5\r\n")) << part.head;
  EXPECT_EQ(part.offset, 3);
  EXPECT_EQ(part.left, 2);

  r.range = "bytes=5-";
  Outgoing none = respond(opts_, r);
  EXPECT_EQ(none.head.rfind("HTTP/1.1 416 Range Not Satisfiable\r\n", 0), 0u) << none.head;
  EXPECT_TRUE(has(none.head, "\r\nContent-Range: bytes */5\r\n"));
  EXPECT_FALSE(none.file.valid());
  EXPECT_TRUE(none.keep_alive);

  r.range = "bytes=0-0,2-2";  // several: the whole file
  EXPECT_EQ(respond(opts_, r).head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  r.range = "bytes=1-3";
  r.if_range = "\"stale\"";  // the file changed since: the whole file
  Outgoing whole = respond(opts_, r);
  EXPECT_EQ(whole.head.rfind("HTTP/1.1 200 OK\r\n", 0), 0u);
  EXPECT_EQ(whole.offset, 0);
  EXPECT_EQ(whole.left, 5);
  r.if_range = etag;
  EXPECT_EQ(respond(opts_, r).head.rfind("HTTP/1.1 206 ", 0), 0u);
  r.if_range = files::format_http_date(st.st_mtime);
  EXPECT_EQ(respond(opts_, r).head.rfind("HTTP/1.1 206 ", 0), 0u);

  // HEAD ignores Range (RFC 9110 14.2): the head of the 200, even for an unsatisfiable one.
  for (const char* range : {"bytes=1-3", "bytes=5-"}) {
    http::Request head = get("/a.txt", true, true);
    head.range = range;
    EXPECT_EQ(without_date(respond(opts_, head).head), without_date(respond(opts_, get("/a.txt")).head)) << range;
  }
}

TEST_F(Served, IfNoneMatchIs304AndOverridesIfModifiedSince) {
  struct stat st {};
  ASSERT_EQ(::stat((dir_ + "/a.txt").c_str(), &st), 0);
  const std::string etag = files::entity_tag(st.st_size, st.st_mtim);
  http::Request r = get("/a.txt");
  r.if_none_match = "\"other\", " + etag;
  r.range = "bytes=0-0";  // 13.2.2: the 304 comes first
  Outgoing out = respond(opts_, r);
  EXPECT_EQ(out.head.rfind("HTTP/1.1 304 Not Modified\r\n", 0), 0u) << out.head;
  EXPECT_TRUE(has(out.head, "\r\nETag: " + etag + "\r\n"));
  EXPECT_TRUE(has(out.head, "\r\nLast-Modified: "));
  EXPECT_FALSE(has(out.head, "Content-Length"));
  EXPECT_FALSE(out.file.valid());
  // A tag that does not match wins over a date that would: the file, whole.
  r.range.clear();
  r.if_none_match = "\"other\"";
  r.if_modified_since = files::format_http_date(mtime_);
  EXPECT_EQ(respond(opts_, r).head.rfind("HTTP/1.1 200 ", 0), 0u);
  // A field that is not a list of tags is ignored: the date decides.
  r.if_none_match = "no quotes";
  EXPECT_EQ(respond(opts_, r).head.rfind("HTTP/1.1 304 ", 0), 0u);
}

TEST_F(Served, ErrorsKeepTheConnectionWhenAsked) {
  Outgoing out = respond(opts_, get("/missing"));
  EXPECT_EQ(out.head.rfind("HTTP/1.1 404 Not Found\r\n", 0), 0u);
  EXPECT_TRUE(has(out.head, "\r\nConnection: keep-alive\r\n"));
  EXPECT_TRUE(out.keep_alive);
  EXPECT_EQ(out.head.substr(out.head.find("\r\n\r\n") + 4), "404 Not Found\n");
  EXPECT_TRUE(has(out.head, "\r\nContent-Length: 14\r\n"));

  EXPECT_FALSE(respond(opts_, get("/missing", false)).keep_alive);
  Outgoing head = respond(opts_, get("/missing", true, true));
  EXPECT_EQ(head.head.size(), head.head.find("\r\n\r\n") + 4);  // HEAD: no body
  EXPECT_EQ(respond(opts_, get("/%2e%2e/x")).head.rfind("HTTP/1.1 400 ", 0), 0u);
  EXPECT_EQ(respond(opts_, get("/")).head.rfind("HTTP/1.1 403 ", 0), 0u);

  Outgoing moved = respond(opts_, get("/sub"));
  EXPECT_EQ(moved.head.rfind("HTTP/1.1 301 Moved Permanently\r\n", 0), 0u);
  EXPECT_TRUE(has(moved.head, "\r\nLocation: /sub/\r\n"));
  EXPECT_TRUE(moved.keep_alive);

  Outgoing full = detail::file_error(503, get("/x"), "");  // out of descriptors: close, to free one
  EXPECT_FALSE(full.keep_alive);
  EXPECT_TRUE(has(full.head, "\r\nConnection: close\r\n"));
}

// The Location header of a directory redirect names this site's path, never another host: "//sub" sent back as
// "Location: //sub/" would send a browser to the host "sub" (files_test.cpp has the rules; this is the header).
TEST_F(Served, RedirectsNameAPathOnThisSite) {
  for (const auto& [target, location] : std::vector<std::pair<std::string, std::string>>{
           {"//sub", "/sub/"}, {"///sub?x=1", "/sub/?x=1"}, {"/./sub", "/sub/"}, {"/%73ub", "/sub/"}}) {
    Outgoing moved = respond(opts_, get(target));
    EXPECT_EQ(moved.head.rfind("HTTP/1.1 301 Moved Permanently\r\n", 0), 0u) << target;
    EXPECT_TRUE(has(moved.head, "\r\nLocation: " + location + "\r\n")) << target << ":\n" << moved.head;
  }
  EXPECT_FALSE(has(respond(opts_, get("/%2fsub")).head, "Location:"));  // 400: an encoded '/' is refused
}

TEST(Refuse, IsTheErrorResponseAndCloses) {
  Outgoing out = refuse(400);
  EXPECT_EQ(without_date(out.head), without_date(http::error_response(400)));
  EXPECT_FALSE(out.keep_alive);
  EXPECT_FALSE(out.file.valid());
}

// A connected TCP pair on loopback: {the server's end, the client's end}.
std::pair<Fd, Fd> tcp_pair() {
  Fd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  ::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), len);
  ::listen(listener.get(), 1);
  ::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  Fd client(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (::connect(client.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) return {};
  return {Fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC)), std::move(client)};
}

// A temporary file of `size` bytes, each one a function of its position, so that a misplaced byte shows.
class BigFile {
 public:
  explicit BigFile(off_t size) {
    char tmpl[] = "/tmp/psp-big-XXXXXX";
    fd_.reset(::mkstemp(tmpl));
    path_ = tmpl;
    std::string block(1 << 20, '\0');
    for (off_t at = 0; at < size; at += static_cast<off_t>(block.size())) {
      for (std::size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>((at + i) * 7 / 3);
      auto n = static_cast<std::size_t>(std::min<off_t>(size - at, static_cast<off_t>(block.size())));
      EXPECT_EQ(::pwrite(fd_.get(), block.data(), n, at), static_cast<ssize_t>(n));
    }
    size_ = size;
  }
  ~BigFile() { ::unlink(path_.c_str()); }
  static char byte_at(off_t at) { return static_cast<char>(at * 7 / 3); }

  // An Outgoing for the whole file, as respond() builds it.
  Outgoing outgoing(const std::string& head) const {
    Outgoing out;
    out.head = head;
    out.file.reset(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
    out.left = size_;
    return out;
  }
  int fd() const { return fd_.get(); }

 private:
  Fd fd_;
  std::string path_;
  off_t size_ = 0;
};

// Reads until EOF; checks the bytes against "HEAD" + the file's pattern as it goes, without keeping them.
struct Reader {
  std::size_t total = 0;
  bool ok = true;
  void run(int fd, const std::string& head, std::chrono::microseconds pause = 0us) {
    char buf[65536];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) {
      for (ssize_t i = 0; i < n; ++i, ++total) {
        char want = total < head.size() ? head[total] : BigFile::byte_at(static_cast<off_t>(total - head.size()));
        if (buf[i] != want) ok = false;
      }
      if (pause.count()) std::this_thread::sleep_for(pause);
    }
  }
};

TEST(SendWhole, SendsTheHeadThenEveryByteOfTheFile) {
  BigFile file(24 << 20);  // far more than the socket buffers: many sendfile() calls
  auto [server, client] = tcp_pair();
  ASSERT_TRUE(server.valid());
  Outgoing out = file.outgoing("HEAD\r\n\r\n");
  Reader reader;
  std::thread t([&, fd = client.get()] { reader.run(fd, out.head); });
  EXPECT_TRUE(send_whole(server.get(), out));
  EXPECT_TRUE(out.done());
  EXPECT_FALSE(out.file.valid());  // closed once sent
  EXPECT_EQ(out.offset, 24 << 20);
  server.reset();  // EOF for the reader
  t.join();
  EXPECT_TRUE(reader.ok);
  EXPECT_EQ(reader.total, 8u + (24u << 20));
}

TEST(SendWhole, HeadOnlyAndAClosedPeer) {
  auto [server, client] = tcp_pair();
  ASSERT_TRUE(server.valid());
  Outgoing out = refuse(400);
  EXPECT_TRUE(send_whole(server.get(), out));
  EXPECT_TRUE(out.done());
  client.reset();
  BigFile file(8 << 20);
  Outgoing more = file.outgoing("x");
  EXPECT_FALSE(send_whole(server.get(), more));  // EPIPE or ECONNRESET, and no SIGPIPE: the test is still alive
}

// The promise the server cannot keep: the file shrinks below the Content-Length it announced. send_whole() must
// return false (the caller closes), not hang waiting for bytes that will never exist.
TEST(SendWhole, AFileThatShrinksMidSendFails) {
  constexpr off_t kSize = 64 << 20, kShrunk = 4 << 20;
  BigFile file(kSize);
  auto [server, client] = tcp_pair();
  ASSERT_TRUE(server.valid());
  set_send_timeout(server.get(), 10s);  // a hang would show as a timeout (false too, but only after 10 s)
  Outgoing out = file.outgoing("HEAD\r\n\r\n");
  auto start = std::chrono::steady_clock::now();
  auto sent = std::async(std::launch::async, [&] { return send_whole(server.get(), out); });
  // Read 1 MiB, then shrink the file while the sender waits for room in the socket buffer, then read the rest.
  std::string got;
  char buf[65536];
  while (got.size() < (1u << 20)) {
    ssize_t n = ::recv(client.get(), buf, sizeof buf, 0);
    ASSERT_GT(n, 0);
    got.append(buf, static_cast<std::size_t>(n));
  }
  ASSERT_EQ(::ftruncate(file.fd(), kShrunk), 0);
  std::thread drain([fd = client.get()] {
    char b[65536];
    while (::recv(fd, b, sizeof b, 0) > 0) {
    }
  });
  ASSERT_EQ(sent.wait_for(8s), std::future_status::ready) << "send_whole() hangs on a shrunk file";
  EXPECT_FALSE(sent.get());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 8s);
  EXPECT_GT(out.left, 0);  // short of the promise
  server.reset();
  drain.join();
}

TEST(SendWhole, AReaderThatTakesNothingTimesOut) {
  BigFile file(32 << 20);
  auto [server, client] = tcp_pair();
  ASSERT_TRUE(server.valid());
  set_send_timeout(server.get(), 1s);
  Outgoing out = file.outgoing("HEAD\r\n\r\n");
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(send_whole(server.get(), out));  // the client never reads: SO_SNDTIMEO ends it
  auto took = std::chrono::steady_clock::now() - start;
  // At least the timeout; a few of them at most: a sendfile() that got some bytes out before its timeout returns
  // that short count, and only a call that sends nothing at all for the whole timeout fails.
  EXPECT_GE(took, 900ms);
  EXPECT_LT(took, 10s);
}

// Waits until `fd` is writable (at most 10 s).
bool wait_writable(int fd) {
  pollfd p{fd, POLLOUT, 0};
  return ::poll(&p, 1, 10000) == 1;
}

TEST(SendSome, SendsWhatFitsAndGoesOnFromTheSavedOffset) {
  BigFile file(16 << 20);
  auto [server, client] = tcp_pair();
  ASSERT_TRUE(server.valid());
  set_nonblocking(server.get());
  Outgoing out = file.outgoing("HEAD\r\n\r\n");
  ASSERT_EQ(send_some(server.get(), out), SendProgress::kBlocked);  // nobody reads yet: the buffer fills
  EXPECT_EQ(out.head_sent, out.head.size());
  EXPECT_GT(out.offset, 0);
  EXPECT_EQ(out.offset + out.left, 16 << 20);
  Reader reader;
  std::thread t([&, fd = client.get()] { reader.run(fd, "HEAD\r\n\r\n", 100us); });  // a slowish reader
  SendProgress progress = SendProgress::kBlocked;
  int calls = 1;
  while (progress == SendProgress::kBlocked && wait_writable(server.get())) {
    progress = send_some(server.get(), out);
    ++calls;
  }
  EXPECT_EQ(progress, SendProgress::kDone);
  EXPECT_TRUE(out.done());
  EXPECT_FALSE(out.file.valid());
  EXPECT_GT(calls, 2);
  server.reset();
  t.join();
  EXPECT_TRUE(reader.ok);
  EXPECT_EQ(reader.total, 8u + (16u << 20));
}

TEST(SendSome, AShrunkFileOrAClosedPeerFails) {
  BigFile file(16 << 20);
  auto [server, client] = tcp_pair();
  ASSERT_TRUE(server.valid());
  set_nonblocking(server.get());
  Outgoing out = file.outgoing("HEAD\r\n\r\n");
  ASSERT_EQ(send_some(server.get(), out), SendProgress::kBlocked);
  ASSERT_EQ(::ftruncate(file.fd(), out.offset), 0);  // nothing left to send where the sender stands
  std::thread drain([fd = client.get()] {
    char b[65536];
    while (::recv(fd, b, sizeof b, 0) > 0) {
    }
  });
  SendProgress progress = SendProgress::kBlocked;
  while (progress == SendProgress::kBlocked && wait_writable(server.get())) progress = send_some(server.get(), out);
  EXPECT_EQ(progress, SendProgress::kFailed);
  EXPECT_GT(out.left, 0);
  server.reset();
  drain.join();

  auto [server2, client2] = tcp_pair();
  set_nonblocking(server2.get());
  client2.reset();
  Outgoing more = file.outgoing("x");
  SendProgress p2 = SendProgress::kBlocked;
  for (int i = 0; i < 100 && p2 != SendProgress::kFailed; ++i) p2 = send_some(server2.get(), more);  // RST, EPIPE
  EXPECT_EQ(p2, SendProgress::kFailed);
}

TEST(RecvDeadline, RecvWaitsOnlyUntilTheDeadline) {
  int sv[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  Fd a(sv[0]), b(sv[1]);
  auto now = std::chrono::steady_clock::now();
  EXPECT_FALSE(set_recv_deadline(a.get(), now - 1ms));  // passed: close
  EXPECT_FALSE(set_recv_deadline(a.get(), now));
  ASSERT_TRUE(set_recv_deadline(a.get(), std::chrono::steady_clock::now() + 300ms));
  timeval tv{};
  socklen_t len = sizeof tv;
  ASSERT_EQ(::getsockopt(a.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, &len), 0);
  EXPECT_TRUE(tv.tv_sec == 0 && tv.tv_usec > 0 && tv.tv_usec <= 300000) << tv.tv_sec << "." << tv.tv_usec;
  std::string in;
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(recv_into(a.get(), in), -2);  // nothing came: the timeout
  auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 2s);
  // A deadline a few nanoseconds away (if it has not passed yet) is rounded up to 1 us, never {0, 0}, which would
  // mean "wait forever".
  if (set_recv_deadline(a.get(), std::chrono::steady_clock::now() + 50ns)) {
    ASSERT_EQ(::getsockopt(a.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, &len), 0);
    EXPECT_TRUE(tv.tv_sec > 0 || tv.tv_usec > 0);
  }
}

}  // namespace
