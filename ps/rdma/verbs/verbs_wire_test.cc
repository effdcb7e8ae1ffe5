// Wire formats of the ibverbs van: private data, immediate values, message
// headers, rendezvous control messages and pull descriptors round-trip, and
// damaged input is refused rather than trusted.
#include <arpa/inet.h>

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

extern "C" {
#include "ps/net/codec/message.h"
#include "ps/rdma/verbs/verbs_wire.h"
}

namespace {

TEST(ConnData, RoundTripFitsInfinibandConnectLimit)
{
    ps__vb_conn_data_t d;
    memset(&d, 0, sizeof(d));
    d.node_id = 9;
    d.qp_index = 1;
    d.qp_count = 2;
    d.flags = PS__VB_CONN_LAG;
    d.nonce = 0x0123456789abcdefull;
    d.max_inline = 256;
    uint8_t buf[56];
    size_t len = 0;
    ASSERT_EQ(ps__vb_conn_data_encode(&d, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(len, (size_t)PS__VB_CONN_DATA_LEN);
    EXPECT_LE(len, 56u) << "rdma_connect private data on IB is at most 56 bytes";

    ps__vb_conn_data_t out;
    ASSERT_EQ(ps__vb_conn_data_decode(buf, len, &out), PS_OK);
    EXPECT_EQ(out.node_id, 9);
    EXPECT_EQ(out.qp_index, 1);
    EXPECT_EQ(out.qp_count, 2);
    EXPECT_EQ(out.flags, PS__VB_CONN_LAG);
    EXPECT_EQ(out.nonce, d.nonce);
    EXPECT_EQ(out.max_inline, 256u);
}

TEST(ConnData, PaddedInputDecodes)
{
    // InfiniBand delivers the private data padded to the maximum length.
    ps__vb_conn_data_t d;
    memset(&d, 0, sizeof(d));
    d.node_id = PS_NODE_EMPTY;
    d.qp_count = 1;
    uint8_t buf[56];
    memset(buf, 0, sizeof(buf));
    size_t len = 0;
    ASSERT_EQ(ps__vb_conn_data_encode(&d, buf, sizeof(buf), &len), PS_OK);
    ps__vb_conn_data_t out;
    ASSERT_EQ(ps__vb_conn_data_decode(buf, sizeof(buf), &out), PS_OK);
    EXPECT_EQ(out.node_id, PS_NODE_EMPTY);
}

TEST(ConnData, DamagedInputIsRefused)
{
    ps__vb_conn_data_t d;
    memset(&d, 0, sizeof(d));
    d.node_id = 8;
    d.qp_count = 2;
    d.qp_index = 0;
    uint8_t buf[PS__VB_CONN_DATA_LEN];
    size_t len = 0;
    ASSERT_EQ(ps__vb_conn_data_encode(&d, buf, sizeof(buf), &len), PS_OK);
    ps__vb_conn_data_t out;

    EXPECT_EQ(ps__vb_conn_data_decode(buf, len - 1, &out), PS_ERR_PROTOCOL) << "short";
    EXPECT_EQ(ps__vb_conn_data_decode(nullptr, 0, &out), PS_ERR_PROTOCOL) << "none at all";

    uint8_t bad[PS__VB_CONN_DATA_LEN];
    memcpy(bad, buf, len);
    bad[0] ^= 0xff;
    EXPECT_EQ(ps__vb_conn_data_decode(bad, len, &out), PS_ERR_PROTOCOL) << "magic";
    memcpy(bad, buf, len);
    bad[4] = 99;
    EXPECT_EQ(ps__vb_conn_data_decode(bad, len, &out), PS_ERR_PROTOCOL) << "version";
    memcpy(bad, buf, len);
    bad[12] = 2; // index == count
    EXPECT_EQ(ps__vb_conn_data_decode(bad, len, &out), PS_ERR_PROTOCOL) << "index";
    memcpy(bad, buf, len);
    bad[13] = 0;
    EXPECT_EQ(ps__vb_conn_data_decode(bad, len, &out), PS_ERR_PROTOCOL) << "count 0";
    memcpy(bad, buf, len);
    bad[13] = PS__VB_MAX_QP + 1;
    EXPECT_EQ(ps__vb_conn_data_decode(bad, len, &out), PS_ERR_PROTOCOL) << "count too big";
    memcpy(bad, buf, len);
    bad[8] = 0; // node id 0
    EXPECT_EQ(ps__vb_conn_data_decode(bad, len, &out), PS_ERR_PROTOCOL) << "node 0";

    // The encoder refuses what the decoder would.
    d.qp_index = 2;
    EXPECT_EQ(ps__vb_conn_data_encode(&d, buf, sizeof(buf), &len), PS_ERR_INVALID_ARG);
    d.qp_index = 0;
    EXPECT_EQ(ps__vb_conn_data_encode(&d, buf, 10, &len), PS_ERR_TOO_LARGE);
}

TEST(Imm, MetaCarriesSlotInNetworkOrder)
{
    uint32_t slot = 0x00100005u; // generation 1, index 5
    uint32_t imm = ps__vb_imm_meta(slot);
    EXPECT_EQ(imm, htonl(slot));
    uint32_t got = 0;
    EXPECT_EQ(ps__vb_imm_decode(imm, &got), PS__VB_IMM_META);
    EXPECT_EQ(got, slot);

    // The top bits of a slot id are its generation: all 32 bits survive.
    slot = 0xfff00001u;
    EXPECT_EQ(ps__vb_imm_decode(ps__vb_imm_meta(slot), &got), PS__VB_IMM_META);
    EXPECT_EQ(got, slot);
}

TEST(Imm, ZeroIsASlaveChunk)
{
    uint32_t got = 1234;
    EXPECT_EQ(ps__vb_imm_decode(ps__vb_imm_slave(), &got), PS__VB_IMM_SLAVE);
    EXPECT_EQ(got, 1234u) << "slot untouched for a slave chunk";
}

TEST(Hdr, RoundTripWithSlaveCounters)
{
    ps__vb_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.type = PS__VB_MSG_META;
    h.flags = PS__VB_HDR_RMA;
    h.rma_seg = 1;
    h.rma_slot = 77;
    h.nqp = 3;
    h.frame_len = 123;
    h.slave[1] = 0xfffffffeu;
    h.slave[2] = 5;
    uint8_t buf[64];
    size_t len = 0;
    ASSERT_EQ(ps__vb_hdr_encode(&h, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(len, (size_t)PS__VB_HDR_FIXED + 8);
    EXPECT_EQ(len, ps__vb_hdr_len(&h));
    EXPECT_EQ(ps__vb_msg_type(buf, len), PS__VB_MSG_META);

    ps__vb_hdr_t out;
    size_t used = 0;
    ASSERT_EQ(ps__vb_hdr_decode(buf, len, &out, &used), PS_OK);
    EXPECT_EQ(used, len);
    EXPECT_EQ(out.type, PS__VB_MSG_META);
    EXPECT_EQ(out.flags, PS__VB_HDR_RMA);
    EXPECT_EQ(out.rma_seg, 1);
    EXPECT_EQ(out.rma_slot, 77u);
    EXPECT_EQ(out.nqp, 3);
    EXPECT_EQ(out.frame_len, 123u);
    EXPECT_EQ(out.slave[1], 0xfffffffeu);
    EXPECT_EQ(out.slave[2], 5u);
}

TEST(Hdr, SingleQpIsSixteenBytes)
{
    ps__vb_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.type = PS__VB_MSG_EAGER;
    h.nqp = 1;
    uint8_t buf[16];
    size_t len = 0;
    ASSERT_EQ(ps__vb_hdr_encode(&h, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(len, 16u);
}

TEST(Hdr, DamagedInputIsRefused)
{
    ps__vb_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.type = PS__VB_MSG_EAGER;
    h.nqp = 2;
    uint8_t buf[32];
    size_t len = 0;
    ASSERT_EQ(ps__vb_hdr_encode(&h, buf, sizeof(buf), &len), PS_OK);
    ps__vb_hdr_t out;
    size_t used;
    EXPECT_EQ(ps__vb_hdr_decode(buf, len - 1, &out, &used), PS_ERR_PROTOCOL) << "counters cut";
    uint8_t bad[32];
    memcpy(bad, buf, len);
    bad[4] = PS__VB_MSG_RDV_START; // a control type is not a message header
    EXPECT_EQ(ps__vb_hdr_decode(bad, len, &out, &used), PS_ERR_PROTOCOL);
    memcpy(bad, buf, len);
    bad[5] = 0x80; // unknown flag
    EXPECT_EQ(ps__vb_hdr_decode(bad, len, &out, &used), PS_ERR_PROTOCOL);
    memcpy(bad, buf, len);
    bad[5] = PS__VB_HDR_RMA; // RMA without a slot
    EXPECT_EQ(ps__vb_hdr_decode(bad, len, &out, &used), PS_ERR_PROTOCOL);
    memcpy(bad, buf, len);
    bad[7] = 0;
    EXPECT_EQ(ps__vb_hdr_decode(bad, len, &out, &used), PS_ERR_PROTOCOL) << "nqp 0";
    EXPECT_EQ(ps__vb_msg_type(buf, 3), 0) << "too short to have a type";
}

TEST(Ctrl, GrantRoundTrip)
{
    ps__vb_ctrl_t c;
    memset(&c, 0, sizeof(c));
    c.type = PS__VB_MSG_RDV_GRANT;
    c.dir = 3;
    c.flags = PS__VB_RDV_REGRANT;
    c.token = 17;
    c.slot = 0x00200001u;
    c.key = 0xdeadbeefcafef00dull;
    c.meta_len = 4096;
    c.data_len = 4ull << 30;
    c.meta_addr = 0x7f0000001000ull;
    c.meta_rkey = 0x1234;
    c.data_addr = 0x7f0000100000ull;
    c.data_rkey = 0x5678;
    uint8_t buf[PS__VB_CTRL_LEN];
    size_t len = 0;
    ASSERT_EQ(ps__vb_ctrl_encode(&c, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(len, (size_t)PS__VB_CTRL_LEN);
    EXPECT_EQ(ps__vb_msg_type(buf, len), PS__VB_MSG_RDV_GRANT);
    ps__vb_ctrl_t out;
    ASSERT_EQ(ps__vb_ctrl_decode(buf, len, &out), PS_OK);
    EXPECT_EQ(0, memcmp(&out, &c, sizeof(c)));
}

TEST(Ctrl, RefusalAndHelloRules)
{
    ps__vb_ctrl_t c;
    memset(&c, 0, sizeof(c));
    uint8_t buf[PS__VB_CTRL_LEN];
    size_t len = 0;
    ps__vb_ctrl_t out;

    c.type = PS__VB_MSG_RDV_GRANT;
    c.flags = PS__VB_RDV_REFUSED;
    ASSERT_EQ(ps__vb_ctrl_encode(&c, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(ps__vb_ctrl_decode(buf, len, &out), PS_OK) << "a refusal has no slot";
    c.flags = 0;
    ASSERT_EQ(ps__vb_ctrl_encode(&c, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(ps__vb_ctrl_decode(buf, len, &out), PS_ERR_PROTOCOL) << "a grant needs a slot";
    c.flags = PS__VB_RDV_REFUSED | PS__VB_RDV_REGRANT;
    ASSERT_EQ(ps__vb_ctrl_encode(&c, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(ps__vb_ctrl_decode(buf, len, &out), PS_ERR_PROTOCOL);

    memset(&c, 0, sizeof(c));
    c.type = PS__VB_MSG_HELLO;
    c.node_id = PS_NODE_EMPTY;
    ASSERT_EQ(ps__vb_ctrl_encode(&c, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(ps__vb_ctrl_decode(buf, len, &out), PS_ERR_PROTOCOL) << "hello without an id";
    c.node_id = 11;
    ASSERT_EQ(ps__vb_ctrl_encode(&c, buf, sizeof(buf), &len), PS_OK);
    ASSERT_EQ(ps__vb_ctrl_decode(buf, len, &out), PS_OK);
    EXPECT_EQ(out.node_id, 11);

    memset(&c, 0, sizeof(c));
    c.type = PS__VB_MSG_EAGER;
    EXPECT_EQ(ps__vb_ctrl_encode(&c, buf, sizeof(buf), &len), PS_ERR_INVALID_ARG);
    EXPECT_EQ(ps__vb_ctrl_decode(buf, PS__VB_CTRL_LEN - 1, &out), PS_ERR_PROTOCOL);
}

TEST(Ctrl, SteeredStartAndGrantRoundTrip)
{
    ps__vb_ctrl_t c;
    memset(&c, 0, sizeof(c));
    c.type = PS__VB_MSG_RDV_START;
    c.dir = 3;
    c.flags = PS__VB_RDV_CACHEABLE | PS__VB_RDV_STEER;
    c.token = 9;
    c.key = 77;
    c.meta_len = 300;
    c.app_id = 2;
    c.customer_id = -1;
    c.is_tensor = 1;
    c.num_data = 3;
    c.seg_len[0] = 8;
    c.seg_len[1] = 1 << 20;
    c.seg_len[2] = 4;
    c.data_len = 8 + (1 << 20) + 4;
    uint8_t buf[PS__VB_CTRL_STEER_LEN];
    size_t len = 0;
    ps__vb_ctrl_t out;
    EXPECT_EQ(ps__vb_ctrl_encode(&c, buf, PS__VB_CTRL_LEN, &len), PS_ERR_TOO_LARGE);
    ASSERT_EQ(ps__vb_ctrl_encode(&c, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(len, (size_t)PS__VB_CTRL_STEER_LEN);
    ASSERT_EQ(ps__vb_ctrl_decode(buf, len, &out), PS_OK);
    EXPECT_EQ(0, memcmp(&out, &c, sizeof(c)));
    EXPECT_EQ(ps__vb_ctrl_decode(buf, PS__VB_CTRL_LEN, &out), PS_ERR_PROTOCOL)
        << "the steering fields cut off";

    ps__vb_ctrl_t g;
    memset(&g, 0, sizeof(g));
    g.type = PS__VB_MSG_RDV_GRANT;
    g.flags = PS__VB_RDV_STEER;
    g.slot = 4;
    g.app_id = 2;
    g.customer_id = 5;
    g.steer_seg = 1;
    g.steer_addr = 0x7f0000200000ull;
    g.steer_len = 1 << 20;
    g.steer_rkey = 0x99;
    ASSERT_EQ(ps__vb_ctrl_encode(&g, buf, sizeof(buf), &len), PS_OK);
    ASSERT_EQ(ps__vb_ctrl_decode(buf, len, &out), PS_OK);
    EXPECT_EQ(0, memcmp(&out, &g, sizeof(g)));
}

TEST(Ctrl, SteeringFieldsAreChecked)
{
    uint8_t buf[PS__VB_CTRL_STEER_LEN];
    size_t len = 0;
    ps__vb_ctrl_t out;
    ps__vb_ctrl_t start;
    memset(&start, 0, sizeof(start));
    start.type = PS__VB_MSG_RDV_START;
    start.flags = PS__VB_RDV_STEER;
    start.meta_len = 100;
    start.num_data = 2;
    start.seg_len[0] = 8;
    start.seg_len[1] = 100;
    start.data_len = 108;
    ASSERT_EQ(ps__vb_ctrl_encode(&start, buf, sizeof(buf), &len), PS_OK);
    ASSERT_EQ(ps__vb_ctrl_decode(buf, len, &out), PS_OK);

    ps__vb_ctrl_t c = start;
    c.data_len = 109; // the segments do not add up
    ASSERT_EQ(ps__vb_ctrl_encode(&c, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(ps__vb_ctrl_decode(buf, len, &out), PS_ERR_PROTOCOL);
    c = start;
    c.num_data = 5;
    ASSERT_EQ(ps__vb_ctrl_encode(&c, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(ps__vb_ctrl_decode(buf, len, &out), PS_ERR_PROTOCOL) << "more segments than 4";
    c = start;
    c.num_data = 1; // a length past the count
    ASSERT_EQ(ps__vb_ctrl_encode(&c, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(ps__vb_ctrl_decode(buf, len, &out), PS_ERR_PROTOCOL);
    c = start;
    c.seg_len[0] = UINT64_MAX; // wraps the sum
    c.seg_len[1] = 109;
    c.data_len = 108;
    ASSERT_EQ(ps__vb_ctrl_encode(&c, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(ps__vb_ctrl_decode(buf, len, &out), PS_ERR_PROTOCOL);
    c = start;
    c.is_tensor = 2;
    ASSERT_EQ(ps__vb_ctrl_encode(&c, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(ps__vb_ctrl_decode(buf, len, &out), PS_ERR_PROTOCOL);

    ps__vb_ctrl_t g;
    memset(&g, 0, sizeof(g));
    g.type = PS__VB_MSG_RDV_GRANT;
    g.flags = PS__VB_RDV_STEER;
    g.slot = 4;
    g.steer_seg = 1;
    g.steer_addr = 0x1000;
    g.steer_len = 0; // an empty region
    ASSERT_EQ(ps__vb_ctrl_encode(&g, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(ps__vb_ctrl_decode(buf, len, &out), PS_ERR_PROTOCOL);
    g.steer_len = 64;
    g.steer_seg = 4;
    ASSERT_EQ(ps__vb_ctrl_encode(&g, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(ps__vb_ctrl_decode(buf, len, &out), PS_ERR_PROTOCOL) << "no segment 4";
    g.steer_seg = 1;
    g.flags = PS__VB_RDV_STEER | PS__VB_RDV_REFUSED;
    g.slot = 0;
    ASSERT_EQ(ps__vb_ctrl_encode(&g, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(ps__vb_ctrl_decode(buf, len, &out), PS_ERR_PROTOCOL) << "a refusal steers nothing";

    ps__vb_ctrl_t d;
    memset(&d, 0, sizeof(d));
    d.type = PS__VB_MSG_RDV_DROP;
    d.slot = 3;
    d.flags = PS__VB_RDV_STEER;
    EXPECT_EQ(ps__vb_ctrl_encode(&d, buf, sizeof(buf), &len), PS_ERR_INVALID_ARG);
    d.flags = 0;
    ASSERT_EQ(ps__vb_ctrl_encode(&d, buf, sizeof(buf), &len), PS_OK);
    buf[6] = PS__VB_RDV_STEER;
    memset(buf + PS__VB_CTRL_LEN, 0, PS__VB_CTRL_STEER_LEN - PS__VB_CTRL_LEN);
    EXPECT_EQ(ps__vb_ctrl_decode(buf, sizeof(buf), &out), PS_ERR_PROTOCOL)
        << "only a start or a grant steers";
}

TEST(Hdr, SteeredSegmentOnlyInAGrantedRequest)
{
    ps__vb_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.type = PS__VB_MSG_META;
    h.flags = PS__VB_HDR_STEER;
    h.rma_seg = 1;
    h.nqp = 1;
    uint8_t buf[32];
    size_t len = 0, used = 0;
    ps__vb_hdr_t out;
    ASSERT_EQ(ps__vb_hdr_encode(&h, buf, sizeof(buf), &len), PS_OK);
    ASSERT_EQ(ps__vb_hdr_decode(buf, len, &out, &used), PS_OK);
    EXPECT_EQ(out.flags, PS__VB_HDR_STEER);
    EXPECT_EQ(out.rma_seg, 1);

    ps__vb_hdr_t bad = h;
    bad.type = PS__VB_MSG_EAGER; // nothing was granted
    ASSERT_EQ(ps__vb_hdr_encode(&bad, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(ps__vb_hdr_decode(buf, len, &out, &used), PS_ERR_PROTOCOL);
    bad = h;
    bad.flags |= PS__VB_HDR_RMA;
    bad.rma_slot = 3;
    ASSERT_EQ(ps__vb_hdr_encode(&bad, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(ps__vb_hdr_decode(buf, len, &out, &used), PS_ERR_PROTOCOL) << "and a pull response";
    bad = h;
    bad.rma_seg = 4;
    ASSERT_EQ(ps__vb_hdr_encode(&bad, buf, sizeof(buf), &len), PS_OK);
    EXPECT_EQ(ps__vb_hdr_decode(buf, len, &out, &used), PS_ERR_PROTOCOL) << "no segment 4";
}

TEST(PullDesc, RoundTripInVanData)
{
    ps__vb_pull_desc_t d = {42, 0xabcd, 0x7f00deadb000ull, 1u << 20};
    uint8_t van_data[64];
    uint32_t len = 0;
    ASSERT_EQ(ps__vb_pull_desc_encode(&d, van_data, sizeof(van_data), &len), PS_OK);
    EXPECT_EQ(len, (uint32_t)PS__VB_PULL_DESC_LEN);
    ps__vb_pull_desc_t out;
    ASSERT_EQ(ps__vb_pull_desc_decode(van_data, len, &out), PS_OK);
    EXPECT_EQ(out.slot, 42u);
    EXPECT_EQ(out.rkey, 0xabcdu);
    EXPECT_EQ(out.addr, d.addr);
    EXPECT_EQ(out.len, d.len);
}

TEST(PullDesc, AbsentOrDamaged)
{
    ps__vb_pull_desc_t out;
    EXPECT_EQ(ps__vb_pull_desc_decode(nullptr, 0, &out), PS_ERR_NOT_FOUND);
    uint8_t other[8] = {'P', 'S', 'T', 'C', 'P', 'H', 0, 0};
    EXPECT_EQ(ps__vb_pull_desc_decode(other, sizeof(other), &out), PS_ERR_NOT_FOUND)
        << "another van's data is not ours";
    ps__vb_pull_desc_t d = {1, 2, 0x1000, 64};
    uint8_t vd[64];
    uint32_t len = 0;
    ASSERT_EQ(ps__vb_pull_desc_encode(&d, vd, sizeof(vd), &len), PS_OK);
    EXPECT_EQ(ps__vb_pull_desc_decode(vd, len - 1, &out), PS_ERR_PROTOCOL);
    uint8_t bad[64];
    memcpy(bad, vd, len);
    memset(bad + 16, 0xff, 8); // length wraps the address space
    EXPECT_EQ(ps__vb_pull_desc_decode(bad, len, &out), PS_ERR_PROTOCOL);
    d.slot = 0;
    EXPECT_EQ(ps__vb_pull_desc_encode(&d, vd, sizeof(vd), &len), PS_ERR_INVALID_ARG);
}

// A segment in device memory keeps a message off the eager path (the CPU
// would read it); the remote-write segment does not count, empty ones do not.
TEST(VerbsWire, EagerOnlyForMemoryTheCpuReads)
{
    static char host[64], dev[64], shm[64];
    ps_buf_t *hb = nullptr, *db = nullptr, *sb = nullptr;
    ASSERT_EQ(ps_buf_wrap(host, sizeof(host), nullptr, nullptr, &hb), PS_OK);
    ASSERT_EQ(ps_buf_wrap_mem(dev, sizeof(dev), PS_BUF_MEM_CUDA, 0, nullptr, nullptr, &db), PS_OK);
    ASSERT_EQ(ps_buf_wrap_mem(shm, sizeof(shm), PS_BUF_MEM_SHM, 0, nullptr, nullptr, &sb), PS_OK);
    ps_slice_t s[3];
    ASSERT_EQ(ps_slice_of(hb, 0, sizeof(host), &s[0]), PS_OK);
    ASSERT_EQ(ps_slice_of(sb, 0, sizeof(shm), &s[1]), PS_OK);
    ASSERT_EQ(ps_slice_of(db, 0, sizeof(dev), &s[2]), PS_OK);
    EXPECT_EQ(ps__vb_eager_data_ok(s, 2, -1), 1);
    EXPECT_EQ(ps__vb_eager_data_ok(s, 3, -1), 0);
    EXPECT_EQ(ps__vb_eager_data_ok(s, 3, 2), 1) << "the remote-write segment is not copied";
    ASSERT_EQ(ps_slice_narrow(&s[2], 0, 0), PS_OK);
    EXPECT_EQ(ps__vb_eager_data_ok(s, 3, -1), 1) << "an empty segment has nothing to read";
    for (auto &x : s)
        ps_slice_unref(&x);
    ps_buf_unref(hb);
    ps_buf_unref(db);
    ps_buf_unref(sb);
}

} // namespace
