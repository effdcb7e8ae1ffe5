#include "ps/net/codec/message.h"

#include <string.h>

#include <gtest/gtest.h>

TEST(Message, NodeIdsFollowUpstream) {
  EXPECT_EQ(PS_SCHEDULER_ID, 1);
  EXPECT_EQ(ps_server_rank_to_id(0), 8);
  EXPECT_EQ(ps_server_rank_to_id(3), 14);
  EXPECT_EQ(ps_worker_rank_to_id(0), 9);
  EXPECT_EQ(ps_worker_rank_to_id(3), 15);
  for (int r = 0; r < 1000; r++) {
    EXPECT_EQ(ps_id_to_rank(ps_server_rank_to_id(r)), r);
    EXPECT_EQ(ps_id_to_rank(ps_worker_rank_to_id(r)), r);
    EXPECT_EQ(ps_id_to_role(ps_server_rank_to_id(r)), PS_ROLE_SERVER);
    EXPECT_EQ(ps_id_to_role(ps_worker_rank_to_id(r)), PS_ROLE_WORKER);
  }
  // max((id - 8) / 2, 0) for the scheduler and the groups.
  for (int id = 1; id < 8; id++) {
    EXPECT_EQ(ps_id_to_rank(id), 0) << id;
    EXPECT_EQ(ps_id_to_role(id), PS_ROLE_SCHEDULER) << id;
    EXPECT_TRUE(ps_id_is_group(id)) << id;
  }
  EXPECT_FALSE(ps_id_is_group(0));
  EXPECT_FALSE(ps_id_is_group(8));
  EXPECT_EQ(PS_GROUP_SCHEDULER, 1);
  EXPECT_EQ(PS_GROUP_SERVER, 2);
  EXPECT_EQ(PS_GROUP_WORKER, 4);
  EXPECT_EQ(PS_GROUP_ALL, 7);
  EXPECT_EQ(PS_NODE_EMPTY, 32767);
}

TEST(Message, EnumValuesFollowUpstream) {
  EXPECT_EQ(PS_ROLE_SERVER, 0);
  EXPECT_EQ(PS_ROLE_WORKER, 1);
  EXPECT_EQ(PS_ROLE_SCHEDULER, 2);
  EXPECT_EQ(PS_ROLE_JOINT, 3);
  EXPECT_EQ(PS_CTRL_INSTANCE_BARRIER, 9);
  EXPECT_EQ(PS_CTRL_COUNT, PS_CTRL_AUTH + 1);
  EXPECT_EQ(PS_DATA_OTHER, 11);
  EXPECT_EQ(PS_DATA_BFLOAT16, 13);
  EXPECT_EQ(PS_DATA_TYPE_COUNT, PS_DATA_BFLOAT16 + 1);
  EXPECT_EQ(PS_DEV_UNK, 0);
  EXPECT_EQ(PS_DEV_CPU, 1);
  EXPECT_EQ(PS_DEV_GPU, 2);
}

TEST(Message, InitSetsUpstreamDefaults) {
  ps_meta_t m;
  memset(&m, 0xab, sizeof(m));
  ps_meta_init(&m);
  EXPECT_EQ(m.head, PS_NODE_EMPTY);
  EXPECT_EQ(m.app_id, PS_NODE_EMPTY);
  EXPECT_EQ(m.customer_id, PS_NODE_EMPTY);
  EXPECT_EQ(m.timestamp, PS_NODE_EMPTY);
  EXPECT_EQ(m.sender, PS_NODE_EMPTY);
  EXPECT_EQ(m.recver, PS_NODE_EMPTY);
  EXPECT_FALSE(m.request);
  EXPECT_EQ(m.body, nullptr);
  EXPECT_EQ(m.body_len, 0u);
  EXPECT_EQ(m.src_dev_id, -1);
  EXPECT_EQ(m.dst_dev_id, -1);
  EXPECT_EQ(m.control.cmd, PS_CTRL_EMPTY);
  EXPECT_EQ(m.control.nodes, nullptr);
  EXPECT_FALSE(ps_meta_is_control(&m));

  ps_node_t n;
  memset(&n, 0xab, sizeof(n));
  ps_node_init(&n);
  EXPECT_EQ(n.id, PS_NODE_EMPTY);
  EXPECT_EQ(n.aux_id, -1);
  EXPECT_EQ(n.hostname[0], '\0');
  EXPECT_EQ(n.num_ports, 0u);
}

