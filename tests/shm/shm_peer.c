/*
 * shm_peer: the other process of the shared-memory van tests (a test
 * starts it, talks to it through an shm van, and kills it).
 *
 *   shm_peer JOB MY_ID MY_HOST MY_PORT [PEER_ID PEER_HOST PEER_PORT]
 *
 * Opens an shm van of job JOB, listens as MY_HOST:MY_PORT, takes node id
 * MY_ID and, when a peer is given, connects to it and sends it one message
 * (key 42): 8 bytes, a 1 MiB value in a buffer of ps_shm_buf_alloc() (sent
 * without a copy), and a 2 MiB plain value. Every message it receives with
 * key 7 is echoed back to its sender (key 8, same data). Runs until killed;
 * prints "ready" once set up.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/base/status.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
#include "ps/net/shm_alloc.h"
#include "ps/net/van/van.h"

static ps_van_t *g_van;

static uint8_t pattern(uint64_t seed, size_t i)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + i;
    x ^= x >> 29;
    return (uint8_t)(x * 0xbf58476d1ce4e5b9ull >> 56);
}

static void deliver(void *arg, ps_msg_t *msg)
{
    (void)arg;
    if (msg->meta.key == 7) {
        ps_msg_t echo;
        ps_msg_init(&echo);
        echo.meta.recver = msg->meta.sender;
        echo.meta.key = 8;
        for (uint32_t i = 0; i < msg->num_data; ++i) {
            ps_msg_add_data(&echo, &msg->data[i], PS_DATA_CHAR);
        }
        (void)g_van->ops->send(g_van, &echo);
        ps_msg_release(&echo);
    }
    ps_msg_release(msg);
}

static int fill(ps_slice_t *s, size_t len, int shared, uint64_t seed)
{
    ps_status_t st = shared ? ps_shm_slice_alloc(len, s) : ps_slice_alloc(len, 4096, s);
    if (st != PS_OK) {
        return -1;
    }
    uint8_t *p = ps_slice_ptr(s);
    for (size_t i = 0; i < len; ++i) {
        p[i] = pattern(seed, i);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 8) {
        fprintf(stderr, "usage: shm_peer JOB MY_ID MY_HOST MY_PORT [PEER_ID PEER_HOST PEER_PORT]\n");
        return 2;
    }
    ps_config_set(PS_CFG_PS_JOB_ID, argv[1]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    int my_id = atoi(argv[2]);
    const ps_van_component_t *comp;
    if (ps_van_find("shm", &comp) != PS_OK) {
        return 1;
    }
    ps_van_params_t params;
    memset(&params, 0, sizeof(params));
    params.role = PS_ROLE_WORKER;
    params.connect_timeout_ms = 20000;
    ps_van_callbacks_t cb = {.arg = NULL, .recv_buffer = NULL, .deliver = deliver,
                             .peer_failed = NULL};
    if (comp->ops->open(&params, &cb, &g_van) != PS_OK) {
        return 1;
    }
    ps_node_t me;
    ps_node_init(&me);
    snprintf(me.hostname, sizeof(me.hostname), "%s", argv[3]);
    me.num_ports = 1;
    me.ports[0] = atoi(argv[4]);
    if (g_van->ops->bind(g_van, &me, 40) != PS_OK || g_van->ops->set_node_id(g_van, my_id) != PS_OK) {
        return 1;
    }
    if (argc == 8) {
        ps_node_t peer;
        ps_node_init(&peer);
        peer.id = atoi(argv[5]);
        snprintf(peer.hostname, sizeof(peer.hostname), "%s", argv[6]);
        peer.num_ports = 1;
        peer.ports[0] = atoi(argv[7]);
        if (g_van->ops->connect(g_van, &peer, my_id) != PS_OK) {
            return 1;
        }
        ps_msg_t msg;
        ps_msg_init(&msg);
        msg.meta.recver = peer.id;
        msg.meta.key = 42;
        ps_slice_t a, b, c;
        if (fill(&a, 8, 0, 1) || fill(&b, 1 << 20, 1, 2) || fill(&c, 2 << 20, 0, 3)) {
            return 1;
        }
        ps_msg_add_data(&msg, &a, PS_DATA_CHAR);
        ps_msg_add_data(&msg, &b, PS_DATA_CHAR);
        ps_msg_add_data(&msg, &c, PS_DATA_CHAR);
        if (g_van->ops->send(g_van, &msg) != PS_OK) {
            return 1;
        }
        ps_msg_release(&msg);
        ps_slice_unref(&a);
        ps_slice_unref(&b);
        ps_slice_unref(&c);
    }
    printf("ready %d\n", me.ports[0]);
    fflush(stdout);
    for (;;) {
        pause();
    }
}
