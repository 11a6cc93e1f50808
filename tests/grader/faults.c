// faults.c: turns a correct server into a broken one, with exactly one defect, for testing the grader.
//
// LD_PRELOAD names a shared library that the dynamic linker loads before every other one. A function it defines
// (send, accept4, epoll_pwait2...) takes the place of libc's in the whole process; dlsym(RTLD_NEXT, "send") still
// finds libc's, so a wrapper can call the real function and change its answer. The server's code is not touched.
//
// Why a shim and not seven hand-broken copies: each broken server here is a correct server plus one defect, so
// the grader's report for it must lose exactly the checks about that defect and keep every other one. A check
// that fails too proves a check that is not precise; a defect no check catches proves a hole in the suite.
//
// PSP_FAULT picks the defect (unset or unknown: one line on stderr, and every call passes through untouched):
//   short-writes  ignores short writes: when send/write/writev/sendmsg/sendfile on a socket take only part of what
//                 they were given, report it all as taken. The rest is silently lost (sendfile's offset stays where
//                 the kernel put it, so the server skips the bytes it believes were sent).
//   leak-fd       leaks a descriptor per connection: every accepted socket is dup()ed once and never closed, so
//                 the server's close() does not end it: the peer gets no FIN (nor RST) from an idle or reset close.
//                 (close() still takes the socket out of epoll: see "leak-fd" below.)
//   spin          an event loop that busy-spins when idle: select/pselect/poll/ppoll/epoll_wait/epoll_pwait/
//                 epoll_pwait2 always get a zero timeout, so the loop wakes at once and burns a CPU doing nothing.
//   crash-empty   crashes on an empty request: SIGSEGV when a connection's first bytes begin with an empty line
//                 (RFC 9112 section 2.2: a server SHOULD ignore it), or when it ends before sending any byte.
//
// Build and run (the wrappers see only calls made through libc, so this suits 05-epoll, and 03-select for spin;
// 06-io_uring receives and sends through its ring, where no libc function is called, and the shim sees nothing):
//   gcc -shared -fPIC -O2 -Wall -Wextra -o libpsp_faults.so faults.c -ldl
//   env LD_PRELOAD=/path/libpsp_faults.so PSP_FAULT=leak-fd ./build/05-epoll/run_server --port 0
#define _GNU_SOURCE
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

enum Fault { kNone, kShortWrites, kLeakFd, kSpin, kCrashEmpty };
static enum Fault fault = kNone;

__attribute__((constructor)) static void choose_fault(void) {
  static const char* const names[] = {"", "short-writes", "leak-fd", "spin", "crash-empty"};
  const char* wanted = getenv("PSP_FAULT");
  for (int f = kShortWrites; f <= kCrashEmpty; ++f)
    if (wanted != NULL && strcmp(wanted, names[f]) == 0) fault = (enum Fault)f;
  if (fault == kNone)
    fprintf(stderr, "psp_faults: PSP_FAULT '%s' is not a known fault: nothing injected\n", wanted ? wanted : "");
  else
    fprintf(stderr, "psp_faults: injecting %s\n", names[fault]);
}

