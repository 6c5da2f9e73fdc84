#pragma once
// Shim over libpq for Swift: diagnostic field codes are character macros, and
// PQconnectdbParams takes NULL-terminated arrays that are simpler to build here.
#include <poll.h>
#include <libpq-fe.h>

static const int SIWA_PG_DIAG_SQLSTATE = PG_DIAG_SQLSTATE;
static const int SIWA_PG_DIAG_MESSAGE_PRIMARY = PG_DIAG_MESSAGE_PRIMARY;

/// Connects with `conninfo` (URI or key=value), applying defaults that the conninfo may override
/// (it is expanded last): `connect_timeout` seconds, TCP keepalives and a TCP user timeout, so a
/// database host that vanishes (no RST) is noticed in ~15 s instead of the kernel's ~15 minutes.
static inline PGconn *siwa_pq_connect(const char *conninfo, const char *connect_timeout,
                                      const char *application_name) {
    /* Keywords before dbname are defaults the conninfo may override; client_encoding comes after it:
       pinned, so neither the conninfo nor a server, database or role default changes what is stored. */
    const char *keywords[] = { "connect_timeout", "application_name", "keepalives", "keepalives_idle",
                               "keepalives_interval", "keepalives_count", "tcp_user_timeout", "dbname",
                               "client_encoding", NULL };
    const char *values[] = { connect_timeout, application_name, "1", "10", "5", "3", "15000", conninfo, "UTF8", NULL };
    return PQconnectdbParams(keywords, values, 1);
}

/// Waits until the connection's socket is readable; returns poll()'s result (0 = timeout).
static inline int siwa_pq_wait_readable(PGconn *conn, int timeout_ms) {
    struct pollfd p;
    p.fd = PQsocket(conn);
    if (p.fd < 0) return -1;
    p.events = POLLIN;
    p.revents = 0;
    return poll(&p, 1, timeout_ms);
}
