/*
 * The send path of the TCP van.
 *
 * send() encodes header + meta on the caller's stack and writes the frame
 * with one sendmsg() whose iovecs point at the user's slices: no staging
 * copy, except that a large segment that does not start on a page may be
 * sent from an aligned copy where that is cheaper (send_align.h). What the
 * socket cannot take is queued on the connection, holding
 * references on the slices, and the progress thread finishes it when the
 * socket becomes writable (EPOLLOUT). A frame is either written directly
 * (queue empty) or appended to the queue, both under the connection's send
 * lock, so frames leave in the order send() was called for them.
 *
 * The progress thread gathers several queued frames into one sendmsg() and
 * does not hold the send lock during the system call: senders only ever
 * append to a non-empty queue, and only the progress thread removes from
 * its head.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "ps/base/log.h"
#include "ps/base/stage_trace.h"
#include "ps/net/tcp/tcp_internal.h"

static ssize_t send_iov(int fd, struct iovec *iov, int cnt)
{
    struct msghdr mh;
    memset(&mh, 0, sizeof(mh));
    mh.msg_iov = iov;
    mh.msg_iovlen = (size_t)cnt;
    ssize_t n;
    do {
        n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n > 0)
        ps_stage_posted();
    return n;
}

void ps__tcp_set_epoll(ps__tcp_conn_t *conn, int want_out)
{
    if (ps_van_epoll_ctl(conn->van->sock.epfd, EPOLL_CTL_MOD, conn->fd,
                         (conn->rx_off ? 0 : EPOLLIN) | (want_out ? EPOLLOUT : 0),
                         &conn->handle) != 0) {
        /* Only a closed fd gets here, and then the connection is being torn
         * down anyway. */
        ps_debug(PS_LOG_TCP, "epoll_ctl on the connection to %s: %m", conn->addr_str);
        return;
    }
    conn->epoll_out = want_out;
}

/* Moves the entry's position `n` bytes forward. */
static void entry_advance(ps__tcp_entry_t *e, uint64_t n)
{
    e->bytes -= n;
    while (n > 0 && e->iov_idx < e->iovcnt) {
        struct iovec *v = &e->iov[e->iov_idx];
        if (n >= v->iov_len) {
            n -= v->iov_len;
            v->iov_len = 0;
            e->iov_idx++;
        } else {
            v->iov_base = (char *)v->iov_base + n;
            v->iov_len -= n;
            n = 0;
        }
    }
    while (e->iov_idx < e->iovcnt && e->iov[e->iov_idx].iov_len == 0) {
        e->iov_idx++;
    }
}

static void entry_free(ps__tcp_van_t *van, ps__tcp_entry_t *e)
{
    for (uint32_t i = 0; i < e->num_data; ++i) {
        ps_slice_unref(&e->data[i]);
    }
    if (e->hm != e->hm_inline) {
        free(e->hm);
    }
    ps_mpool_put(&van->entries, e);
    __atomic_sub_fetch(&van->queued, 1, __ATOMIC_RELEASE);
}

void ps__tcp_entries_free(ps__tcp_van_t *van, ps__tcp_entry_t *list)
{
    while (list != NULL) {
        ps__tcp_entry_t *next = list->next;
        entry_free(van, list);
        list = next;
    }
}

ps__tcp_entry_t *ps__tcp_queue_take(ps__tcp_conn_t *conn)
{
    ps__tcp_entry_t *list = conn->sq_head;
    conn->sq_head = conn->sq_tail = NULL;
    return list;
}