// Declares `real`: libc's version of the wrapped function, looked up once (a race stores the same pointer twice).
#define REAL(fn)                  \
  static __typeof__(fn)* real;    \
  if (real == NULL) real = (__typeof__(fn)*)dlsym(RTLD_NEXT, #fn)

// Asked on every call, not cached: an fd number that was a socket may be a file by the next call.
static int is_socket(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

// ---- short-writes: a partial write is reported as complete ----

static ssize_t claim_all(int fd, ssize_t n, size_t wanted) {
  if (fault == kShortWrites && n > 0 && (size_t)n < wanted && is_socket(fd)) return (ssize_t)wanted;
  return n;
}

ssize_t send(int fd, const void* buf, size_t len, int flags) {
  REAL(send);
  return claim_all(fd, real(fd, buf, len, flags), len);
}

ssize_t sendmsg(int fd, const struct msghdr* msg, int flags) {
  REAL(sendmsg);
  size_t wanted = 0;
  for (size_t i = 0; i < msg->msg_iovlen; ++i) wanted += msg->msg_iov[i].iov_len;
  return claim_all(fd, real(fd, msg, flags), wanted);
}

ssize_t writev(int fd, const struct iovec* iov, int count) {
  REAL(writev);
  size_t wanted = 0;
  for (int i = 0; i < count; ++i) wanted += iov[i].iov_len;
  return claim_all(fd, real(fd, iov, count), wanted);
}

ssize_t write(int fd, const void* buf, size_t len) {  // claim_all() leaves files and pipes alone
  REAL(write);
  return claim_all(fd, real(fd, buf, len), len);
}

// The kernel has advanced *offset by what it really sent (or the file position, with no offset): left as it is.
ssize_t sendfile(int out_fd, int in_fd, off_t* offset, size_t count) {
  REAL(sendfile);
  return claim_all(out_fd, real(out_fd, in_fd, offset, count), count);
}

ssize_t sendfile64(int out_fd, int in_fd, off64_t* offset, size_t count) {
  REAL(sendfile64);
  return claim_all(out_fd, real(out_fd, in_fd, offset, count), count);
}

// ---- per connection: what accept4() starts ----

#define kMaxFd 65536                      // per-fd tables; fds past the end pass through
static unsigned char got_bytes[kMaxFd];  // crash-empty: has this connection sent us any byte yet?
static int epoll_of[kMaxFd];             // leak-fd: the epoll fd this fd was added to, plus one (0: none)

static void on_accepted(int fd) {
  if (fd < 0) return;
  if (fault == kLeakFd) (void)dup(fd);  // never closed: the connection outlives the server's close()
  if (fd < kMaxFd) got_bytes[fd] = 0;   // a new connection under this number
}

int accept(int fd, struct sockaddr* addr, socklen_t* len) {
  REAL(accept);
  int client = real(fd, addr, len);
  on_accepted(client);
  return client;
}

int accept4(int fd, struct sockaddr* addr, socklen_t* len, int flags) {
  REAL(accept4);
  int client = real(fd, addr, len, flags);
  on_accepted(client);
  return client;
}

// ---- leak-fd: the leaked socket still leaves epoll ----
// epoll watches the socket, not the fd number: with a duplicate open, close() leaves it watched, and 05 would
// spin on a closed peer's EOF and hand its events to the next connection under that number. The defect wanted is
// the leak alone (a server that unregisters a connection and forgets to close it): close() unregisters it first.
int epoll_ctl(int ep, int op, int fd, struct epoll_event* event) {
  REAL(epoll_ctl);
  int result = real(ep, op, fd, event);
  if (fault == kLeakFd && result == 0 && op == EPOLL_CTL_ADD && fd >= 0 && fd < kMaxFd) epoll_of[fd] = ep + 1;
  return result;
}

int close(int fd) {
  REAL(close);
  if (fault == kLeakFd && fd >= 0 && fd < kMaxFd && epoll_of[fd] != 0) {
    epoll_ctl(epoll_of[fd] - 1, EPOLL_CTL_DEL, fd, NULL);
    epoll_of[fd] = 0;
  }
  return real(fd);
}

// ---- crash-empty: the first bytes of a connection ----
// Called after a read from a socket. The parser this imitates takes the first line as the request-line and
// dereferences NULL when that line is empty, or when there is no line at all.
static ssize_t check_first_bytes(int fd, const void* buf, ssize_t n) {
  if (fault != kCrashEmpty || fd < 0 || fd >= kMaxFd || got_bytes[fd] || n < 0) return n;
  const char* p = buf;
  // A lone "\r" counts as an empty line: its "\n" is on the way.
  int empty_line = n > 0 && (p[0] == '\n' || (p[0] == '\r' && (n == 1 || p[1] == '\n')));
  if (n == 0 || empty_line) raise(SIGSEGV);
  got_bytes[fd] = 1;
  return n;
}

ssize_t recv(int fd, void* buf, size_t len, int flags) {
  REAL(recv);
  return check_first_bytes(fd, buf, real(fd, buf, len, flags));
}

// read() serves files and pipes too: only sockets are looked at.
ssize_t read(int fd, void* buf, size_t len) {
  REAL(read);
  ssize_t n = real(fd, buf, len);
  return fault == kCrashEmpty && is_socket(fd) ? check_first_bytes(fd, buf, n) : n;
}

// ---- spin: every wait returns at once ----

static const struct timespec kNoWait = {0, 0};

int select(int nfds, fd_set* r, fd_set* w, fd_set* e, struct timeval* timeout) {
  REAL(select);
  struct timeval zero = {0, 0};
  return real(nfds, r, w, e, fault == kSpin ? &zero : timeout);
}

int pselect(int nfds, fd_set* r, fd_set* w, fd_set* e, const struct timespec* timeout, const sigset_t* mask) {
  REAL(pselect);
  return real(nfds, r, w, e, fault == kSpin ? &kNoWait : timeout, mask);
}

int poll(struct pollfd* fds, nfds_t n, int timeout) {
  REAL(poll);
  return real(fds, n, fault == kSpin ? 0 : timeout);
}

int ppoll(struct pollfd* fds, nfds_t n, const struct timespec* timeout, const sigset_t* mask) {
  REAL(ppoll);
  return real(fds, n, fault == kSpin ? &kNoWait : timeout, mask);
}

int epoll_wait(int ep, struct epoll_event* events, int max, int timeout) {
  REAL(epoll_wait);
  return real(ep, events, max, fault == kSpin ? 0 : timeout);
}

int epoll_pwait(int ep, struct epoll_event* events, int max, int timeout, const sigset_t* mask) {
  REAL(epoll_pwait);
  return real(ep, events, max, fault == kSpin ? 0 : timeout, mask);
}

#if __GLIBC_PREREQ(2, 35)  // epoll_pwait2 (05-epoll's wait) came with glibc 2.35
int epoll_pwait2(int ep, struct epoll_event* events, int max, const struct timespec* timeout, const sigset_t* mask) {
  REAL(epoll_pwait2);
  return real(ep, events, max, fault == kSpin ? &kNoWait : timeout, mask);
}
#endif
