// For unit tests that need real TCP sockets: a listener on a port the kernel picks, and a client connected to it.
#pragma once

#include "common/net.hpp"

inline Options any_port() {
  Options o;
  o.port = 0;
  return o;
}

inline int port_of(int fd) { return detail::bound_port(fd); }

// A blocking client connected to 127.0.0.1:port, or an invalid Fd.
inline Fd connect_to(int port) {
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) fd.reset();
  return fd;
}