/* A queue entry for the frame [hm, data...] of which `sent` bytes are out. */
static ps__tcp_entry_t *entry_new(ps__tcp_van_t *van, const uint8_t *hm, size_t hm_len,
                                  const ps_slice_t *data, uint32_t num_data, uint64_t sent)
{
    ps__tcp_entry_t *e;
    if (ps_mpool_get(&van->entries, (void **)&e) != PS_OK) {
        return NULL;
    }
    if (hm_len <= sizeof(e->hm_inline)) {
        e->hm = e->hm_inline;
    } else {
        e->hm = malloc(hm_len);
        if (e->hm == NULL) {
            ps_mpool_put(&van->entries, e);
            return NULL;
        }
    }
    __atomic_add_fetch(&van->queued, 1, __ATOMIC_RELAXED);
    memcpy(e->hm, hm, hm_len);
    e->next = NULL;
    e->iovcnt = 0;
    e->iov_idx = 0;
    e->num_data = 0;
    e->iov[e->iovcnt].iov_base = e->hm;
    e->iov[e->iovcnt].iov_len = hm_len;
    e->iovcnt++;
    e->bytes = hm_len;
    for (uint32_t i = 0; i < num_data; ++i) {
        if (data[i].len == 0) {
            continue;
        }
        e->data[e->num_data] = ps_slice_ref(&data[i]);
        e->iov[e->iovcnt].iov_base = ps_slice_ptr(&e->data[e->num_data]);
        e->iov[e->iovcnt].iov_len = data[i].len;
        e->iovcnt++;
        e->num_data++;
        e->bytes += data[i].len;
    }
    entry_advance(e, sent);
    return e;
}

static ps_status_t queue_frame(ps__tcp_conn_t *conn, const uint8_t *hm, size_t hm_len,
                               const ps_slice_t *data, uint32_t num_data, uint64_t sent);

ps_status_t ps__tcp_conn_send_frame(ps__tcp_conn_t *conn, const uint8_t *hm, size_t hm_len,
                                    const ps_slice_t *data, uint32_t num_data,
                                    ps_send_align_way_t way)
{
    pthread_mutex_lock(&conn->send_lock);
    ps_status_t st = ps__tcp_conn_send_frame_locked(conn, hm, hm_len, data, num_data, way);
    pthread_mutex_unlock(&conn->send_lock);
    return st;
}

ps_status_t ps__tcp_conn_send_frame_locked(ps__tcp_conn_t *conn, const uint8_t *hm,
                                           size_t hm_len, const ps_slice_t *data,
                                           uint32_t num_data, ps_send_align_way_t way)
{
    ps__tcp_van_t *van = conn->van;
    struct iovec iov[PS__TCP_FRAME_IOV];
    int cnt = 0;
    uint64_t total = hm_len;
    iov[cnt].iov_base = (void *)hm;
    iov[cnt].iov_len = hm_len;
    cnt++;
    for (uint32_t i = 0; i < num_data; ++i) {
        if (data[i].len != 0) {
            iov[cnt].iov_base = ps_slice_ptr(&data[i]);
            iov[cnt].iov_len = data[i].len;
            total += data[i].len;
            cnt++;
        }
    }

    if (conn->state == PS__TCP_DEAD) {
        return PS_ERR_PEER_GONE;
    }
    uint64_t sent = 0;
    if (conn->state == PS__TCP_READY && conn->sq_head == NULL) {
        /* The common case: straight from the user's buffers to the socket. */
        uint64_t t0 = way != PS_SEND_ALIGN_NONE ? ps_send_align_thread_ns() : 0;
        ssize_t n = send_iov(conn->fd, iov, cnt);
        if (way != PS_SEND_ALIGN_NONE && n > 0) {
            ps_send_align_note_send(&van->align, way, ps_send_align_thread_ns() - t0, (uint64_t)n);
        }
        if (n >= 0 && (uint64_t)n == total) {
            __atomic_add_fetch(&van->base.bytes_sent, total, __ATOMIC_RELAXED);
            return PS_OK;
        }
        if (n < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                /* The progress thread sees the same error on the socket and
                 * reports the peer; the caller only learns this send failed. */
                int err = errno;
                ps_debug(PS_LOG_TCP, "send to node %d at %s: %s", conn->peer_id,
                         conn->addr_str, strerror(err));
                return PS_ERR_PEER_GONE;
            }
            n = 0;
        }
        sent = (uint64_t)n;
    }
    return queue_frame(conn, hm, hm_len, data, num_data, sent);
}

