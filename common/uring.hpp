// common/uring.hpp: small helpers for the two io_uring programs of chapter 06 (main.cpp and advanced.cpp).
//
//   Ring                    a ring, with get_sqe() that never returns NULL and reap(), which copies the CQEs out
//   to_kernel_timespec(d)   a duration as the __kernel_timespec that io_uring's timeouts read
//   unavailable(error)      the sentence to print when the ring cannot be created
//   BufferRing              a ring of provided buffers, which a recv armed with IOSQE_BUFFER_SELECT reads into
#pragma once

#include <liburing.h>
#include <linux/time_types.h>
#include <sys/mman.h>

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
  unsigned flags;  // IORING_CQE_F_BUFFER (and the buffer's id: see BufferRing); advanced.cpp's F_MORE and F_NOTIF
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

// [excerpt:buffer-ring]
// A ring of provided buffers (Linux 5.19): `count` buffers of `size` bytes, registered with the ring under a group
// number. A recv armed with IOSQE_BUFFER_SELECT and that group names no memory: the kernel takes a buffer from this
// ring only when bytes are there to be read, and its CQE carries IORING_CQE_F_BUFFER and the buffer's id (in the
// flags' upper 16 bits). The loop copies the bytes out and gives the buffer back; with none left, such a recv fails
// with -ENOBUFS. So a waiting recv pins no memory of its connection: the buffers belong to the loop, not to the
// connections, and a loop needs about as many as it handles recv completions in one turn.
//
//   set_up: mmap the ring of buffer descriptors, register it, add every buffer, publish them (advance)
//   CQE with IORING_CQE_F_BUFFER: data(id) holds the bytes -> copy them out -> give_back(id): the kernel may reuse it
//
// (liburing 2.4 wraps set_up() in io_uring_setup_buf_ring(); 2.3, which Debian 12 has, only has its parts.)
class BufferRing {
 public:
  BufferRing() = default;
  ~BufferRing() {  // after io_uring_queue_exit(), which unregisters it (member of a Loop: destroyed after its body)
    if (descriptors_) ::munmap(descriptors_, count_ * sizeof(io_uring_buf));
  }
  BufferRing(const BufferRing&) = delete;
  BufferRing& operator=(const BufferRing&) = delete;

  // 0, or -errno: ENOMEM, or EINVAL from a kernel older than 5.19. `count` is a power of two, at most 32,768.
  int set_up(io_uring& ring, unsigned count, std::size_t size, int group) {
    void* mem = ::mmap(nullptr, count * sizeof(io_uring_buf), PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE,
                       -1, 0);  // page-aligned, as the kernel requires
    if (mem == MAP_FAILED) return -ENOMEM;
    descriptors_ = static_cast<io_uring_buf_ring*>(mem);
    count_ = count;
    size_ = size;
    buffers_.resize(count * size);
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<std::uintptr_t>(mem);
    reg.ring_entries = count;
    reg.bgid = static_cast<std::uint16_t>(group);
    if (int r = io_uring_register_buf_ring(&ring, &reg, 0); r < 0) return r;
    io_uring_buf_ring_init(descriptors_);
    for (unsigned id = 0; id < count; ++id)
      io_uring_buf_ring_add(descriptors_, data(id), static_cast<unsigned>(size), static_cast<unsigned short>(id),
                            io_uring_buf_ring_mask(count), static_cast<int>(id));
    io_uring_buf_ring_advance(descriptors_, static_cast<int>(count));  // from here on the kernel may take them
    return 0;
  }

  // The id of the buffer that a CQE with IORING_CQE_F_BUFFER names, and the buffer.
  static unsigned id(unsigned cqe_flags) { return cqe_flags >> IORING_CQE_BUFFER_SHIFT; }
  char* data(unsigned id) { return &buffers_[id * size_]; }

  // The buffer goes back at the ring's tail. Every buffer a CQE names must come back, whatever the CQE says (an EOF,
  // a connection that is gone): one that does not is lost to the kernel for good.
  void give_back(unsigned id) {
    io_uring_buf_ring_add(descriptors_, data(id), static_cast<unsigned>(size_), static_cast<unsigned short>(id),
                          io_uring_buf_ring_mask(count_), 0);
    io_uring_buf_ring_advance(descriptors_, 1);
  }

 private:
  io_uring_buf_ring* descriptors_ = nullptr;  // shared with the kernel: where each buffer is, and the tail
  unsigned count_ = 0;
  std::size_t size_ = 0;
  std::vector<char> buffers_;  // count x size bytes
};
// [/excerpt:buffer-ring]
