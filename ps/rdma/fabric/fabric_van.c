/*
 * The libfabric van: its ops table, lifecycle, peers, and the TCP van it
 * composes with.
 *
 * Bootstrap: the scheduler's traffic (registration, node table, barriers,
 * heartbeats) goes over ps's TCP van, opened inside this one; data between
 * workers and servers goes over libfabric. A node learns its peers'
 * libfabric addresses from the node table the scheduler broadcasts: bind()
 * puts this node's address (fi_getname, wrapped in a small blob) in
 * node->endpoint_name, which travels in ADD_NODE and in the table, and
 * connect() inserts a peer's into the address vector. Why TCP for the
 * scheduler rather than deriving its libfabric address from
 * DMLC_PS_ROOT_URI:PORT: that works only for providers whose addresses are
 * IP socket addresses (tcp, sockets); an EFA or InfiniBand address (GID,
 * QPN, QKey) cannot be derived from an IP, and shm names are per process.
 * The TCP listener also gives every node the unique host:port the node
 * table is keyed by, and a dead scheduler link is noticed at once. So the
 * scheduler opens no libfabric endpoint at all, and a peer with an empty
 * endpoint_name is reached over TCP.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <unistd.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_errno.h>

#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/rdma/common/rdma_shared.h"
#include "ps/rdma/common/van_open.h"
#include "ps/base/time.h"
#include "ps/net/codec/lane.h"
#include "ps/rdma/fabric/fabric_internal.h"
#include "ps/rdma/fabric/fabric_testing.h"

int ps__fab_rma_disabled;
unsigned long ps__fab_rma_writes;
int ps__fab_enable_failures;

void ps__fabric_test_fail_enable(int times)
{
    __atomic_store_n(&ps__fab_enable_failures, times, __ATOMIC_RELAXED);
}

unsigned long ps__fabric_test_rma_writes(void)
{
    return __atomic_load_n(&ps__fab_rma_writes, __ATOMIC_RELAXED);
}

unsigned long ps__fabric_test_hmem_probes(void)
{
    return __atomic_load_n(&ps__fab_hmem_probes, __ATOMIC_RELAXED);
}

void ps__fabric_test_disable_rma(int disabled)
{
    ps__fab_rma_disabled = disabled;
}

int ps__fab_repeat_errors;
unsigned long ps__fab_errors_repeated;

unsigned long ps__fabric_test_repeat_errors(int on)
{
    __atomic_store_n(&ps__fab_repeat_errors, on, __ATOMIC_RELAXED);
    return __atomic_load_n(&ps__fab_errors_repeated, __ATOMIC_RELAXED);
}

void ps__fabric_test_stall(struct ps_van *v, int on)
{
    __atomic_store_n(&ps__fab_of(v)->test_stall, on, __ATOMIC_RELAXED);
}

long long ps__fabric_test_ops_in_flight(struct ps_van *v)
{
    return (long long)__atomic_load_n(&ps__fab_of(v)->ops_in_flight, __ATOMIC_RELAXED);
}

unsigned long ps__fabric_test_sends_in_flight(struct ps_van *v)
{
    ps__fab_van_t *van = ps__fab_of(v);
    unsigned long n = 0;
    pthread_rwlock_rdlock(&van->peers_lock);
    for (ps__fab_peer_t *p = van->all_peers; p != NULL; p = p->all_next) {
        pthread_mutex_lock(&p->lock);
        /* A failed or disconnected peer's posted sends may never complete
         * (shm does not fail a send to a dead process): close frees them. */
        if (!p->failed && !p->detached) {
            for (ps__fab_tx_t *t = p->inflight; t != NULL; t = t->fl_next)
                n += t->failed_ops == 0;
        }
        pthread_mutex_unlock(&p->lock);
    }
    pthread_rwlock_unlock(&van->peers_lock);
    return n;
}

int ps__fab_my_id(ps__fab_van_t *van)
{
    return __atomic_load_n(&van->base.my_id, __ATOMIC_ACQUIRE);
}

/* ---- peers ---- */

/* Not to be guessed by a peer, as a first sequence number (van.h). */
static uint32_t random_epoch(void)
{
    return (uint32_t)ps_van_random();
}

