// See gpu_slices.h.
#include "tests/van/gpu_slices.h"

#include <cstring>
#include <mutex>

#include "gtest/gtest.h"

namespace ps_van_test {

namespace {

void FreeCuda(void *data, size_t len, void *arg)
{
    (void)len;
    (void)arg;
    (void)Cuda()->free(data);
}

}  // namespace

std::string PatternBytes(uint64_t seq, unsigned seg, size_t len)
{
    std::string s(len, '\0');
    for (size_t i = 0; i < len; i++)
        s[i] = static_cast<char>(Pattern(seq, seg, i));
    return s;
}

ps_slice_t CudaSlice(size_t len, uint64_t seq, unsigned seg)
{
    ps_slice_t s = PS_SLICE_EMPTY_INIT;
    void *p = nullptr;
    EXPECT_EQ(Cuda()->alloc(len, 0, &p), PS_OK);
    if (p == nullptr)
        return s;
    std::string bytes = seq != 0 ? PatternBytes(seq, seg, len) : std::string(len, '\0');
    EXPECT_EQ(Cuda()->copy_from_host(p, bytes.data(), len), PS_OK);
    ps_buf_t *buf = nullptr;
    EXPECT_EQ(ps_buf_wrap_mem(p, len, PS_BUF_MEM_CUDA, 0, FreeCuda, nullptr, &buf), PS_OK);
    EXPECT_EQ(ps_slice_of(buf, 0, len, &s), PS_OK);
    ps_buf_unref(buf);
    return s;
}

ps_slice_t PatternSlice(size_t len, uint64_t seq, unsigned seg)
{
    ps_slice_t s;
    EXPECT_EQ(ps_slice_alloc(len, 64, &s), PS_OK);
    std::string bytes = PatternBytes(seq, seg, len);
    memcpy(ps_slice_ptr(&s), bytes.data(), len);
    return s;
}

ps_status_t SendKv(VanBase &from, int to, uint64_t seq, uint64_t key, ps_slice_t keys,
                   ps_slice_t vals, bool request, bool pull, uint64_t val_len)
{
    ps_msg_t msg;
    ps_msg_init(&msg);
    msg.meta.timestamp = static_cast<int32_t>(seq);
    msg.meta.request = request;
    msg.meta.push = !pull;
    msg.meta.pull = pull;
    msg.meta.recver = to;
    msg.meta.key = key;
    msg.meta.val_len = val_len;
    EXPECT_EQ(ps_msg_add_data(&msg, &keys, PS_DATA_UINT64), PS_OK);
    if (vals.len != 0) {
        EXPECT_EQ(ps_msg_add_data(&msg, &vals, PS_DATA_UINT8), PS_OK);
    }
    ps_status_t st = from.ops->send(from.van, &msg);
    ps_msg_release(&msg);
    return st;
}

void CheckPushesIntoDeviceBuffer(VanBase &w, VanBase &s, int s_id, uint64_t key, size_t len,
                                 int n)
{
    ps_slice_t dest = CudaSlice(len);
    {
        std::lock_guard<std::mutex> lk(s.inbox.mu);
        s.inbox.dest[{key, 1}] = ps_slice_ref(&dest);
    }
    size_t before = 0;
    {
        std::lock_guard<std::mutex> lk(s.inbox.mu);
        before = s.inbox.msgs.size();
    }
    for (int i = 0; i < n; i++) {
        uint64_t seq = 100 + static_cast<uint64_t>(i);
        ps_slice_t keys = PatternSlice(8, seq, 0);
        ps_slice_t vals = CudaSlice(len, seq, 1);
        ASSERT_EQ(SendKv(w, s_id, seq, key, keys, vals, true), PS_OK);
        ps_slice_unref(&keys);
        ps_slice_unref(&vals);
        ASSERT_TRUE(s.inbox.WaitMsgs(before + static_cast<size_t>(i) + 1));
        std::lock_guard<std::mutex> lk(s.inbox.mu);
        const Received &r = s.inbox.msgs[before + static_cast<size_t>(i)];
        EXPECT_EQ(r.ptrs[1], ps_slice_ptr(&dest)) << "push " << i;
        EXPECT_EQ(r.data[1], PatternBytes(seq, 1, len)) << "push " << i;
    }
    ps_slice_unref(&dest);
}

}  // namespace ps_van_test
