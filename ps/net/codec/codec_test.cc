#include "ps/net/codec/codec.h"

#include <stdint.h>
#include <string.h>

#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ps/base/log.h"
#include "ps/base/status.h"
#include "ps/net/codec/frame.h"
#include "ps/net/codec/message.h"

namespace {

class Codec : public ::testing::Test {
 protected:
  // Rejections are logged as warnings; the random tests make many.
  void SetUp() override { ps_log_set_level(PS_LOG_ERROR); }
  void TearDown() override { ps_log_init_from_env(); }
};

const uint8_t kBody[] = "the body: bytes \x00\x01\xff that are never copied";

// Every field of a data message set to a value other than its default.
void FillDataMeta(ps_meta_t *m) {
  ps_meta_init(m);
  m->head = -3;
  m->app_id = 7;
  m->customer_id = 11;
  m->timestamp = 123456;
  m->sender = 9;
  m->recver = 8;
  m->request = true;
  m->push = true;
  m->pull = true;
  m->simple_app = true;
  m->body = kBody;
  m->body_len = sizeof(kBody);
  m->num_data_types = 3;
  m->data_types[0] = PS_DATA_UINT64;
  m->data_types[1] = PS_DATA_BFLOAT16;
  m->data_types[2] = PS_DATA_INT32;
  m->src_dev_type = PS_DEV_GPU;
  m->src_dev_id = 5;
  m->dst_dev_type = PS_DEV_CPU;
  m->dst_dev_id = -1;
  m->data_size = (1ull << 40) + 17;
  m->key = UINT64_MAX - 1;
  m->addr = 0x7f12345678abull;
  m->val_len = 1ull << 33;
  m->option = static_cast<int32_t>(0x80001234u);  // an rkey with the top bit set
  m->sid = 424242;
  m->priority = -2;
  m->is_tensor = true;
  m->dtype = -7;
  m->ndim = PS_META_MAX_SHAPE;
  for (int i = 0; i < PS_META_MAX_SHAPE; i++) m->shape[i] = (i % 2 ? -1 : 1) * (INT64_C(1) << (7 * i));
  m->request_trace = {1, 2, 3, 4, UINT64_MAX};
  m->response_trace = {10, 20, 30, 40, 50};
  m->num_slave_qp_counters = PS_META_MAX_SLAVE_QP;
  for (int i = 0; i < PS_META_MAX_SLAVE_QP; i++) m->slave_qp_counter[i] = 1000u * i + 1;
  m->slave_qp_num = 2;
  m->van_data_len = PS_META_VAN_DATA_MAX;
  for (int i = 0; i < PS_META_VAN_DATA_MAX; i++) m->van_data[i] = static_cast<uint8_t>(255 - i);
}

// A node with every field at its maximum size.
void FillMaxNode(ps_node_t *n, int i) {
  ps_node_init(n);
  n->role = static_cast<ps_role_t>(i % 4);
  n->id = ps_worker_rank_to_id(i);
  n->customer_id = i;
  memset(n->hostname, 'a' + i % 26, PS_NODE_HOSTNAME_MAX - 1);
  n->hostname[PS_NODE_HOSTNAME_MAX - 1] = '\0';
  n->num_ports = PS_NODE_MAX_PORTS;
  for (int p = 0; p < PS_NODE_MAX_PORTS; p++) {
    n->ports[p] = 10000 + p + i;
    n->dev_types[p] = static_cast<ps_device_type_t>(p % PS_DEV_TYPE_COUNT);
    n->dev_ids[p] = p - 1;
  }
  n->is_recovery = i % 2;
  n->endpoint_name_len = PS_NODE_ENDPOINT_MAX;
  for (int b = 0; b < PS_NODE_ENDPOINT_MAX; b++) n->endpoint_name[b] = static_cast<uint8_t>(b ^ i);
  n->aux_id = i;
}

std::vector<uint8_t> Encode(const ps_meta_t &m) {
  size_t size = 0, len = 0;
  EXPECT_EQ(ps_meta_encoded_size(&m, &size), PS_OK);
  std::vector<uint8_t> buf(size + 1);
  EXPECT_EQ(ps_meta_encode(&m, buf.data(), buf.size(), &len), PS_OK);
  EXPECT_EQ(len, size);
  buf.resize(len);
  return buf;
}

TEST_F(Codec, DataMessageRoundTripsEveryField) {
  ps_meta_t in, out;
  FillDataMeta(&in);
  std::vector<uint8_t> wire = Encode(in);
  memset(&out, 0, sizeof(out));
  ASSERT_EQ(ps_meta_decode(wire.data(), wire.size(), &out, nullptr, 0), PS_OK);
  EXPECT_TRUE(ps_meta_equal(&in, &out));

  // Spelled out too, so that a bug in ps_meta_equal cannot hide one.
  EXPECT_EQ(out.head, -3);
  EXPECT_EQ(out.app_id, 7);
  EXPECT_EQ(out.customer_id, 11);
  EXPECT_EQ(out.timestamp, 123456);
  EXPECT_EQ(out.sender, 9);
  EXPECT_EQ(out.recver, 8);
  EXPECT_TRUE(out.request && out.push && out.pull && out.simple_app);
  EXPECT_EQ(out.num_data_types, 3u);
  EXPECT_EQ(out.data_types[1], PS_DATA_BFLOAT16);
  EXPECT_EQ(out.src_dev_type, PS_DEV_GPU);
  EXPECT_EQ(out.src_dev_id, 5);
  EXPECT_EQ(out.dst_dev_type, PS_DEV_CPU);
  EXPECT_EQ(out.dst_dev_id, -1);
  EXPECT_EQ(out.data_size, (1ull << 40) + 17);
  EXPECT_EQ(out.key, UINT64_MAX - 1);
  EXPECT_EQ(out.addr, 0x7f12345678abull);
  EXPECT_EQ(out.val_len, 1ull << 33);
  EXPECT_EQ(static_cast<uint32_t>(out.option), 0x80001234u);
  EXPECT_EQ(out.sid, 424242);
  EXPECT_EQ(out.priority, -2);
  EXPECT_TRUE(out.is_tensor);
  EXPECT_EQ(out.dtype, -7);
  ASSERT_EQ(out.ndim, 8u);
  EXPECT_EQ(out.shape[7], -(INT64_C(1) << 49));
  EXPECT_EQ(out.request_trace.process, UINT64_MAX);
  EXPECT_EQ(out.response_trace.pre_start, 10u);
  EXPECT_EQ(out.response_trace.process, 50u);
  EXPECT_EQ(out.num_slave_qp_counters, 8u);
  EXPECT_EQ(out.slave_qp_counter[7], 7001u);
  EXPECT_EQ(out.slave_qp_num, 2u);
  ASSERT_EQ(out.van_data_len, 64u);
  EXPECT_EQ(out.van_data[0], 255);
  EXPECT_EQ(out.van_data[63], 192);
  EXPECT_EQ(out.control.cmd, PS_CTRL_EMPTY);
  EXPECT_EQ(out.control.num_nodes, 0u);
  EXPECT_EQ(out.control.nodes, nullptr);

  // Zero-copy: the body points into the decoded buffer.
  ASSERT_EQ(out.body_len, sizeof(kBody));
  EXPECT_GE(out.body, wire.data());
  EXPECT_LE(out.body + out.body_len, wire.data() + wire.size());
  EXPECT_EQ(memcmp(out.body, kBody, sizeof(kBody)), 0);
}

TEST_F(Codec, EveryFieldChangesTheEncoding) {
  // Each field alone, from the all-zero meta, yields a different non-empty
  // encoding: no field is silently dropped by meta_to_wire.
  ps_meta_t full, zero;
  FillDataMeta(&full);
  memset(&zero, 0, sizeof(zero));
  EXPECT_TRUE(Encode(zero).empty());
  std::vector<std::vector<uint8_t>> seen;
#define ONE_FIELD(_stmt)                                   \
  do {                                                     \
    ps_meta_t m;                                           \
    memset(&m, 0, sizeof(m));                              \
    _stmt;                                                 \
    std::vector<uint8_t> w = Encode(m);                    \
    EXPECT_FALSE(w.empty()) << #_stmt;                     \
    for (const auto &s : seen) EXPECT_NE(s, w) << #_stmt;  \
    seen.push_back(w);                                     \
    ps_meta_t d;                                           \
    ASSERT_EQ(ps_meta_decode(w.data(), w.size(), &d, nullptr, 0), PS_OK); \
    EXPECT_TRUE(ps_meta_equal(&m, &d)) << #_stmt;          \
  } while (0)
  ONE_FIELD(m.head = full.head);
  ONE_FIELD(m.app_id = full.app_id);
  ONE_FIELD(m.customer_id = full.customer_id);
  ONE_FIELD(m.timestamp = full.timestamp);
  ONE_FIELD(m.sender = full.sender);
  ONE_FIELD(m.recver = full.recver);
  ONE_FIELD(m.request = true);
  ONE_FIELD(m.push = true);
  ONE_FIELD(m.pull = true);
  ONE_FIELD(m.simple_app = true);
  ONE_FIELD((m.body = full.body, m.body_len = full.body_len));
  ONE_FIELD((m.num_data_types = 1, m.data_types[0] = PS_DATA_FLOAT16));
  ONE_FIELD(m.src_dev_type = PS_DEV_GPU);
  ONE_FIELD(m.src_dev_id = 3);
  ONE_FIELD(m.dst_dev_type = PS_DEV_GPU);
  ONE_FIELD(m.dst_dev_id = 3);
  ONE_FIELD(m.data_size = 5);
  ONE_FIELD(m.key = 5);
  ONE_FIELD(m.addr = 5);
  ONE_FIELD(m.val_len = 5);
  ONE_FIELD(m.option = 5);
  ONE_FIELD(m.sid = 5);
  ONE_FIELD(m.priority = 5);
  ONE_FIELD(m.control.cmd = PS_CTRL_ACK);
  ONE_FIELD(m.control.barrier_group = 5);
  ONE_FIELD(m.control.msg_sig = 5);
  ONE_FIELD(m.is_tensor = true);
  ONE_FIELD(m.dtype = 5);
  ONE_FIELD((m.ndim = 1, m.shape[0] = 5));
  ONE_FIELD(m.request_trace.pre_start = 5);
  ONE_FIELD(m.request_trace.start = 5);
  ONE_FIELD(m.request_trace.postsend = 5);
  ONE_FIELD(m.request_trace.postrecv = 5);
  ONE_FIELD(m.request_trace.process = 5);
  ONE_FIELD(m.response_trace.process = 5);
  ONE_FIELD((m.num_slave_qp_counters = 1, m.slave_qp_counter[0] = 5));
  ONE_FIELD(m.slave_qp_num = 5);
  ONE_FIELD((m.van_data_len = 1, m.van_data[0] = 5));
#undef ONE_FIELD
}

TEST_F(Codec, DefaultMetaRoundTrips) {
  ps_meta_t in, out;
  ps_meta_init(&in);
  std::vector<uint8_t> wire = Encode(in);
  ASSERT_EQ(ps_meta_decode(wire.data(), wire.size(), &out, nullptr, 0), PS_OK);
  EXPECT_TRUE(ps_meta_equal(&in, &out));
  EXPECT_EQ(out.app_id, PS_NODE_EMPTY);
}

TEST_F(Codec, ControlMessageWithMaxSizeNodesRoundTrips) {
  const int kNodes = 300;
  std::vector<ps_node_t> nodes(kNodes), got(kNodes);
  for (int i = 0; i < kNodes; i++) FillMaxNode(&nodes[i], i);
  ps_meta_t in, out;
  ps_meta_init(&in);
  in.control.cmd = PS_CTRL_ADD_NODE;
  in.control.nodes = nodes.data();
  in.control.num_nodes = kNodes;
  in.control.barrier_group = PS_GROUP_ALL;
  in.control.msg_sig = 0xfedcba9876543210ull;
  std::vector<uint8_t> wire = Encode(in);
  EXPECT_LE(wire.size(), PS_FRAME_DEFAULT_MAX_META);

  ASSERT_EQ(ps_meta_decode(wire.data(), wire.size(), &out, got.data(), got.size()), PS_OK);
  EXPECT_TRUE(ps_meta_is_control(&out));
  EXPECT_EQ(out.control.nodes, got.data());
  ASSERT_EQ(out.control.num_nodes, static_cast<uint32_t>(kNodes));
  EXPECT_EQ(out.control.cmd, PS_CTRL_ADD_NODE);
  EXPECT_EQ(out.control.barrier_group, PS_GROUP_ALL);
  EXPECT_EQ(out.control.msg_sig, 0xfedcba9876543210ull);
  EXPECT_TRUE(ps_meta_equal(&in, &out));
  const ps_node_t &n = got[kNodes - 1];
  EXPECT_EQ(strlen(n.hostname), static_cast<size_t>(PS_NODE_HOSTNAME_MAX - 1));
  EXPECT_EQ(n.num_ports, static_cast<uint32_t>(PS_NODE_MAX_PORTS));
  EXPECT_EQ(n.ports[31], 10000 + 31 + kNodes - 1);
  EXPECT_EQ(n.dev_types[2], PS_DEV_GPU);
  EXPECT_EQ(n.dev_ids[0], -1);
  EXPECT_EQ(n.endpoint_name_len, static_cast<uint32_t>(PS_NODE_ENDPOINT_MAX));
  EXPECT_EQ(n.endpoint_name[255], static_cast<uint8_t>(255 ^ (kNodes - 1)));
  EXPECT_EQ(n.aux_id, kNodes - 1);
  EXPECT_EQ(n.role, static_cast<ps_role_t>((kNodes - 1) % 4));
  EXPECT_TRUE(n.is_recovery);

  // One slot short, or none at all: refused, and the meta is untouched.
  ps_meta_t untouched;
  memset(&untouched, 0x5a, sizeof(untouched));
  ps_meta_t probe = untouched;
  EXPECT_EQ(ps_meta_decode(wire.data(), wire.size(), &probe, got.data(), kNodes - 1),
            PS_ERR_TOO_LARGE);
  EXPECT_EQ(memcmp(&probe, &untouched, sizeof(probe)), 0);
  EXPECT_EQ(ps_meta_decode(wire.data(), wire.size(), &probe, nullptr, 0), PS_ERR_TOO_LARGE);
}

TEST_F(Codec, EveryControlCommandRoundTrips) {
  ps_node_t node, got;
  FillMaxNode(&node, 1);
  strcpy(node.hostname, "10.0.0.1");
  for (int c = 0; c < PS_CTRL_COUNT; c++) {
    ps_meta_t in, out;
    ps_meta_init(&in);
    in.control.cmd = static_cast<ps_control_cmd_t>(c);
    in.control.nodes = &node;
    in.control.num_nodes = 1;
    std::vector<uint8_t> wire = Encode(in);
    ASSERT_EQ(ps_meta_decode(wire.data(), wire.size(), &out, &got, 1), PS_OK) << c;
    EXPECT_EQ(out.control.cmd, c);
    EXPECT_TRUE(ps_meta_equal(&in, &out)) << c;
    EXPECT_STREQ(got.hostname, "10.0.0.1");
  }
}

TEST_F(Codec, EncodeIntoTooSmallBufferFails) {
  ps_meta_t m;
  FillDataMeta(&m);
  std::vector<uint8_t> wire = Encode(m);
  std::vector<uint8_t> buf(wire.size());
  size_t len = 12345;
  for (size_t cap = 0; cap < wire.size(); cap++) {
    EXPECT_EQ(ps_meta_encode(&m, buf.data(), cap, &len), PS_ERR_TOO_LARGE) << cap;
    EXPECT_EQ(len, 12345u);
  }
  EXPECT_EQ(ps_meta_encode(&m, nullptr, 0, &len), PS_ERR_TOO_LARGE);
  EXPECT_EQ(ps_meta_encode(&m, buf.data(), buf.size(), &len), PS_OK);
  EXPECT_EQ(buf, wire);
}

TEST_F(Codec, EncodeRefusesAMetaOutsideTheModel) {
  ps_node_t node;
  FillMaxNode(&node, 0);
  std::vector<void (*)(ps_meta_t *, ps_node_t *)> breakers = {
      [](ps_meta_t *m, ps_node_t *) { m->num_data_types = PS_META_MAX_DATA + 1; },
      [](ps_meta_t *m, ps_node_t *) { m->data_types[0] = static_cast<ps_data_type_t>(14); },
      [](ps_meta_t *m, ps_node_t *) { m->src_dev_type = static_cast<ps_device_type_t>(3); },
      [](ps_meta_t *m, ps_node_t *) { m->dst_dev_type = static_cast<ps_device_type_t>(-1); },
      [](ps_meta_t *m, ps_node_t *) { m->body = nullptr; },
      [](ps_meta_t *m, ps_node_t *) { m->ndim = PS_META_MAX_SHAPE + 1; },
      [](ps_meta_t *m, ps_node_t *) { m->num_slave_qp_counters = PS_META_MAX_SLAVE_QP + 1; },
      [](ps_meta_t *m, ps_node_t *) { m->van_data_len = PS_META_VAN_DATA_MAX + 1; },
      [](ps_meta_t *m, ps_node_t *) { m->control.cmd = static_cast<ps_control_cmd_t>(PS_CTRL_COUNT); },
      [](ps_meta_t *m, ps_node_t *) { m->control.nodes = nullptr; },
      [](ps_meta_t *, ps_node_t *n) { n->role = static_cast<ps_role_t>(4); },
      [](ps_meta_t *, ps_node_t *n) { n->hostname[PS_NODE_HOSTNAME_MAX - 1] = 'x'; },
      [](ps_meta_t *, ps_node_t *n) { n->num_ports = PS_NODE_MAX_PORTS + 1; },
      [](ps_meta_t *, ps_node_t *n) { n->dev_types[3] = static_cast<ps_device_type_t>(9); },
      [](ps_meta_t *, ps_node_t *n) { n->endpoint_name_len = PS_NODE_ENDPOINT_MAX + 1; },
  };
  uint8_t buf[4096];
  for (size_t i = 0; i < breakers.size(); i++) {
    ps_meta_t m;
    ps_node_t n = node;
    FillDataMeta(&m);
    m.control.cmd = PS_CTRL_ADD_NODE;
    m.control.nodes = &n;
    m.control.num_nodes = 1;
    size_t size = 777, len = 777;
    breakers[i](&m, &n);
    EXPECT_EQ(ps_meta_encoded_size(&m, &size), PS_ERR_INVALID_ARG) << i;
    EXPECT_EQ(ps_meta_encode(&m, buf, sizeof(buf), &len), PS_ERR_INVALID_ARG) << i;
    EXPECT_EQ(size, 777u);
    EXPECT_EQ(len, 777u);
  }
}

// Hand-made wire bytes that nanopb accepts but the model does not.
std::vector<uint8_t> Bytes(std::initializer_list<int> b) {
  std::vector<uint8_t> v;
  for (int x : b) v.push_back(static_cast<uint8_t>(x));
  return v;
}

TEST_F(Codec, DecodeRejectsValuesOutsideTheModel) {
  struct Case {
    const char *what;
    std::vector<uint8_t> wire;
    ps_status_t want;
  };
  std::vector<uint8_t> many_types = {0x52, 65};  // field 10, packed, 65 entries
  for (int i = 0; i < 65; i++) many_types.push_back(1);
  std::vector<uint8_t> shape9 = {0xda, 0x01, 9};  // field 27, packed, 9 entries
  for (int i = 0; i < 9; i++) shape9.push_back(2);
  std::vector<uint8_t> van65 = {0x82, 0x02, 65};  // field 32, 65 bytes
  van65.resize(3 + 65, 0xee);
  std::vector<Case> cases = {
      {"src device type 7", Bytes({0x90, 0x01, 7}), PS_ERR_PROTOCOL},
      {"dst device type -1", Bytes({0xa0, 0x01, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}),
       PS_ERR_PROTOCOL},
      {"data type 99", Bytes({0x50, 99}), PS_ERR_PROTOCOL},
      {"65 data types", many_types, PS_ERR_PROTOCOL},
      {"control cmd 50", Bytes({0xc2, 0x01, 2, 0x08, 50}), PS_ERR_PROTOCOL},
      {"dtype 300", Bytes({0xd0, 0x01, 0xd8, 0x04}), PS_ERR_PROTOCOL},
      {"9 dims", shape9, PS_ERR_PROTOCOL},
      {"65 bytes of van data", van65, PS_ERR_PROTOCOL},
      {"body as a varint", Bytes({0x88, 0x01, 5}), PS_ERR_PROTOCOL},
      {"body as a fixed32", Bytes({0x8d, 0x01, 'a', 'b', 'c', 'd'}), PS_ERR_PROTOCOL},
      {"node as a fixed32", Bytes({0xc2, 0x01, 5, 0x15, 0x08, 0x01, 0x10, 0x02}), PS_ERR_PROTOCOL},
      {"node role 4", Bytes({0xc2, 0x01, 4, 0x12, 2, 0x08, 4}), PS_ERR_PROTOCOL},
      {"hostname with a NUL", Bytes({0xc2, 0x01, 7, 0x12, 5, 0x22, 3, 'a', 0, 'b'}), PS_ERR_PROTOCOL},
      {"2 ports, 1 device", Bytes({0xc2, 0x01, 12, 0x12, 10, 0x2a, 2, 2, 4, 0x32, 1, 1, 0x3a, 1, 0}),
       PS_ERR_PROTOCOL},
      {"node device type 3", Bytes({0xc2, 0x01, 11, 0x12, 9, 0x2a, 1, 2, 0x32, 1, 3, 0x3a, 1, 0}),
       PS_ERR_PROTOCOL},
      {"truncated varint", Bytes({0x08, 0x80}), PS_ERR_PROTOCOL},
      {"length past the end", Bytes({0x8a, 0x01, 10, 1, 2}), PS_ERR_PROTOCOL},
      {"field number 0", Bytes({0x00, 0x01}), PS_ERR_PROTOCOL},
      {"wire type 7", Bytes({0x0f}), PS_ERR_PROTOCOL},
      {"node when the array is empty", Bytes({0xc2, 0x01, 2, 0x12, 0}), PS_ERR_TOO_LARGE},
  };
  for (const Case &c : cases) {
    ps_meta_t m;
    memset(&m, 0x77, sizeof(m));
    ps_meta_t before = m;
    ps_node_t nodes[1];
    size_t cap = strcmp(c.what, "node when the array is empty") == 0 ? 0 : 1;
    EXPECT_EQ(ps_meta_decode(c.wire.data(), c.wire.size(), &m, nodes, cap), c.want) << c.what;
    EXPECT_EQ(memcmp(&m, &before, sizeof(m)), 0) << c.what;
  }
  // The same bytes with the values in range are fine (the cases are not
  // rejected for some other reason).
  ps_meta_t m;
  ps_node_t nodes[1];
  auto ok = Bytes({0xc2, 0x01, 11, 0x12, 9, 0x2a, 1, 2, 0x32, 1, 2, 0x3a, 1, 0});
  ASSERT_EQ(ps_meta_decode(ok.data(), ok.size(), &m, nodes, 1), PS_OK);
  EXPECT_EQ(m.control.num_nodes, 1u);
  EXPECT_EQ(nodes[0].ports[0], 1);
  EXPECT_EQ(nodes[0].dev_types[0], PS_DEV_GPU);
  auto dtype = Bytes({0xd0, 0x01, 0xfd, 0x01});  // zigzag 253 = -127
  ASSERT_EQ(ps_meta_decode(dtype.data(), dtype.size(), &m, nullptr, 0), PS_OK);
  EXPECT_EQ(m.dtype, -127);
}

TEST_F(Codec, EmptyInputIsTheZeroMeta) {
  ps_meta_t m, zero;
  memset(&zero, 0, sizeof(zero));
  ASSERT_EQ(ps_meta_decode(nullptr, 0, &m, nullptr, 0), PS_OK);
  EXPECT_TRUE(ps_meta_equal(&m, &zero));
  EXPECT_EQ(ps_meta_decode(nullptr, 5, &m, nullptr, 0), PS_ERR_INVALID_ARG);
}

TEST_F(Codec, TruncatedInputNeverDecodesToTheOriginal) {
  ps_node_t nodes[3], got[3];
  for (int i = 0; i < 3; i++) FillMaxNode(&nodes[i], i);
  ps_meta_t in;
  FillDataMeta(&in);
  in.control.cmd = PS_CTRL_BARRIER;
  in.control.nodes = nodes;
  in.control.num_nodes = 3;
  std::vector<uint8_t> wire = Encode(in);
  for (size_t len = 0; len < wire.size(); len++) {
    // A copy of exactly len bytes, so that ASan sees any read past the end.
    std::vector<uint8_t> cut(wire.begin(), wire.begin() + len);
    ps_meta_t out;
    ps_status_t s = ps_meta_decode(cut.data(), cut.size(), &out, got, 3);
    if (s == PS_OK) {
      // Cut at a field boundary: a valid meta, but not the whole one.
      EXPECT_FALSE(ps_meta_equal(&in, &out)) << len;
    } else {
      EXPECT_EQ(s, PS_ERR_PROTOCOL) << len;
    }
  }
}

// Decoded metas re-encode to bytes that decode to the same meta.
void CheckRoundTrip(const ps_meta_t &m) {
  size_t size = 0, len = 0;
  ASSERT_EQ(ps_meta_encoded_size(&m, &size), PS_OK);
  std::vector<uint8_t> buf(size);
  ASSERT_EQ(ps_meta_encode(&m, buf.data(), buf.size(), &len), PS_OK);
  ASSERT_EQ(len, size);
  std::vector<ps_node_t> nodes(m.control.num_nodes + 1);
  ps_meta_t again;
  ASSERT_EQ(ps_meta_decode(buf.data(), len, &again, nodes.data(), nodes.size()), PS_OK);
  EXPECT_TRUE(ps_meta_equal(&m, &again));
}

TEST_F(Codec, RandomBytesAreRejectedOrRoundTrip) {
  std::mt19937_64 rng(20240601);
  ps_node_t nodes[4];
  int accepted = 0;
  for (int iter = 0; iter < 20000; iter++) {
    std::vector<uint8_t> bytes(rng() % 300);
    for (auto &b : bytes) b = static_cast<uint8_t>(rng());
    ps_meta_t m;
    ps_status_t s = ps_meta_decode(bytes.data(), bytes.size(), &m, nodes, 4);
    ASSERT_TRUE(s == PS_OK || s == PS_ERR_PROTOCOL || s == PS_ERR_TOO_LARGE) << s;
    if (s == PS_OK) {
      accepted++;
      CheckRoundTrip(m);
    }
  }
  // Some short inputs parse; the test exercises both branches.
  EXPECT_GT(accepted, 0);
}

TEST_F(Codec, MutatedMessagesAreRejectedOrRoundTrip) {
  ps_node_t nodes[2], got[2];
  FillMaxNode(&nodes[0], 0);
  FillMaxNode(&nodes[1], 1);
  strcpy(nodes[1].hostname, "short");
  nodes[1].num_ports = 2;
  ps_meta_t in;
  FillDataMeta(&in);
  in.control.cmd = PS_CTRL_ADD_NODE;
  in.control.nodes = nodes;
  in.control.num_nodes = 2;
  const std::vector<uint8_t> wire = Encode(in);
  std::mt19937_64 rng(7);
  int accepted = 0, rejected = 0;
  for (int iter = 0; iter < 20000; iter++) {
    std::vector<uint8_t> bytes = wire;
    int flips = 1 + rng() % 4;
    for (int f = 0; f < flips; f++) bytes[rng() % bytes.size()] = static_cast<uint8_t>(rng());
    if (rng() % 4 == 0) bytes.resize(rng() % bytes.size());
    ps_meta_t m;
    ps_status_t s = ps_meta_decode(bytes.data(), bytes.size(), &m, got, 2);
    ASSERT_TRUE(s == PS_OK || s == PS_ERR_PROTOCOL || s == PS_ERR_TOO_LARGE) << s;
    if (s == PS_OK) {
      accepted++;
      CheckRoundTrip(m);
    } else {
      rejected++;
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rejected, 0);
}

TEST_F(Codec, FrameCarriesMetaAndDataUnchanged) {
  ps_meta_t in, out;
  FillDataMeta(&in);
  std::vector<uint8_t> meta = Encode(in);
  std::vector<std::string> data = {"keys....", "", std::string(1000, 'v')};
  uint64_t lens[3];
  for (int i = 0; i < 3; i++) lens[i] = data[i].size();
  uint8_t header[PS_FRAME_MAX_HEADER_LEN];
  size_t hlen = 0;
  ASSERT_EQ(ps_frame_header_build(0, static_cast<uint32_t>(meta.size()), lens, 3, nullptr,
                                  header, sizeof(header), &hlen),
            PS_OK);
  std::vector<uint8_t> frame(header, header + hlen);
  frame.insert(frame.end(), meta.begin(), meta.end());
  for (const auto &d : data) frame.insert(frame.end(), d.begin(), d.end());

  ps_frame_view_t view;
  size_t need = 0;
  ASSERT_EQ(ps_frame_parse(frame.data(), frame.size(), nullptr, &view, &need), PS_OK);
  EXPECT_EQ(view.hdr.frame_len, frame.size());
  ASSERT_EQ(ps_meta_decode(view.meta, view.hdr.meta_len, &out, nullptr, 0), PS_OK);
  EXPECT_TRUE(ps_meta_equal(&in, &out));
  for (int i = 0; i < 3; i++) {
    EXPECT_EQ(std::string(reinterpret_cast<const char *>(view.data[i]), view.hdr.data_len[i]),
              data[i]);
  }
}

}  // namespace

TEST(CodecGrow, GrowsTheNodeArrayUntilTheListFits) {
  std::vector<ps_node_t> nodes(40);
  ps_meta_t meta;
  ps_meta_init(&meta);
  meta.control.cmd = PS_CTRL_ADD_NODE;
  for (size_t i = 0; i < nodes.size(); ++i) {
    ps_node_init(&nodes[i]);
    nodes[i].id = 8 + static_cast<int>(i);
    snprintf(nodes[i].hostname, sizeof(nodes[i].hostname), "host-%zu", i);
  }
  meta.control.nodes = nodes.data();
  meta.control.num_nodes = static_cast<uint32_t>(nodes.size());
  std::vector<uint8_t> buf(64 * 1024);
  size_t len = 0;
  ASSERT_EQ(ps_meta_encode(&meta, buf.data(), buf.size(), &len), PS_OK);

  ps_node_t *scratch = nullptr;
  size_t cap = 0;
  ps_meta_t out;
  ASSERT_EQ(ps_meta_decode_grow(buf.data(), len, &out, &scratch, &cap, 1024), PS_OK);
  EXPECT_GE(cap, nodes.size());
  ASSERT_EQ(out.control.num_nodes, nodes.size());
  EXPECT_EQ(out.control.nodes, scratch);
  EXPECT_STREQ(out.control.nodes[39].hostname, "host-39");

  // A ceiling below the list's length is still refused.
  ps_node_t *small = nullptr;
  size_t small_cap = 0;
  EXPECT_EQ(ps_meta_decode_grow(buf.data(), len, &out, &small, &small_cap, 16), PS_ERR_TOO_LARGE);
  EXPECT_LE(small_cap, 16u);
  free(scratch);
  free(small);
}