TEST(Message, EqualityLooksAtEveryField) {
  ps_meta_t a, b;
  ps_meta_init(&a);
  ps_meta_init(&b);
  EXPECT_TRUE(ps_meta_equal(&a, &b));
  // Bytes past a count do not matter.
  a.data_types[5] = PS_DATA_FLOAT;
  EXPECT_TRUE(ps_meta_equal(&a, &b));

  b.request_trace.process = 1;
  EXPECT_FALSE(ps_meta_equal(&a, &b));
  ps_meta_init(&b);
  b.van_data_len = 1;
  EXPECT_FALSE(ps_meta_equal(&a, &b));

  // Bodies compare by content, not by pointer.
  const uint8_t x[3] = {1, 2, 3}, y[3] = {1, 2, 3}, z[3] = {1, 2, 4};
  ps_meta_init(&b);
  a.body = x;
  a.body_len = 3;
  b.body = y;
  b.body_len = 3;
  EXPECT_TRUE(ps_meta_equal(&a, &b));
  b.body = z;
  EXPECT_FALSE(ps_meta_equal(&a, &b));

  ps_node_t n1, n2;
  ps_node_init(&n1);
  ps_node_init(&n2);
  strcpy(n1.hostname, "host");
  strcpy(n2.hostname, "host");
  n2.hostname[10] = 'x';  // past the NUL
  EXPECT_TRUE(ps_node_equal(&n1, &n2));
  n2.num_ports = n1.num_ports = 1;
  n2.dev_ids[0] = 3;
  EXPECT_FALSE(ps_node_equal(&n1, &n2));
}

TEST(Message, DataTypeSizesAndNames) {
  EXPECT_EQ(ps_data_type_size(PS_DATA_CHAR), 1u);
  EXPECT_EQ(ps_data_type_size(PS_DATA_INT16), 2u);
  EXPECT_EQ(ps_data_type_size(PS_DATA_FLOAT), 4u);
  EXPECT_EQ(ps_data_type_size(PS_DATA_DOUBLE), 8u);
  EXPECT_EQ(ps_data_type_size(PS_DATA_FLOAT16), 2u);
  EXPECT_EQ(ps_data_type_size(PS_DATA_BFLOAT16), 2u);
  EXPECT_EQ(ps_data_type_size(PS_DATA_OTHER), 0u);
  EXPECT_EQ(ps_data_type_size(static_cast<ps_data_type_t>(99)), 0u);
  for (int t = 0; t < PS_DATA_TYPE_COUNT; t++) {
    EXPECT_STRNE(ps_data_type_str(static_cast<ps_data_type_t>(t)), "unknown") << t;
  }
  for (int c = 0; c < PS_CTRL_COUNT; c++) {
    EXPECT_STRNE(ps_control_cmd_str(static_cast<ps_control_cmd_t>(c)), "unknown") << c;
  }
  EXPECT_STREQ(ps_data_type_str(PS_DATA_BFLOAT16), "bfloat16");
  EXPECT_STREQ(ps_control_cmd_str(PS_CTRL_ADD_NODE), "add_node");
  EXPECT_STREQ(ps_control_cmd_str(static_cast<ps_control_cmd_t>(PS_CTRL_COUNT)), "unknown");
  EXPECT_STREQ(ps_role_str(PS_ROLE_JOINT), "joint");
  EXPECT_STREQ(ps_role_str(static_cast<ps_role_t>(7)), "unknown");
  EXPECT_STREQ(ps_device_type_str(PS_DEV_GPU), "gpu");
  EXPECT_STREQ(ps_device_type_str(static_cast<ps_device_type_t>(-1)), "unknown");
}
