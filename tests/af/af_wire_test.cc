// The AF app's pure pieces: tensor sizes, the tensor meta through the
// codec, the batch header, batch flags, and the server's reorder buffer.
#include <sched.h>
#include <stdint.h>
#include <string.h>

#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ps/app/af.h"
#include "ps/app/af_order.h"
#include "ps/app/af_wire.h"
#include "ps/base/config.h"
#include "ps/net/codec/codec.h"
#include "ps/net/codec/message.h"

namespace {

TEST(AfTensor, BytesOfEachType) {
  int64_t shape[2] = {3, 7168};
  struct {
    int dtype;
    uint64_t size;
  } cases[] = {{PS_AF_UINT8, 1},  {PS_AF_BFLOAT16, 2}, {PS_AF_FLOAT16, 2},
               {PS_AF_FLOAT32, 4}, {PS_AF_INT32, 4},   {PS_AF_INT64, 8}};
  for (const auto &c : cases) {
    ps_af_tensor_t t;
    ps_af_tensor_init(&t, 1, nullptr, c.dtype, 2, shape);
    uint64_t bytes = 0;
    ASSERT_EQ(ps_af_tensor_bytes(&t, &bytes), PS_OK) << ps_af_dtype_str(c.dtype);
    EXPECT_EQ(bytes, 3u * 7168u * c.size) << ps_af_dtype_str(c.dtype);
  }
}

TEST(AfTensor, RefusesBadShapesAndTypes) {
  ps_af_tensor_t t;
  int64_t shape[2] = {2, -1};
  uint64_t bytes;
  ps_af_tensor_init(&t, 1, nullptr, PS_AF_FLOAT32, 2, shape);
  EXPECT_EQ(ps_af_tensor_bytes(&t, &bytes), PS_ERR_INVALID_ARG);
  int64_t huge[3] = {INT64_C(1) << 40, INT64_C(1) << 30, 4};
  ps_af_tensor_init(&t, 1, nullptr, PS_AF_FLOAT32, 3, huge);
  EXPECT_EQ(ps_af_tensor_bytes(&t, &bytes), PS_ERR_INVALID_ARG);
  int64_t ok[1] = {4};
  ps_af_tensor_init(&t, 1, nullptr, 99, 1, ok);
  EXPECT_EQ(ps_af_tensor_bytes(&t, &bytes), PS_ERR_INVALID_ARG);
  ps_af_tensor_init(&t, 1, nullptr, PS_AF_UINT8, 1, ok);
  t.ndim = PS_AF_MAX_DIMS + 1;
  EXPECT_EQ(ps_af_tensor_bytes(&t, &bytes), PS_ERR_INVALID_ARG);
}

// A tensor's key, dtype and shape and the batch header survive the codec.
TEST(AfWire, TensorMetaRoundTripsThroughTheCodec) {
  int64_t shape[3] = {4, 128, 7168};
  ps_af_tensor_t t;
  ps_af_tensor_init(&t, (1u << 16) | 7, nullptr, PS_AF_BFLOAT16, 3, shape);
  ps_meta_t m;
  ps_meta_init(&m);
  m.request = true;
  m.pull = true;
  m.head = ps__af_flag(2, 3);
  ps__af_meta_set_tensor(&m, &t);
  uint8_t body[PS__AF_HDR_LEN];
  ps__af_hdr_t hdr = {2, 3, 2, UINT64_C(0x123456789a)};
  ps__af_hdr_write(body, &hdr);
  m.body = body;
  m.body_len = sizeof(body);
  m.request_trace = {0, 11, 12, 13, 14};
  m.response_trace = {0, 21, 22, 23, 0};

  std::vector<uint8_t> buf(4096);
  size_t len = 0;
  ASSERT_EQ(ps_meta_encode(&m, buf.data(), buf.size(), &len), PS_OK);
  ps_meta_t out;
  ASSERT_EQ(ps_meta_decode(buf.data(), len, &out, nullptr, 0), PS_OK);
  EXPECT_TRUE(ps_meta_equal(&m, &out));

  ps_af_tensor_t back;
  uint64_t bytes = 0;
  ASSERT_EQ(ps__af_meta_get_tensor(&out, &back, &bytes), PS_OK);
  EXPECT_EQ(back.key, t.key);
  EXPECT_EQ(back.dtype, PS_AF_BFLOAT16);
  ASSERT_EQ(back.ndim, 3u);
  EXPECT_EQ(back.shape[2], 7168);
  EXPECT_EQ(bytes, 4u * 128u * 7168u * 2u);
  EXPECT_EQ(out.head, PS_AF_FLAG_BATCH_END);
  ps__af_hdr_t h2;
  ASSERT_EQ(ps__af_hdr_read(out.body, out.body_len, &h2), PS_OK);
  EXPECT_EQ(h2.index, 2u);
  EXPECT_EQ(h2.count, 3u);
  EXPECT_EQ(h2.num_push, 2u);
  EXPECT_EQ(h2.seq, UINT64_C(0x123456789a));
  EXPECT_EQ(out.request_trace.process, 14u);
  EXPECT_EQ(out.response_trace.postrecv, 23u);
}

TEST(AfWire, RefusesMetasThatAreNoTensor) {
  ps_meta_t m;
  ps_meta_init(&m);
  ps_af_tensor_t t;
  uint64_t bytes;
  EXPECT_EQ(ps__af_meta_get_tensor(&m, &t, &bytes), PS_ERR_PROTOCOL);  // not a tensor
  m.is_tensor = true;
  m.dtype = 42;
  m.ndim = 1;
  m.shape[0] = 3;
  EXPECT_EQ(ps__af_meta_get_tensor(&m, &t, &bytes), PS_ERR_PROTOCOL);  // unknown dtype
  m.dtype = PS_AF_FLOAT32;
  m.shape[0] = -3;
  EXPECT_EQ(ps__af_meta_get_tensor(&m, &t, &bytes), PS_ERR_PROTOCOL);  // negative dim
  m.shape[0] = 3;
  EXPECT_EQ(ps__af_meta_get_tensor(&m, &t, &bytes), PS_OK);
  EXPECT_EQ(bytes, 12u);
}

TEST(AfWire, RefusesBadHeaders) {
  uint8_t body[PS__AF_HDR_LEN];
  ps__af_hdr_t h = {0, 1, 1, 5}, out;
  ps__af_hdr_write(body, &h);
  EXPECT_EQ(ps__af_hdr_read(body, sizeof(body), &out), PS_OK);
  EXPECT_EQ(ps__af_hdr_read(body, sizeof(body) - 1, &out), PS_ERR_PROTOCOL);
  EXPECT_EQ(ps__af_hdr_read(nullptr, 0, &out), PS_ERR_PROTOCOL);
  ps__af_hdr_t bad[] = {
      {1, 1, 0, 0},                          // index beyond count
      {0, 0, 0, 0},                          // empty batch
      {0, 2, 3, 0},                          // more pushes than messages
      {0, PS__AF_MAX_BATCH_MSGS + 1, 0, 0},  // too many messages
  };
  for (const auto &b : bad) {
    ps__af_hdr_write(body, &b);
    EXPECT_EQ(ps__af_hdr_read(body, sizeof(body), &out), PS_ERR_PROTOCOL);
  }
  ps__af_hdr_write(body, &h);
  body[0] ^= 1;  // magic
  EXPECT_EQ(ps__af_hdr_read(body, sizeof(body), &out), PS_ERR_PROTOCOL);
}

TEST(AfWire, BatchFlagsAsStepMesh) {
  EXPECT_EQ(ps__af_flag(0, 1), PS_AF_FLAG_SINGLE);
  EXPECT_EQ(ps__af_flag(0, 2), PS_AF_FLAG_BATCH_START);
  EXPECT_EQ(ps__af_flag(1, 2), PS_AF_FLAG_BATCH_END);
  EXPECT_EQ(ps__af_flag(0, 4), PS_AF_FLAG_BATCH_START);
  EXPECT_EQ(ps__af_flag(1, 4), PS_AF_FLAG_BATCH_MIDDLE);
  EXPECT_EQ(ps__af_flag(2, 4), PS_AF_FLAG_BATCH_MIDDLE);
  EXPECT_EQ(ps__af_flag(3, 4), PS_AF_FLAG_BATCH_END);
}

// Batches complete out of order; they come out in sequence, each once.
TEST(AfOrder, DeliversInSequence) {
  ps__af_order_t o;
  ps__af_order_init(&o);
  int items[5];
  void **slot;
  for (int seq : {2, 0, 1, 4, 3}) {
    ASSERT_EQ(ps__af_order_slot(&o, seq, &slot), PS_OK);
    EXPECT_EQ(*slot, nullptr);
    *slot = &items[seq];
  }
  EXPECT_EQ(ps__af_order_pop(&o), nullptr);  // nothing complete yet
  ps__af_order_mark_complete(&o, 1);
  ps__af_order_mark_complete(&o, 2);
  EXPECT_EQ(ps__af_order_pop(&o), nullptr);  // 0 is not
  ps__af_order_mark_complete(&o, 0);
  EXPECT_EQ(ps__af_order_pop(&o), &items[0]);
  EXPECT_EQ(ps__af_order_pop(&o), &items[1]);
  EXPECT_EQ(ps__af_order_pop(&o), &items[2]);
  EXPECT_EQ(ps__af_order_pop(&o), nullptr);
  ps__af_order_mark_complete(&o, 4);
  EXPECT_EQ(ps__af_order_pop(&o), nullptr);
  ps__af_order_mark_complete(&o, 3);
  EXPECT_EQ(ps__af_order_pop(&o), &items[3]);
  EXPECT_EQ(ps__af_order_pop(&o), &items[4]);
  EXPECT_EQ(o.next, 5u);
  // A delivered number again, and one beyond the window, are refused.
  EXPECT_EQ(ps__af_order_slot(&o, 4, &slot), PS_ERR_PROTOCOL);
  EXPECT_EQ(ps__af_order_slot(&o, 5 + PS__AF_ORDER_WINDOW, &slot), PS_ERR_PROTOCOL);
  EXPECT_EQ(ps__af_order_slot(&o, 4 + PS__AF_ORDER_WINDOW, &slot), PS_OK);
}

TEST(AfOrder, ClearDropsEveryItem) {
  ps__af_order_t o;
  ps__af_order_init(&o);
  int items[3];
  void **slot;
  for (int seq = 0; seq < 3; seq++) {
    ASSERT_EQ(ps__af_order_slot(&o, seq, &slot), PS_OK);
    *slot = &items[seq];
  }
  int dropped = 0;
  ps__af_order_clear(
      &o, [](void *arg, void *) { ++*static_cast<int *>(arg); }, &dropped);
  EXPECT_EQ(dropped, 3);
  EXPECT_EQ(ps__af_order_pop(&o), nullptr);
}

}  // namespace