/* Queues the frame, of which `sent` bytes went out directly (send lock
 * held). */
static ps_status_t queue_frame(ps__tcp_conn_t *conn, const uint8_t *hm, size_t hm_len,
                               const ps_slice_t *data, uint32_t num_data, uint64_t sent)
{
    ps__tcp_van_t *van = conn->van;
    ps__tcp_entry_t *e = entry_new(van, hm, hm_len, data, num_data, sent);
    if (e == NULL) {
        if (sent != 0) {
            /* Half a frame is on the wire and the rest cannot be kept: the
             * stream is unusable. Shutting it down makes the progress thread
             * tear the connection down and report the peer. */
            shutdown(conn->fd, SHUT_RDWR);
        }
        ps_error(PS_LOG_TCP, "out of memory queueing a send to node %d", conn->peer_id);
        return PS_ERR_NO_MEMORY;
    }
    if (conn->sq_tail != NULL) {
        conn->sq_tail->next = e;
    } else {
        conn->sq_head = e;
    }
    conn->sq_tail = e;
    if (conn->state == PS__TCP_READY && !conn->epoll_out) {
        ps__tcp_set_epoll(conn, 1);
    }
    if (sent != 0) {
        __atomic_add_fetch(&van->base.bytes_sent, sent, __ATOMIC_RELAXED);
    }
    return PS_OK;
}

/* ---- segments still being written (PS_CAP_SEND_AS_WRITTEN) ---- */

/* Waits until every segment is written whole. */
static ps_status_t wait_all_written(const ps_slice_t *data, uint32_t num_data)
{
    for (uint32_t i = 0; i < num_data; ++i) {
        size_t w;
        ps_status_t st = ps_slice_written(&data[i], 1, data[i].len - 1, &w);
        if (st != PS_OK) {
            return st;
        }
    }
    return PS_OK;
}

/* iovecs over bytes [from, to) of the frame [hm, data...]. */
static int frame_iov(const uint8_t *hm, size_t hm_len, const ps_slice_t *data, uint32_t num_data,
                     uint64_t from, uint64_t to, struct iovec *iov)
{
    int cnt = 0;
    uint64_t start = 0;
    for (int64_t i = -1; i < (int64_t)num_data && from < to; ++i) {
        const uint8_t *p = i < 0 ? hm : ps_slice_ptr(&data[i]);
        uint64_t len = i < 0 ? hm_len : data[i].len;
        if (from < start + len) {
            uint64_t in = from - start;
            uint64_t take = start + len < to ? len - in : to - from;
            iov[cnt].iov_base = (void *)(p + in);
            iov[cnt].iov_len = (size_t)take;
            cnt++;
            from += take;
        }
        start += len;
    }
    return cnt;
}

/* A frame some segment of which its producer is still writing: what is
 * written goes out at once, from the caller's thread, which waits for the
 * rest as it comes. What the socket cannot take is queued once all of it
 * is written, so the progress thread never sees a partial buffer. A
 * producer that fails after part of the frame went out leaves the stream
 * unusable: it is shut down, as for a queueing failure. */