/* A new peer in the table (write lock held). */
static ps__fab_peer_t *peer_new_locked(ps__fab_van_t *van, int id)
{
    if (id < 0 || id >= PS_NODE_EMPTY)
        return NULL;
    ps__fab_peer_t *p = calloc(1, sizeof(*p));
    if (p == NULL)
        return NULL;
    if (pthread_mutex_init(&p->lock, NULL) != 0) {
        free(p);
        return NULL;
    }
    p->id = id;
    p->addr = FI_ADDR_NOTAVAIL;
    p->pidfd = -1;
    p->tx_epoch = random_epoch() & 0xFFF;
    p->all_next = van->all_peers;
    /* Published complete: the watchdog walks the list without a lock. */
    __atomic_store_n(&van->all_peers, p, __ATOMIC_RELEASE);
    /* Published complete: lookups take no lock. */
    __atomic_store_n(&van->peers[id], p, __ATOMIC_RELEASE);
    return p;
}

/* Every send and every received message looks its peer up: a fixed table
 * read without a lock (an rwlock here cost ~90 instructions a lookup). */
ps__fab_peer_t *ps__fab_peer_lookup(ps__fab_van_t *van, int id)
{
    if (id < 0 || id >= PS_NODE_EMPTY)
        return NULL;
    return __atomic_load_n(&van->peers[id], __ATOMIC_ACQUIRE);
}

ps__fab_peer_t *ps__fab_peer_for_rx(ps__fab_van_t *van, int id)
{
    ps__fab_peer_t *p = ps__fab_peer_lookup(van, id);
    if (p != NULL || id < 0 || id >= PS_NODE_EMPTY)
        return p;
    pthread_rwlock_wrlock(&van->peers_lock);
    p = ps__fab_peer_lookup(van, id);
    if (p == NULL)
        p = peer_new_locked(van, id);
    pthread_rwlock_unlock(&van->peers_lock);
    return p;
}

/* The fields watch_process() sets are read here without the peer's lock
 * (the watchdog must not wait for a lock a stuck thread may hold): each is
 * written and read atomically. */
int ps__fab_peer_process_gone(const ps__fab_peer_t *peer)
{
    size_t addr_len = __atomic_load_n(&peer->local_addr_len, __ATOMIC_ACQUIRE);
    if (addr_len != 0) /* our own process: is its van still open? */
        return !ps__fab_local_open(peer->local_addr, addr_len);
    int pidfd = __atomic_load_n(&peer->pidfd, __ATOMIC_ACQUIRE);
    if (pidfd >= 0) {
        /* Readable once the process has exited, reaped or not. */
        struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
        return poll(&pfd, 1, 0) > 0;
    }
    /* Without a pidfd: a zombie still counts as alive here. */
    pid_t pid = __atomic_load_n(&peer->pid, __ATOMIC_ACQUIRE);
    return pid > 0 && kill(pid, 0) != 0 && errno == ESRCH;
}

/* Whether a same-host peer's process is gone or on its way out: its memory
 * is gone before its exit is complete (when the pidfd turns readable), and
 * /proc/PID/statm reads all zeros from then on. */
int ps__fab_peer_process_exiting(const ps__fab_peer_t *peer)
{
    if (ps__fab_peer_process_gone(peer))
        return 1;
    pid_t pid = __atomic_load_n(&peer->pid, __ATOMIC_ACQUIRE);
    if (__atomic_load_n(&peer->local_addr_len, __ATOMIC_ACQUIRE) != 0 || pid <= 0 ||
        !__atomic_load_n(&peer->same_host, __ATOMIC_ACQUIRE))
        return 0;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/statm", (int)pid);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return errno == ENOENT;
    unsigned long pages = 1;
    int n = fscanf(f, "%lu", &pages);
    fclose(f);
    return n == 1 && pages == 0;
}

/* Follows a peer's process by pidfd, or a peer of this process by its
 * endpoint's address (peer->lock held). */
