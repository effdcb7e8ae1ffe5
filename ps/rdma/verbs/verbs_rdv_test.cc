// The rendezvous state machine of the ibverbs van, driven by fake events:
// starts, grants, metas landing, the application letting go of data,
// re-grants, drops, a connection going away and the van closing while the
// application still holds data. Buffers are plain host slices with fake
// rkeys.
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

extern "C" {
#include "ps/base/buffer.h"
#include "ps/rdma/verbs/verbs_rdv.h"
}

namespace {

struct Fake {
    uint32_t next_rkey = 100;
    int allocs = 0;
    int notifies = 0;
    int fail_after = -1; // alloc fails once this many allocations happened
};

ps_status_t FakeAlloc(void *ctx, size_t len, ps_slice_t *slice_p, uint32_t *rkey_p)
{
    Fake *f = static_cast<Fake *>(ctx);
    if (f->fail_after >= 0 && f->allocs >= f->fail_after)
        return PS_ERR_NO_MEMORY;
    ps_status_t st = ps_slice_alloc(len, 0, slice_p);
    if (st != PS_OK)
        return st;
    f->allocs++;
    *rkey_p = f->next_rkey++;
    return PS_OK;
}

void FakeNotify(void *ctx)
{
    static_cast<Fake *>(ctx)->notifies++;
}

// Steered regions' handles are counters of live registrations.
void FakeSteerRelease(void *ctx, void *handle)
{
    (void)ctx;
    --*static_cast<int *>(handle);
}

// What a message of meta_len and data_len bytes (nothing steerable) needs.
ps__vb_gc_result_t Take(ps__vb_gcache_t *c, uint64_t key, uint8_t dir, uint32_t meta_len,
                        uint64_t data_len, ps__vb_grant_t *out)
{
    ps__vb_need_t n;
    memset(&n, 0, sizeof(n));
    n.meta_len = meta_len;
    n.data_len = data_len;
    return ps__vb_gcache_take(c, key, dir, &n, out);
}

struct Receiver {
    Fake fake;
    ps__vb_grants_t *g = nullptr;

