/*
 * PS_RESEND and PS_DROP_MSG in the postoffice: acknowledging what arrives,
 * resending what was not acknowledged (resender.c keeps the books), and
 * dropping received data messages on purpose to test that.
 */
#include <stdint.h>
#include <unistd.h>

#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/base/time.h"
#include "ps/net/postoffice_state_internal.h"

/* PS_RESEND, PS_RESEND_TIMEOUT and PS_DROP_MSG. */
ps_status_t ps__po_setup_resend(ps_postoffice_t *po)
{
    int resend = 0;
    ps_status_t st = ps_config_get_bool(PS_CFG_PS_RESEND, &resend);
    if (st != PS_OK && st != PS_ERR_NOT_FOUND)
        return PS_ERR_CONFIG;
    int64_t timeout_ms = 1000;
    st = ps_config_get_int(PS_CFG_PS_RESEND_TIMEOUT, &timeout_ms);
    if (st != PS_OK && st != PS_ERR_NOT_FOUND)
        return PS_ERR_CONFIG;
    int64_t drop = 0;
    st = ps_config_get_int(PS_CFG_PS_DROP_MSG, &drop);
    if (st != PS_OK && st != PS_ERR_NOT_FOUND)
        return PS_ERR_CONFIG;
    if (drop < 0 || drop > 100) {
        ps_error(PS_LOG_CORE, "PS_DROP_MSG is %lld; expected a percentage, 0 to 100",
                 (long long)drop);
        return PS_ERR_CONFIG;
    }
    if (resend) {
        if (timeout_ms <= 0 || timeout_ms > 3600 * 1000) {
            ps_error(PS_LOG_CORE, "PS_RESEND_TIMEOUT is %lld; expected 1 to 3600000 (ms)",
                     (long long)timeout_ms);
            return PS_ERR_CONFIG;
        }
        st = ps__resender_create((uint64_t)timeout_ms * PS_NSEC_PER_MSEC, PS__RESEND_MAX_RETRIES,
                                 PS__RESEND_DEDUP_CAP, &po->res);
        if (st != PS_OK)
            return st;
        ps_info(PS_LOG_CORE, "PS_RESEND: data messages are acknowledged, resent after %lld ms "
                "(then 2x, 3x, ...) at most %d times, and de-duplicated",
                (long long)timeout_ms, PS__RESEND_MAX_RETRIES);
    }
    po->drop_pct = (int)drop;
    po->drop_rng = ps_time_now_ns() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)po;
    if (drop > 0)
        ps_warn(PS_LOG_CORE, "PS_DROP_MSG=%lld: dropping that percentage of the data messages "
                "this node receives, on purpose%s", (long long)drop,
                resend ? "" : " (without PS_RESEND=1 they are lost for good)");
    return PS_OK;
}

/* Acknowledges a received data message: an ACK carrying its app, customer,
 * timestamp and request flag (the rest of its key is who sends the ACK
 * and who receives it). */
void ps__po_send_ack(ps_postoffice_t *po, const ps_meta_t *meta)
{
    ps_msg_t ack;
    ps_msg_init(&ack);
    ack.meta.recver = meta->sender;
    ack.meta.app_id = meta->app_id;
    ack.meta.customer_id = meta->customer_id;
    ack.meta.timestamp = meta->timestamp;
    ack.meta.request = meta->request;
    ack.meta.control.cmd = PS_CTRL_ACK;
    ps__msg_key_t key;
    ps__msg_key_of(meta, &key);
    ack.meta.control.msg_sig = ps__msg_key_sig(&key);
    (void)ps__po_van_send(po, &ack); /* a lost ACK only costs a resend */
}

/* PS_DROP_MSG: 1 if this received data message is to be dropped (splitmix64:
 * a test knob, nothing a peer gains by predicting). */
int ps__po_drop_on_purpose(ps_postoffice_t *po)
{
    uint64_t z = __atomic_add_fetch(&po->drop_rng, 0x9e3779b97f4a7c15ull, __ATOMIC_RELAXED);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (int)(z % 100) < po->drop_pct;
}

static ps_status_t po_resend_cb(void *arg, ps_msg_t *msg)
{
    ps_postoffice_t *po = arg;
    if (ps__po_closing(po))
        return PS_ERR_SHUTDOWN;
    ps_debug(PS_LOG_CORE, "resending to node %d: app %d ts %d%s", msg->meta.recver,
             msg->meta.app_id, msg->meta.timestamp, msg->meta.request ? " request" : " response");
    return ps__po_van_send(po, msg);
}

static void po_giveup_cb(void *arg, const ps_msg_t *msg, int retries)
{
    ps_postoffice_t *po = arg;
    char who[64];
    ps__po_id_describe(msg->meta.recver, who, sizeof(who));
    if (msg->meta.request) {
        ps_error(PS_LOG_CORE, "%s did not acknowledge request ts %d of app %d after %d resends "
                 "(PS_RESEND_TIMEOUT %d ms); failing it with 'timed out'", who,
                 msg->meta.timestamp, msg->meta.app_id, retries,
                 (int)ps_config_int_or(PS_CFG_PS_RESEND_TIMEOUT, 1000));
        ps__registry_fail_request(po->reg, &msg->meta, PS_ERR_TIMED_OUT);
    } else {
        ps_error(PS_LOG_CORE, "%s did not acknowledge the response to its request ts %d of "
                 "app %d after %d resends (PS_RESEND_TIMEOUT %d ms); its request will time out",
                 who, msg->meta.timestamp, msg->meta.app_id, retries,
                 (int)ps_config_int_or(PS_CFG_PS_RESEND_TIMEOUT, 1000));
    }
}

uint64_t ps__po_resend_poll(ps_postoffice_t *po, uint64_t now_ns)
{
    return ps__resender_poll(po->res, now_ns, po_resend_cb, po_giveup_cb, po);
}
