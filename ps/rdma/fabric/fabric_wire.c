/*
 * The libfabric van's wire helpers (fabric_wire.h): the checks of what a
 * peer sends, tags, the provider hash and the host id carried in endpoint
 * blobs.
 */
#include "ps/rdma/fabric/fabric_wire.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ps/net/codec/frame.h"
#include "ps/net/codec/lane.h"
#include "ps/net/codec/message.h"

#define KIND_SHIFT 60
#define EPOCH_SHIFT 48
#define SENDER_SHIFT 32

int ps__fab_hdr_valid(const ps__fab_hdr_t *hdr)
{
    return hdr->magic == PS__FAB_MAGIC && hdr->version == PS__FAB_VERSION && hdr->sender > 0 &&
           hdr->sender < PS_NODE_EMPTY;
}

int ps__fab_lane_valid(const ps__fab_hdr_t *hdr, size_t len)
{
    return len >= PS_LANE_HDR_LEN && len <= PS_LANE_MAX_BYTES &&
           (hdr->flags & ~PS__FAB_F_LANE) == 0;
}

int ps__fab_ext_len_valid(const ps__fab_hdr_t *hdr, uint64_t max_meta)
{
    return hdr->ext_len != 0 && hdr->ext_len <= max_meta + PS_FRAME_MAX_HEADER_LEN;
}

int ps__fab_blob_read(const uint8_t *name, size_t len, ps__fab_ep_blob_t *b_p)
{
    ps__fab_ep_blob_t b;
    if (len < sizeof(b))
        return 0;
    memcpy(&b, name, sizeof(b));
    if (b.magic != PS__FAB_EP_MAGIC || b.version != PS__FAB_VERSION ||
        sizeof(b) + b.addr_len > len)
        return 0;
    *b_p = b;
    return 1;
}

uint64_t ps__fab_tag(int kind, uint32_t epoch, int sender, uint32_t seq)
{
    return ((uint64_t)(kind & 0xF) << KIND_SHIFT) | ((uint64_t)(epoch & 0xFFF) << EPOCH_SHIFT) |
           ((uint64_t)(sender & 0xFFFF) << SENDER_SHIFT) | seq;
}

/* FNV-1a: a provider name in 4 bytes, to refuse peers on another one. */
uint32_t ps__fab_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (; *s != '\0'; s++) {
        h ^= (uint8_t)*s;
        h *= 16777619u;
    }
    return h;
}

/* This boot of this machine: the shared-memory provider reaches only
 * processes with the same id. */
uint64_t ps__fab_host_id(void)
{
    char line[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f != NULL) {
        if (fgets(line, sizeof(line), f) == NULL)
            line[0] = '\0';
        fclose(f);
    }
    if (line[0] == '\0')
        gethostname(line, sizeof(line) - 1);
    uint64_t h = 1469598103934665603ull;
    for (const char *p = line; *p != '\0' && *p != '\n'; p++) {
        h ^= (uint8_t)*p;
        h *= 1099511628211ull;
    }
    return h;
}

/* This process's PID namespace: a peer's pid names its process here only
 * when both are the same (processes in containers sharing /dev/shm have
 * the same boot id but their own pids). */
uint64_t ps__fab_pid_ns(void)
{
    struct stat st;
    if (stat("/proc/self/ns/pid", &st) != 0)
        return 0;
    return ((uint64_t)st.st_dev << 32) ^ (uint64_t)st.st_ino;
}