    explicit Receiver(uint64_t max_cached = 1 << 30, uint32_t slots = 64)
    {
        ps__vb_grants_params_t p;
        memset(&p, 0, sizeof(p));
        p.max_slots = slots;
        p.max_cached_bytes = max_cached;
        p.max_meta_len = 1 << 20;
        p.max_data_len = 1ull << 32;
        ps__vb_grants_ops_t ops;
        memset(&ops, 0, sizeof(ops));
        ops.alloc = FakeAlloc;
        ops.notify = FakeNotify;
        ops.ctx = &fake;
        ops.steer_release = FakeSteerRelease;
        EXPECT_EQ(ps__vb_grants_create(&p, &ops, &g), PS_OK);
    }
    ~Receiver()
    {
        if (g != nullptr)
            ps__vb_grants_close(g);
    }
    ps__vb_grants_stats_t Stats()
    {
        ps__vb_grants_stats_t s;
        ps__vb_grants_stats(g, &s);
        return s;
    }
};

ps__vb_ctrl_t Start(uint32_t token, uint64_t key, uint8_t dir, uint32_t meta_len,
                    uint64_t data_len, bool cacheable, uint32_t replace = 0)
{
    ps__vb_ctrl_t c;
    memset(&c, 0, sizeof(c));
    c.type = PS__VB_MSG_RDV_START;
    c.token = token;
    c.key = key;
    c.dir = dir;
    c.meta_len = meta_len;
    c.data_len = data_len;
    c.flags = cacheable ? PS__VB_RDV_CACHEABLE : 0;
    c.slot = replace;
    return c;
}

// The sender writes `payload` into the grant (as RDMA would) and the
// receiver is told the meta landed; returns the data slice it hands out.
ps_slice_t Land(Receiver &r, uint64_t owner, const ps__vb_grant_t &grant,
                const std::string &payload)
{
    memcpy(reinterpret_cast<void *>(grant.meta_addr), "META", 4);
    if (!payload.empty())
        memcpy(reinterpret_cast<void *>(grant.data_addr), payload.data(), payload.size());
    const uint8_t *meta = nullptr;
    uint32_t meta_cap = 0;
    uint64_t data_cap = 0;
    ps__vb_grant_rec_t *rec =
        ps__vb_grants_filled(r.g, owner, grant.slot, &meta, &meta_cap, &data_cap);
    EXPECT_NE(rec, nullptr);
    ps_slice_t s = PS_SLICE_EMPTY_INIT;
    if (rec == nullptr)
        return s;
    EXPECT_EQ(memcmp(meta, "META", 4), 0);
    EXPECT_EQ(meta_cap, grant.meta_cap);
    EXPECT_EQ(data_cap, grant.data_cap);
    if (data_cap == 0) {
        ps__vb_grants_done(r.g, rec);
        return s;
    }
    EXPECT_EQ(ps__vb_grants_data(r.g, rec, &s), PS_OK);
    return s;
}

TEST(GrantCache, TakeHitMissTooSmall)
{
    ps__vb_gcache_t c;
    ps__vb_gcache_init(&c, 8);
    ps__vb_grant_t g, out, ev;
    memset(&g, 0, sizeof(g));
    g.slot = 5;
    g.meta_cap = 4096;
    g.data_cap = 1000;
    EXPECT_EQ(Take(&c, 1, 3, 100, 10, &out), PS__VB_GC_MISS);
    EXPECT_EQ(ps__vb_gcache_put(&c, 1, 3, &g, &ev), 0);
    EXPECT_EQ(Take(&c, 1, 2, 100, 10, &out), PS__VB_GC_MISS) << "other direction";
    EXPECT_EQ(Take(&c, 1, 3, 100, 1000, &out), PS__VB_GC_HIT);
    EXPECT_EQ(out.slot, 5u);
    EXPECT_EQ(ps__vb_gcache_size(&c), 0u) << "a grant serves one message";
    EXPECT_EQ(ps__vb_gcache_put(&c, 1, 3, &g, &ev), 0);
    EXPECT_EQ(Take(&c, 1, 3, 100, 1001, &out), PS__VB_GC_TOO_SMALL);
    EXPECT_EQ(out.slot, 5u) << "handed back so the start can replace it";
    EXPECT_EQ(Take(&c, 1, 3, 5000, 1, &out), PS__VB_GC_MISS);
    ps__vb_gcache_destroy(&c);
}

TEST(GrantCache, ReplaceAndEvictOldest)
{
    ps__vb_gcache_t c;
    ps__vb_gcache_init(&c, 3);
    ps__vb_grant_t g, ev;
    memset(&g, 0, sizeof(g));
    for (uint32_t k = 1; k <= 3; k++) {
        g.slot = k;
        EXPECT_EQ(ps__vb_gcache_put(&c, k, 0, &g, &ev), 0);
    }
    g.slot = 20;
    ASSERT_EQ(ps__vb_gcache_put(&c, 2, 0, &g, &ev), 1) << "same key: the old one goes back";
    EXPECT_EQ(ev.slot, 2u);
    g.slot = 40;
    ASSERT_EQ(ps__vb_gcache_put(&c, 4, 0, &g, &ev), 1) << "full: the oldest goes back";
    EXPECT_EQ(ev.slot, 1u);
    EXPECT_EQ(ps__vb_gcache_size(&c), 3u);
    ps__vb_grant_t out;
    EXPECT_EQ(Take(&c, 1, 0, 0, 0, &out), PS__VB_GC_MISS);
    EXPECT_EQ(Take(&c, 2, 0, 0, 0, &out), PS__VB_GC_HIT);
    EXPECT_EQ(out.slot, 20u);
    ps__vb_gcache_destroy(&c);
}

TEST(Grants, StartGrantFillAndRegrantOnRelease)
{
    Receiver r;
    ps__vb_ctrl_t reply;
    ps__vb_ctrl_t st = Start(7, 42, PS__VB_DIR_REQUEST | PS__VB_DIR_PUSH, 300, 1 << 20, true);
    ASSERT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &reply), PS_OK);
    EXPECT_EQ(reply.type, PS__VB_MSG_RDV_GRANT);
    EXPECT_EQ(reply.token, 7u);
    EXPECT_EQ(reply.key, 42u);
    EXPECT_NE(reply.slot, 0u);
    EXPECT_GE(reply.meta_len, 300u);
    EXPECT_EQ(reply.data_len, 1u << 20);
    EXPECT_NE(reply.meta_rkey, reply.data_rkey);

    ps__vb_grant_t grant;
    ps__vb_grant_from_ctrl(&reply, &grant);
    ps_slice_t data = Land(r, 1, grant, "hello");
    ASSERT_EQ(data.len, 1u << 20);
    EXPECT_EQ(memcmp(ps_slice_ptr(&data), "hello", 5), 0);
    EXPECT_EQ(r.Stats().in_use, 1u);

    // While the application holds the data, nothing is re-granted.
    uint64_t owners[4];
    ps__vb_ctrl_t msgs[4];
    EXPECT_EQ(ps__vb_grants_take_regrants(r.g, owners, msgs, 4), 0u);
    // A second meta into the same slot now is a protocol error.
    const uint8_t *m;
    uint32_t mc;
    uint64_t dc;
    EXPECT_EQ(ps__vb_grants_filled(r.g, 1, grant.slot, &m, &mc, &dc), nullptr);

    ps_slice_unref(&data);
    EXPECT_EQ(r.fake.notifies, 1);
    ASSERT_EQ(ps__vb_grants_take_regrants(r.g, owners, msgs, 4), 1u);
    EXPECT_EQ(owners[0], 1u);
    EXPECT_EQ(msgs[0].flags, PS__VB_RDV_REGRANT);
    EXPECT_EQ(msgs[0].slot, grant.slot) << "the same buffer comes back";
    EXPECT_EQ(msgs[0].data_addr, grant.data_addr);
    EXPECT_EQ(msgs[0].key, 42u);

    // The sender uses the re-grant for the next message.
    data = Land(r, 1, grant, "again");
    EXPECT_EQ(memcmp(ps_slice_ptr(&data), "again", 5), 0);
    EXPECT_EQ(r.Stats().reuses, 1u);
    ps_slice_unref(&data);
    EXPECT_EQ(r.Stats().live, 1u);
    EXPECT_EQ(r.fake.allocs, 2) << "meta and data region, allocated once";
}