static void watch_process(ps__fab_van_t *van, ps__fab_peer_t *p, pid_t pid, int same_host,
                          const uint8_t *addr, size_t addr_len)
{
    /* Only an address a van of ours has open now: anything else (a forged
     * or stale address) is left to the provider to fail as unreachable. */
    __atomic_store_n(&p->local_addr_len, 0, __ATOMIC_RELEASE);
    if (same_host && pid > 0 && pid == getpid() && addr_len <= sizeof(p->local_addr) &&
        ps__fab_local_open(addr, addr_len)) {
        memcpy(p->local_addr, addr, addr_len);
        __atomic_store_n(&p->local_addr_len, addr_len, __ATOMIC_RELEASE);
    }
    if (p->pidfd >= 0 && p->pid != pid) {
        int old = p->pidfd;
        __atomic_store_n(&p->pidfd, -1, __ATOMIC_RELEASE);
        close(old);
    }
    __atomic_store_n(&p->pid, pid, __ATOMIC_RELEASE);
    __atomic_store_n(&p->same_host, same_host, __ATOMIC_RELEASE);
    if (pid > 0 && p->pidfd < 0) /* -1 (gone already, or no pidfds): kill() */
        __atomic_store_n(&p->pidfd, (int)pidfd_open(pid, 0), __ATOMIC_RELEASE);
    /* shm spins forever on the region lock of a peer that died holding it
     * (libfabric 1.17): nothing is posted to a peer whose process is gone. */
    p->watch_pid = van->same_host_only && pid > 0;
}

/* Wakes the progress thread if it sleeps. Callers publish their hand-off
 * (van->blocked, van->fail_pending) with a seq_cst store first; the thread
 * stores `sleeping` then re-checks them, seq_cst too: one of the two sees
 * the other. */
void ps__fab_kick(ps__fab_van_t *van)
{
    ps_van_loop_kick(&van->loop);
}

/* Pending pulls of one peer (slot drain callbacks). */
typedef struct {
    ps__fab_van_t *van;
    int id; /* -1: all */
} pull_match_t;

static int pull_of_peer(void *arg, void *ptr)
{
    const pull_match_t *m = arg;
    return m->id < 0 || ((ps__fab_pull_t *)ptr)->peer == m->id;
}

static void pull_drop(void *arg, void *ptr)
{
    ps__fab_pull_free(((pull_match_t *)arg)->van, ptr);
}

/* The rendezvous state kept for `id` (-1: everyone): its pending pulls,
 * and where its pull responses were to be written. */
static void forget_rendezvous(ps__fab_van_t *van, int id)
{
    if (van->dests != NULL && id >= 0)
        ps_rdma_rdv_drop_peer(van->dests, id);
    if (van->pulls != NULL) {
        pull_match_t m = {van, id};
        ps_rdma_slot_drain(van->pulls, pull_of_peer, pull_drop, &m);
    }
}

void ps__fab_peer_fail(ps__fab_van_t *van, ps__fab_peer_t *peer, ps_status_t why,
                       const char *what)
{
    if (ps__fab_lock(van, &peer->lock) != 0)
        return; /* the watchdog reported every peer */
    if (peer->failed) {
        pthread_mutex_unlock(&peer->lock);
        return;
    }
    __atomic_store_n(&peer->failed, 1, __ATOMIC_RELEASE);
    peer->fail_why = why;
    peer->fail_pending = !peer->detached;
    ps__fab_tx_t *queued = peer->q_head;
    peer->q_head = peer->q_tail = NULL;
    pthread_mutex_unlock(&peer->lock);

    ps_error(PS_LOG_FABRIC, "link to node %d failed: %s", peer->id, what);
    ps__fab_tx_free_list(van, queued);
    forget_rendezvous(van, peer->id);
    __atomic_store_n(&van->fail_pending, 1, __ATOMIC_SEQ_CST);
    ps__fab_kick(van);
}

/* ---- lifecycle ---- */

static void fab_close(ps_van_t *v);
static const ps_van_ops_t ps__fab_ops;

/* The ops of a van no waiting thread may drive (posts_on_loop): the same
 * without a progress op, so that a waiter spins a little on its own and
 * then sleeps, instead of spinning beside the progress thread (which
 * busy polling keeps spinning). */
static ps_van_ops_t undriven_ops;

static void undriven_ops_init(void)
{
    undriven_ops = ps__fab_ops;
    undriven_ops.progress = ps_van_no_progress;
}

