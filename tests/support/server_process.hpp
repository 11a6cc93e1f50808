#pragma once
// One server binary run as a child process for the length of a test.
//
//   ServerProcess(path, args)        fork + exec; stdout and stderr are pipes
//        |
//        v
//   [running] --wait_listening()--> port() known (the first stdout line, read with a deadline)
//        |
//        |  stop(signal, deadline) or wait_exit(deadline)
//        v
//   [reaped: status kept]            the destructor SIGKILLs and reaps a child that is still running
//
// A reader thread drains both pipes into strings from the start, so a chatty server never blocks on a full pipe
// and its stderr is there for failure messages. Every wait has a deadline: a broken server fails a test, it never
// hangs the suite. The child is stopped by its PID only, and dies with the test process (PR_SET_PDEATHSIG).

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/client.hpp"

namespace psp::test {

struct ExitStatus {
  enum class State { running, exited, killed };
  State state = State::running;
  int code = -1;   // when exited
  int signal = 0;  // when killed

  bool exited_with(int c) const { return state == State::exited && code == c; }
  std::string describe() const {
    switch (state) {
      case State::running: return "still running";
      case State::exited: return "exited with status " + std::to_string(code);
      case State::killed: return "killed by signal " + std::to_string(signal) + " (" + strsignal(signal) + ")";
    }
    return "?";
  }
  static ExitStatus from_wait(int status) {
    ExitStatus s;
    if (WIFEXITED(status)) {
      s.state = State::exited;
      s.code = WEXITSTATUS(status);
    } else if (WIFSIGNALED(status)) {
      s.state = State::killed;
      s.signal = WTERMSIG(status);
    }
    return s;
  }
};

struct SpawnOptions {
  // RLIMIT_NOFILE (soft and hard) set in the child before exec. The servers raise their soft limit to the hard
  // one, so only a hard limit holds them to a number.
  std::optional<rlim_t> nofile;
};

// The address space a graded server may use, from tests/grade.sh --memory (PSP_GRADE_MEMORY_MB; none when unset or
// 0): a server that reads a 5 GiB file into memory fails its check instead of taking the grading machine down.
inline std::optional<rlim_t> graded_memory_cap() {
  const char* mb = std::getenv("PSP_GRADE_MEMORY_MB");
  if (mb == nullptr || std::atoll(mb) <= 0) return std::nullopt;
  return static_cast<rlim_t>(std::atoll(mb)) << 20;
}

// What a check cannot do to a server that something else started (tests/grade.sh --url): the grader reports such a
// check with these words, as lacking (kNeedsItsProcess) or as not applicable (kNeedsItsPid).
constexpr const char* kNeedsItsProcess = "needs the grader to start the server";
constexpr const char* kNeedsItsPid = "does not apply without --pid";

class ServerProcess {
 public:
  ServerProcess(std::string path, std::vector<std::string> args, SpawnOptions options = {})
      : path_(std::move(path)), args_(std::move(args)) {
    spawn(options);
  }

  // A server already running, that the grader did not start (tests/grade.sh --url, with --pid or without: 0). It
  // is never signalled, stopped or reaped here: what a check would need for that throws NeedsItsProcess, and pid()
  // without a PID throws NeedsItsPid. GoogleTest fails the check with the exception's words, which the grader
  // turns into "lacking" and "skipped".
  struct Attached {};
  ServerProcess(Attached, std::uint16_t port, pid_t pid) : path_("(already running)"), pid_(pid), port_(port),
                                                            attached_(true) {}
  bool attached() const { return attached_; }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  ~ServerProcess() {
    if (pid_ > 0 && !status_ && !attached_) {
      ::kill(-pid_, SIGKILL);  // its process group (spawn() made it one): the server and what it started
      int status = 0;
      while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
    if (wake_.valid()) {
      const std::uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(wake_.get(), &one, sizeof one);
    }
    if (reader_.joinable()) reader_.join();
  }

  const std::string& spawn_error() const { return spawn_error_; }
  pid_t pid() const {
    if (attached_ && pid_ <= 0)
      throw std::runtime_error(std::string(kNeedsItsPid) + ": it reads the server's process (/proc/PID)");
    return pid_;
  }
  std::uint16_t port() const { return port_; }
  std::string command_line() const {
    std::string out = path_;
    for (const auto& a : args_) out += " " + a;
    return out;
  }

  // Waits for the first stdout line and checks that it is exactly `listening on http://127.0.0.1:PORT/`.
  // On failure `why` says what happened instead (exit status and stderr included).
  bool wait_listening(Deadline deadline, std::string& why) {
    if (!spawn_error_.empty()) {
      why = spawn_error_;
      return false;
    }
    std::string line;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait_until(lock, deadline, [&] { return out_.find('\n') != std::string::npos || out_closed_; });
      const std::size_t eol = out_.find('\n');
      if (eol == std::string::npos) {
        why = out_closed_ ? "stdout closed before a listening line" : "no listening line before the deadline";
        why += "; stdout so far: " + Client::preview(out_);
        lock.unlock();
        if (out_closed_) why += "; " + wait_exit(deadline_in(std::chrono::seconds(2))).describe();
        why += "; stderr: " + err();
        return false;
      }
      line = out_.substr(0, eol);
    }
    // A graded server (tests/grade.sh) may name the loopback `localhost`; the seven servers print 127.0.0.1.
    const char* graded = std::getenv("PSP_GRADE_COMMAND");
    const std::string localhost = "listening on http://localhost:";
    const std::string prefix = graded != nullptr && *graded != '\0' && line.rfind(localhost, 0) == 0
                                   ? localhost
                                   : "listening on http://127.0.0.1:";
    const std::string digits = line.size() > prefix.size() + 1 ? line.substr(prefix.size(), line.size() - prefix.size() - 1) : "";
    if (line.compare(0, prefix.size(), prefix) != 0 || line.back() != '/' || digits.empty() || digits.size() > 5 ||
        digits.find_first_not_of("0123456789") != std::string::npos || std::stoul(digits) == 0 ||
        std::stoul(digits) > 65535) {
      why = "first stdout line is not 'listening on http://127.0.0.1:PORT/': '" + line + "'";
      return false;
    }
    port_ = static_cast<std::uint16_t>(std::stoul(digits));
    return true;
  }