TEST(Grants, OnlyTheOwnerMayUseOrDropAGrant)
{
    Receiver r;
    ps__vb_ctrl_t reply;
    ps__vb_ctrl_t st = Start(1, 9, 0, 100, 64, true);
    ASSERT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &reply), PS_OK);
    const uint8_t *m;
    uint32_t mc;
    uint64_t dc;
    EXPECT_EQ(ps__vb_grants_filled(r.g, 2, reply.slot, &m, &mc, &dc), nullptr);
    EXPECT_EQ(ps__vb_grants_filled(r.g, 1, reply.slot + 1, &m, &mc, &dc), nullptr);
    EXPECT_EQ(ps__vb_grants_drop(r.g, 2, reply.slot), PS_ERR_PROTOCOL);
    EXPECT_EQ(ps__vb_grants_drop(r.g, 1, reply.slot), PS_OK);
    EXPECT_EQ(ps__vb_grants_drop(r.g, 1, reply.slot), PS_ERR_PROTOCOL) << "already dropped";
    EXPECT_EQ(ps__vb_grants_filled(r.g, 1, reply.slot, &m, &mc, &dc), nullptr)
        << "a stale slot id names nothing";
    EXPECT_EQ(r.Stats().live, 0u);
}

TEST(Grants, NewStartWhileOldInUseFreesOldOnRelease)
{
    Receiver r;
    ps__vb_ctrl_t reply1, reply2;
    ps__vb_ctrl_t st = Start(1, 5, 1, 100, 256, true);
    ASSERT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &reply1), PS_OK);
    ps__vb_grant_t g1;
    ps__vb_grant_from_ctrl(&reply1, &g1);
    ps_slice_t d1 = Land(r, 1, g1, "one");

    // The sender has nothing cached (g1 is in use): a new rendezvous.
    st = Start(2, 5, 1, 100, 256, true);
    ASSERT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &reply2), PS_OK);
    EXPECT_NE(reply2.slot, reply1.slot);
    ps__vb_grant_t g2;
    ps__vb_grant_from_ctrl(&reply2, &g2);
    ps_slice_t d2 = Land(r, 1, g2, "two");

    ps_slice_unref(&d1); // not current any more: freed, not re-granted
    uint64_t owners[4];
    ps__vb_ctrl_t msgs[4];
    EXPECT_EQ(ps__vb_grants_take_regrants(r.g, owners, msgs, 4), 0u);
    EXPECT_EQ(r.Stats().live, 1u);
    ps_slice_unref(&d2);
    ASSERT_EQ(ps__vb_grants_take_regrants(r.g, owners, msgs, 4), 1u);
    EXPECT_EQ(msgs[0].slot, reply2.slot);
}

