// common/uring.hpp: small helpers for the two io_uring programs of chapter 06 (main.cpp and advanced.cpp).
//
//   to_kernel_timespec(d)   a duration as the __kernel_timespec that io_uring's timeouts read
//   monotonic_in(d)         `d` from now, as an absolute time for IORING_TIMEOUT_ABS
//   unavailable(error)      the sentence to print when the ring cannot be created
#pragma once

#include <linux/time_types.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>

inline __kernel_timespec to_kernel_timespec(std::chrono::nanoseconds d) {
  return {static_cast<long long>(d.count() / 1'000'000'000), static_cast<long long>(d.count() % 1'000'000'000)};
}

// `d` from now on CLOCK_MONOTONIC: the clock of an IORING_TIMEOUT_ABS timeout, and of std::chrono::steady_clock.
inline __kernel_timespec monotonic_in(std::chrono::nanoseconds d) {
  return to_kernel_timespec(std::chrono::steady_clock::now().time_since_epoch() + d);
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
