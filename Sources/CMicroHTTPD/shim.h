#pragma once
// Shim over libmicrohttpd for Swift: Swift cannot call the variadic
// MHD_start_daemon / MHD_get_daemon_info, so typed inline wrappers live here.
#include <stdint.h>
#include <string.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <microhttpd.h>

/// Options of one listener; every field is set by the caller.
struct siwa_mhd_options {
    const char *host;               // numeric IPv4 or IPv6 address
    uint16_t port;                  // 0 = ephemeral
    unsigned int threads;           // thread pool size (>= 1)
    unsigned int connection_timeout;// seconds, idle/slow clients are cut off
    unsigned int connection_limit;  // concurrent connections
    size_t memory_limit;            // per-connection memory (headers, upload chunks)
    int suspend_resume;             // allow MHD_suspend_connection
};

/// Starts a daemon with an internal epoll polling thread pool bound to `host:port`.
/// Returns NULL when the address is invalid or the bind fails.
static inline struct MHD_Daemon *siwa_mhd_start(const struct siwa_mhd_options *o,
                                                MHD_AccessHandlerCallback handler, void *handler_cls,
                                                MHD_RequestCompletedCallback completed, void *completed_cls,
                                                MHD_NotifyConnectionCallback notify, void *notify_cls) {
    struct sockaddr_in v4;
    struct sockaddr_in6 v6;
    const struct sockaddr *addr;
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC;
    memset(&v4, 0, sizeof v4);
    memset(&v6, 0, sizeof v6);
    if (inet_pton(AF_INET, o->host, &v4.sin_addr) == 1) {
        v4.sin_family = AF_INET;
        v4.sin_port = htons(o->port);
        addr = (const struct sockaddr *)&v4;
    } else if (inet_pton(AF_INET6, o->host, &v6.sin6_addr) == 1) {
        v6.sin6_family = AF_INET6;
        v6.sin6_port = htons(o->port);
        addr = (const struct sockaddr *)&v6;
        flags |= MHD_USE_IPv6;
    } else {
        return NULL;
    }
    if (o->suspend_resume) flags |= MHD_ALLOW_SUSPEND_RESUME;
    struct MHD_OptionItem items[] = {
        { MHD_OPTION_SOCK_ADDR, 0, (void *)addr },
        { MHD_OPTION_THREAD_POOL_SIZE, (intptr_t)o->threads, NULL },
        { MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)o->connection_timeout, NULL },
        { MHD_OPTION_CONNECTION_LIMIT, (intptr_t)o->connection_limit, NULL },
        { MHD_OPTION_CONNECTION_MEMORY_LIMIT, (intptr_t)o->memory_limit, NULL },
        { MHD_OPTION_LISTENING_ADDRESS_REUSE, 1, NULL },
        { MHD_OPTION_END, 0, NULL },
    };
    return MHD_start_daemon(flags, o->port, NULL, NULL, handler, handler_cls,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, completed_cls,
                            MHD_OPTION_NOTIFY_CONNECTION, notify, notify_cls,
                            MHD_OPTION_ARRAY, items,
                            MHD_OPTION_END);
}

/// The port the daemon is bound to (useful after binding port 0).
static inline uint16_t siwa_mhd_bound_port(struct MHD_Daemon *d) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : 0;
}

/// Looks up a request header (case-insensitive); NULL when absent.
static inline const char *siwa_mhd_header(struct MHD_Connection *c, const char *name) {
    return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

/// The socket of a connection (-1 when unknown).
static inline int siwa_mhd_connection_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? info->connect_fd : -1;
}

/// The peer's numeric address into `out` (NUL-terminated); 0 when unknown.
static inline int siwa_mhd_client_address(struct MHD_Connection *c, char *out, size_t len) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!info || !info->client_addr) return 0;
    const struct sockaddr *sa = info->client_addr;
    if (sa->sa_family == AF_INET)
        return inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, (socklen_t)len) != NULL;
    if (sa->sa_family == AF_INET6)
        return inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, (socklen_t)len) != NULL;
    return 0;
}

/// Calls `each` for every request header line, in the order received (a header sent on several
/// lines, such as `X-Forwarded-For` behind a proxy that appends its own, once per line).
static inline int siwa_mhd_headers(struct MHD_Connection *c, MHD_KeyValueIterator each, void *cls) {
    return MHD_get_connection_values(c, MHD_HEADER_KIND, each, cls);
}

/// Calls `each` for every query argument (decoded by libmicrohttpd); returns how many.
static inline int siwa_mhd_query(struct MHD_Connection *c, MHD_KeyValueIterator each, void *cls) {
    return MHD_get_connection_values(c, MHD_GET_ARGUMENT_KIND, each, cls);
}