TEST(Grants, RegrantInFlightIsStillHonoured)
{
    // The receiver re-grants g1 while the sender, not having seen it yet,
    // starts a new rendezvous. Both grants must work.
    Receiver r;
    ps__vb_ctrl_t reply1, reply2;
    ps__vb_ctrl_t st = Start(1, 5, 1, 100, 256, true);
    ASSERT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &reply1), PS_OK);
    ps__vb_grant_t g1;
    ps__vb_grant_from_ctrl(&reply1, &g1);
    ps_slice_t d = Land(r, 1, g1, "one");
    ps_slice_unref(&d);
    uint64_t owners[4];
    ps__vb_ctrl_t msgs[4];
    ASSERT_EQ(ps__vb_grants_take_regrants(r.g, owners, msgs, 4), 1u); // on its way

    st = Start(2, 5, 1, 100, 256, true);
    ASSERT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &reply2), PS_OK);
    ps__vb_grant_t g2;
    ps__vb_grant_from_ctrl(&reply2, &g2);
    d = Land(r, 1, g2, "two");
    ps_slice_unref(&d);
    // Now the sender caches the late re-grant of g1 and uses it.
    d = Land(r, 1, g1, "three");
    EXPECT_EQ(memcmp(ps_slice_ptr(&d), "three", 5), 0);
    ps_slice_unref(&d); // g1 is not current: freed
    size_t n = ps__vb_grants_take_regrants(r.g, owners, msgs, 4);
    ASSERT_EQ(n, 1u);
    EXPECT_EQ(msgs[0].slot, reply2.slot) << "only the current grant comes back";
    EXPECT_EQ(r.Stats().live, 1u);
}

TEST(Grants, TooSmallGrantIsReplaced)
{
    Receiver r;
    ps__vb_ctrl_t reply1, reply2;
    ps__vb_ctrl_t st = Start(1, 5, 1, 100, 256, true);
    ASSERT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &reply1), PS_OK);
    st = Start(2, 5, 1, 100, 4096, true, reply1.slot);
    ASSERT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &reply2), PS_OK);
    EXPECT_EQ(reply2.data_len, 4096u);
    EXPECT_EQ(r.Stats().live, 1u) << "the replaced grant is gone";
    // Replacing a slot one does not hold is refused and allocates nothing.
    int allocs = r.fake.allocs;
    st = Start(3, 5, 1, 100, 4096, true, reply1.slot);
    EXPECT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &reply2), PS_ERR_PROTOCOL);
    EXPECT_EQ(r.fake.allocs, allocs);
}

TEST(Grants, OneShotBeyondTheCacheBudget)
{
    Receiver r(/*max_cached=*/8192 + 1024);
    ps__vb_ctrl_t reply1, reply2;
    ps__vb_ctrl_t st = Start(1, 1, 0, 100, 1024, true); // 4 KiB meta region + 1 KiB
    ASSERT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &reply1), PS_OK);
    st = Start(2, 2, 0, 100, 4096, true); // would exceed the budget
    ASSERT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &reply2), PS_OK);
    EXPECT_EQ(r.Stats().one_shot, 1u);
    ps__vb_grant_t g2;
    ps__vb_grant_from_ctrl(&reply2, &g2);
    ps_slice_t d = Land(r, 1, g2, "x");
    ps_slice_unref(&d);
    uint64_t owners[4];
    ps__vb_ctrl_t msgs[4];
    EXPECT_EQ(ps__vb_grants_take_regrants(r.g, owners, msgs, 4), 0u) << "one-shot: freed";
    EXPECT_EQ(r.Stats().live, 1u);
}