static ps_status_t send_frame_as_written(ps__tcp_conn_t *conn, const uint8_t *hm, size_t hm_len,
                                         const ps_slice_t *data, uint32_t num_data)
{
    ps__tcp_van_t *van = conn->van;
    ps_status_t st = PS_OK;
    pthread_mutex_lock(&conn->send_lock);
    if (conn->state != PS__TCP_READY || conn->sq_head != NULL) {
        st = wait_all_written(data, num_data);
        if (st == PS_OK) {
            st = ps__tcp_conn_send_frame_locked(conn, hm, hm_len, data, num_data,
                                                PS_SEND_ALIGN_NONE);
        }
        pthread_mutex_unlock(&conn->send_lock);
        return st;
    }
    uint64_t total = hm_len;
    for (uint32_t i = 0; i < num_data; ++i) {
        total += data[i].len;
    }
    uint64_t sent = 0;
    for (;;) {
        /* The written front: the header, whole segments, then the written
         * part of the first one still being written (k). */
        uint64_t front = hm_len;
        uint32_t k = num_data;
        size_t have = 0;
        for (uint32_t i = 0; i < num_data && st == PS_OK; ++i) {
            st = ps_slice_written(&data[i], 0, 0, &have);
            front += have;
            if (st == PS_OK && have < data[i].len) {
                k = i;
                break;
            }
        }
        if (st != PS_OK) {
            break;
        }
        if (front > sent) {
            struct iovec iov[PS__TCP_FRAME_IOV];
            int cnt = frame_iov(hm, hm_len, data, num_data, sent, front, iov);
            ssize_t n = send_iov(conn->fd, iov, cnt);
            if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
                ps_debug(PS_LOG_TCP, "send to node %d at %s: %m", conn->peer_id, conn->addr_str);
                st = PS_ERR_PEER_GONE;
                break;
            }
            sent += n > 0 ? (uint64_t)n : 0;
            if (sent < front) {
                break; /* the socket is full */
            }
        }
        if (sent == total) {
            __atomic_add_fetch(&van->base.bytes_sent, total, __ATOMIC_RELAXED);
            pthread_mutex_unlock(&conn->send_lock);
            return PS_OK;
        }
        if (k == num_data) {
            break;
        }
        st = ps_slice_written(&data[k], 1, have, &have);
        if (st != PS_OK) {
            break;
        }
    }
    if (st == PS_OK) {
        st = wait_all_written(data, num_data);
    }
    if (st == PS_OK) {
        st = queue_frame(conn, hm, hm_len, data, num_data, sent);
    } else if (sent != 0) {
        ps_error(PS_LOG_TCP, "send to node %d: %s after %llu bytes of the frame; closing",
                 conn->peer_id, ps_status_str(st), (unsigned long long)sent);
        shutdown(conn->fd, SHUT_RDWR);
    }
    pthread_mutex_unlock(&conn->send_lock);
    return st;
}

ps_status_t ps__tcp_flush(ps__tcp_conn_t *conn)
{
    ps__tcp_van_t *van = conn->van;
    for (;;) {
        struct iovec iov[PS__TCP_FLUSH_IOV];
        int cnt = 0;
        uint64_t want = 0;
        pthread_mutex_lock(&conn->send_lock);
        if (conn->state != PS__TCP_READY) {
            pthread_mutex_unlock(&conn->send_lock);
            return PS_OK;
        }
        for (ps__tcp_entry_t *e = conn->sq_head; e != NULL && cnt < PS__TCP_FLUSH_IOV;
             e = e->next) {
            for (int i = e->iov_idx; i < e->iovcnt && cnt < PS__TCP_FLUSH_IOV; ++i) {
                if (e->iov[i].iov_len != 0) {
                    iov[cnt++] = e->iov[i];
                    want += e->iov[i].iov_len;
                }
            }
        }
        if (cnt == 0) {
            if (conn->epoll_out) {
                ps__tcp_set_epoll(conn, 0);
            }
            pthread_mutex_unlock(&conn->send_lock);
            return PS_OK;
        }
        int fd = conn->fd;
        pthread_mutex_unlock(&conn->send_lock);

        ssize_t n = send_iov(fd, iov, cnt);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                return PS_OK;
            }
            return ps_status_from_errno(errno);
        }
        __atomic_add_fetch(&van->base.bytes_sent, (uint64_t)n, __ATOMIC_RELAXED);

        ps__tcp_entry_t *done = NULL, **done_tail = &done;
        uint64_t left = (uint64_t)n;
        pthread_mutex_lock(&conn->send_lock);
        while (left > 0 && conn->sq_head != NULL) {
            ps__tcp_entry_t *e = conn->sq_head;
            uint64_t step = left < e->bytes ? left : e->bytes;
            entry_advance(e, step);
            left -= step;
            if (e->bytes == 0) {
                conn->sq_head = e->next;
                if (conn->sq_head == NULL) {
                    conn->sq_tail = NULL;
                }
                e->next = NULL;
                *done_tail = e;
                done_tail = &e->next;
            }
        }
        pthread_mutex_unlock(&conn->send_lock);
        ps__tcp_entries_free(van, done);
        if ((uint64_t)n < want) {
            return PS_OK; /* the socket is full; EPOLLOUT stays armed */
        }
    }
}