static ps_status_t fab_open_body(const ps_van_params_t *params, const ps_van_callbacks_t *cb,
                                 ps_van_t **van_p)
{
    if (params == NULL || cb == NULL || van_p == NULL)
        return PS_ERR_INVALID_ARG;
    const ps_van_component_t *tcp = NULL;
    if (ps_van_find("tcp", &tcp) != PS_OK) {
        ps_error(PS_LOG_FABRIC, "the fabric van needs the tcp van (for the scheduler's "
                 "traffic) linked into this binary");
        return PS_ERR_UNSUPPORTED;
    }
    ps__fab_van_t *van = calloc(1, sizeof(*van));
    if (van == NULL)
        return PS_ERR_NO_MEMORY;
    ps_van_base_init(&van->base, "fabric", &ps__fab_ops, PS_LOG_FABRIC, params, cb);
    if (params->is_scheduler)
        van->base.my_id = PS_SCHEDULER_ID;
    van->loop.wakefd = -1; /* no loop before bind */
    van->cq_fd = -1;
    van->limits = ps_frame_limits_default();
    if (params->max_meta_bytes > 0 && params->max_meta_bytes <= UINT32_MAX)
        van->limits.max_meta_bytes = (uint32_t)params->max_meta_bytes;
    if (params->max_message_bytes > 0)
        van->limits.max_message_bytes = params->max_message_bytes;
    if (params->max_data_segments > 0 && params->max_data_segments <= PS_FRAME_MAX_SEGMENTS)
        van->limits.max_segments = params->max_data_segments;
    /* PS_NODE_EMPTY pointers (256 KiB of address space; calloc maps it
     * zeroed, and only the pages of ids in use are ever touched). */
    van->peers = calloc(PS_NODE_EMPTY, sizeof(*van->peers));
    if (van->peers == NULL || pthread_rwlock_init(&van->peers_lock, NULL) != 0 ||
        pthread_mutex_init(&van->blocked_lock, NULL) != 0 ||
        pthread_mutex_init(&van->ep_lock, NULL) != 0 ||
        pthread_mutex_init(&van->tx_cache_lock, NULL) != 0) {
        free(van->peers);
        free(van);
        return PS_ERR_NO_MEMORY;
    }

    /* The scheduler speaks TCP only; busy-polling is for the data path. */
    ps_van_params_t tp = *params;
    tp.busy_poll = 0;
    ps_status_t st = tcp->ops->open(&tp, cb, &van->tcp);
    if (st != PS_OK)
        goto fail;
    if (!params->is_scheduler && (st = ps__fab_probe(van)) != PS_OK)
        goto fail;
    if (van->posts_on_loop) {
        static pthread_once_t once = PTHREAD_ONCE_INIT;
        pthread_once(&once, undriven_ops_init);
        van->base.handle.ops = &undriven_ops;
    }
    if (!params->is_scheduler && params->auth_enabled && !van->have_source) {
        /* Job secret: see ps__fab_on_meta(); without source addresses a
         * stranger's message could not be told from a node's. */
        ps_error(PS_LOG_FABRIC, "PS_JOB_SECRET is set, but provider %s gives no source "
                 "addresses (FI_SOURCE) to check senders by; refusing to start", van->prov_name);
        st = PS_ERR_UNSUPPORTED;
        goto fail;
    }
    *van_p = &van->base.handle;
    return PS_OK;
fail:
    fab_close(&van->base.handle);
    return st;
}