  // For a server that prints no listening line (one started by tests/grade.sh with the port in its command): waits
  // until a connection to `port` succeeds, trying every 20 ms while the child runs.
  bool wait_accepting(std::uint16_t port, Deadline deadline, std::string& why) {
    if (!spawn_error_.empty()) {
      why = spawn_error_;
      return false;
    }
    while (running()) {
      if (Client::connect_to(port, deadline_in(std::chrono::milliseconds(200))).ok()) {
        port_ = port;
        return true;
      }
      if (Clock::now() >= deadline) {
        why = "nothing accepted connections on port " + std::to_string(port) + " before the deadline; stderr: " + err();
        return false;
      }
      ::poll(nullptr, 0, 20);
    }
    const ExitStatus status = wait_exit(deadline_in(std::chrono::seconds(2)));
    why = "the server exited before accepting a connection on port " + std::to_string(port) + ": " +
          status.describe() + "; stderr: " + err();
    if (status.exited_with(0))
      why += " (exited 0 before accepting: run it in the foreground; a server that forks into the background "
             "escapes the grader)";
    return false;
  }

  // Reaps the child if it has exited; never blocks.
  std::optional<ExitStatus> try_reap() {
    if (attached_) return status_;  // not our child: running() asks the kernel instead
    if (status_ || pid_ <= 0) return status_;
    // Once it has exited, and before it is reaped (so that its PID, the group's ID, cannot be reused yet), whatever
    // is left in its process group goes too: a wrapper script's server, helpers it started.
    siginfo_t info{};
    if (::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid_)
      ::kill(-pid_, SIGKILL);
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) status_ = ExitStatus::from_wait(status);
    return status_;
  }

  bool running() {
    if (attached_) return pid_ <= 0 || ::kill(pid_, 0) == 0 || errno == EPERM;  // unknown: assumed running
    return pid_ > 0 && !try_reap();
  }

  // Waits for the child to exit (state `running` if it has not by the deadline). Once it has, also waits a moment
  // for the pipes to reach EOF so that out() and err() are complete.
  ExitStatus wait_exit(Deadline deadline) {
    needs_its_process("waits for it to exit");
    if (pid_ <= 0) return {};
    while (!try_reap()) {
      const int timeout = poll_timeout_ms(deadline);
      if (timeout == 0) return {};
      if (pidfd_.valid()) {
        pollfd p{pidfd_.get(), POLLIN, 0};
        ::poll(&p, 1, timeout);
      } else {
        // No pidfd (kernel < 5.3): poll waitpid at a short interval.
        ::poll(nullptr, 0, std::min(timeout, 5));
      }
    }
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_until(lock, std::max(deadline, deadline_in(std::chrono::seconds(1))),
                   [&] { return out_closed_ && err_closed_; });
    return *status_;
  }

  // Sends `signal` to the child (by its PID) if it is still running; does not wait.
  void send_signal(int signal) {
    needs_its_process("sends it a signal");
    if (pid_ > 0 && !try_reap()) ::kill(pid_, signal);
  }