/* Bytes [off, off + len) of the data as slices (references not taken). */
static uint32_t slice_range(const ps_slice_t *data, uint32_t num_data, uint64_t off,
                            uint64_t len, ps_slice_t *out)
{
    uint32_t n = 0;
    uint64_t start = 0;
    for (uint32_t s = 0; s < num_data && len > 0; ++s) {
        uint64_t slen = data[s].len;
        if (off < start + slen) {
            uint64_t in = off - start;
            uint64_t take = slen - in < len ? slen - in : len;
            out[n] = data[s];
            out[n].off += (size_t)in;
            out[n].len = (size_t)take;
            n++;
            off += take;
            len -= take;
        }
        start += slen;
    }
    return n;
}

/* A frame striped over a peer's streams (tcp_internal.h): chunk 0 after
 * the header and meta on stream 0, chunk i bare on stream i, all queued
 * under every stream's send lock so that the frame order is the same on
 * each. */
static ps_status_t send_striped(ps__tcp_conn_t **conns, int n, const uint8_t *hm, size_t hm_len,
                                const ps_slice_t *data, uint32_t num_data, uint64_t total,
                                ps_send_align_way_t way)
{
    for (int i = 0; i < n; ++i) {
        pthread_mutex_lock(&conns[i]->send_lock);
    }
    ps_status_t st = PS_OK;
    for (int i = 0; i < n; ++i) {
        if (conns[i]->state == PS__TCP_DEAD) {
            st = PS_ERR_PEER_GONE; /* nothing queued yet: the group is failing */
        }
    }
    for (int i = 0; i < n && st == PS_OK; ++i) {
        ps_slice_t part[PS_MSG_MAX_DATA];
        uint64_t off, len;
        ps__tcp_stripe_range(total, n, i, &off, &len);
        uint32_t np = slice_range(data, num_data, off, len, part);
        st = ps__tcp_conn_send_frame_locked(conns[i], hm, i == 0 ? hm_len : 0, part, np, way);
        if (st != PS_OK && i > 0) {
            /* Part of the frame is queued and the rest cannot be: the group
             * is unusable. Shutting its streams down makes the progress
             * thread fail the peer. */
            for (int j = 0; j < n; ++j) {
                if (conns[j]->fd >= 0) {
                    shutdown(conns[j]->fd, SHUT_RDWR);
                }
            }
        }
    }
    for (int i = n - 1; i >= 0; --i) {
        pthread_mutex_unlock(&conns[i]->send_lock);
    }
    return st;
}

static int unaligned_and_large(const ps_slice_t *s)
{
    return s->len >= PS_SEND_ALIGN_MIN && (uintptr_t)ps_slice_ptr(s) % 4096 != 0 &&
           ps_slice_in_host_mem(s);
}

/* data[i]: msg's segment i, or an aligned copy of it where van->align says
 * so; a bit of *copies_p per copy, which the caller releases. Returns what
 * the large unaligned segments are sent as. */