static void fab_close(ps_van_t *v)
{
    ps__fab_van_t *van = ps__fab_of(v);
    if (van == NULL)
        return;
    ps__fab_watchdog_stop(van);
    ps_status_t stopped = ps__fab_stop_progress(van);
    int found_stuck = ps__fab_stuck(van); /* by the watchdog */
    if (stopped != PS_OK)
        /* The verdict, if the watchdog has not given it: threads waiting
         * for a lock the stuck thread holds (a disconnect on the TCP van's
         * thread) give up, and the TCP van can stop. */
        __atomic_store_n(&van->stuck, 1, __ATOMIC_RELEASE);
    if (van->tcp != NULL)
        van->tcp->ops->close(van->tcp);
    van->tcp = NULL;
    if (stopped != PS_OK) {
        /* The progress thread is stuck inside the provider and may still
         * touch the endpoint, the queues and the van: all of it stays. */
        if (found_stuck)
            ps_error(PS_LOG_FABRIC,
                     "close: the progress thread is stuck in provider %s; "
                     "leaving it and the endpoint behind",
                     van->prov_name);
        else
            ps_error(PS_LOG_FABRIC,
                     "close: the progress thread did not stop within %d ms "
                     "(stuck in provider %s, on a peer that died?); leaving the endpoint open",
                     PS__FAB_STOP_MS, van->prov_name);
        return;
    }
    /* Off the list first: a van of this process stops posting to this
     * endpoint from now on. */
    if (van->local_listed)
        ps__fab_local_remove(van->my_addr, van->my_addr_len);
    van->local_listed = 0;
    if (van->up) {
        /* Nothing completes once the endpoint is closed: whatever is still
         * posted is released by hand. */
        ps__fab_close_ep(van);
        ps__fab_rx_free_all(van);
        for (ps__fab_peer_t *p = van->all_peers; p != NULL; p = p->all_next)
            ps__fab_tx_free_all(van, p);
        forget_rendezvous(van, -1);
        ps_rdma_rdv_destroy(van->dests);
        van->dests = NULL;
        ps_rdma_slot_pool_destroy(van->pulls);
        van->pulls = NULL;
    }
    ps__fab_teardown(van);
    while (van->all_peers != NULL) {
        ps__fab_peer_t *p = van->all_peers;
        van->all_peers = p->all_next;
        if (p->pidfd >= 0)
            close(p->pidfd);
        pthread_mutex_destroy(&p->lock);
        free(p);
    }
    ps__fab_tx_cache_free(van);
    free(van->peers);
    free(van->av_entries);
    ps_van_base_fini(&van->base);
    pthread_rwlock_destroy(&van->peers_lock);
    pthread_mutex_destroy(&van->blocked_lock);
    pthread_mutex_destroy(&van->ep_lock);
    pthread_mutex_destroy(&van->tx_cache_lock);
    free(van);
}

/* libfabric is loaded here, not linked: a job of another van never maps it.
 * Its providers' init (psm's libinfinipath) may take over fatal signals;
 * the process keeps its own dispositions. */
static ps_status_t fab_open(const ps_van_params_t *params, const ps_van_callbacks_t *cb,
                            ps_van_t **van_p)
{
    return ps__van_open_loaded("fabric", PS_LOG_FABRIC, ps__fab_dl_load, fab_open_body, params,
                               cb, van_p);
}

static int fab_unavailable(char *why, size_t cap)
{
    return ps__fab_dl_load(why, cap) != PS_OK;
}

static ps_status_t fab_query(ps_van_t *v, ps_van_attr_t *attr_p)
{
    ps__fab_van_t *van = ps__fab_of(v);
    if (attr_p == NULL)
        return PS_ERR_INVALID_ARG;
    if (van->info == NULL) /* the scheduler: TCP only */
        return van->tcp->ops->query(van->tcp, attr_p);
    ps_van_attr_t a;
    memset(&a, 0, sizeof(a));
    a.cap_flags = PS_CAP_ZCOPY_SEND | PS_CAP_RECV_INTO_DEST | PS_CAP_MEM_REGISTRATION |
                  PS_CAP_BUSY_POLL;
    if (van->use_rma)
        a.cap_flags |= PS_CAP_REMOTE_WRITE;
    if (van->same_host_only)
        a.cap_flags |= PS_CAP_SAME_HOST_ONLY;
    if (van->device_kinds != 0)
        a.cap_flags |= PS_CAP_DEVICE_MEMORY;
    a.max_message_bytes = van->limits.max_message_bytes;
    if (van->max_msg < a.max_message_bytes)
        a.max_message_bytes = van->max_msg;
    a.max_data_segments = PS_MSG_MAX_DATA;
    a.num_streams = 1;
    *attr_p = a;
    return PS_OK;
}

static ps_status_t fab_bind(ps_van_t *v, ps_node_t *node, int max_retry)
{
    ps__fab_van_t *van = ps__fab_of(v);
    if (node == NULL)
        return PS_ERR_INVALID_ARG;
    ps_status_t st = van->tcp->ops->bind(van->tcp, node, max_retry);
    if (st != PS_OK || van->info == NULL)
        return st;
    if (van->up) {
        ps_error(PS_LOG_FABRIC, "bind: the fabric endpoint is bound already");
        return PS_ERR_BAD_STATE;
    }
    if ((st = ps__fab_setup(van, node->hostname)) != PS_OK)
        return st;
    if (van->use_rma) {
        int64_t slots = ps_config_int_or(PS_RDMA_CFG(BYTEPS_ADDRESS_POOL_SIZE), PS__FAB_RDV_SLOTS);
        if (slots < 1 || slots > PS_RDMA_SLOT_POOL_MAX)
            slots = PS__FAB_RDV_SLOTS;
        if ((st = ps_rdma_slot_pool_create("fabric pull", (uint32_t)slots, &van->pulls)) != PS_OK)
            return st;
        if ((st = ps_rdma_rdv_create(PS__FAB_RDV_ENTRIES, ps__fab_dest_drop, van, &van->dests)) !=
            PS_OK)
            return st;
    }
    if ((st = ps__fab_post_meta_recvs(van)) != PS_OK)
        return st;
    if ((st = ps__fab_start_progress(van)) != PS_OK)
        return st;
    if ((st = ps__fab_watchdog_start(van)) != PS_OK)
        return st;
    return ps__fab_make_blob(van, node->endpoint_name, sizeof(node->endpoint_name),
                             &node->endpoint_name_len);
}

