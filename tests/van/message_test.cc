// ps_msg_t helpers: building a message from slices, releasing it, and the
// one-line description PS_VERBOSE=2 prints.

#include <cstdlib>
#include <cstring>
#include <string>

#include "gtest/gtest.h"

extern "C" {
#include "ps/base/buffer.h"
#include "ps/net/codec/message.h"
#include "ps/net/message.h"
}

namespace {

TEST(Message, InitSetsUpstreamEmptyMarkers)
{
    ps_msg_t m;
    memset(&m, 0xab, sizeof(m));
    ps_msg_init(&m);
    EXPECT_EQ(m.num_data, 0u);
    EXPECT_EQ(m.nodes, nullptr);
    EXPECT_EQ(m.meta.sender, PS_NODE_EMPTY);
    EXPECT_EQ(m.meta.recver, PS_NODE_EMPTY);
    EXPECT_EQ(m.meta.timestamp, PS_NODE_EMPTY);
    EXPECT_EQ(m.meta.data_size, 0u);
    EXPECT_FALSE(ps_meta_is_control(&m.meta));
}

TEST(Message, AddDataTakesReferencesAndRecordsSizesAndTypes)
{
    ps_slice_t a, b;
    ASSERT_EQ(ps_slice_alloc(100, 0, &a), PS_OK);
    ASSERT_EQ(ps_slice_alloc(28, 0, &b), PS_OK);
    ps_msg_t m;
    ps_msg_init(&m);
    ASSERT_EQ(ps_msg_add_data(&m, &a, PS_DATA_UINT64), PS_OK);
    ASSERT_EQ(ps_msg_add_data(&m, &b, PS_DATA_FLOAT), PS_OK);
    EXPECT_EQ(ps_buf_refcount(a.buf), 2u);
    EXPECT_EQ(m.num_data, 2u);
    EXPECT_EQ(m.meta.data_size, 128u);
    EXPECT_EQ(m.meta.num_data_types, 2u);
    EXPECT_EQ(m.meta.data_types[0], PS_DATA_UINT64);
    EXPECT_EQ(m.meta.data_types[1], PS_DATA_FLOAT);
    EXPECT_EQ(ps_msg_data_bytes(&m), 128u);
    EXPECT_EQ(ps_slice_ptr(&m.data[0]), ps_slice_ptr(&a)); // no copy
    ASSERT_EQ(ps_msg_add_data(&m, &a, PS_DATA_CHAR), PS_OK);
    ASSERT_EQ(ps_msg_add_data(&m, &b, PS_DATA_CHAR), PS_OK);
    EXPECT_EQ(ps_msg_add_data(&m, &a, PS_DATA_CHAR), PS_ERR_TOO_LARGE);
    EXPECT_EQ(m.num_data, static_cast<uint32_t>(PS_MSG_MAX_DATA));
    EXPECT_EQ(ps_msg_add_data(nullptr, &a, PS_DATA_CHAR), PS_ERR_INVALID_ARG);
    ps_msg_release(&m);
    EXPECT_EQ(m.num_data, 0u);
    EXPECT_EQ(ps_buf_refcount(a.buf), 1u);
    EXPECT_EQ(ps_buf_refcount(b.buf), 1u);
    ps_msg_release(&m); // twice is harmless
    ps_slice_unref(&a);
    ps_slice_unref(&b);
}

TEST(Message, LendDataRecordsTheSegmentWithoutAReference)
{
    ps_slice_t a;
    ASSERT_EQ(ps_slice_alloc(64, 0, &a), PS_OK);
    ps_msg_t m;
    ps_msg_init(&m);
    ASSERT_EQ(ps_msg_lend_data(&m, &a, PS_DATA_INT32), PS_OK);
    EXPECT_EQ(ps_buf_refcount(a.buf), 1u); // lent: the caller's reference only
    EXPECT_EQ(m.num_data, 1u);
    EXPECT_EQ(m.meta.data_size, 64u);
    EXPECT_EQ(m.meta.num_data_types, 1u);
    EXPECT_EQ(m.meta.data_types[0], PS_DATA_INT32);
    EXPECT_EQ(ps_slice_ptr(&m.data[0]), ps_slice_ptr(&a));
    // Mixed with referenced segments, up to the same limit.
    ASSERT_EQ(ps_msg_add_data(&m, &a, PS_DATA_CHAR), PS_OK);
    EXPECT_EQ(ps_buf_refcount(a.buf), 2u);
    ASSERT_EQ(ps_msg_lend_data(&m, &a, PS_DATA_CHAR), PS_OK);
    ASSERT_EQ(ps_msg_lend_data(&m, &a, PS_DATA_CHAR), PS_OK);
    EXPECT_EQ(ps_msg_lend_data(&m, &a, PS_DATA_CHAR), PS_ERR_TOO_LARGE);
    EXPECT_EQ(ps_msg_lend_data(nullptr, &a, PS_DATA_CHAR), PS_ERR_INVALID_ARG);
    EXPECT_EQ(ps_msg_lend_data(&m, nullptr, PS_DATA_CHAR), PS_ERR_INVALID_ARG);
    ps_slice_unref(&m.data[1]); // the one reference the message took
    ps_slice_unref(&a);
}

TEST(Message, ReleaseFreesAnOwnedNodeListAndBody)
{
    ps_msg_t m;
    ps_msg_init(&m);
    // One allocation holding two nodes and a body, as the TCP van delivers.
    size_t bytes = 2 * sizeof(ps_node_t) + 5;
    uint8_t *block = static_cast<uint8_t *>(malloc(bytes));
    ASSERT_NE(block, nullptr);
    memcpy(block + 2 * sizeof(ps_node_t), "body", 5);
    m.nodes = reinterpret_cast<ps_node_t *>(block);
    m.num_nodes = 2;
    m.nodes_owned = 1;
    m.meta.control.cmd = PS_CTRL_ADD_NODE;
    m.meta.control.nodes = m.nodes;
    m.meta.control.num_nodes = 2;
    m.meta.body = block + 2 * sizeof(ps_node_t);
    m.meta.body_len = 5;
    ps_msg_release(&m); // asan reports a leak if this does not free it
    EXPECT_EQ(m.nodes, nullptr);
    EXPECT_EQ(m.meta.control.nodes, nullptr);
    EXPECT_EQ(m.meta.body, nullptr);
}

TEST(Message, DescribeSaysWhatTheMessageIs)
{
    ps_slice_t a;
    ASSERT_EQ(ps_slice_alloc(4096, 0, &a), PS_OK);
    ps_msg_t m;
    ps_msg_init(&m);
    m.meta.request = true;
    m.meta.push = true;
    m.meta.app_id = 0;
    m.meta.timestamp = 17;
    m.meta.sender = 9;
    m.meta.recver = 8;
    m.meta.key = 8;
    ASSERT_EQ(ps_msg_add_data(&m, &a, PS_DATA_FLOAT), PS_OK);
    char buf[256];
    int n = ps_msg_describe(&m, buf, sizeof(buf));
    EXPECT_EQ(n, static_cast<int>(strlen(buf)));
    EXPECT_EQ(std::string(buf), "request push app 0 ts 17 from 9 to 8 key 8 1 seg 4096b");
    // Truncation behaves like snprintf: the full length is returned.
    char small[8];
    EXPECT_EQ(ps_msg_describe(&m, small, sizeof(small)), n);
    EXPECT_EQ(std::string(small), std::string(buf).substr(0, 7));
    ps_msg_release(&m);

    ps_msg_init(&m);
    m.meta.control.cmd = PS_CTRL_BARRIER;
    m.meta.control.barrier_group = PS_GROUP_ALL;
    m.meta.request = true;
    m.meta.sender = 9;
    m.meta.recver = PS_SCHEDULER_ID;
    ps_msg_describe(&m, buf, sizeof(buf));
    EXPECT_EQ(std::string(buf), "control barrier from 9 to 1 group 7 request");
    ps_msg_init(&m);
    m.meta.request = false;
    m.meta.pull = true;
    ps_msg_describe(&m, buf, sizeof(buf));
    EXPECT_EQ(std::string(buf), "response pull app 32767 ts 32767 from - to - key 0 0 seg 0b");
    ps_slice_unref(&a);
}

} // namespace
