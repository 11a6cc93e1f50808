// fuzz/parser_fuzz.cpp: a libFuzzer target for http::RequestReader, the one part of every server that reads bytes
// chosen by a stranger on the network: request heads, and bodies framed by Content-Length or the chunked coding.
//
// libFuzzer calls LLVMFuzzerTestOneInput() again and again with inputs it mutates from the seed corpus (corpus/),
// keeping the ones that reach new branches of the reader. AddressSanitizer and UndefinedBehaviorSanitizer turn a
// stray read or an integer overflow into a crash; the checks below turn a wrong answer into one too. Each is a
// promise that the seven servers rely on without checking it themselves:
//
//   1. Each answer is one of the four, with the fields that go with it; an error is a status the servers can send.
//   2. It depends on the bytes only: read again from a copy at another address, they give the same answers.
//   3. The buffer stays bounded: while the reader waits for more, what it leaves in the buffer is less than
//      2 x kMaxHead (empty lines before a head, and the head; or a part of a chunk-size or trailer line), so a
//      server that reads 4 KiB at a time never holds more than that plus one read, whatever the body's size.
//   4. Where the reads split the bytes does not matter: fed in two pieces, cut anywhere, the same requests come out,
//      with the same lengths, and the same final error if any ("100 Continue" aside: it depends on the split).
//   5. Pipelining: after a complete request, the bytes that follow are read with all the same checks.
//   6. The response to the answer frames itself: Content-Length is the size of the body that follows (none
//      after HEAD, errors included).
//
// Build and run with ./fuzz/run_fuzz.sh; fuzz/README.md says how to run it longer and what to do with a crash.
#include "common/http.hpp"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

using http::Parse;

// A broken promise is a crash, like a sanitizer report: libFuzzer then saves the input as crash-<sha1> and stops.
void require(bool kept, const char* promise) {
  if (kept) return;
  std::fprintf(stderr, "parser_fuzz: broken promise: %s\n", promise);
  std::abort();
}

// What a reader made of a stream of bytes: each request it completed, and how it ended.
struct Outcome {
  std::vector<Parse> requests;  // kComplete, in order
  Parse last;                   // kIncomplete (all read, more wanted) or kError
};

bool same(const Parse& a, const Parse& b) {
  return a.status == b.status && a.length == b.length && a.error == b.error &&
         a.request.head_only == b.request.head_only && a.request.post == b.request.post &&
         a.request.keep_alive == b.request.keep_alive && a.request.target == b.request.target &&
         a.request.if_modified_since == b.request.if_modified_since &&
         a.request.if_none_match == b.request.if_none_match && a.request.range == b.request.range &&
         a.request.if_range == b.request.if_range;
}

bool same(const Outcome& a, const Outcome& b) {
  if (a.requests.size() != b.requests.size() || !same(a.last, b.last)) return false;
  for (std::size_t i = 0; i < a.requests.size(); ++i)
    if (!same(a.requests[i], b.requests[i])) return false;
  return true;
}

// Promise 6. A response must frame itself, or the client cannot tell where it ends: the head is CRLF lines up to an
// empty line, and exactly the announced Content-Length of body follows. A HEAD response has none: its
// Content-Length is the size of the body a GET would get.
void check_response(std::string_view r, int status, bool head_only, bool keep_alive) {
  const std::string status_line = "HTTP/1.1 " + std::to_string(status) + " ";
  require(r.substr(0, status_line.size()) == status_line, "the status line has the status");
  std::size_t end = r.find("\r\n\r\n");
  require(end != std::string_view::npos, "the response head ends with an empty line");
  std::string_view head = r.substr(0, end + 2), body = r.substr(end + 4);
  for (std::size_t i = 0; i < head.size(); ++i) {
    if (head[i] == '\r') require(i + 1 < head.size() && head[i + 1] == '\n', "no bare CR in the response head");
    if (head[i] == '\n') require(i > 0 && head[i - 1] == '\r', "no bare LF in the response head");
  }
  constexpr std::string_view kField = "\r\nContent-Length: ";
  std::size_t at = head.find(kField);
  require(at != std::string_view::npos, "the response has a Content-Length");
  require(head.find(kField, at + 1) == std::string_view::npos, "the response has one Content-Length");
  std::size_t announced = 0, digits = 0;
  for (std::size_t i = at + kField.size(); i < head.size() && head[i] >= '0' && head[i] <= '9'; ++i, ++digits)
    announced = announced * 10 + static_cast<std::size_t>(head[i] - '0');
  require(digits > 0 && digits < 6, "Content-Length is a small number");
  require(body.size() == (head_only ? 0 : announced), "the body is Content-Length bytes (none after HEAD)");
  require(head.find(keep_alive ? "\r\nConnection: keep-alive\r\n" : "\r\nConnection: close\r\n") !=
              std::string_view::npos,
          "the Connection header says what the server will do");
}

