/*
 * Writes the seed corpus of codec_fuzzer into a directory: frames carrying
 * the messages ps sends (KV push/pull, AF tensors, every control command),
 * bare metas, and a few broken frames. Regenerate after a wire change:
 *
 *   bazel run //tests/fuzz:codec_corpus_gen -- $PWD/tests/fuzz/corpus/codec
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/app/af_wire.h"
#include "ps/app/kv_error.h"
#include "ps/app/kv_ipc.h"
#include "ps/base/status.h"
#include "ps/net/codec/codec.h"
#include "ps/net/codec/frame.h"
#include "ps/net/codec/message.h"
#include "ps/net/codec/meta_fast.h"
#include "tests/fuzz/corpus_file.h"

static const char *out_dir;
static int written;

static void die(const char *what)
{
    fprintf(stderr, "codec_corpus_gen: %s\n", what);
    exit(1);
}

static void write_file(const char *name, const uint8_t *bytes, size_t len)
{
    if (fuzz_corpus_write(out_dir, name, NULL, 0, bytes, len) != 0)
        exit(1);
    written++;
}

/* Encodes m (fast 0: protobuf; 1: the fast form of meta_fast.h; 2: its
 * compact form, in a compact frame header) and writes it framed with the
 * given segments as frame_<name>, and with bare also unframed as
 * meta_<name>. */
static void emit_as(const char *name, const ps_meta_t *m, const char *const *segs,
                    uint16_t num_segs, int bare, int fast)
{
    static uint8_t buf[1 << 16];
    uint64_t lens[PS_FRAME_MAX_SEGMENTS];
    size_t meta_len = 0, hdr_len = 0, off;
    char file[256];

    for (uint16_t i = 0; i < num_segs; i++)
        lens[i] = strlen(segs[i]);
    uint8_t *mp = buf + PS_FRAME_MAX_HEADER_LEN;
    size_t mcap = sizeof(buf) - PS_FRAME_MAX_HEADER_LEN;
    if ((fast == 2   ? ps_meta_compact_encode(m, mp, mcap, &meta_len)
         : fast == 1 ? ps_meta_fast_encode(m, mp, mcap, &meta_len)
                     : ps_meta_encode(m, mp, mcap, &meta_len)) != PS_OK)
        die("encode");
    if (bare) {
        snprintf(file, sizeof(file), "meta_%s", name);
        write_file(file, buf + PS_FRAME_MAX_HEADER_LEN, meta_len);
    }

    if ((fast == 2 ? ps_frame_header_build_compact((uint32_t)meta_len, lens, num_segs, NULL, buf,
                                                   PS_FRAME_MAX_HEADER_LEN, &hdr_len)
                   : ps_frame_header_build(0, (uint32_t)meta_len, lens, num_segs, NULL, buf,
                                           PS_FRAME_MAX_HEADER_LEN, &hdr_len)) != PS_OK)
        die("frame header");
    memmove(buf + hdr_len, buf + PS_FRAME_MAX_HEADER_LEN, meta_len);
    off = hdr_len + meta_len;
    for (uint16_t i = 0; i < num_segs; i++) {
        if (off + lens[i] > sizeof(buf))
            die("segments too long");
        memcpy(buf + off, segs[i], lens[i]);
        off += lens[i];
    }
    snprintf(file, sizeof(file), "frame_%s", name);
    write_file(file, buf, off);
}

static void emit(const char *name, const ps_meta_t *m, const char *const *segs,
                 uint16_t num_segs, int bare)
{
    emit_as(name, m, segs, num_segs, bare, 0);
}

/* The same message with its meta in the fast form, as the TCP van sends
 * plain data messages: fast_<name>. */
static void emit_fast(const char *name, const ps_meta_t *m, const char *const *segs,
                      uint16_t num_segs, int bare)
{
    char fast_name[128];
    snprintf(fast_name, sizeof(fast_name), "fast_%s", name);
    emit_as(fast_name, m, segs, num_segs, bare, 1);
    /* And in the compact forms, as ps_frame_encode_head() sends it:
     * compact_<name>. */
    snprintf(fast_name, sizeof(fast_name), "compact_%s", name);
    emit_as(fast_name, m, segs, num_segs, bare, 2);
}