TEST(Grants, NotCacheableMeansOneShot)
{
    Receiver r;
    ps__vb_ctrl_t reply;
    ps__vb_ctrl_t st = Start(1, 1, 0, 100, 0, false); // control message: meta only
    ASSERT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &reply), PS_OK);
    EXPECT_EQ(reply.data_len, 0u);
    EXPECT_EQ(reply.data_addr, 0u);
    ps__vb_grant_t g;
    ps__vb_grant_from_ctrl(&reply, &g);
    ps_slice_t d = Land(r, 1, g, "");
    EXPECT_EQ(d.buf, nullptr);
    EXPECT_EQ(r.Stats().live, 0u);
}

TEST(Grants, LimitsAndExhaustion)
{
    Receiver r(1 << 30, /*slots=*/2);
    ps__vb_ctrl_t reply;
    ps__vb_ctrl_t st = Start(1, 1, 0, (1 << 20) + 1, 0, false);
    EXPECT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &reply), PS_ERR_TOO_LARGE);
    st = Start(1, 1, 0, 0, 10, false);
    EXPECT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &reply), PS_ERR_TOO_LARGE) << "no meta";
    st = Start(1, 1, 0, 10, 10, false);
    ASSERT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &reply), PS_OK);
    ASSERT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &reply), PS_OK);
    EXPECT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &reply), PS_ERR_NO_RESOURCE) << "slots";
    EXPECT_EQ(r.Stats().live, 2u);

    Receiver r2;
    r2.fake.fail_after = 1; // meta region ok, data region fails
    EXPECT_EQ(ps__vb_grants_start(r2.g, 1, &st, nullptr, &reply), PS_ERR_NO_RESOURCE);
    EXPECT_EQ(r2.Stats().live, 0u);
}

TEST(Grants, OwnerGoneFreesWhatItHeld)
{
    Receiver r;
    ps__vb_ctrl_t a, b, c;
    ps__vb_ctrl_t st = Start(1, 1, 0, 10, 64, true);
    ASSERT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &a), PS_OK);
    st = Start(2, 2, 0, 10, 64, true);
    ASSERT_EQ(ps__vb_grants_start(r.g, 1, &st, nullptr, &b), PS_OK);
    st = Start(3, 3, 0, 10, 64, true);
    ASSERT_EQ(ps__vb_grants_start(r.g, 2, &st, nullptr, &c), PS_OK); // another connection
    ps__vb_grant_t gb;
    ps__vb_grant_from_ctrl(&b, &gb);
    ps_slice_t held = Land(r, 1, gb, "held");

    ps__vb_grants_owner_gone(r.g, 1);
    EXPECT_EQ(r.Stats().live, 2u) << "owner 1's idle grant freed; the held one and owner 2's stay";
    EXPECT_EQ(memcmp(ps_slice_ptr(&held), "held", 4), 0) << "data still valid";
    ps_slice_unref(&held);
    uint64_t owners[4];
    ps__vb_ctrl_t msgs[4];
    EXPECT_EQ(ps__vb_grants_take_regrants(r.g, owners, msgs, 4), 0u) << "nobody to re-grant to";
    EXPECT_EQ(r.Stats().live, 1u);
}

// A START for a request of app 0, customer 3 with segments 8, 4096, 12.
ps__vb_ctrl_t SteerStart(uint32_t token, uint64_t key)
{
    ps__vb_ctrl_t c = Start(token, key, PS__VB_DIR_REQUEST | PS__VB_DIR_PUSH, 200, 8 + 4096 + 12,
                            true);
    c.flags |= PS__VB_RDV_STEER;
    c.customer_id = 3;
    c.num_data = 3;
    c.seg_len[0] = 8;
    c.seg_len[1] = 4096;
    c.seg_len[2] = 12;
    return c;
}