static ps_send_align_way_t align_segments(ps__tcp_van_t *van, const ps_msg_t *msg,
                                          ps_slice_t *data, uint64_t *copies_p)
{
    ps_send_align_way_t way = PS_SEND_ALIGN_NONE;
    int copy = -1; /* not chosen yet: one choice per message */
    *copies_p = 0;
    for (uint32_t i = 0; i < msg->num_data; ++i) {
        const ps_slice_t *s = &msg->data[i];
        data[i] = *s;
        if (!unaligned_and_large(s)) {
            continue;
        }
        if (copy < 0) {
            copy = ps_send_align_choose(&van->align);
        }
        ps_slice_t aligned;
        if (!copy || ps_van_rx_pool_get(van->sock.pool, s->len, &aligned) != PS_OK) {
            if (way == PS_SEND_ALIGN_NONE) {
                way = PS_SEND_ALIGN_DIRECT;
            }
            continue; /* sent as it is */
        }
        uint64_t t0 = ps_send_align_thread_ns();
        memcpy(ps_slice_ptr(&aligned), ps_slice_ptr(s), s->len);
        ps_send_align_note_memcpy(&van->align, ps_send_align_thread_ns() - t0, s->len);
        data[i] = aligned;
        *copies_p |= 1ull << i;
        way = PS_SEND_ALIGN_COPIED;
    }
    return way;
}

ps_status_t ps__tcp_send(ps_van_t *v, const ps_msg_t *msg)
{
    ps__tcp_van_t *van = ps__tcp_of(v);
    ps_meta_t with_nodes;
    const ps_meta_t *meta;
    ps_status_t st = ps_van_send_prepare(&van->base, msg, 0, &with_nodes, &meta);
    if (st != PS_OK) {
        return st;
    }
    int recver = meta->recver;
    uint64_t lens[PS_MSG_MAX_DATA];
    for (uint32_t i = 0; i < msg->num_data; ++i) {
        lens[i] = msg->data[i].len;
    }

    uint8_t stack[PS__TCP_HM_STACK];
    uint8_t *hm, *heap = NULL;
    size_t hm_len;
    st = ps__tcp_encode_frame(van, meta, lens, msg->num_data, stack, sizeof(stack),
                                          &hm, &hm_len, &heap);
    if (st != PS_OK) {
        return st;
    }
    uint64_t total = 0;
    for (uint32_t i = 0; i < msg->num_data; ++i) {
        total += lens[i];
    }
    ps__tcp_conn_t *conns[PS__TCP_MAX_STREAMS];
    int n = ps__tcp_peer_send_conns(van, recver, total, conns);
    if (n <= 0) {
        free(heap);
        if (n < 0) {
            return PS_ERR_PEER_GONE;
        }
        return ps_van_unconnected(&van->base, recver, ps_van_peer_table_lost(&van->sock.peers, recver));
    }
    /* Segments still being written go out as they are on one stream,
     * straight from the producer's buffer; else they are waited for. */
    int as_written = 0;
    for (uint32_t i = 0; i < msg->num_data; ++i) {
        if (ps_slice_being_written(&msg->data[i])) {
            as_written = n == 1 && !unaligned_and_large(&msg->data[i]) ? 1 : -1;
            if (as_written < 0) {
                break;
            }
        }
    }
    if (as_written < 0 && (st = wait_all_written(msg->data, msg->num_data)) != PS_OK) {
        for (int i = 0; i < n; ++i) {
            ps__tcp_conn_unref(conns[i]);
        }
        free(heap);
        return st;
    }
    ps_slice_t data[PS_MSG_MAX_DATA];
    uint64_t copies;
    ps_send_align_way_t way = align_segments(van, msg, data, &copies);
    if (as_written > 0) {
        st = send_frame_as_written(conns[0], hm, hm_len, data, msg->num_data);
    } else if (n == 1) {
        st = ps__tcp_conn_send_frame(conns[0], hm, hm_len, data, msg->num_data, way);
    } else {
        st = send_striped(conns, n, hm, hm_len, data, msg->num_data, total, way);
    }
    for (uint32_t i = 0; i < msg->num_data; ++i) {
        if (copies & (1ull << i))
            ps_slice_unref(&data[i]); /* the queue holds its own reference */
    }
    for (int i = 0; i < n; ++i) {
        ps__tcp_conn_unref(conns[i]);
    }
    free(heap);
    if (ps_unlikely(PS_LOG_TRACE <= ps__log_level) && st == PS_OK) {
        char line[192];
        ps_msg_describe(msg, line, sizeof(line));
        ps_trace(PS_LOG_TCP, "sent %s", line);
    }
    return st;
}
