// SO_ORIGINAL_DST for mesh-proxy's use_original_dst listeners. Node has no getsockopt, and the
// destination a connection had before iptables REDIRECT changed it is only known to conntrack,
// which the kernel answers through this socket option. And IP_TRANSPARENT for listeners that TPROXY
// delivers connections to (Node has no setsockopt either), transparent upstream sockets bound to
// a downstream client's address (original_src), and the TCP keepalive interval and probe count
// (Node's setKeepAlive sets only the idle time).
#include <node_api.h>
#include <unistd.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

// The values of linux/netfilter_ipv4.h and linux/netfilter_ipv6/ip6_tables.h, whose headers clash
// with the libc ones.
#ifndef SO_ORIGINAL_DST
#define SO_ORIGINAL_DST 80
#endif
#ifndef IP6T_SO_ORIGINAL_DST
#define IP6T_SO_ORIGINAL_DST 80
#endif

static napi_value throw_errno(napi_env env, const char* what, int err) {
  char msg[160];
  snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
  napi_throw_error(env, NULL, msg);
  return NULL;
}

// The descriptor argument of fn(fd) and its socket's address family, or -1 after throwing.
static int32_t socket_arg(napi_env env, napi_callback_info info, const char* fn, sa_family_t* family) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t fd;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 1 ||
      napi_get_value_int32(env, argv[0], &fd) != napi_ok || fd < 0) {
    char msg[96];
    snprintf(msg, sizeof msg, "%s(fd): fd must be a non-negative integer", fn);
    napi_throw_type_error(env, NULL, msg);
    return -1;
  }
  struct sockaddr_storage local;
  socklen_t len = sizeof local;
  if (getsockname(fd, (struct sockaddr*)&local, &len) != 0) {
    throw_errno(env, "getsockname", errno);
    return -1;
  }
  *family = local.ss_family;
  return fd;
}

// originalDst(fd) -> { address, port } | null. Null when the connection is not NATed by conntrack
// (ENOENT), i.e. its local address is already its destination.
static napi_value original_dst(napi_env env, napi_callback_info info) {
  sa_family_t family;
  int32_t fd = socket_arg(env, info, "originalDst", &family);
  if (fd < 0) return NULL;

  struct sockaddr_storage dst;
  memset(&dst, 0, sizeof dst);
  socklen_t len = sizeof dst;
  int rc = -1;
  // An IPv6 socket may carry an IPv4 connection (mapped address): IPv6's option first, then IPv4's.
  if (family == AF_INET6) rc = getsockopt(fd, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &dst, &len);
  if (rc != 0) {
    len = sizeof dst;
    rc = getsockopt(fd, SOL_IP, SO_ORIGINAL_DST, &dst, &len);
  }
  napi_value result;
  if (rc != 0) {
    if (errno == ENOENT || errno == ENOPROTOOPT) {
      napi_get_null(env, &result);
      return result;
    }
    return throw_errno(env, "getsockopt(SO_ORIGINAL_DST)", errno);
  }

  char text[INET6_ADDRSTRLEN];
  int port;
  if (dst.ss_family == AF_INET6) {
    struct sockaddr_in6* a = (struct sockaddr_in6*)&dst;
    inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    port = ntohs(a->sin6_port);
  } else {
    struct sockaddr_in* a = (struct sockaddr_in*)&dst;
    inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    port = ntohs(a->sin_port);
  }
  napi_value address, port_value;
  napi_create_object(env, &result);
  napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &address);
  napi_create_int32(env, port, &port_value);
  napi_set_named_property(env, result, "address", address);
  napi_set_named_property(env, result, "port", port_value);
  return result;
}

// setTransparent(fd): IP_TRANSPARENT (IPV6_TRANSPARENT too on an IPv6 socket), so that a listener
// accepts the connections TPROXY hands it with their original destination. Needs CAP_NET_ADMIN.
static napi_value set_transparent(napi_env env, napi_callback_info info) {
  sa_family_t family;
  int32_t fd = socket_arg(env, info, "setTransparent", &family);
  if (fd < 0) return NULL;
  int one = 1;
  if (family == AF_INET6 && setsockopt(fd, SOL_IPV6, IPV6_TRANSPARENT, &one, sizeof one) != 0) {
    return throw_errno(env, "setsockopt(IPV6_TRANSPARENT)", errno);
  }
  if (setsockopt(fd, SOL_IP, IP_TRANSPARENT, &one, sizeof one) != 0) return throw_errno(env, "setsockopt(IP_TRANSPARENT)", errno);
  napi_value result;
  napi_get_undefined(env, &result);
  return result;
}

