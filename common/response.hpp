// common/response.hpp: what every server sends, and the two ways to send it.
//
//   respond(opts, request)   the answer to a well-formed request: the fixed 1 KB body, or with --root the file
//                            (or 206, 301, 304, 403, 404, 416, 500, 503...), as an Outgoing
//   refuse(opts, parse)      the answer to a request the parser refused: closes after it
//   refuse(status)           a refusal before any request was read (503 at accept): closes after it
//   interim_continue()       "100 Continue", for a client that waits for it before sending its body
//   send_whole(sock, out)    blocking sockets (01, 02, 04): all of it, or false
//   send_some(sock, out)     non-blocking sockets (03, 05, 06, 07): what the socket takes now
//
// A file is never read into memory: sendfile() moves its bytes from the page cache to the socket inside the kernel,
// with no copy into user space, and the socket's send buffer is the only buffer, so a slow reader gets backpressure
// (the sender waits, or waits for writability) rather than a growing queue. 06 sends the head with IORING_OP_SEND
// and the file with send_some(), waiting for writability with IORING_OP_POLL_ADD.
//
// sendfile() has no MSG_NOSIGNAL: writing to a connection the peer has closed raises SIGPIPE, which would kill the
// process. start_process() ignores SIGPIPE for that reason (the sends of the head pass MSG_NOSIGNAL too).
#pragma once

#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <optional>
#include <string>

#include "files.hpp"
#include "http.hpp"
#include "lifecycle.hpp"
#include "net.hpp"
#include "options.hpp"

// A response on its way out: `head` (status line, headers, and any in-memory body, e.g. the fixed 1 KB or an
// error text), then `left` bytes of `file` starting at `offset`. The fixed workload has no file.
struct Outgoing {
  std::string head;
  std::size_t head_sent = 0;
  Fd file;                  // invalid when everything is in head
  off_t offset = 0;         // the next byte of `file` to send
  off_t left = 0;           // bytes of `file` still to send
  bool keep_alive = false;  // false: close the connection once it is sent
  bool done() const { return head_sent == head.size() && left == 0; }
};

namespace detail {

// A status from files::lookup() other than 200, with a short text body. The framing is sound (the request was
// well-formed), so the connection stays open if the client asked for that; 503 (out of descriptors) closes it,
// to free one.
// `fields`: more header lines (416's Content-Range).
inline Outgoing file_error(int status, const http::Request& request, const std::string& location,
                           std::string fields = {}) {
  Outgoing out;
  out.keep_alive = request.keep_alive && status != 503;
  std::string body = std::to_string(status) + ' ' + http::reason_phrase(status) + '\n';
  if (!location.empty()) fields += "Location: " + location + "\r\n";
  if (status == 405) fields += "Allow: GET, HEAD\r\n";  // --root: files are only fetched (RFC 9110 15.5.6)
  out.head = http::status_and_headers(status, body.size(), out.keep_alive, "text/plain", fields) + "\r\n";
  if (!request.head_only) out.head += body;
  return out;
}

// sendfile() moves at most 0x7ffff000 bytes per call (about 2 GiB); a file past 4 GiB takes several calls.
constexpr off_t kSendfileMax = 0x7ffff000;

}  // namespace detail

// The answer to a well-formed request: the fixed 1 KB body without --root, else the file (or 301/304/403/404...).
// Called when the simulated handler's wait is over. HEAD: the same headers, no body and no file.
inline Outgoing respond(const Options& opts, const http::Request& request) {
  // A stopping server closes each connection after the response it is working on, so that response says
  // "Connection: close" (RFC 9112 9.6): a client that read "keep-alive" could send its next request for nothing.
  // (07 does the same with its own stop flag.)
  if (request.keep_alive && stop_requested()) {
    http::Request last = request;
    last.keep_alive = false;
    return respond(opts, last);
  }
  Outgoing out;
  out.keep_alive = request.keep_alive;
  if (opts.root_fd < 0) {
    out.head = http::response(request);
    return out;
  }
  // A POST's body has been read and thrown away, so the connection stays usable: 405, and it may be kept.
  if (request.post) return detail::file_error(405, request, "");
  files::Lookup found = files::lookup(opts.root_fd, request.target);
  if (found.status != 200) return detail::file_error(found.status, request, found.location);
  // [excerpt:validators]
  // The validators go out with every answer about the file (200, 206, 304): a cache or a download keeps them and
  // sends them back, in If-None-Match and If-Modified-Since ("do I still have it?") or If-Range ("is the part I
  // have still of this file?"). files.hpp says how each is compared.
  const std::string validators =
      "ETag: " + found.etag + "\r\nLast-Modified: " + files::format_http_date(found.mtime) + "\r\n";
  // RFC 9110 13.2.2's order: a usable If-None-Match decides alone, else If-Modified-Since (a date that does not
  // parse is ignored). Not modified: 304, no body; the client keeps using its copy.
  const std::optional<bool> listed = files::if_none_match(request.if_none_match, found.etag);
  const std::optional<std::time_t> since = files::parse_http_date(request.if_modified_since);
  if (listed ? *listed : since && found.mtime <= *since) {
    out.head = http::status_and_headers(304, std::nullopt, out.keep_alive, "", validators) + "\r\n";
    return out;
  }
  // A Range applies to GET only (HEAD's range handling is not defined, so RFC 9110 14.2 says to ignore it: HEAD
  // gets the 200 head), and only while If-Range, if sent, still names this file.
  files::Range range;  // kWhole unless set below
  if (!request.head_only && files::if_range_allows(request.if_range, found.etag, found.mtime))
    range = files::parse_range(request.range, found.size);
  if (range.kind == files::Range::kUnsatisfiable)  // 14.1.1: no byte of it exists. Says how many there are.
    return detail::file_error(416, request, "", "Content-Range: bytes */" + std::to_string(found.size) + "\r\n");
  int status = 200;
  std::string fields = "Accept-Ranges: bytes\r\n" + validators;  // "ask for a part, if you like" (14.3)
  if (range.kind == files::Range::kPart) {
    status = 206;
    fields += "Content-Range: bytes " + std::to_string(range.first) + '-' +
              std::to_string(range.first + range.length - 1) + '/' + std::to_string(found.size) + "\r\n";
  } else {
    range.first = 0;
    range.length = found.size;
  }
  out.head = http::status_and_headers(status, static_cast<std::uint64_t>(range.length), out.keep_alive,
                                      found.content_type, fields) + "\r\n";
  if (!request.head_only && range.length > 0) {
    out.file = std::move(found.file);
    out.offset = range.first;  // every sender starts here: sendfile(), 06's splice and its read for send_zc
    out.left = range.length;   // what Content-Length promised, even if the file grows meanwhile
  }
  // [/excerpt:validators]
  return out;
}