TEST(GrantFit, SteeredOnlyForItsCustomerAndSize)
{
    ps__vb_grant_t g;
    memset(&g, 0, sizeof(g));
    g.meta_cap = 1024;
    g.data_cap = 20;
    g.steer_seg = 1;
    g.customer_id = 3;
    g.steer_addr = 0x1000;
    g.steer_len = 4096;
    uint64_t lens[3] = {8, 4096, 12};
    ps__vb_need_t n;
    memset(&n, 0, sizeof(n));
    n.meta_len = 200;
    n.data_len = 8 + 4096 + 12;
    n.customer_id = 3;
    n.num_data = 3;
    n.seg_len = lens;
    EXPECT_EQ(ps__vb_grant_fit(&g, &n), PS__VB_FIT_STEER);
    lens[1] = 100;
    n.data_len = 120;
    EXPECT_EQ(ps__vb_grant_fit(&g, &n), PS__VB_FIT_STEER) << "a shorter segment fits too";
    lens[1] = 4097;
    n.data_len = 8 + 4097 + 12;
    EXPECT_EQ(ps__vb_grant_fit(&g, &n), PS__VB_FIT_NO) << "longer than the region";
    lens[1] = 4096;
    n.data_len = 8 + 4096 + 12;
    n.customer_id = 4;
    EXPECT_EQ(ps__vb_grant_fit(&g, &n), PS__VB_FIT_NO) << "another customer's buffer";
    n.customer_id = 3;
    n.seg_len = nullptr;
    EXPECT_EQ(ps__vb_grant_fit(&g, &n), PS__VB_FIT_NO) << "not steerable (a response)";
    g.data_cap = 8 + 4096 + 12;
    EXPECT_EQ(ps__vb_grant_fit(&g, &n), PS__VB_FIT_DATA) << "all in the data region";
    n.meta_len = 1025;
    EXPECT_EQ(ps__vb_grant_fit(&g, &n), PS__VB_FIT_NO) << "the meta does not fit";
}

TEST(Grants, SteeredGrantCarriesTheApplicationsBuffer)
{
    Receiver r;
    int regs = 1;
    ps_slice_t app;
    ASSERT_EQ(ps_slice_alloc(4096, 64, &app), PS_OK);
    ps__vb_steer_t steer;
    steer.seg = 1;
    steer.dest = ps_slice_ref(&app);
    steer.rkey = 0x77;
    steer.handle = &regs;
    ps__vb_ctrl_t st = SteerStart(1, 42), reply;
    ASSERT_EQ(ps__vb_grants_start(r.g, 1, &st, &steer, &reply), PS_OK);
    EXPECT_TRUE(reply.flags & PS__VB_RDV_STEER);
    EXPECT_EQ(reply.steer_seg, 1);
    EXPECT_EQ(reply.steer_addr, (uint64_t)(uintptr_t)ps_slice_ptr(&app));
    EXPECT_EQ(reply.steer_len, 4096u);
    EXPECT_EQ(reply.steer_rkey, 0x77u);
    EXPECT_EQ(reply.customer_id, 3);
    EXPECT_EQ(reply.data_len, 20u) << "the data region holds the other segments";
    EXPECT_EQ(r.Stats().steered, 1u);

    // The message lands: the steered region is the application's buffer.
    ps__vb_grant_t grant;
    ps__vb_grant_from_ctrl(&reply, &grant);
    EXPECT_EQ(grant.steer_len, 4096u);
    memcpy(reinterpret_cast<void *>(grant.meta_addr), "META", 4);
    const uint8_t *m;
    uint32_t mc;
    uint64_t dc;
    ps__vb_grant_rec_t *rec = ps__vb_grants_filled(r.g, 1, grant.slot, &m, &mc, &dc);
    ASSERT_NE(rec, nullptr);
    unsigned seg = 9;
    const ps_slice_t *region = nullptr;
    ASSERT_TRUE(ps__vb_grants_steered(rec, &seg, &region));
    EXPECT_EQ(seg, 1u);
    EXPECT_EQ(ps_slice_ptr(region), ps_slice_ptr(&app));
    ps_slice_t data;
    ASSERT_EQ(ps__vb_grants_data(r.g, rec, &data), PS_OK);
    ps_slice_unref(&data);

    // Re-granted with the region; a region the application no longer
    // names is taken off before the re-grant goes out.
    uint64_t owners[2];
    ps__vb_ctrl_t msgs[2];
    ASSERT_EQ(ps__vb_grants_take_regrants(r.g, owners, msgs, 2), 1u);
    EXPECT_TRUE(msgs[0].flags & PS__VB_RDV_STEER);
    EXPECT_EQ(msgs[0].steer_addr, reply.steer_addr);
    EXPECT_EQ(msgs[0].customer_id, 3);
    EXPECT_EQ(regs, 1);
    EXPECT_EQ(ps__vb_grants_unsteer(r.g, 2, msgs[0].slot), PS_ERR_PROTOCOL) << "not its grant";
    ASSERT_EQ(ps__vb_grants_unsteer(r.g, 1, msgs[0].slot), PS_OK);
    EXPECT_EQ(regs, 0) << "the registration goes with the region";
    rec = ps__vb_grants_filled(r.g, 1, msgs[0].slot, &m, &mc, &dc);
    ASSERT_NE(rec, nullptr);
    EXPECT_FALSE(ps__vb_grants_steered(rec, &seg, &region));
    ps__vb_grants_done(r.g, rec);
    ps_slice_unref(&app);
}

