// An AF server handler for tests of one push and one pull slot per batch:
// answers each batch with the first byte of its push (which arrives in host
// memory over the vans these tests use), repeated over the slot, and counts
// the batches.
#ifndef PS_TESTS_AF_ECHO_SERVER_H_
#define PS_TESTS_AF_ECHO_SERVER_H_

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <vector>

extern "C" {
#include "ps/app/af.h"
}

struct EchoServer {
    std::atomic<int> batches{0};
    std::vector<uint8_t> result;
    explicit EchoServer(size_t bytes) : result(bytes) {}
    static void Handle(void *arg, ps_af_server_t *server, ps_af_batch_t *b)
    {
        auto *s = static_cast<EchoServer *>(arg);
        s->batches++;
        uint8_t first = 0;
        EXPECT_EQ(1u, b->num_push);
        if (b->num_push == 1) {
            EXPECT_EQ(PS_MEM_HOST, b->push[0].mem_kind);
            first = *static_cast<const uint8_t *>(b->push[0].data);
        }
        memset(s->result.data(), first, s->result.size());
        ps_af_tensor_t r = b->pull[0];
        r.data = s->result.data();
        r.mem_kind = PS_MEM_HOST;
        EXPECT_EQ(PS_OK, ps_af_server_respond(server, b, &r, nullptr, 1));
    }
};

#endif // PS_TESTS_AF_ECHO_SERVER_H_
