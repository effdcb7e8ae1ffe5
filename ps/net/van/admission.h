/*
 * Admission control every van that accepts connections shares: what a
 * peer that has not finished the handshake (hello, plus the job-secret
 * proof when a secret is set) may cost us.
 *
 *   - At most PS_MAX_PENDING_CONNS such connections at once; past it a new
 *     one is closed at once.
 *   - Each must finish within PS_HANDSHAKE_TIMEOUT_MS of its accept, or it
 *     is dropped (debug line, counted).
 *   - Before the handshake a connection may make us hold only
 *     PS_VAN_PREAUTH_BYTES of receive memory (the van enforces it: the
 *     hello and the secret's frames fit in it).
 *   - accept() failing for lack of descriptors (EMFILE, ENFILE) or memory
 *     takes the listener out of epoll for a while (100 ms, doubling to
 *     1 s while no accept() succeeds in between) instead of letting a level-triggered listener spin, with one
 *     rate-limited warning.
 *
 * Everything here belongs to the van's progress thread, except
 * ps_van_admission_init() (before the thread runs, or before the listener
 * exists), ps_van_admission_listener() (bind(), any thread) and
 * ps_van_admission_done() (any thread: a van whose handshake ends on
 * another thread, as the ibverbs van's on its poller).
 */
#ifndef PS_NET_VAN_ADMISSION_H_
#define PS_NET_VAN_ADMISSION_H_

#include <stdint.h>
#include <sys/socket.h>

#include "ps/base/log.h"

/* Receive memory a connection may pin before its handshake. */
#define PS_VAN_PREAUTH_BYTES 4096u

typedef struct ps_van_admission {
    ps_log_component_t comp;
    int max_pending;         /* PS_MAX_PENDING_CONNS */
    int handshake_ms;        /* PS_HANDSHAKE_TIMEOUT_MS */
    int pending;             /* atomic: accepted, handshake not finished */
    /* Counters (progress thread writes; others may read them racily). */
    uint64_t refused_full;   /* closed at once: too many pending */
    uint64_t timed_out;      /* dropped at the handshake deadline */
    uint64_t accept_paused;  /* times the listener was taken out */
    /* The listener's pause after EMFILE and friends. */
    int epfd;
    int listen_fd;           /* atomic: set last by ps_van_admission_listener() */
    void *listen_ptr;        /* its epoll data */
    int paused;
    uint32_t backoff_ms;
    uint64_t resume_ns;
} ps_van_admission_t;

/* Reads the limits from the config table; `comp` tags its log lines. */
void ps_van_admission_init(ps_van_admission_t *a, ps_log_component_t comp);
/* The listener accept() works on, registered with EPOLLIN in `epfd` with
 * `ptr` as its data. */
void ps_van_admission_listener(ps_van_admission_t *a, int epfd, int listen_fd, void *ptr);

/* One accept4() (non-blocking, close-on-exec) on the listener. Returns the
 * new descriptor; -1 when there is nothing more to accept now (EAGAIN, or
 * the listener was just paused for lack of descriptors or memory). */
int ps_van_admission_accept(ps_van_admission_t *a, struct sockaddr *sa, socklen_t *len_p);

/* Whether refusing `fd` before it counts against admission: 1 keeps it, 0
 * refuses it (the screen closes it). */
typedef int (*ps_van_admission_screen_t)(void *arg, int fd);

/* The next accepted connection allowed to wait for its handshake (counted
 * pending until ps_van_admission_done()), its address in sa/len_p when not
 * NULL; -1 when there is none now. Those `screen` (or NULL) refuses and
 * those over the cap are closed on the way. */
int ps_van_admission_next(ps_van_admission_t *a, struct sockaddr *sa, socklen_t *len_p,
                          ps_van_admission_screen_t screen, void *arg);

/* What a van makes of an accepted connection (its address in sa/len):
 * 0 once it owns the descriptor (it calls ps_van_admission_done() when
 * the connection finishes its handshake or goes), -1 when it could not
 * make a connection of it (no memory). */
typedef int (*ps_van_admission_take_t)(void *arg, int fd, const struct sockaddr *sa,
                                       socklen_t len);

/* Every connection admission lets in now (ps_van_admission_next with
 * `screen`), each handed to `take`; one it could not take is closed and
 * no longer counted pending, with a rate-limited warning. `arg` goes to
 * both. */
void ps_van_admission_each(ps_van_admission_t *a, ps_van_admission_screen_t screen,
                           ps_van_admission_take_t take, void *arg);

/* A connection was accepted: 1 if it may wait for its handshake (counted
 * pending until ps_van_admission_done()), 0 if the caller must close it
 * now (too many pending; counted and logged rate-limited). */
int ps_van_admission_admit(ps_van_admission_t *a);
/* A pending connection finished its handshake or went away. */
void ps_van_admission_done(ps_van_admission_t *a);
/* The deadline (ps_time_now_ns() clock) of a connection accepted now. */
uint64_t ps_van_admission_deadline(const ps_van_admission_t *a);
/* A pending connection missed its deadline: counts and logs it (debug);
 * the caller closes it. `who` describes the peer. */
void ps_van_admission_expired(ps_van_admission_t *a, const char *who);

/* Puts a paused listener back when its time has come. Returns the ms until
 * it is due (-1: not paused); a loop waits at most that long. */
int ps_van_admission_timer(ps_van_admission_t *a);

#endif /* PS_NET_VAN_ADMISSION_H_ */