/* The AV address of a peer's address bytes, inserting them the first time
 * (peers_lock held for writing). */
static ps_status_t av_lookup_insert(ps__fab_van_t *van, const uint8_t *addr, size_t len,
                                   fi_addr_t *fa_p)
{
    for (size_t i = 0; i < van->num_av; i++) {
        if (van->av_entries[i].len == len && memcmp(van->av_entries[i].addr, addr, len) == 0) {
            *fa_p = van->av_entries[i].fi_addr;
            return PS_OK;
        }
    }
    if (len > PS_NODE_ENDPOINT_MAX)
        return PS_ERR_PROTOCOL;
    if (van->num_av == van->cap_av) {
        size_t cap = van->cap_av ? van->cap_av * 2 : 16;
        struct ps__fab_av_entry *e = realloc(van->av_entries, cap * sizeof(*e));
        if (e == NULL)
            return PS_ERR_NO_MEMORY;
        van->av_entries = e;
        van->cap_av = cap;
    }
    fi_addr_t fa = FI_ADDR_NOTAVAIL;
    if (van->need_ep_lock && ps__fab_lock(van, &van->ep_lock) != 0)
        return PS_ERR_LINK_FAILED;
    int ret = fi_av_insert(van->av, addr, 1, &fa, 0, NULL);
    ps__fab_ep_unlock(van);
    if (ret != 1) {
        ps_error(PS_LOG_FABRIC, "cannot add an address to the address vector: %s",
                 ret < 0 ? ps__fab_strerror(ret) : "not inserted");
        return PS_ERR_UNREACHABLE;
    }
    struct ps__fab_av_entry *e = &van->av_entries[van->num_av++];
    memcpy(e->addr, addr, len);
    e->len = len;
    e->fi_addr = fa;
    *fa_p = fa;
    return PS_OK;
}

static ps_status_t fab_connect(ps_van_t *v, const ps_node_t *peer, int my_id)
{
    ps__fab_van_t *van = ps__fab_of(v);
    if (peer == NULL)
        return PS_ERR_INVALID_ARG;
    if (peer->endpoint_name_len == 0 || !van->up)
        return van->tcp->ops->connect(van->tcp, peer, my_id);
    if (ps__fab_stuck(van))
        return PS_ERR_LINK_FAILED;
    if (peer->id <= 0 || peer->id >= PS_NODE_EMPTY) {
        ps_error(PS_LOG_FABRIC, "connect: node id %d is not valid", peer->id);
        return PS_ERR_INVALID_ARG;
    }
    const uint8_t *addr;
    size_t addr_len;
    pid_t pid;
    int same_host;
    ps_status_t st = ps__fab_parse_blob(van, peer, &addr, &addr_len, &pid, &same_host);
    if (st != PS_OK)
        return st;

    pthread_rwlock_wrlock(&van->peers_lock);
    ps__fab_peer_t *p = ps__fab_peer_lookup(van, peer->id);
    if (p == NULL)
        p = peer_new_locked(van, peer->id);
    fi_addr_t fa = FI_ADDR_NOTAVAIL;
    st = p != NULL ? av_lookup_insert(van, addr, addr_len, &fa) : PS_ERR_NO_MEMORY;
    pthread_rwlock_unlock(&van->peers_lock);
    if (st != PS_OK)
        return st;

    if (ps__fab_lock(van, &p->lock) != 0)
        return PS_ERR_LINK_FAILED;
    if (p->addr == fa && p->pid == pid && !p->failed) {
        pthread_mutex_unlock(&p->lock); /* idempotent */
        return PS_OK;
    }
    if (p->failed || p->addr != FI_ADDR_NOTAVAIL) {
        /* A fresh start with this peer: what was lost left a gap in the
         * old sequence, so a new epoch tells the peer to start over. */
        p->tx_epoch = (p->tx_epoch + 1 + (random_epoch() & 0x7FF)) & 0xFFF;
        p->tx_seq = 0;
        p->fail_pending = 0;
    }
    __atomic_store_n(&p->addr, fa, __ATOMIC_RELEASE);
    __atomic_store_n(&p->last_progress_ns, ps_time_now_ns(), __ATOMIC_RELAXED);
    watch_process(van, p, pid, same_host, addr, addr_len);
    __atomic_store_n(&p->failed, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&p->lock);
    ps_info(PS_LOG_FABRIC, "node %d reachable over %s", peer->id, van->prov_name);
    return PS_OK;
}

