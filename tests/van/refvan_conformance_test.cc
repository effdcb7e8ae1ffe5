// The van conformance suite on the reference van "mem" (ps/net/refvan):
// vans of one process joined by in-memory byte pipes. Its host names only
// key the in-process listener table; 127.0.0.1 keeps the suite's check
// that the host can bind it trivially true.

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "tests/van/van_conformance.h"
#include "tests/van/van_harness.h"
#include "gtest/gtest.h"

extern "C" {
#include "ps/base/endian.h"
#include "ps/base/status.h"
#include "ps/net/caps.h"
#include "ps/net/codec/frame_encode.h"
#include "ps/net/codec/lane.h"
#include "ps/net/refvan/mem_testing.h"
#include "ps/net/van/van.h"
}

namespace {

using ps_van_test::VanConfig;
using ps_van_test::VanConfigName;
using ps_van_test::VanConformance;

VanConfig MemConfig()
{
    VanConfig c;
    c.name = "mem";
    c.van = "mem";
    // A peer's van closing ends its pipes: the end of file says "gone".
    c.peer_close_statuses = {PS_ERR_PEER_GONE};
    // The hello's van_data (mem_rx.c): "PSMEMH" and the announced id.
    c.hello_tag = "PSMEMH";
    c.hello_len = 10;
    // Bytes count as sent once the pipe took them.
    c.sent_counts_taken_bytes = true;
    // One pipe pair per peer, reaching only this process.
    c.caps_set = PS_CAP_SAME_HOST_ONLY | PS_CAP_BUSY_POLL;
    c.caps_clear = PS_CAP_REMOTE_WRITE | PS_CAP_MULTI_STREAM;
    c.num_streams = 1;
    return c;
}

INSTANTIATE_TEST_SUITE_P(Mem, VanConformance, ::testing::Values(MemConfig()), VanConfigName);

// The job secret: refused at open, since every peer shares the process
// and its key (a proof would show nothing).
TEST(MemVan, RefusesToOpenWithAJobSecret)
{
    const ps_van_component_t *c = nullptr;
    ASSERT_EQ(ps_van_find("refvan", &c), PS_OK);
    ps_van_params_t p = ps_van_test::DefaultParams();
    p.auth_enabled = 1;
    ps_van_t *van = nullptr;
    EXPECT_EQ(c->ops->open(&p, nullptr, &van), PS_ERR_UNSUPPORTED);
    EXPECT_EQ(van, nullptr);
}

// ---- hostile input: bytes no mem van writes, from a raw end ----

// A frame of `meta` with one segment of `data` (none when empty).
std::string Frame(const ps_meta_t &meta, const std::string &data)
{
    uint64_t len = data.size();
    uint8_t buf[1024], *head = nullptr, *heap = nullptr;
    size_t n = 0;
    EXPECT_EQ(ps_frame_encode_head(&meta, &len, data.empty() ? 0 : 1, nullptr, PS_LOG_VAN, buf,
                                   sizeof(buf), &head, &n, &heap),
              PS_OK);
    std::string f(reinterpret_cast<const char *>(head), n);
    free(heap);
    return f + data;
}

std::string Hello(int id, uint32_t van_data_len = 10)
{
    ps_meta_t m;
    ps_meta_init(&m);
    memcpy(m.van_data, "PSMEMH", 6);
    ps_put_le32(m.van_data + 6, static_cast<uint32_t>(id));
    m.van_data_len = van_data_len;
    return Frame(m, "");
}

std::string Data(uint64_t key, const std::string &bytes)
{
    ps_meta_t m;
    ps_meta_init(&m);
    m.recver = 8;
    m.sender = 3; // a lie the van must not pass on
    m.key = key;
    m.request = true;
    m.num_data_types = 1;
    m.data_types[0] = PS_DATA_UINT8;
    m.data_size = bytes.size();
    return Frame(m, bytes);
}

std::string Lane(size_t len)
{
    std::string b(3 + len, 'x');
    b[0] = static_cast<char>(PS_LANE_MAGIC);
    ps_put_le16(reinterpret_cast<uint8_t *>(&b[1]), static_cast<uint16_t>(len));
    return b;
}

class MemHostile : public ::testing::Test {
  protected:
    void SetUp() override
    {
        ASSERT_EQ(server.OpenAs("mem", 8, "127.0.0.1", ps_van_test::DefaultParams(), 0), PS_OK);
    }
    // Writes `bytes` from a new raw end; whether the van closed it.
    bool Closes(const std::string &bytes)
    {
        ps__mem_test_raw_t *raw = nullptr;
        EXPECT_EQ(ps__mem_test_raw_dial("127.0.0.1", server.Port(), &raw), PS_OK);
        if (raw == nullptr) {
            return false;
        }
        EXPECT_EQ(ps__mem_test_raw_write(raw, bytes.data(), bytes.size()), bytes.size());
        auto deadline = std::chrono::steady_clock::now() + ps_van_test::kWait;
        bool closed = false;
        while (!(closed = ps__mem_test_raw_closed(raw)) &&
               std::chrono::steady_clock::now() < deadline) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        ps__mem_test_raw_close(raw);
        return closed;
    }
    ps_van_test::VanBase server;
};

TEST_F(MemHostile, EachBadStreamClosesOnlyItsConnection)
{
    EXPECT_TRUE(Closes("PSX1 not a frame header at all"));
    EXPECT_TRUE(Closes(Data(1, "abc"))); // data before the hello
    EXPECT_TRUE(Closes(Lane(16)));       // a lane message before it
    EXPECT_TRUE(Closes(Hello(9, 8)));    // a hello of the wrong length
    EXPECT_TRUE(Closes(Hello(-4)));      // an impossible id
    EXPECT_TRUE(Closes(Hello(9) + Lane(PS_LANE_MAX_BYTES + 1)));
    EXPECT_TRUE(Closes(Hello(9) + Lane(4))); // shorter than a lane header
    // Node 9's two connections closed after its hello: reported.
    ASSERT_TRUE(server.inbox.WaitFailure(2));
    {
        // A frame cut short by the peer's end: node 9 is gone.
        ps__mem_test_raw_t *raw = nullptr;
        ASSERT_EQ(ps__mem_test_raw_dial("127.0.0.1", server.Port(), &raw), PS_OK);
        std::string cut = Hello(9) + Data(2, "abc").substr(0, 7);
        ASSERT_EQ(ps__mem_test_raw_write(raw, cut.data(), cut.size()), cut.size());
        ps__mem_test_raw_close(raw);
    }
    ASSERT_TRUE(server.inbox.WaitFailure(3));
    {
        std::lock_guard<std::mutex> lk(server.inbox.mu);
        EXPECT_TRUE(server.inbox.msgs.empty());
        ASSERT_EQ(server.inbox.failures.size(), 3u);
        for (int i = 0; i < 3; ++i) {
            EXPECT_EQ(server.inbox.failures[i].first, 9);
            EXPECT_EQ(server.inbox.failures[i].second, i < 2 ? PS_ERR_PROTOCOL : PS_ERR_PEER_GONE);
        }
    }
    // The van still serves a well-formed stream, with the sender its hello
    // proved, not the meta's.
    ps__mem_test_raw_t *raw = nullptr;
    ASSERT_EQ(ps__mem_test_raw_dial("127.0.0.1", server.Port(), &raw), PS_OK);
    std::string ok = Hello(11) + Data(5, "hello");
    ASSERT_EQ(ps__mem_test_raw_write(raw, ok.data(), ok.size()), ok.size());
    ASSERT_TRUE(server.inbox.WaitMsgs(1));
    {
        std::lock_guard<std::mutex> lk(server.inbox.mu);
        EXPECT_EQ(server.inbox.msgs[0].meta.sender, 11);
        EXPECT_EQ(server.inbox.msgs[0].meta.key, 5u);
        ASSERT_EQ(server.inbox.msgs[0].data.size(), 1u);
        EXPECT_EQ(server.inbox.msgs[0].data[0], "hello");
    }
    server.Close();
    EXPECT_TRUE(ps__mem_test_raw_closed(raw));
    ps__mem_test_raw_close(raw);
}

} // namespace