static void kv_meta(ps_meta_t *m, int push, int request)
{
    ps_meta_init(m);
    m->app_id = 0;
    m->customer_id = 0;
    m->timestamp = 42;
    m->sender = ps_worker_rank_to_id(0);
    m->recver = ps_server_rank_to_id(1);
    m->request = request;
    m->push = push;
    m->pull = !push;
    m->head = 0;
    m->key = 0x123456789ull;
    m->src_dev_type = PS_DEV_CPU;
    m->dst_dev_type = PS_DEV_CPU;
}

static void node(ps_node_t *n, ps_role_t role, int id, const char *host, int port)
{
    ps_node_init(n);
    n->role = role;
    n->id = id;
    snprintf(n->hostname, sizeof(n->hostname), "%s", host);
    n->num_ports = 1;
    n->ports[0] = port;
    n->dev_types[0] = PS_DEV_CPU;
    n->dev_ids[0] = 0;
}

int main(int argc, char **argv)
{
    static const char *const kv3[] = {"\x01\0\0\0\0\0\0\0", "\0\0\x80?\0\0\0@", "\x02\0\0\0"};
    static const char *const kv2[] = {"\x01\0\0\0\0\0\0\0", "\0\0\x80?\0\0\0@"};
    ps_meta_t m;
    ps_node_t nodes[4];

    if (argc != 2)
        die("usage: codec_corpus_gen DIR");
    out_dir = argv[1];

    /* KV push request with keys, values and lengths; its response. */
    kv_meta(&m, 1, 1);
    m.num_data_types = 3;
    m.data_types[0] = PS_DATA_UINT64;
    m.data_types[1] = PS_DATA_FLOAT;
    m.data_types[2] = PS_DATA_INT32;
    m.data_size = 8 + 8 + 4;
    m.addr = 0x7f0000001000ull;
    m.val_len = 8;
    m.option = 0x1234;
    emit("kv_push", &m, kv3, 3, 1);
    emit_fast("kv_push", &m, kv3, 3, 1);
    kv_meta(&m, 1, 0);
    emit("kv_push_response", &m, NULL, 0, 0);
    emit_fast("kv_push_response", &m, NULL, 0, 1);

    /* KV pull request and its response carrying the values. */
    kv_meta(&m, 0, 1);
    m.num_data_types = 1;
    m.data_types[0] = PS_DATA_UINT64;
    m.data_size = 8;
    emit("kv_pull", &m, kv2, 1, 0);
    emit_fast("kv_pull", &m, kv2, 1, 0);
    kv_meta(&m, 0, 0);
    m.num_data_types = 2;
    m.data_types[0] = PS_DATA_UINT64;
    m.data_types[1] = PS_DATA_FLOAT;
    m.data_size = 16;
    m.sid = 77;
    emit("kv_pull_response", &m, kv2, 2, 0);
    emit_fast("kv_pull_response", &m, kv2, 2, 0);

    /* AF tensor push: shape, dtype, traces, qp counters, van data. */
    kv_meta(&m, 1, 1);
    m.head = 1; /* AF_FLAG_BATCH_START */
    m.is_tensor = 1;
    m.dtype = 15; /* torch bfloat16 */
    m.ndim = 3;
    m.shape[0] = 4;
    m.shape[1] = 128;
    m.shape[2] = 7168;
    m.num_data_types = 2;
    m.data_types[0] = PS_DATA_UINT64;
    m.data_types[1] = PS_DATA_BFLOAT16;
    m.src_dev_type = PS_DEV_GPU;
    m.src_dev_id = 3;
    m.dst_dev_type = PS_DEV_GPU;
    m.dst_dev_id = 1;
    m.request_trace.pre_start = 1000;
    m.request_trace.start = 1100;
    m.request_trace.postsend = 1200;
    m.response_trace.postrecv = 2000;
    m.response_trace.process = 2100;
    m.num_slave_qp_counters = 2;
    m.slave_qp_counter[0] = 5;
    m.slave_qp_counter[1] = 6;
    m.slave_qp_num = 2;
    m.van_data_len = 12;
    memcpy(m.van_data, "rkey:0000abc", 12);
    emit("af_tensor_push", &m, kv2, 2, 1);

    /* An AF batch's pull slot and its answer: tensor meta, batch header in
     * the body (af_wire.h), traces. */
    uint8_t af_body[PS__AF_HDR_LEN];
    ps__af_hdr_t af_hdr = {.index = 2, .count = 3, .num_push = 2, .seq = 41};
    ps__af_hdr_write(af_body, &af_hdr);
    kv_meta(&m, 0, 1);
    m.head = 3; /* AF_FLAG_BATCH_END */
    m.is_tensor = 1;
    m.dtype = 15;
    m.ndim = 2;
    m.shape[0] = 128;
    m.shape[1] = 7168;
    m.key = (1u << 16) | (2u << 8) | 1u;
    m.val_len = 128u * 7168u * 2u;
    m.body = af_body;
    m.body_len = sizeof(af_body);
    m.num_data_types = 0;
    m.data_size = 0;
    m.request_trace.start = 5000;
    m.request_trace.postsend = 5100;
    emit("af_batch_pull", &m, NULL, 0, 1);
    m.request = 0;
    m.request_trace.postrecv = 5300;
    m.request_trace.process = 5400;
    m.response_trace.start = 5500;
    m.response_trace.postsend = 5600;
    emit("af_pull_response", &m, NULL, 0, 1);

    /* KV bodies: a push and a pull as IPC descriptors, a push-pull with
     * both, an answer written in place, an error answer. */
    ps__kv_ipc_desc_t ipc[2];
    memset(ipc, 0, sizeof(ipc));
    ipc[0] = (ps__kv_ipc_desc_t){.magic = PS__KV_IPC_MAGIC, .kind = 2, .device = 0,
                                 .offset = 4096, .len = 1 << 20};
    memcpy(ipc[0].handle.bytes, "emu-or-cuda-handle", 18);
    ipc[1] = ipc[0];
    ipc[1].magic = PS__KV_IPC_PULL_MAGIC;
    ipc[1].offset = 64;
    kv_meta(&m, 1, 0);
    m.num_data_types = 1;
    m.data_types[0] = PS_DATA_UINT64;
    m.data_size = 8;
    m.body = (const uint8_t *)&ipc[0];
    m.body_len = sizeof(ipc[0]);
    emit("kv_ipc_push", &m, kv2, 1, 0);
    kv_meta(&m, 0, 1);
    m.body = (const uint8_t *)&ipc[1];
    m.body_len = sizeof(ipc[1]);
    emit("kv_ipc_pull", &m, kv2, 1, 0);
    kv_meta(&m, 1, 1);
    m.body = (const uint8_t *)ipc;
    m.body_len = sizeof(ipc);
    emit("kv_ipc_pushpull", &m, kv2, 1, 0);
    ps__kv_ipc_written_t in_place = {.magic = PS__KV_IPC_WRITTEN_MAGIC, .len = 1 << 20};
    kv_meta(&m, 0, 0);
    m.body = (const uint8_t *)&in_place;
    m.body_len = sizeof(in_place);
    emit("kv_ipc_written", &m, kv2, 1, 0);
    uint8_t kv_err[PS__KV_ERROR_LEN];
    ps__kv_error_pack(PS_ERR_NOT_FOUND, kv_err);
    m.body = kv_err;
    m.body_len = sizeof(kv_err);
    emit("kv_error", &m, NULL, 0, 0);

    /* Simple app with a body. */
    kv_meta(&m, 0, 1);
    m.simple_app = 1;
    m.pull = 0;
    m.head = 7;
    m.body = (const uint8_t *)"hello from the simple app";
    m.body_len = strlen((const char *)m.body);
    m.priority = -1;
    emit("simple_app_body", &m, NULL, 0, 1);
    emit_fast("simple_app_body", &m, NULL, 0, 1);

    /* Control: ADD_NODE from a worker, the scheduler's full list, barriers,
     * heartbeat, ack, terminate and the rest. */
    ps_meta_init(&m);
    m.control.cmd = PS_CTRL_ADD_NODE;
    node(&nodes[0], PS_ROLE_WORKER, PS_NODE_EMPTY, "10.0.0.2", 40001);
    nodes[0].aux_id = 0;
    nodes[0].endpoint_name_len = 16;
    memcpy(nodes[0].endpoint_name, "fabric-addr-0001", 16);
    m.control.nodes = nodes;
    m.control.num_nodes = 1;
    emit("add_node_request", &m, NULL, 0, 0);

    node(&nodes[0], PS_ROLE_SCHEDULER, PS_SCHEDULER_ID, "10.0.0.1", 9000);
    node(&nodes[1], PS_ROLE_SERVER, ps_server_rank_to_id(0), "10.0.0.3", 40002);
    node(&nodes[2], PS_ROLE_WORKER, ps_worker_rank_to_id(0), "fe80::1", 40003);
    node(&nodes[3], PS_ROLE_JOINT, ps_worker_rank_to_id(1), "host-4.example", 40004);
    nodes[3].num_ports = 2;
    nodes[3].ports[1] = 40005;
    nodes[3].dev_types[1] = PS_DEV_GPU;
    nodes[3].dev_ids[1] = 7;
    nodes[3].is_recovery = 1;
    m.control.num_nodes = 4;
    emit("add_node_reply", &m, NULL, 0, 1);

    ps_meta_init(&m);
    m.request = 1;
    m.control.cmd = PS_CTRL_BARRIER;
    m.control.barrier_group = PS_GROUP_ALL;
    emit("barrier", &m, NULL, 0, 0);
    m.control.cmd = PS_CTRL_INSTANCE_BARRIER;
    m.control.barrier_group = PS_GROUP_SERVER | PS_GROUP_WORKER;
    emit("instance_barrier", &m, NULL, 0, 0);

    ps_meta_init(&m);
    m.control.cmd = PS_CTRL_HEARTBEAT;
    m.control.nodes = &nodes[2];
    m.control.num_nodes = 1;
    emit("heartbeat", &m, NULL, 0, 0);

    ps_meta_init(&m);
    m.control.cmd = PS_CTRL_ACK;
    m.control.msg_sig = 0x0001090800000054ull;
    emit("ack", &m, NULL, 0, 1);

    ps_meta_init(&m);
    m.control.cmd = PS_CTRL_TERMINATE;
    emit("terminate", &m, NULL, 0, 0);

    ps_meta_init(&m);
    m.control.cmd = PS_CTRL_NODE_FAILED;
    m.control.nodes = &nodes[1];
    m.control.num_nodes = 1;
    emit("node_failed", &m, NULL, 0, 0);

    /* Broken frames: the parser's early exits. */
    {
        static const uint8_t bad_magic[] = {'P', 'S', 'F', '0', 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
        static const uint8_t bad_version[] = {'P', 'S', 'F', '1', 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
        static const uint8_t short_header[] = {'P', 'S', 'F', '1', 1, 0, 0, 0, 4};
        static const uint8_t huge_segment[] = {'P', 'S', 'F', '1', 1, 0, 0, 0, 0, 0, 0, 0, 1, 0,
                                               0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
        write_file("bad_magic", bad_magic, sizeof(bad_magic));
        write_file("bad_version", bad_version, sizeof(bad_version));
        write_file("short_header", short_header, sizeof(short_header));
        write_file("huge_segment", huge_segment, sizeof(huge_segment));
        /* The compact header's: magic, version, a meta length varint that
         * is overlong and one that never ends, a segment past 64 bits. */
        static const uint8_t c_bad_magic[] = {'p', 'S', 1, 0, 0};
        static const uint8_t c_bad_version[] = {'p', 's', 2, 0, 0};
        static const uint8_t c_overlong[] = {'p', 's', 1, 0, 0x80, 0x00};
        static const uint8_t c_endless[] = {'p', 's', 1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
        static const uint8_t c_huge_segment[] = {'p', 's', 1, 1, 0, 0xff, 0xff, 0xff, 0xff,
                                                 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f};
        write_file("compact_bad_magic", c_bad_magic, sizeof(c_bad_magic));
        write_file("compact_bad_version", c_bad_version, sizeof(c_bad_version));
        write_file("compact_overlong", c_overlong, sizeof(c_overlong));
        write_file("compact_endless", c_endless, sizeof(c_endless));
        write_file("compact_huge_segment", c_huge_segment, sizeof(c_huge_segment));
    }

    printf("codec_corpus_gen: wrote %d files to %s\n", written, out_dir);
    return 0;
}