namespace {

// Defaults (48 cores per socket, 5 per GPU, first 10 left alone): 7 GPUs
// fit on a socket, the 8th starts the next one.
TEST(AfCpu, CoresPerGpuAndSocket) {
  EXPECT_EQ(ps__af_cpu_core(0, 0, 48, 5, 10), 10);
  EXPECT_EQ(ps__af_cpu_core(0, 1, 48, 5, 10), 11);
  EXPECT_EQ(ps__af_cpu_core(3, 2, 48, 5, 10), 27);
  EXPECT_EQ(ps__af_cpu_core(6, 4, 48, 5, 10), 44);
  EXPECT_EQ(ps__af_cpu_core(7, 0, 48, 5, 10), 58);
  EXPECT_EQ(ps__af_cpu_core(0, 5, 48, 5, 10), -1);  // offset beyond the GPU's cores
  EXPECT_EQ(ps__af_cpu_core(0, -1, 48, 5, 10), -1);
  EXPECT_EQ(ps__af_cpu_core(0, 0, 12, 5, 10), -1);  // no GPU fits on a socket
  EXPECT_EQ(ps__af_cpu_core(-1, 0, 48, 5, 10), -1);
}

TEST(AfCpu, BindsTheCallingThreadOnlyWhenAsked) {
  int core = 7;
  ASSERT_EQ(ps_config_set(PS_CFG_STEPMESH_BIND_CPU_CORE, "0"), PS_OK);
  EXPECT_EQ(ps_af_bind_cpu_core(0, &core), PS_OK);
  EXPECT_EQ(core, -1);
  std::thread t([&] {
    ASSERT_EQ(ps_config_set(PS_CFG_STEPMESH_BIND_CPU_CORE, "1"), PS_OK);
    ASSERT_EQ(ps_config_set(PS_CFG_STEPMESH_GPU, "0"), PS_OK);
    ASSERT_EQ(ps_config_set(PS_CFG_STEPMESH_CPU_START_OFFSET, "0"), PS_OK);
    ASSERT_EQ(ps_config_set(PS_CFG_STEPMESH_CPU_CORES_PER_GPU, "1"), PS_OK);
    ASSERT_EQ(ps_config_set(PS_CFG_STEPMESH_CPU_CORES_PER_SOCKET, "1"), PS_OK);
    EXPECT_EQ(ps_af_bind_cpu_core(0, &core), PS_OK);
    EXPECT_EQ(core, 0);
    cpu_set_t set;
    ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
    EXPECT_EQ(CPU_COUNT(&set), 1);
    EXPECT_TRUE(CPU_ISSET(0, &set));
    EXPECT_EQ(ps_af_bind_cpu_core(1, &core), PS_ERR_INVALID_ARG);  // one core per GPU
  });
  t.join();
  for (auto id : {PS_CFG_STEPMESH_BIND_CPU_CORE, PS_CFG_STEPMESH_GPU,
                  PS_CFG_STEPMESH_CPU_START_OFFSET, PS_CFG_STEPMESH_CPU_CORES_PER_GPU,
                  PS_CFG_STEPMESH_CPU_CORES_PER_SOCKET})
    ps_config_set(id, nullptr);
}

}  // namespace
