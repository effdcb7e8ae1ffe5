/*
 * The epoll set, listener, peer table and receive pool of a socket van
 * (sock_core.h).
 */
#include "ps/net/van/sock_core.h"

#include <errno.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#define LISTEN_BACKLOG 1024

void ps_van_sock_init(ps_van_sock_t *s, size_t peer_size, ps_log_component_t log)
{
    s->epfd = -1;
    s->listen_fd = -1;
    s->pool = NULL;
    s->log = log;
    ps_van_admission_init(&s->adm, log);
    ps_van_peer_table_init(&s->peers, peer_size);
}

ps_status_t ps_van_sock_open(ps_van_sock_t *s, size_t pool_cache, const ps_van_loop_t *loop,
                             void *wake_ptr)
{
    ps_status_t st = ps_van_rx_pool_create(pool_cache, s->log, &s->pool);
    if (st != PS_OK) {
        return st;
    }
    return ps_van_loop_epoll_open(loop, wake_ptr, s->log, &s->epfd);
}

void ps_van_sock_fini(ps_van_sock_t *s)
{
    int lfd = __atomic_load_n(&s->listen_fd, __ATOMIC_ACQUIRE);
    if (lfd >= 0) {
        close(lfd);
        s->listen_fd = -1;
    }
    if (s->epfd >= 0) {
        close(s->epfd);
        s->epfd = -1;
    }
    ps_van_peer_table_fini(&s->peers);
    ps_van_rx_pool_release(s->pool);
    s->pool = NULL;
}

ps_status_t ps_van_sock_may_bind(const ps_van_sock_t *s)
{
    if (__atomic_load_n(&s->listen_fd, __ATOMIC_ACQUIRE) >= 0) {
        ps_error(s->log, "bind: this van is already listening");
        return PS_ERR_BAD_STATE;
    }
    return PS_OK;
}

ps_status_t ps_van_bind_listen(int fd, const struct sockaddr *sa, socklen_t len, const char *where,
                               ps_log_component_t log)
{
    if (bind(fd, sa, len) == 0 && listen(fd, LISTEN_BACKLOG) == 0) {
        return PS_OK;
    }
    int err = errno;
    close(fd);
    if (err == EADDRINUSE) {
        return PS_ERR_ADDRESS_IN_USE;
    }
    ps_error(log, "cannot listen on %s: %s", where, strerror(err));
    return err == EADDRNOTAVAIL ? PS_ERR_INVALID_ARG : ps_status_from_errno(err);
}

ps_status_t ps_van_ip_listen(const ps_sockaddr_t *addr, const char *where, ps_log_component_t log,
                             void (*tune)(void *arg, int fd), void *arg, int *fd_p)
{
    int fd = socket(ps_sockaddr_family(addr), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        ps_error(log, "bind: socket() for %s: %m", where);
        return ps_status_from_errno(errno);
    }
    int one = 1, zero = 0;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ps_sockaddr_family(addr) == AF_INET6 && ps_sockaddr_is_wildcard(addr)) {
        (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (tune != NULL) {
        tune(arg, fd);
    }
    ps_status_t st = ps_van_bind_listen(fd, ps_sockaddr_sa(addr), addr->len, where, log);
    if (st == PS_OK) {
        *fd_p = fd;
    }
    return st;
}

ps_status_t ps_van_sock_listen(ps_van_sock_t *s, int fd, void *listen_ptr, const char *where)
{
    /* Before epoll: the progress thread accepts through it. */
    ps_van_admission_listener(&s->adm, s->epfd, fd, listen_ptr);
    if (ps_van_epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, EPOLLIN, listen_ptr) != 0) {
        ps_error(s->log, "bind: epoll_ctl for %s: %m", where);
        close(fd);
        return PS_ERR_NO_RESOURCE;
    }
    __atomic_store_n(&s->listen_fd, fd, __ATOMIC_RELEASE);
    return PS_OK;
}