static void fab_disconnect(ps_van_t *v, int node_id)
{
    ps__fab_van_t *van = ps__fab_of(v);
    van->tcp->ops->disconnect(van->tcp, node_id);
    if (!van->up)
        return;
    pthread_rwlock_wrlock(&van->peers_lock);
    ps__fab_peer_t *p = ps__fab_peer_lookup(van, node_id);
    if (p != NULL)
        __atomic_store_n(&van->peers[node_id], NULL, __ATOMIC_RELEASE);
    pthread_rwlock_unlock(&van->peers_lock);
    if (p == NULL || ps__fab_lock(van, &p->lock) != 0)
        return;
    __atomic_store_n(&p->detached, 1, __ATOMIC_RELEASE);
    ps__fab_tx_t *queued = p->q_head;
    p->q_head = p->q_tail = NULL;
    pthread_mutex_unlock(&p->lock);
    ps__fab_tx_free_list(van, queued);
    forget_rendezvous(van, node_id);
    ps__fab_kick(van);
    ps_debug(PS_LOG_FABRIC, "disconnected node %d", node_id);
}

static ps_status_t fab_set_node_id(ps_van_t *v, int node_id)
{
    ps__fab_van_t *van = ps__fab_of(v);
    if (node_id <= 0 || node_id >= PS_NODE_EMPTY)
        return PS_ERR_INVALID_ARG;
    __atomic_store_n(&van->base.my_id, node_id, __ATOMIC_RELEASE);
    return van->tcp->ops->set_node_id(van->tcp, node_id);
}

static ps_status_t fab_send(ps_van_t *v, const ps_msg_t *msg)
{
    ps__fab_van_t *van = ps__fab_of(v);
    if (msg == NULL)
        return PS_ERR_INVALID_ARG;
    if (van->up) {
        ps__fab_peer_t *p = ps__fab_peer_lookup(van, msg->meta.recver);
        if (p != NULL && __atomic_load_n(&p->addr, __ATOMIC_ACQUIRE) != FI_ADDR_NOTAVAIL)
            return ps_unlikely(ps__fab_stuck(van)) ? PS_ERR_LINK_FAILED : ps__fab_send(van, p, msg);
    }
    return van->tcp->ops->send(van->tcp, msg);
}

/* To a peer reached over the fabric; PS_ERR_UNSUPPORTED for one reached
 * through the TCP van (the scheduler, or before the fabric is up): the
 * caller sends that message the generic way. */
static ps_status_t fab_send_lane(ps_van_t *v, int recver, uint8_t *bytes, size_t len)
{
    ps__fab_van_t *van = ps__fab_of(v);
    if (bytes == NULL || len < PS_LANE_HDR_LEN || len > PS_LANE_MAX_BYTES)
        return PS_ERR_INVALID_ARG;
    if (van->up) {
        ps__fab_peer_t *p = ps__fab_peer_lookup(van, recver);
        if (p != NULL && __atomic_load_n(&p->addr, __ATOMIC_ACQUIRE) != FI_ADDR_NOTAVAIL)
            return ps_unlikely(ps__fab_stuck(van)) ? PS_ERR_LINK_FAILED
                                                   : ps__fab_send_lane(van, p, bytes, len);
    }
    return PS_ERR_UNSUPPORTED;
}

