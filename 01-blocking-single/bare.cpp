// 01-blocking-single/bare.cpp: the bare blocking HTTP server, with nothing but the raw system calls.
//
// socket, bind, listen, then for ever: accept, recv until the blank line that ends the request head, send one fixed
// answer, close. It works for curl and a browser. Everything it leaves out is what main.cpp gets from common/:
//
//   partial reads    a head split over several recv()s works here, but nothing checks that it is HTTP: http.hpp's
//                    parse_request() says complete, incomplete or malformed (400, 405, 413, 414, 431, 501, 505)
//   short writes     send() may take only part of the answer; this ignores it: send_all(), send_whole() loop
//   pipelining       bytes after the first head are thrown away: serve() keeps them in its buffer for the next turn
//   keep-alive       one request per connection ("Connection: close"): serve() loops, respond() decides
//   limits           `in` grows without bound: kMaxHead (8 KiB, http.hpp) and recv_into()'s 4 KiB reads
//   timeouts         a silent client holds the server for ever: set_recv_deadline(), set_send_timeout() (net.hpp)
//   errors, EINTR    failed calls are ignored, or end it with perror(): accept_client() retries EINTR and sheds a
//                    connection at EMFILE (the spare descriptor), send_all() retries EINTR, fail_startup() explains
//                    a bad start in one sentence
//   signals          Ctrl-C kills it mid-request, and a server that sends again to a client that has reset the
//                    connection gets SIGPIPE, which kills it: start_process() ignores SIGPIPE and catches
//                    SIGINT/SIGTERM, accept_or_stop() notices them (lifecycle.hpp), every send passes MSG_NOSIGNAL
//   closing          close() with unread input sends an RST: end_after_response(), reset_connection() (closing.hpp)
//
// Build:  g++ -std=c++17 -O2 -Wall -Wextra -o bare bare.cpp
// Run:    ./bare [PORT]    (default 8080; 0 lets the kernel pick a free port; further arguments are ignored)
// Try:    curl -i http://127.0.0.1:8080/
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

// [excerpt:bare]
int main(int argc, char** argv) {
  int port = argc > 1 ? atoi(argv[1]) : 8080;
  int listener = socket(AF_INET, SOCK_STREAM, 0);  // a TCP socket, not yet bound to anything
  int one = 1;
  setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // a restart may bind despite TIME_WAIT
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);                     // network byte order
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);   // 127.0.0.1: reachable from this machine only
  if (bind(listener, (sockaddr*)&addr, sizeof addr) < 0 || listen(listener, 128) < 0) {
    perror("bind or listen");
    return 1;
  }
  socklen_t len = sizeof addr;
  getsockname(listener, (sockaddr*)&addr, &len);   // which port we got (port 0: the kernel chose)
  printf("listening on http://127.0.0.1:%d/\n", ntohs(addr.sin_port));
  fflush(stdout);                                  // scripts wait for that line

  const std::string answer =
      "HTTP/1.1 200 OK\r\n"
      "Content-Length: 6\r\n"
      "Connection: close\r\n"
      "\r\n"
      "hello\n";
  for (;;) {
    int client = accept(listener, nullptr, nullptr);  // sleeps until a connection is in the queue
    if (client < 0) continue;
    std::string in;                                   // the bytes of the request head so far
    char chunk[4096];
    while (in.find("\r\n\r\n") == std::string::npos) {
      ssize_t n = recv(client, chunk, sizeof chunk, 0);  // sleeps until some bytes arrive
      if (n <= 0) break;                                 // 0: the client closed; -1: an error
      in.append(chunk, n);
    }
    if (in.find("\r\n\r\n") != std::string::npos)
      send(client, answer.data(), answer.size(), 0);  // sleeps until the kernel has taken (some of) it
    close(client);
  }
}
// [/excerpt:bare]
