/*
 * A UCX van in a process of its own, for tests of what happens when a peer
 * dies: it listens, prints "READY <port>", connects
 * to the van at 127.0.0.1:<port> as node <my id>, sends <count> messages of
 * <size> bytes to node <peer id>, and once it has received one message back
 * kills itself (SIGKILL: no goodbye of any kind).
 *
 *   ucx_peer <peer port> <peer id> <my id> <count> <size>
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps/base/buffer.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/van/van.h"

static int g_got; /* atomic */

static void on_deliver(void *arg, ps_msg_t *msg)
{
    (void)arg;
    ps_msg_release(msg);
    __atomic_store_n(&g_got, 1, __ATOMIC_RELEASE);
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s peer_port peer_id my_id count size\n", argv[0]);
        return 2;
    }
    int peer_port = atoi(argv[1]);
    int peer_id = atoi(argv[2]);
    int my_id = atoi(argv[3]);
    int count = atoi(argv[4]);
    size_t size = (size_t)atol(argv[5]);

    const ps_van_component_t *c;
    if (ps_van_find("ucx", &c) != PS_OK) {
        return 3;
    }
    ps_van_params_t p;
    memset(&p, 0, sizeof(p));
    p.role = PS_ROLE_WORKER;
    p.connect_timeout_ms = 20000;
    ps_van_callbacks_t cb = {0};
    memset(&cb, 0, sizeof(cb));
    cb.deliver = on_deliver;
    ps_van_t *van;
    if (c->ops->open(&p, &cb, &van) != PS_OK) {
        return 4;
    }
    ps_node_t me;
    ps_node_init(&me);
    me.id = my_id;
    snprintf(me.hostname, sizeof(me.hostname), "127.0.0.1");
    if (c->ops->bind(van, &me, 40) != PS_OK) {
        return 5;
    }
    printf("READY %d\n", me.ports[0]);
    fflush(stdout);

    ps_node_t peer;
    ps_node_init(&peer);
    peer.id = peer_id;
    snprintf(peer.hostname, sizeof(peer.hostname), "127.0.0.1");
    peer.num_ports = 1;
    peer.ports[0] = peer_port;
    if (c->ops->connect(van, &peer, my_id) != PS_OK) {
        return 6;
    }
    for (int i = 0; i < count; ++i) {
        ps_msg_t msg;
        ps_msg_init(&msg);
        msg.meta.recver = peer_id;
        msg.meta.key = (uint64_t)i;
        ps_slice_t s;
        if (ps_slice_alloc(size, 0, &s) != PS_OK) {
            return 7;
        }
        memset(ps_slice_ptr(&s), i & 0xff, size);
        ps_msg_add_data(&msg, &s, PS_DATA_UINT8);
        ps_slice_unref(&s);
        if (c->ops->send(van, &msg) != PS_OK) {
            return 8;
        }
        ps_msg_release(&msg);
    }
    for (int i = 0; i < 60000 && !__atomic_load_n(&g_got, __ATOMIC_ACQUIRE); ++i) {
        usleep(1000);
    }
    kill(getpid(), SIGKILL);
    return 9;
}