// originalSrcSocket(address, mark) -> fd: a non-blocking TCP socket with IP_TRANSPARENT (so it may
// bind an address that is not local), SO_MARK `mark` when not 0 (so the replies to that address are
// routed back to this host), bound to `address` on a port the kernel picks. The caller connects it.
// Needs CAP_NET_ADMIN.
static napi_value original_src_socket(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  char text[INET6_ADDRSTRLEN];
  size_t text_len;
  uint32_t mark;
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 2 ||
      napi_get_value_string_utf8(env, argv[0], text, sizeof text, &text_len) != napi_ok ||
      napi_get_value_uint32(env, argv[1], &mark) != napi_ok) {
    napi_throw_type_error(env, NULL, "originalSrcSocket(address, mark): an IP address string and a non-negative mark");
    return NULL;
  }
  struct sockaddr_storage src;
  memset(&src, 0, sizeof src);
  socklen_t len;
  int family;
  struct sockaddr_in* v4 = (struct sockaddr_in*)&src;
  struct sockaddr_in6* v6 = (struct sockaddr_in6*)&src;
  if (inet_pton(AF_INET, text, &v4->sin_addr) == 1) {
    family = v4->sin_family = AF_INET;
    len = sizeof *v4;
  } else if (inet_pton(AF_INET6, text, &v6->sin6_addr) == 1) {
    family = v6->sin6_family = AF_INET6;
    len = sizeof *v6;
  } else {
    char msg[96];
    snprintf(msg, sizeof msg, "originalSrcSocket: %s is not an IP address", text);
    napi_throw_type_error(env, NULL, msg);
    return NULL;
  }
  int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return throw_errno(env, "socket", errno);
  int one = 1;
  const char* failed = NULL;
  if (family == AF_INET6 && setsockopt(fd, SOL_IPV6, IPV6_TRANSPARENT, &one, sizeof one) != 0) failed = "setsockopt(IPV6_TRANSPARENT)";
  else if (family == AF_INET && setsockopt(fd, SOL_IP, IP_TRANSPARENT, &one, sizeof one) != 0) failed = "setsockopt(IP_TRANSPARENT)";
  else if (mark != 0 && setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof mark) != 0) failed = "setsockopt(SO_MARK)";
  else if (bind(fd, (struct sockaddr*)&src, len) != 0) failed = "bind";
  if (failed) {
    int err = errno;
    close(fd);
    return throw_errno(env, failed, err);
  }
  napi_value result;
  napi_create_int32(env, fd, &result);
  return result;
}

// tcpKeepalive(fd, time, interval, probes) -> { time, interval, probes }: SO_KEEPALIVE on, and each
// of TCP_KEEPIDLE (seconds), TCP_KEEPINTVL (seconds) and TCP_KEEPCNT that is above 0 (0 keeps the
// system's); returns the three as the kernel now has them.
static napi_value tcp_keepalive(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  int32_t fd;
  uint32_t want[3];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 4 || napi_get_value_int32(env, argv[0], &fd) != napi_ok || fd < 0 ||
      napi_get_value_uint32(env, argv[1], &want[0]) != napi_ok || napi_get_value_uint32(env, argv[2], &want[1]) != napi_ok ||
      napi_get_value_uint32(env, argv[3], &want[2]) != napi_ok) {
    napi_throw_type_error(env, NULL, "tcpKeepalive(fd, time, interval, probes): a descriptor and three non-negative integers");
    return NULL;
  }
  static const int options[3] = {TCP_KEEPIDLE, TCP_KEEPINTVL, TCP_KEEPCNT};
  static const char* const names[3] = {"time", "interval", "probes"};
  int one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) != 0) return throw_errno(env, "setsockopt(SO_KEEPALIVE)", errno);
  napi_value result;
  napi_create_object(env, &result);
  for (int i = 0; i < 3; i++) {
    int v = (int)want[i];
    if (v > 0 && setsockopt(fd, IPPROTO_TCP, options[i], &v, sizeof v) != 0) return throw_errno(env, "setsockopt(TCP_KEEP*)", errno);
    socklen_t len = sizeof v;
    if (getsockopt(fd, IPPROTO_TCP, options[i], &v, &len) != 0) return throw_errno(env, "getsockopt(TCP_KEEP*)", errno);
    napi_value value;
    napi_create_int32(env, v, &value);
    napi_set_named_property(env, result, names[i], value);
  }
  return result;
}

static napi_value init(napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, "originalDst", NAPI_AUTO_LENGTH, original_dst, NULL, &fn);
  napi_set_named_property(env, exports, "originalDst", fn);
  napi_create_function(env, "setTransparent", NAPI_AUTO_LENGTH, set_transparent, NULL, &fn);
  napi_set_named_property(env, exports, "setTransparent", fn);
  napi_create_function(env, "originalSrcSocket", NAPI_AUTO_LENGTH, original_src_socket, NULL, &fn);
  napi_set_named_property(env, exports, "originalSrcSocket", fn);
  napi_create_function(env, "tcpKeepalive", NAPI_AUTO_LENGTH, tcp_keepalive, NULL, &fn);
  napi_set_named_property(env, exports, "tcpKeepalive", fn);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
