// SO_ORIGINAL_DST for mesh-proxy's use_original_dst listeners. Node has no getsockopt, and the
// destination a connection had before iptables REDIRECT changed it is only known to conntrack,
// which the kernel answers through this socket option. And IP_TRANSPARENT for listeners that TPROXY
// delivers connections to (Node has no setsockopt either).
#include <node_api.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
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

static napi_value init(napi_env env, napi_value exports) {
  napi_value fn;
  napi_create_function(env, "originalDst", NAPI_AUTO_LENGTH, original_dst, NULL, &fn);
  napi_set_named_property(env, exports, "originalDst", fn);
  napi_create_function(env, "setTransparent", NAPI_AUTO_LENGTH, set_transparent, NULL, &fn);
  napi_set_named_property(env, exports, "setTransparent", fn);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
