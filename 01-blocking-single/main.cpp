// 01-blocking-single: one thread, blocking sockets, one connection at a time.
//
// The simplest server that can work: accept a connection, serve its requests until it closes, then accept the next.
// While one client is being served (or is merely connected and silent), every other client waits in the kernel's
// listen queue. With the 1 ms handler that caps the server near 1 / 1.1 ms = ~900 requests a second, whatever the
// concurrency. Chapter 02 lifts that limit with a thread per connection.
// With --root DIR it serves the files under DIR, each sent by sendfile() with no copy through user space.
//
// Needs:  Linux, g++ with C++17.
// Build:  g++ -std=c++17 -O2 -pthread -o run_server main.cpp
// Run:    ./run_server            (./run_server --help for the flags)
// Try:    curl -i http://127.0.0.1:8080/
#include <chrono>
#include <string>

#include "../common/closing.hpp"
#include "../common/handler.hpp"
#include "../common/http.hpp"
#include "../common/lifecycle.hpp"
#include "../common/net.hpp"
#include "../common/options.hpp"
#include "../common/response.hpp"

namespace {

// [excerpt:serve-connection]
// Serves one connection until the client closes it, an error occurs, or a request head takes longer than
// --idle-timeout to arrive (the request deadline: before each recv(), SO_RCVTIMEO is set to the time left, so a
// client that dribbles bytes is closed on time too; a body may take longer while it keeps coming, deadline.hpp).
// Everyone else waits meanwhile: that is the lesson of this chapter.
// How it ends (common/closing.hpp): after a last response (an error, Connection: close), gracefully: our FIN, then
// what the client still sends is read and thrown away until it closes too, so that no RST destroys the response
// before the client has read it; at the request deadline, or when a send fails, with a reset.
void serve(Fd client, const Options& opts) {
  const OnlyConnection registered(client.get());  // a stop shuts its reading side: see lifecycle.hpp
  set_send_timeout(client.get(), opts.idle_timeout);  // how long a reader may take nothing
  std::string in;  // bytes received and not yet read by `reader`: the rest of a request, pipelined ones
  http::RequestReader reader(opts.max_body);  // where this connection's request stands (common/http.hpp)
  RequestDeadline deadline(opts.idle_timeout, std::chrono::steady_clock::now());  // the head's, then the body's
  for (;;) {
    http::Parse p = reader.next(in);  // takes the request (head and body) out of `in` as it reads it
    if (p.status == http::Parse::kError)  // answer, then end the connection: nothing can follow a framing error
      return end_after_response(client.get(), send_whole(client.get(), refuse(opts, p)));
    if (p.status == http::Parse::kContinue && !send_whole(client.get(), interim_continue()))
      return reset_connection(client.get());  // the client waits for "100 Continue" before sending its body
    if (p.status != http::Parse::kComplete) {  // read more
      long n = recv_before(client.get(), in, deadline, reader.reading_body());  // at a stop, no wait (lifecycle)
      if (n == -2) return reset_connection(client.get());  // the request deadline passed: reset (closing.hpp)
      if (n <= 0) return;  // EOF or an error (the client ended it), or a stop with nothing more to answer
      continue;
    }
    run_handler_here(opts);  // the simulated 1 ms of waiting blocks the only thread we have
    Outgoing out = respond(opts, p.request);  // the 1 KB body, or with --root a file for sendfile()
    bool sent = send_whole(client.get(), out);
    if (!sent || !out.keep_alive) return end_after_response(client.get(), sent);  // graceful, or reset if not sent
    deadline.next_request(std::chrono::steady_clock::now());
  }
}
// [/excerpt:serve-connection]

}  // namespace

int main(int argc, char** argv) {
  const Options opts = options_or_exit(argc, argv, {"01-blocking-single", 0, "it serves one connection at a time"});
  start_process();
  std::vector<Fd> listener = listen_sockets(opts);

  // [excerpt:accept-loop]
  for (;;) {
    Fd client = accept_or_stop(listener[0].get());
    if (!client.valid()) break;  // SIGINT or SIGTERM: stop accepting
    serve(std::move(client), opts);
  }
  // [/excerpt:accept-loop]
  return 0;  // serve() finishes (or, past the stop's grace, resets) its connection before returning
}
