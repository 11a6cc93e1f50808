#pragma once
// Forced into the test builds server_06_eagain and server_06_advanced_eagain (CMake compiles them with
// `-include` this file), never into the servers themselves: every other recv and send that 06's loops prepare
// completes with -EAGAIN when its socket is not ready, so tests/integration/uring_eagain_test.cpp can check that
// the loops take -EAGAIN for "not ready yet" and never for the end of a connection.
//
// Why: an io_uring recv or send normally waits for its socket in the ring (internal poll). One that the kernel hands
// to a worker thread (io-wq: after many spurious wake-ups, or when it cannot allocate its poll) runs there as a
// blocking call, and for SENDMSG and RECVMSG the socket's O_NONBLOCK then answers -EAGAIN (liburing issue #364,
// Seastar's io_uring backend). SEND and RECV, which 06 uses, do not pass O_NONBLOCK on in the worker (the kernel's
// io_uring/net.c) and wait there; still, -EAGAIN is a result io_uring may give, and no test can order that pressure.
// IOSQE_ASYNC does not provoke it: on Linux 6.18 a forced-async recv or send on a pollable socket still waits by
// poll, in the worker (checked: a thousand such recvs on an idle socket, and sends to a slow reader, and not one
// -EAGAIN). MSG_DONTWAIT does: the kernel then completes the operation with -EAGAIN instead of waiting.
//
// Every other one, not every one: the loop's retry of an operation that got -EAGAIN is then usually an ordinary
// one, which waits, so a fixed loop does not spin while the client is slow.
//
// The same builds also run with a ring of provided buffers that never holds more than kBuffers (common/uring.hpp's
// BufferRing): a turn in which more recvs complete than that fails the others with -ENOBUFS, which the loops must
// take for "armed again", too. The setup publishes all its buffers with one io_uring_buf_ring_advance(); the
// wrapper publishes kBuffers of them only. Each one given back is published again (an advance by 1), in the place of
// the one the kernel took, so the ring keeps kBuffers at most, and the others are never used.
//
// How: liburing's prep functions and io_uring_buf_ring_advance() are inline functions of <liburing.h>. This file
// includes it first, wraps the four that prepare a socket recv or send and the one that publishes buffers, and then
// names the wrappers with macros, so that every later use in the server's own source (and in common/uring.hpp) takes
// the wrapper. A macro that renames a library function is a test build's trick only.
#include <liburing.h>
#include <sys/socket.h>

#include <cstddef>

namespace psp_inject_eagain {

// One loop per thread: the alternation is the thread's own, and needs no lock.
inline void every_other(io_uring_sqe* sqe) {
  thread_local unsigned count = 0;
  if (++count % 2 == 1) sqe->msg_flags |= MSG_DONTWAIT;
}

inline void prep_recv(io_uring_sqe* sqe, int fd, void* buf, std::size_t len, int flags) {
  io_uring_prep_recv(sqe, fd, buf, len, flags);
  every_other(sqe);
}
inline void prep_recv_multishot(io_uring_sqe* sqe, int fd, void* buf, std::size_t len, int flags) {
  io_uring_prep_recv_multishot(sqe, fd, buf, len, flags);
  every_other(sqe);
}
inline void prep_send(io_uring_sqe* sqe, int fd, const void* buf, std::size_t len, int flags) {
  io_uring_prep_send(sqe, fd, buf, len, flags);
  every_other(sqe);
}
constexpr int kBuffers = 2;

inline void buf_ring_advance(io_uring_buf_ring* br, int count) {
  io_uring_buf_ring_advance(br, count < kBuffers ? count : kBuffers);
}

inline void prep_send_zc(io_uring_sqe* sqe, int fd, const void* buf, std::size_t len, int flags, unsigned zc_flags) {
  io_uring_prep_send_zc(sqe, fd, buf, len, flags, zc_flags);
  every_other(sqe);
}

}  // namespace psp_inject_eagain

#define io_uring_prep_recv psp_inject_eagain::prep_recv
#define io_uring_prep_recv_multishot psp_inject_eagain::prep_recv_multishot
#define io_uring_prep_send psp_inject_eagain::prep_send
#define io_uring_prep_send_zc psp_inject_eagain::prep_send_zc
#define io_uring_buf_ring_advance psp_inject_eagain::buf_ring_advance