// The methods a request may use (RFC 9110 15.5.6: a 405 lists them in Allow): the 1 KB handler takes a POST as it
// takes a GET; a file can only be fetched.
inline std::string_view allowed_methods(const Options& opts) {
  return opts.root_fd < 0 ? "GET, HEAD, POST" : "GET, HEAD";
}

// A refused request (http::Parse::kError): error text (none after HEAD), keep_alive = false.
inline Outgoing refuse(const Options& opts, const http::Parse& p) {
  Outgoing out;
  out.head = http::error_response(p.error, p.request.head_only, allowed_methods(opts));
  return out;
}

// A refusal before any request was read (a 503 at accept): error text, keep_alive = false.
inline Outgoing refuse(int status) {
  Outgoing out;
  out.head = http::error_response(status);
  return out;
}

// The interim response to "Expect: 100-continue" (http::Parse::kContinue). keep_alive: the connection goes on to
// read the body, and the final response follows.
inline Outgoing interim_continue() {
  Outgoing out;
  out.head = http::kContinueResponse;
  out.keep_alive = true;
  return out;
}

// Blocking sockets (01, 02, 04): the head with send(), then sendfile() until `left` is 0. False on an error, a
// timeout (SO_SNDTIMEO: the reader took nothing for that long), the end of a stop's grace, or a file that shrank
// (sendfile() returns 0 before `left` is 0: the promised Content-Length cannot be kept). On false the caller resets
// the connection: the response cannot be completed, and the client must not take a part of it for the whole.
inline bool send_whole(int sock, Outgoing& out) {
  while (out.head_sent < out.head.size()) {
    if (!send_within_stop_grace(sock)) return false;
    // MSG_MORE when a file follows: the head waits to share a packet with the file's first bytes.
    int more = out.left > 0 ? MSG_MORE : 0;
    ssize_t n = ::send(sock, out.head.data() + out.head_sent, out.head.size() - out.head_sent, MSG_NOSIGNAL | more);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    out.head_sent += static_cast<std::size_t>(n);
  }
  // [excerpt:send-whole]
  while (out.left > 0) {
    if (!send_within_stop_grace(sock)) return false;
    // After a stop, 64 KiB per call: one sendfile() moves its bytes in many pieces, each with the whole send
    // timeout of its own, so a large count would let a slow reader keep the call, and the stop, going.
    off_t most = stop_requested() ? off_t{64 * 1024} : detail::kSendfileMax;
    auto count = static_cast<std::size_t>(std::min(out.left, most));
    ssize_t n = ::sendfile(sock, out.file.get(), &out.offset, count);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;  // 0: the file ended early (it shrank); <0: reset, timeout...
    out.left -= n;
  }
  // [/excerpt:send-whole]
  out.file.reset();
  return true;
}

// The same, for a response built only to be sent: send_whole(fd, refuse(503)).
inline bool send_whole(int sock, Outgoing&& out) { return send_whole(sock, out); }

// Non-blocking sockets (03, 05, 06, 07): send what the socket takes now: the rest of head (send with
// MSG_NOSIGNAL), then sendfile() with the saved offset. kDone: all sent. kBlocked: wait for writability and call
// again. kFailed: close.
enum class SendProgress { kDone, kBlocked, kFailed };

inline SendProgress send_some(int sock, Outgoing& out) {
  while (out.head_sent < out.head.size()) {
    int more = out.left > 0 ? MSG_MORE : 0;
    ssize_t n = ::send(sock, out.head.data() + out.head_sent, out.head.size() - out.head_sent, MSG_NOSIGNAL | more);
    if (n > 0) {
      out.head_sent += static_cast<std::size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? SendProgress::kBlocked : SendProgress::kFailed;
    }
  }
  // [excerpt:send-some]
  while (out.left > 0) {
    // The kernel advances out.offset by what it sent, so the next call goes on from there.
    auto count = static_cast<std::size_t>(std::min(out.left, detail::kSendfileMax));
    ssize_t n = ::sendfile(sock, out.file.get(), &out.offset, count);
    if (n > 0) {
      out.left -= n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {  // 0: the file shrank: Content-Length cannot be kept
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? SendProgress::kBlocked : SendProgress::kFailed;
    }
  }
  // [/excerpt:send-some]
  out.file.reset();  // all sent: the file's descriptor is not needed any more
  return SendProgress::kDone;
}