  // Sends `signal` and waits for the exit.
  ExitStatus stop(int signal, Deadline deadline) {
    needs_its_process("stops it");
    if (pid_ > 0 && !try_reap()) ::kill(pid_, signal);
    return wait_exit(deadline);
  }

  std::string out() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return out_;
  }
  std::string err() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return err_;
  }

 private:
  void needs_its_process(const char* what) const {
    if (attached_) throw std::runtime_error(std::string(kNeedsItsProcess) + ": this check " + what);
  }

  void spawn(const SpawnOptions& options) {
    int out_pipe[2];
    int err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      spawn_error_ = "pipe2: " + errno_text(errno);
      return;
    }
    Fd out_read(out_pipe[0]), out_write(out_pipe[1]), err_read(err_pipe[0]), err_write(err_pipe[1]);
    Fd dev_null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(path_.c_str()));
    for (auto& a : args_) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    const pid_t parent = ::getpid();
    const std::optional<rlim_t> address_space = graded_memory_cap();  // RLIMIT_AS, read before fork()

    pid_ = ::fork();
    if (pid_ < 0) {
      spawn_error_ = "fork: " + errno_text(errno);
      return;
    }
    if (pid_ == 0) {
      // Child: async-signal-safe calls only, up to exec.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::setsid();  // its own session and process group: stopping it stops what it started (a wrapper's server)
      if (address_space) {
        const rlimit limit{*address_space, *address_space};
        if (::setrlimit(RLIMIT_AS, &limit) != 0) child_fail(err_write.get(), "setrlimit(RLIMIT_AS) failed\n");
      }
      if (options.nofile) {
        const rlimit limit{*options.nofile, *options.nofile};
        if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) child_fail(err_write.get(), "setrlimit failed\n");
      }
      // The server must see default signal handling, whatever this process did.
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      for (int sig : {SIGPIPE, SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &dfl, nullptr);
      sigset_t none;
      ::sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      if (::dup2(dev_null.get(), 0) < 0 || ::dup2(out_write.get(), 1) < 0 || ::dup2(err_write.get(), 2) < 0)
        ::_exit(127);
#ifdef SYS_close_range
      ::syscall(SYS_close_range, 3U, ~0U, 0U);  // nothing but 0, 1, 2 leaks into the server
#endif
      ::execvp(argv[0], argv.data());  // a path as given, or a command looked up in PATH (tests/grade.sh)
      child_fail(2, "exec failed: cannot run the server command\n");
    }
    out_write.reset();
    err_write.reset();
#ifdef SYS_pidfd_open
    pidfd_.reset(static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0)));  // invalid on kernels < 5.3: wait_exit polls
#endif
    wake_.reset(::eventfd(0, EFD_CLOEXEC));
    reader_ = std::thread([this, out = std::move(out_read), err = std::move(err_read)]() mutable {
      pump(std::move(out), std::move(err));
    });
  }

  [[noreturn]] static void child_fail(int fd, const char* message) {
    [[maybe_unused]] ssize_t n = ::write(fd, message, std::strlen(message));
    ::_exit(127);
  }

  // Reader thread: appends whatever the child writes until both pipes are closed or the destructor wakes it.
  void pump(Fd out, Fd err) {
    constexpr std::size_t kCap = 1 << 20;  // a server that logs without end must not eat the test's memory
    char chunk[4096];
    for (;;) {
      pollfd fds[3] = {{out.get(), POLLIN, 0}, {err.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
      if (!out.valid() && !err.valid()) break;
      if (::poll(fds, 3, -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[2].revents != 0) break;
      for (int i = 0; i < 2; ++i) {
        if (fds[i].revents == 0) continue;
        Fd& fd = i == 0 ? out : err;
        const ssize_t n = ::read(fd.get(), chunk, sizeof chunk);
        if (n < 0 && errno == EINTR) continue;
        std::lock_guard<std::mutex> lock(mutex_);
        std::string& text = i == 0 ? out_ : err_;
        if (n > 0) {
          if (text.size() < kCap) text.append(chunk, static_cast<std::size_t>(n));
        } else {
          fd.reset();
          (i == 0 ? out_closed_ : err_closed_) = true;
        }
      }
      cv_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    out_closed_ = err_closed_ = true;
    cv_.notify_all();
  }

  std::string path_;
  std::vector<std::string> args_;
  std::string spawn_error_;
  pid_t pid_ = -1;
  std::uint16_t port_ = 0;
  bool attached_ = false;
  std::optional<ExitStatus> status_;
  Fd pidfd_;
  Fd wake_;
  std::thread reader_;

  mutable std::mutex mutex_;  // guards the four fields below, shared with the reader thread
  std::condition_variable cv_;
  std::string out_;
  std::string err_;
  bool out_closed_ = false;
  bool err_closed_ = false;
};

}  // namespace psp::test