static ps_status_t fab_register_mem(ps_van_t *v, ps_buf_t *buf)
{
    ps__fab_van_t *van = ps__fab_of(v);
    if (!van->up)
        return PS_ERR_BAD_STATE;
    return ps_rdma_mr_cache_pin(van->mrc, buf);
}

static ps_status_t fab_deregister_mem(ps_van_t *v, ps_buf_t *buf)
{
    ps__fab_van_t *van = ps__fab_of(v);
    if (!van->up)
        return PS_ERR_BAD_STATE;
    return ps_rdma_mr_cache_unpin(van->mrc, buf);
}

static void fab_stats(ps_van_t *v, uint64_t *sent_p, uint64_t *recv_p)
{
    ps__fab_van_t *van = ps__fab_of(v);
    uint64_t s = 0, r = 0;
    van->tcp->ops->stats(van->tcp, &s, &r);
    s += __atomic_load_n(&van->base.bytes_sent, __ATOMIC_RELAXED);
    r += __atomic_load_n(&van->base.bytes_recv, __ATOMIC_RELAXED);
    if (sent_p != NULL)
        *sent_p = s;
    if (recv_p != NULL)
        *recv_p = r;
}

static const ps_van_ops_t ps__fab_ops = {
    .size = sizeof(ps_van_ops_t),
    .open = fab_open,
    .close = fab_close,
    .query = fab_query,
    .bind = fab_bind,
    .connect = fab_connect,
    .disconnect = fab_disconnect,
    .set_node_id = fab_set_node_id,
    .send = fab_send,
    .register_mem = fab_register_mem,
    .deregister_mem = fab_deregister_mem,
    .stats = fab_stats,
    .progress = ps_van_loop_progress,
    .send_lane = fab_send_lane,
};

static const ps_van_component_t ps__fab_component = {
    .name = "fabric",
    .aliases = "libfabric,efa",
    .ops = &ps__fab_ops,
    .unavailable = fab_unavailable,
};

PS_VAN_REGISTER(ps__fab_component)

/* For a test that timed out: what each side is waiting for. Reads the
 * progress thread's state without its cooperation (a diagnostic only). */
void ps__fabric_test_dump(struct ps_van *v)
{
    ps__fab_van_t *van = ps__fab_of(v);
    int posted = 0;
    for (int i = 0; i < PS__FAB_META_DEPTH; i++)
        posted += van->mrecv[i].posted;
    ps_warn(PS_LOG_FABRIC, "dump: meta posted %d blocked %d rx_blocked %p sleeping %d", posted,
            van->mrecv_blocked, (void *)van->rx_blocked, ps_van_loop_sleeping(&van->loop));
    for (int id = 0; id < van->rxs_cap; id++) {
        ps__fab_rxs_t *r = van->rxs[id];
        if (r == NULL)
            continue;
        ps_warn(PS_LOG_FABRIC, "dump: from %d epoch %u next %u", id, r->epoch, r->next);
        int k = 0;
        for (ps__fab_rx_t *x = r->pending; x != NULL && k < 5; x = x->next, k++)
            ps_warn(PS_LOG_FABRIC, "dump:   seq %u waiting %d ready %d blocked %d flags 0x%x niov %d",
                    x->seq, x->waiting, x->ready, x->blocked, x->flags, x->niov);
    }
    for (ps__fab_peer_t *p = van->all_peers; p != NULL; p = p->all_next) {
        int n = 0;
        for (ps__fab_tx_t *t = p->inflight; t != NULL; t = t->fl_next)
            n++;
        ps_warn(PS_LOG_FABRIC, "dump: to %d seq %u inflight %d queued %p failed %d", p->id,
                p->tx_seq, n, (void *)p->q_head, p->failed);
        int k = 0;
        for (ps__fab_tx_t *t = p->inflight; t != NULL && k < 5; t = t->fl_next, k++)
            ps_warn(PS_LOG_FABRIC, "dump:   tx seq %u stage %d refs %u flags 0x%x", t->seq,
                    t->stage, t->refs, t->flags);
    }
}

static const ps_config_entry_t fabric_vars[] = {
#define PS_CONFIG_VAR PS_CONFIG_ENTRY
#include "ps/rdma/fabric/fabric_config_vars.h"
#undef PS_CONFIG_VAR
};
PS_CONFIG_TABLE(ps__fabric_config, "fabric", fabric_vars)

PS_LOG_COMPONENT(ps__fabric_log, "fabric")