// Promises 1, 3 and 6 for one answer. `in` is the buffer, `unread` what the reader has not read of it yet.
void check_answer(const Parse& p, const std::string& in, std::string_view unread) {
  require(in.size() <= 2 * unread.size(), "what was read is at most half the buffer: it goes in one erase");
  switch (p.status) {
    case Parse::kIncomplete:
    case Parse::kContinue:
      require(p.error == 0, "only kError has an error");
      require(unread.size() < 2 * http::kMaxHead, "waiting for more, the reader holds less than 2 x kMaxHead");
      break;
    case Parse::kComplete: {
      require(p.error == 0 && p.length > 0, "kComplete has a length and no error");
      const std::string& target = p.request.target;
      require(!target.empty() && target.front() == '/', "the target is in origin-form");
      for (unsigned char c : target) require(c > ' ' && c != 0x7f, "the target has no whitespace or control byte");
      check_response(http::response(p.request), 200, p.request.head_only, p.request.keep_alive);
      break;
    }
    case Parse::kError:
      require(p.error == 400 || p.error == 405 || p.error == 413 || p.error == 414 || p.error == 431 ||
                  p.error == 501 || p.error == 505,
              "kError is 400, 405, 413, 414, 431, 501 or 505");
      check_response(http::error_response(p.error, p.request.head_only), p.error, p.request.head_only, false);
      break;
    default:
      require(false, "the status is one of the four");
  }
}

// Feeds `pieces` to a fresh reader as a server would: after each piece, read requests until it wants more. Stops at
// the first error (a server closes the connection there). A small --max-body, so that 413 is reached often.
Outcome read_all(const std::vector<std::string_view>& pieces) {
  Outcome o;
  http::RequestReader reader(4096);
  std::string in;
  for (std::string_view piece : pieces) {
    in.append(piece);
    for (;;) {
      Parse p = reader.next(in);
      check_answer(p, in, reader.unread(in));
      if (p.status == Parse::kComplete) {
        o.requests.push_back(p);
        continue;
      }
      if (p.status == Parse::kContinue) continue;  // a server sends "100 Continue" and reads on
      o.last = p;
      if (p.status == Parse::kError) return o;
      break;
    }
  }
  return o;
}

// A cut point that moves with every mutation: a hash of all the bytes (FNV-1a), folded into 0..size.
std::size_t chosen_cut(std::string_view data) {
  std::uint32_t hash = 2166136261u;
  for (unsigned char c : data) hash = (hash ^ c) * 16777619u;
  return hash % (data.size() + 1);
}

}  // namespace

// libFuzzer's entry point. It hands over a heap buffer of exactly `size` bytes, so that a read past the end of the
// input is an AddressSanitizer report.
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* bytes, std::size_t size) {
  std::string_view data(reinterpret_cast<const char*>(bytes), size);
  Outcome whole = read_all({data});
  const std::string copy(data);
  require(same(whole, read_all({copy})), "the same bytes give the same answers");  // promise 2

  // Promise 4. The prefix gets a buffer of its own, of exactly `cut` bytes, so AddressSanitizer sees a read past it.
  const std::size_t cut = chosen_cut(data);
  const std::vector<char> prefix(data.begin(), data.begin() + cut);
  Outcome split = read_all({std::string_view(prefix.data(), prefix.size()), data.substr(cut)});
  require(same(whole, split), "where the bytes are split does not change what is read");

  std::size_t total = 0;  // promise 5: the requests account for the bytes they took, in order
  for (const Parse& p : whole.requests) total += p.length;
  require(total <= data.size(), "the requests took no more bytes than there were");
  return 0;
}
