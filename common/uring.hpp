// common/uring.hpp: small helpers for the two io_uring programs of chapter 06 (main.cpp and advanced.cpp).
//
//   Ring                    a ring, with get_sqe() that never returns NULL and reap(), which copies the CQEs out
//   to_kernel_timespec(d)   a duration as the __kernel_timespec that io_uring's timeouts read
//   unavailable(error)      the sentence to print when the ring cannot be created
#pragma once

#include <liburing.h>
#include <linux/time_types.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

// What a loop keeps of a CQE, copied out of the ring (see Ring::reap).
struct Completion {
  std::uint64_t user_data;
  int res;
  unsigned flags;  // IORING_CQE_F_MORE (a multishot operation goes on), F_BUFFER, F_NOTIF: advanced.cpp's
};

// [excerpt:get-sqe]
// A ring, and the CQEs reaped from it that the loop has not dispatched yet. The loop creates the ring (`ring`, with
// the setup options it wants), then runs turns: submit and wait, reap(), dispatch every entry of `batch`, clear it.
struct Ring {
  io_uring ring{};
  std::vector<Completion> batch;

  // A free SQE, for `count` entries queued back to back (a linked chain must go in one submission). When the
  // submission queue is full we submit what is queued to make room, rather than dereference the NULL that
  // io_uring_get_sqe() returns. -EBUSY (5.x kernels): CQEs overflowed the CQ, and the kernel takes no SQE until we
  // reap; reap() moves them to `batch`, which the loop dispatches after the handler that called us returns, never
  // in the middle of it. With SQPOLL, submitting only wakes the kernel thread: we wait until it has taken some.
  io_uring_sqe* get_sqe(unsigned count = 1) {
    while (io_uring_sq_space_left(&ring) < count) {
      if (io_uring_submit(&ring) == -EBUSY) reap();  // other errors (-EINTR, -EAGAIN) are transient: retry
      if (ring.flags & IORING_SETUP_SQPOLL) {
        reap();  // (on 5.x an overflow stops the SQPOLL thread too)
        io_uring_sqring_wait(&ring);
      }
    }
    return io_uring_get_sqe(&ring);
  }

  // Copies the CQEs out and hands their slots back before any is handled: the handlers queue new work, whose CQEs
  // need free slots.
  void reap() {
    std::size_t before = batch.size();
    unsigned head;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(&ring, head, cqe) batch.push_back({cqe->user_data, cqe->res, cqe->flags});
    io_uring_cq_advance(&ring, static_cast<unsigned>(batch.size() - before));
  }
};
// [/excerpt:get-sqe]

inline __kernel_timespec to_kernel_timespec(std::chrono::nanoseconds d) {
  return {static_cast<long long>(d.count() / 1'000'000'000), static_cast<long long>(d.count() % 1'000'000'000)};
}

// One sentence on why io_uring cannot be used here; the tests recognise "io_uring is unavailable" and skip.
inline std::string unavailable(int error) {
  std::string why = std::strerror(error);
  if (error == ENOSYS) why = "the kernel does not provide it (ENOSYS: too old, built without it, or filtered)";
  if (error == EPERM) {
    int disabled = 0;
    std::ifstream("/proc/sys/kernel/io_uring_disabled") >> disabled;
    why = disabled == 2   ? "the sysctl kernel.io_uring_disabled is 2 (EPERM)"
          : disabled == 1 ? "the sysctl kernel.io_uring_disabled is 1 and this user is not in kernel.io_uring_group"
                          : "a seccomp filter or security policy forbids it (EPERM), as Docker's default profile does";
  }
  return "io_uring is unavailable: " + why;
}
