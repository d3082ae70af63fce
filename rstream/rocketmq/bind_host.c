/* LD_PRELOAD shim: a socket bound to the wildcard address is bound to one host instead.
 *
 * Some servers inside RocketMQ's JVMs cannot be told where to listen (the proxy's gRPC server is
 * NettyServerBuilder.forPort(port), the broker's HA service binds its port alone). Loaded with
 * LD_PRELOAD, this wraps bind(): an IPv4 INADDR_ANY becomes the IPv4 address in the environment
 * variable RSTREAM_BIND_HOST (default 127.0.0.1), an IPv6 in6addr_any (Java's dual-stack sockets)
 * becomes its v4-mapped form ::ffff:<that address>. Every other bind() is left alone.
 *
 * Build: cc -shared -fPIC -O2 -o libbindhost.so bind_host.c -ldl
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

static struct in_addr bind_host(void) {
    struct in_addr host;
    const char *text = getenv("RSTREAM_BIND_HOST");
    if (text == NULL || inet_pton(AF_INET, text, &host) != 1) {
        host.s_addr = htonl(INADDR_LOOPBACK);
    }
    return host;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
    static bind_fn real_bind = NULL;
    if (real_bind == NULL) {
        real_bind = (bind_fn)dlsym(RTLD_NEXT, "bind");
        if (real_bind == NULL) {
            errno = ENOSYS;
            return -1;
        }
    }
    if (addr != NULL && addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in v4;
        memcpy(&v4, addr, sizeof v4);
        if (v4.sin_addr.s_addr == htonl(INADDR_ANY)) {
            v4.sin_addr = bind_host();
            return real_bind(fd, (const struct sockaddr *)&v4, sizeof v4);
        }
    } else if (addr != NULL && addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 v6;
        memcpy(&v6, addr, sizeof v6);
        if (memcmp(&v6.sin6_addr, &in6addr_any, sizeof(struct in6_addr)) == 0) {
            struct in_addr host = bind_host();
            memset(&v6.sin6_addr, 0, sizeof(struct in6_addr));
            v6.sin6_addr.s6_addr[10] = 0xff;
            v6.sin6_addr.s6_addr[11] = 0xff;
            memcpy(&v6.sin6_addr.s6_addr[12], &host, sizeof host);
            return real_bind(fd, (const struct sockaddr *)&v6, sizeof v6);
        }
    }
    return real_bind(fd, addr, len);
}