TEST(Grants, SteeredRegionIsReleasedWhateverEndsTheGrant)
{
    ps_slice_t app;
    ASSERT_EQ(ps_slice_alloc(4096, 64, &app), PS_OK);
    auto steer_of = [&](int *regs) {
        ps__vb_steer_t s;
        s.seg = 1;
        s.dest = ps_slice_ref(&app);
        s.rkey = 1;
        s.handle = regs;
        return s;
    };
    // Dropped by the sender, its connection gone, the van closed.
    int dropped = 1, gone = 1, closed = 1, refused = 1;
    ps_slice_t held = PS_SLICE_EMPTY_INIT;
    {
        Receiver r;
        ps__vb_ctrl_t st = SteerStart(1, 1), reply;
        ps__vb_steer_t s = steer_of(&dropped);
        ASSERT_EQ(ps__vb_grants_start(r.g, 1, &st, &s, &reply), PS_OK);
        ASSERT_EQ(ps__vb_grants_drop(r.g, 1, reply.slot), PS_OK);
        EXPECT_EQ(dropped, 0);

        st = SteerStart(2, 2);
        s = steer_of(&gone);
        ASSERT_EQ(ps__vb_grants_start(r.g, 2, &st, &s, &reply), PS_OK);
        ps__vb_grants_owner_gone(r.g, 2);
        EXPECT_EQ(gone, 0);

        // Closed while the application holds the message's data: the
        // registration goes at close, the data stays valid.
        st = SteerStart(3, 3);
        s = steer_of(&closed);
        ASSERT_EQ(ps__vb_grants_start(r.g, 3, &st, &s, &reply), PS_OK);
        ps__vb_grant_t grant;
        ps__vb_grant_from_ctrl(&reply, &grant);
        held = Land(r, 3, grant, "steered rest");

        // A steer that does not fit its start stays the caller's.
        st = SteerStart(4, 4);
        s = steer_of(&refused);
        s.seg = 3;
        EXPECT_EQ(ps__vb_grants_start(r.g, 4, &st, &s, &reply), PS_ERR_INVALID_ARG);
        EXPECT_EQ(refused, 1);
        ps_slice_unref(&s.dest);
        ps__vb_ctrl_t plain = SteerStart(5, 5);
        plain.flags &= (uint8_t)~PS__VB_RDV_STEER;
        s = steer_of(&refused);
        EXPECT_EQ(ps__vb_grants_start(r.g, 5, &plain, &s, &reply), PS_ERR_INVALID_ARG)
            << "a start that does not steer";
        ps_slice_unref(&s.dest);
    }
    EXPECT_EQ(closed, 0);
    EXPECT_EQ(memcmp(ps_slice_ptr(&held), "steered rest", 12), 0);
    ps_slice_unref(&held);
    ps_slice_unref(&app);
}

