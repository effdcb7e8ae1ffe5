/*
 * The mem van's "network": the process's table of listening vans, keyed by
 * host:port, and the byte pipes between two connection ends.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/net/refvan/mem_internal.h"
#include "ps/net/refvan/mem_testing.h"

/* Listening vans. A van leaves it (under the lock) before it closes, so a
 * dialler that found one under the lock may hand it a connection. */
static pthread_mutex_t listeners_lock = PTHREAD_MUTEX_INITIALIZER;
static ps__mem_van_t **listeners;
static int num_listeners, cap_listeners;

static ps__mem_van_t *find_listener(const char *host, int port)
{
    for (int i = 0; i < num_listeners; ++i) {
        ps__mem_van_t *v = listeners[i];
        if (v->port == port && (v->host[0] == '\0' || host[0] == '\0' || !strcmp(v->host, host))) {
            return v;
        }
    }
    return NULL;
}

ps_status_t ps__mem_listen(ps__mem_van_t *van, const char *host, int port)
{
    ps_status_t st = PS_OK;
    pthread_mutex_lock(&listeners_lock);
    if (find_listener(host, port) != NULL) {
        st = PS_ERR_ADDRESS_IN_USE;
    } else if (num_listeners == cap_listeners) {
        int cap = cap_listeners ? 2 * cap_listeners : 16;
        ps__mem_van_t **l = realloc(listeners, (size_t)cap * sizeof(*l));
        if (l == NULL) {
            st = PS_ERR_NO_MEMORY;
        } else {
            listeners = l;
            cap_listeners = cap;
        }
    }
    if (st == PS_OK) {
        snprintf(van->host, sizeof(van->host), "%s", host);
        van->port = port;
        listeners[num_listeners++] = van;
    }
    pthread_mutex_unlock(&listeners_lock);
    return st;
}

void ps__mem_unlisten(ps__mem_van_t *van)
{
    pthread_mutex_lock(&listeners_lock);
    for (int i = 0; i < num_listeners; ++i) {
        if (listeners[i] == van) {
            listeners[i] = listeners[--num_listeners];
            break;
        }
    }
    pthread_mutex_unlock(&listeners_lock);
}

ps__mem_conn_t *ps__mem_conn_new(ps__mem_van_t *van, int outgoing, int peer_id)
{
    ps__mem_conn_t *c = calloc(1, sizeof(*c));
    if (c == NULL) {
        return NULL;
    }
    c->van = van;
    c->outgoing = outgoing;
    c->peer_id = peer_id;
    ps_msg_init(&c->rmsg);
    ps__mem_rx_reset(c);
    return c;
}

static void link_unref(ps__mem_link_t *l)
{
    pthread_mutex_lock(&l->lock);
    int last = --l->refs == 0;
    pthread_mutex_unlock(&l->lock);
    if (last) {
        pthread_mutex_destroy(&l->lock);
        free(l->ring[0]);
        free(l->ring[1]);
        free(l);
    }
}

ps_status_t ps__mem_dial(ps_van_loop_t *loop, const char *host, int port, ps__mem_link_t **link_p)
{
    ps__mem_link_t *l = calloc(1, sizeof(*l));
    if (l == NULL || (l->ring[0] = malloc(PS__MEM_PIPE_BYTES)) == NULL ||
        (l->ring[1] = malloc(PS__MEM_PIPE_BYTES)) == NULL) {
        goto fail;
    }
    pthread_mutex_init(&l->lock, NULL);
    l->refs = 2;
    l->loop[0] = loop;
    ps_status_t st = PS_ERR_NOT_FOUND;
    pthread_mutex_lock(&listeners_lock);
    ps__mem_van_t *lv = find_listener(host, port);
    ps__mem_conn_t *peer = lv != NULL ? ps__mem_conn_new(lv, 0, PS_NODE_EMPTY) : NULL;
    if (peer != NULL) {
        peer->link = l;
        peer->side = 1;
        l->loop[1] = &lv->loop;
        st = ps__mem_add_conn(lv, peer);
    } else if (lv != NULL) {
        st = PS_ERR_NO_MEMORY;
    }
    pthread_mutex_unlock(&listeners_lock);
    if (st == PS_OK) {
        *link_p = l;
        return PS_OK;
    }
    free(peer);
    l->refs = 1;
    link_unref(l);
    return st;

fail:
    if (l != NULL) {
        free(l->ring[0]);
        free(l);
    }
    return PS_ERR_NO_MEMORY;
}

