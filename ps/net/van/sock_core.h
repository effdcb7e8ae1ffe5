/*
 * What a van that watches its sockets with epoll from its progress loop
 * keeps (tcp, shm): the epoll set, which also holds the loop's wake
 * eventfd; the listening socket and the admission of what it accepts
 * (admission.h); the peer table; the pool of receive buffers. A van embeds
 * a ps_van_sock_t and adds its own connections and what only it does.
 */
#ifndef PS_NET_VAN_SOCK_CORE_H_
#define PS_NET_VAN_SOCK_CORE_H_

#include <stddef.h>
#include <sys/socket.h>

#include "ps/base/log.h"
#include "ps/base/sockaddr.h"
#include "ps/base/status.h"
#include "ps/net/van/admission.h"
#include "ps/net/van/peer_table.h"
#include "ps/net/van/progress_loop.h"
#include "ps/net/van/rx_pool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps_van_sock {
    int epfd;                  /* the sockets and the loop's wake eventfd */
    int listen_fd;             /* atomic: -1 until bind() */
    ps_van_admission_t adm;    /* the progress thread's (admission.h) */
    ps_van_peer_table_t peers; /* the van's peer structs, by node id */
    ps_van_rx_pool_t *pool;    /* receive buffers */
    ps_log_component_t log;
} ps_van_sock_t;

/* First, before anything can fail: no descriptors, the admission limits
 * read, the peer table empty (peers of `peer_size` bytes, a ps_van_peer_t
 * first). */
void ps_van_sock_init(ps_van_sock_t *s, size_t peer_size, ps_log_component_t log);

/* The receive pool (keeping up to `pool_cache` free bytes) and the epoll
 * set, with the loop's wake eventfd in it (`wake_ptr` its data). On
 * failure ps_van_sock_fini() frees what was made. */
ps_status_t ps_van_sock_open(ps_van_sock_t *s, size_t pool_cache, const ps_van_loop_t *loop,
                             void *wake_ptr);

/* The listener and the epoll set closed, the peers and the pool freed (the
 * van has closed its connections). */
void ps_van_sock_fini(ps_van_sock_t *s);

/* PS_OK when bind() may listen; PS_ERR_BAD_STATE (logged) once it did. */
ps_status_t ps_van_sock_may_bind(const ps_van_sock_t *s);

/* One try of bind() at an address: binds `fd` there and listens (a backlog
 * of 1024). PS_OK; PS_ERR_ADDRESS_IN_USE when it is taken; another status
 * when it cannot be (logged under `log`, naming `where`). On failure fd is
 * closed. Any van with a listening socket of its own uses it. */
ps_status_t ps_van_bind_listen(int fd, const struct sockaddr *sa, socklen_t len, const char *where,
                               ps_log_component_t log);

/* One try of bind() at an IP address for a TCP listener (the tcp van's,
 * the ucx van's handshake): a non-blocking socket with SO_REUSEADDR, the
 * IPv6 wildcard taking IPv4 peers too, `tune` (or NULL) called on it
 * first (sizes the accepted sockets inherit), then ps_van_bind_listen().
 * The listening socket in *fd_p on PS_OK. */
ps_status_t ps_van_ip_listen(const ps_sockaddr_t *addr, const char *where, ps_log_component_t log,
                             void (*tune)(void *arg, int fd), void *arg, int *fd_p);

/* bind()'s last step: `fd` listens; it goes under admission control and
 * into the epoll set (`listen_ptr` its data), then listen_fd is set, which
 * the progress thread reads. On failure fd is closed. `where` names it in
 * the log. */
ps_status_t ps_van_sock_listen(ps_van_sock_t *s, int fd, void *listen_ptr, const char *where);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_VAN_SOCK_CORE_H_ */
