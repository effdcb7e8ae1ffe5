/*
 * The checks of a MSG record's head and segment descriptors (shm_proto.h):
 * what a peer wrote into the ring, before the receiver trusts any length
 * or offset in it.
 */
#include <string.h>

#include "ps/base/log.h"
#include "ps/net/message.h"
#include "ps/net/shm/shm_job.h"
#include "ps/net/shm/shm_proto.h"

ps_status_t ps__shm_rec_msg_head(const uint8_t *rec, uint32_t rec_len, uint32_t max_meta,
                                 int peer_id, ps__shm_rec_msg_t *h_p, size_t *head_p)
{
    ps__shm_rec_msg_t h;
    if (rec_len < sizeof(h)) {
        return PS_ERR_PROTOCOL;
    }
    memcpy(&h, rec, sizeof(h));
    if (h.num_seg > PS_MSG_MAX_DATA || h.meta_len == 0 || h.meta_len > max_meta) {
        ps_error(PS_LOG_SHM, "node %d sent a message with %u segments and %u meta bytes; closing",
                 peer_id, h.num_seg, h.meta_len);
        return PS_ERR_PROTOCOL;
    }
    size_t descs = (size_t)h.num_seg * sizeof(ps__shm_seg_desc_t);
    size_t head = sizeof(h) + descs + (h.meta_streamed ? 0 : h.meta_len);
    if (head > rec_len) {
        ps_error(PS_LOG_SHM, "node %d sent a truncated message record; closing", peer_id);
        return PS_ERR_PROTOCOL;
    }
    *h_p = h;
    *head_p = head;
    return PS_OK;
}

ps_status_t ps__shm_rec_descs_check(const ps__shm_seg_desc_t *desc, uint32_t n, int meta_streamed,
                                    size_t head, uint32_t rec_len, uint64_t max_message,
                                    int peer_id)
{
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; ++i) {
        const ps__shm_seg_desc_t *d = &desc[i];
        int ok = d->kind >= PS__SHM_SEG_INLINE && d->kind <= PS__SHM_SEG_PLACED &&
                 d->len <= max_message;
        if (ok && d->kind == PS__SHM_SEG_INLINE) {
            ok = d->len <= PS__SHM_INLINE_MAX && d->a >= head && d->a <= rec_len &&
                 d->len <= rec_len - d->a;
        }
        if (ok && meta_streamed) {
            ok = d->kind == PS__SHM_SEG_STREAM;
        }
        if (!ok) {
            ps_error(PS_LOG_SHM, "node %d sent a bad segment descriptor; closing", peer_id);
            return PS_ERR_PROTOCOL;
        }
        total += d->len;
    }
    if (total > max_message) {
        ps_error(PS_LOG_SHM, "node %d sent a message of %llu bytes, over the limit; closing",
                 peer_id, (unsigned long long)total);
        return PS_ERR_TOO_LARGE;
    }
    return PS_OK;
}