size_t ps__mem_link_write(ps__mem_conn_t *conn, const uint8_t *buf, size_t len)
{
    ps__mem_link_t *l = conn->link;
    int s = conn->side;
    pthread_mutex_lock(&l->lock);
    size_t room = PS__MEM_PIPE_BYTES - (size_t)(l->tail[s] - l->head[s]);
    size_t n = len < room ? len : room;
    if (l->closed[!s]) {
        n = 0; /* nobody reads any more */
    }
    for (size_t done = 0; done < n;) {
        size_t at = (size_t)((l->tail[s] + done) % PS__MEM_PIPE_BYTES);
        size_t k = PS__MEM_PIPE_BYTES - at < n - done ? PS__MEM_PIPE_BYTES - at : n - done;
        memcpy(l->ring[s] + at, buf + done, k);
        done += k;
    }
    l->tail[s] += n;
    l->wants_space[s] = n < len;
    if (n != 0 && l->loop[!s] != NULL) {
        ps_van_loop_kick(l->loop[!s]);
    }
    pthread_mutex_unlock(&l->lock);
    return n;
}

size_t ps__mem_link_read(ps__mem_conn_t *conn, uint8_t *buf, size_t len, int *eof_p)
{
    ps__mem_link_t *l = conn->link;
    int p = !conn->side;
    pthread_mutex_lock(&l->lock);
    size_t avail = (size_t)(l->tail[p] - l->head[p]);
    size_t n = len < avail ? len : avail;
    for (size_t done = 0; done < n;) {
        size_t at = (size_t)((l->head[p] + done) % PS__MEM_PIPE_BYTES);
        size_t k = PS__MEM_PIPE_BYTES - at < n - done ? PS__MEM_PIPE_BYTES - at : n - done;
        memcpy(buf + done, l->ring[p] + at, k);
        done += k;
    }
    l->head[p] += n;
    *eof_p = n == avail && l->closed[p];
    if (n != 0 && l->wants_space[p] && l->loop[p] != NULL) {
        l->wants_space[p] = 0;
        ps_van_loop_kick(l->loop[p]);
    }
    pthread_mutex_unlock(&l->lock);
    return n;
}

int ps__mem_link_ready(ps__mem_conn_t *conn, int want_write)
{
    ps__mem_link_t *l = conn->link;
    int s = conn->side;
    pthread_mutex_lock(&l->lock);
    int r = l->tail[!s] != l->head[!s] || l->closed[!s] ||
            (want_write && l->tail[s] - l->head[s] < PS__MEM_PIPE_BYTES);
    pthread_mutex_unlock(&l->lock);
    return r;
}

void ps__mem_link_close(ps__mem_conn_t *conn)
{
    ps__mem_link_t *l = conn->link;
    if (l == NULL) {
        return;
    }
    int s = conn->side;
    pthread_mutex_lock(&l->lock);
    l->closed[s] = 1;
    l->loop[s] = NULL;
    if (l->loop[!s] != NULL) {
        ps_van_loop_kick(l->loop[!s]);
    }
    pthread_mutex_unlock(&l->lock);
    conn->link = NULL;
    link_unref(l);
}

/* ---- raw ends for tests (mem_testing.h) ---- */

struct ps__mem_test_raw {
    ps__mem_conn_t conn; /* link and side only */
};

ps_status_t ps__mem_test_raw_dial(const char *host, int port, ps__mem_test_raw_t **raw_p)
{
    ps__mem_test_raw_t *raw = calloc(1, sizeof(*raw));
    if (raw == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    ps_status_t st = ps__mem_dial(NULL, host, port, &raw->conn.link);
    if (st != PS_OK) {
        free(raw);
        return st;
    }
    *raw_p = raw;
    return PS_OK;
}

size_t ps__mem_test_raw_write(ps__mem_test_raw_t *raw, const void *buf, size_t len)
{
    return ps__mem_link_write(&raw->conn, buf, len);
}

int ps__mem_test_raw_closed(ps__mem_test_raw_t *raw)
{
    uint8_t sink[4096];
    int eof = 0;
    while (ps__mem_link_read(&raw->conn, sink, sizeof(sink), &eof) != 0 && !eof) {
    }
    return eof;
}

void ps__mem_test_raw_close(ps__mem_test_raw_t *raw)
{
    ps__mem_link_close(&raw->conn);
    free(raw);
}