// The registration is let go of before the buffer's last reference: a
// registration cache frees its entry with the buffer.
struct Order {
    int regs = 1;
    bool buffer_freed = false;
    bool released_while_alive = false;
};

void OrderRelease(void *ctx, void *handle)
{
    (void)ctx;
    Order *o = static_cast<Order *>(handle);
    o->released_while_alive = !o->buffer_freed;
    o->regs--;
}

void OrderFree(void *data, size_t len, void *arg)
{
    (void)len;
    free(data);
    static_cast<Order *>(arg)->buffer_freed = true;
}

TEST(Grants, SteeredRegistrationGoesBeforeTheBuffer)
{
    Receiver r;
    ps__vb_grants_ops_t ops = {FakeAlloc, FakeNotify, &r.fake, OrderRelease};
    ps__vb_grants_params_t p;
    memset(&p, 0, sizeof(p));
    p.max_slots = 8;
    p.max_cached_bytes = 1 << 20;
    p.max_meta_len = 4096;
    ps__vb_grants_t *g = nullptr;
    ASSERT_EQ(ps__vb_grants_create(&p, &ops, &g), PS_OK);
    Order order;
    ps__vb_steer_t steer;
    steer.seg = 1;
    ASSERT_EQ(ps_slice_wrap(malloc(4096), 4096, OrderFree, &order, &steer.dest), PS_OK);
    steer.rkey = 1;
    steer.handle = &order;
    ps__vb_ctrl_t st = SteerStart(1, 1), reply;
    ASSERT_EQ(ps__vb_grants_start(g, 1, &st, &steer, &reply), PS_OK); // the grant's reference only
    ASSERT_EQ(ps__vb_grants_drop(g, 1, reply.slot), PS_OK);
    EXPECT_EQ(order.regs, 0);
    EXPECT_TRUE(order.buffer_freed);
    EXPECT_TRUE(order.released_while_alive);
    ps__vb_grants_close(g);
}

TEST(Grants, CloseWhileApplicationHoldsData)
{
    Fake fake;
    ps__vb_grants_params_t p;
    memset(&p, 0, sizeof(p));
    p.max_slots = 8;
    p.max_cached_bytes = 1 << 20;
    p.max_meta_len = 4096;
    ps__vb_grants_ops_t ops = {FakeAlloc, FakeNotify, &fake, FakeSteerRelease};
    ps__vb_grants_t *g = nullptr;
    ASSERT_EQ(ps__vb_grants_create(&p, &ops, &g), PS_OK);
    ps__vb_ctrl_t reply;
    ps__vb_ctrl_t st = Start(1, 1, 0, 10, 32, true);
    ASSERT_EQ(ps__vb_grants_start(g, 1, &st, nullptr, &reply), PS_OK);
    ps__vb_ctrl_t st2 = Start(2, 2, 0, 10, 32, true);
    ps__vb_ctrl_t reply2;
    ASSERT_EQ(ps__vb_grants_start(g, 1, &st2, nullptr, &reply2), PS_OK);
    const uint8_t *m;
    uint32_t mc;
    uint64_t dc;
    ps__vb_grant_rec_t *rec = ps__vb_grants_filled(g, 1, reply.slot, &m, &mc, &dc);
    ASSERT_NE(rec, nullptr);
    ps_slice_t data;
    ASSERT_EQ(ps__vb_grants_data(g, rec, &data), PS_OK);
    ps__vb_grants_close(g); // frees grant 2 now, grant 1 later
    memset(ps_slice_ptr(&data), 0xab, data.len); // still ours
    int before = fake.notifies;
    ps_slice_unref(&data); // frees grant 1 and the object (ASan checks)
    EXPECT_EQ(fake.notifies, before) << "no re-grant after close";
}

} // namespace
