/*
 * ps_start_params_t: defaults from the config table, values from the
 * environment (DMLC_* / PS_*), as upstream launchers set them.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/net/postoffice.h"
#include "ps/net/params_internal.h"

/* The config table's default of an INT variable (one source of truth). */
static int table_default_int(ps_config_id_t id, int fallback)
{
    const ps_config_entry_t *e = ps_config_entry(id);
    int64_t v;
    if (e == NULL || ps_config_parse_int(e->default_value, &v) != PS_OK)
        return fallback;
    return (int)v;
}

static int table_default_bool(ps_config_id_t id, int fallback)
{
    const ps_config_entry_t *e = ps_config_entry(id);
    int v;
    if (e == NULL || ps_config_parse_bool(e->default_value, &v) != PS_OK)
        return fallback;
    return v;
}

void ps_start_params_init(ps_start_params_t *p)
{
    memset(p, 0, sizeof(*p));
    p->role = PS_ROLE_WORKER;
    p->preferred_rank = -1;
    p->start_timeout_ms = table_default_int(PS_CFG_PS_START_TIMEOUT_MS, 120000);
    p->barrier_timeout_ms = table_default_int(PS_CFG_PS_BARRIER_TIMEOUT_MS, 600000);
    p->request_timeout_ms = table_default_int(PS_CFG_PS_REQUEST_TIMEOUT_MS, 600000);
    p->finalize_timeout_ms = table_default_int(PS_CFG_PS_FINALIZE_TIMEOUT_MS, -1);
    p->heartbeat_interval_s = table_default_int(PS_CFG_PS_HEARTBEAT_INTERVAL, 5);
    p->heartbeat_timeout_s = table_default_int(PS_CFG_PS_HEARTBEAT_TIMEOUT, 20);
    p->busy_poll = table_default_bool(PS_CFG_PS_BUSY_POLL, 0);
    p->group_size = 1;
    p->instance = -1;
}

static ps_status_t parse_role(const char *text, ps_role_t *role_p)
{
    static const struct {
        const char *name;
        ps_role_t role;
    } roles[] = {
        {"scheduler", PS_ROLE_SCHEDULER},
        {"server", PS_ROLE_SERVER},
        {"worker", PS_ROLE_WORKER},
        {"joint", PS_ROLE_JOINT},
    };
    for (size_t i = 0; i < sizeof(roles) / sizeof(roles[0]); i++) {
        if (strcasecmp(text, roles[i].name) == 0) {
            *role_p = roles[i].role;
            return PS_OK;
        }
    }
    return PS_ERR_PARSE;
}

/* A required variable: PS_ERR_CONFIG, logged, when missing. Bad values are
 * logged by the config getters. */
static ps_status_t required_int(ps_config_id_t id, int64_t min, int64_t max, int *value_p)
{
    int64_t v;
    ps_status_t st = ps_config_get_int(id, &v);
    const char *name = ps_config_entry(id)->name;
    if (st == PS_ERR_NOT_FOUND) {
        ps_error(PS_LOG_CORE, "%s is not set; it is required (%s)", name,
                 ps_config_entry(id)->help);
        return PS_ERR_CONFIG;
    }
    if (st != PS_OK)
        return PS_ERR_CONFIG;
    if (v < min || v > max) {
        ps_error(PS_LOG_CORE, "%s is %lld; expected %lld to %lld", name, (long long)v,
                 (long long)min, (long long)max);
        return PS_ERR_CONFIG;
    }
    *value_p = (int)v;
    return PS_OK;
}

static ps_status_t optional_int(ps_config_id_t id, int64_t min, int64_t max, int *value_p)
{
    int64_t v;
    ps_status_t st = ps_config_get_int(id, &v);
    if (st == PS_ERR_NOT_FOUND)
        return PS_OK; /* keep the default */
    if (st != PS_OK)
        return PS_ERR_CONFIG;
    if (v < min || v > max) {
        ps_error(PS_LOG_CORE, "%s is %lld; expected %lld to %lld", ps_config_entry(id)->name,
                 (long long)v, (long long)min, (long long)max);
        return PS_ERR_CONFIG;
    }
    *value_p = (int)v;
    return PS_OK;
}

static ps_status_t copy_str(ps_config_id_t id, int required, char *dst, size_t cap)
{
    const char *v = NULL;
    const char *name = ps_config_entry(id)->name;
    ps_status_t st = ps_config_get_str(id, &v);
    if (st == PS_ERR_NOT_FOUND) {
        if (!required)
            return PS_OK;
        ps_error(PS_LOG_CORE, "%s is not set; it is required (%s)", name,
                 ps_config_entry(id)->help);
        return PS_ERR_CONFIG;
    }
    if (st != PS_OK)
        return PS_ERR_CONFIG;
    if (strlen(v) >= cap) {
        ps_error(PS_LOG_CORE, "%s is too long (%zu characters, at most %zu)", name, strlen(v),
                 cap - 1);
        return PS_ERR_CONFIG;
    }
    memcpy(dst, v, strlen(v) + 1);
    return PS_OK;
}

/* Heartbeats are on by default (5 s, dead after 20 s of silence). When only
 * one of the two variables is set, the other follows it, so that setting
 * one never gives a pair that declares live nodes dead:
 *  - PS_HEARTBEAT_INTERVAL=0 alone turns the timeout off too (nodes that
 *    send no heartbeats must not be declared dead by silence);
 *  - an interval alone: timeout 4 intervals, at least the default;
 *  - a timeout alone: the default interval, or a quarter of a shorter
 *    timeout (at least 1 s).
 * Both set explicitly are honoured as they are (with a warning when the
 * timeout does not exceed the interval). */
static void derive_heartbeat(ps_start_params_t *p)
{
    int interval_set = ps_config_is_set(PS_CFG_PS_HEARTBEAT_INTERVAL);
    int timeout_set = ps_config_is_set(PS_CFG_PS_HEARTBEAT_TIMEOUT);
    int def_timeout = table_default_int(PS_CFG_PS_HEARTBEAT_TIMEOUT, 20);
    int def_interval = table_default_int(PS_CFG_PS_HEARTBEAT_INTERVAL, 5);

    if (interval_set && !timeout_set) {
        if (p->heartbeat_interval_s == 0)
            p->heartbeat_timeout_s = 0;
        else
            p->heartbeat_timeout_s = p->heartbeat_interval_s > def_timeout / 4
                                         ? 4 * p->heartbeat_interval_s
                                         : def_timeout;
    } else if (timeout_set && !interval_set && p->heartbeat_timeout_s > 0) {
        int quarter = p->heartbeat_timeout_s / 4;
        p->heartbeat_interval_s = quarter >= def_interval ? def_interval
                                  : quarter >= 1         ? quarter
                                                         : 1;
    }
    if (p->heartbeat_interval_s > 0 && p->heartbeat_timeout_s > 0 &&
        p->heartbeat_timeout_s <= p->heartbeat_interval_s)
        ps_warn(PS_LOG_CORE, "PS_HEARTBEAT_TIMEOUT (%d s) does not exceed PS_HEARTBEAT_INTERVAL "
                "(%d s): live nodes may be declared dead between two heartbeats",
                p->heartbeat_timeout_s, p->heartbeat_interval_s);
}

/* Instance groups (postoffice.h): DMLC_GROUP_SIZE; the instance from
 * DMLC_INSTANCE_ID, else StepMesh's STEPMESH_GPU + DMLC_RANK_OFFSET; with
 * DMLC_NODE_RANK and no DMLC_RANK, the rank node_rank * g + instance, as
 * StepMesh computes it. A rank and an instance that disagree are refused. */
static ps_status_t group_from_env(ps_start_params_t *p, int whole_group)
{
    ps_status_t st;
    int offset = 0;
    int gpu = -1;
    int node_rank = -1;
    if ((st = optional_int(PS_CFG_DMLC_GROUP_SIZE, 1, PS_GROUP_SIZE_MAX, &p->group_size)) !=
            PS_OK ||
        (st = optional_int(PS_CFG_DMLC_RANK_OFFSET, 0, PS_GROUP_SIZE_MAX, &offset)) != PS_OK ||
        (st = optional_int(PS_CFG_DMLC_NODE_RANK, 0, 1 << 20, &node_rank)) != PS_OK)
        return st;
    int g = p->group_size;
    if (whole_group) {
        if (p->preferred_rank < 0)
            p->preferred_rank = node_rank;
        return PS_OK;
    }
    if (ps_config_is_set(PS_CFG_DMLC_INSTANCE_ID)) {
        if ((st = optional_int(PS_CFG_DMLC_INSTANCE_ID, 0, g - 1, &p->instance)) != PS_OK)
            return st;
    } else if (ps_config_is_set(PS_CFG_STEPMESH_GPU)) {
        if ((st = optional_int(PS_CFG_STEPMESH_GPU, 0, PS_GROUP_SIZE_MAX, &gpu)) != PS_OK)
            return st;
        p->instance = g > 1 ? gpu + offset : 0;
        if (p->instance >= g) {
            ps_error(PS_LOG_CORE, "STEPMESH_GPU %d + DMLC_RANK_OFFSET %d is instance %d, but "
                     "DMLC_GROUP_SIZE is %d (instances 0..%d)", gpu, offset, p->instance, g,
                     g - 1);
            return PS_ERR_CONFIG;
        }
    } else if (g == 1) {
        p->instance = 0;
    }
    if (p->role == PS_ROLE_SCHEDULER)
        return PS_OK;
    if (p->preferred_rank < 0 && node_rank >= 0) {
        if (p->instance < 0) {
            ps_error(PS_LOG_CORE, "DMLC_NODE_RANK is set but not the instance within the node "
                     "(DMLC_INSTANCE_ID or STEPMESH_GPU) with DMLC_GROUP_SIZE %d", g);
            return PS_ERR_CONFIG;
        }
        p->preferred_rank = node_rank * g + p->instance;
    }
    return ps__start_params_check_instance(p);
}

ps_status_t ps__start_params_check_instance(const ps_start_params_t *p)
{
    int g = p->group_size;
    if (p->role == PS_ROLE_SCHEDULER || p->preferred_rank < 0 || p->instance < 0 || g < 1 ||
        p->preferred_rank % g == p->instance)
        return PS_OK;
    ps_error(PS_LOG_CORE, "rank %d is instance %d of its group (DMLC_GROUP_SIZE %d), not "
             "instance %d (DMLC_INSTANCE_ID, STEPMESH_GPU)", p->preferred_rank,
             p->preferred_rank % g, g, p->instance);
    return PS_ERR_CONFIG;
}

ps_status_t ps__start_params_given_or_env(const ps_start_params_t *given, int whole_group,
                                          ps_start_params_t *p)
{
    if (given == NULL)
        return ps__start_params_from_env(p, whole_group);
    *p = *given;
    return PS_OK;
}

ps_status_t ps_start_params_from_env(ps_start_params_t *params_p)
{
    return ps__start_params_from_env(params_p, 0);
}

ps_status_t ps__start_params_from_env(ps_start_params_t *params_p, int whole_group)
{
    ps_start_params_t p;
    ps_status_t st;
    const char *role = NULL;

    if (params_p == NULL)
        return PS_ERR_INVALID_ARG;
    ps_start_params_init(&p);

    st = ps_config_get_str(PS_CFG_DMLC_ROLE, &role);
    if (st == PS_ERR_NOT_FOUND) {
        ps_error(PS_LOG_CORE, "DMLC_ROLE is not set; it is required (scheduler, server or worker)");
        return PS_ERR_CONFIG;
    }
    if (st != PS_OK)
        return PS_ERR_CONFIG;
    if (parse_role(role, &p.role) != PS_OK) {
        ps_error(PS_LOG_CORE, "DMLC_ROLE is '%s'; expected scheduler, server, worker or joint",
                 role);
        return PS_ERR_CONFIG;
    }

    if ((st = required_int(PS_CFG_DMLC_NUM_WORKER, 0, 1 << 20, &p.num_workers)) != PS_OK ||
        (st = required_int(PS_CFG_DMLC_NUM_SERVER, 0, 1 << 20, &p.num_servers)) != PS_OK ||
        (st = copy_str(PS_CFG_DMLC_PS_ROOT_URI, 1, p.scheduler_host, sizeof(p.scheduler_host))) !=
            PS_OK ||
        (st = required_int(PS_CFG_DMLC_PS_ROOT_PORT, 1, 65535, &p.scheduler_port)) != PS_OK ||
        (st = copy_str(PS_CFG_DMLC_NODE_HOST, 0, p.node_host, sizeof(p.node_host))) != PS_OK ||
        (st = copy_str(PS_CFG_DMLC_INTERFACE, 0, p.interface, sizeof(p.interface))) != PS_OK ||
        (st = optional_int(PS_CFG_DMLC_PORT, 0, 65535, &p.port)) != PS_OK)
        return st;

    /* Preferred rank: DMLC_RANK, else (workers) BytePS's DMLC_WORKER_ID. */
    if (ps_config_is_set(PS_CFG_DMLC_RANK)) {
        if ((st = optional_int(PS_CFG_DMLC_RANK, -1, 1 << 20, &p.preferred_rank)) != PS_OK)
            return st;
    } else if (p.role == PS_ROLE_WORKER && ps_config_is_set(PS_CFG_DMLC_WORKER_ID)) {
        if ((st = optional_int(PS_CFG_DMLC_WORKER_ID, -1, 1 << 20, &p.preferred_rank)) != PS_OK)
            return st;
    }

    if ((st = optional_int(PS_CFG_PS_START_TIMEOUT_MS, -1, INT32_MAX, &p.start_timeout_ms)) !=
            PS_OK ||
        (st = optional_int(PS_CFG_PS_BARRIER_TIMEOUT_MS, -1, INT32_MAX,
                           &p.barrier_timeout_ms)) != PS_OK ||
        (st = optional_int(PS_CFG_PS_REQUEST_TIMEOUT_MS, -1, INT32_MAX,
                           &p.request_timeout_ms)) != PS_OK ||
        (st = optional_int(PS_CFG_PS_FINALIZE_TIMEOUT_MS, -1, INT32_MAX,
                           &p.finalize_timeout_ms)) != PS_OK ||
        (st = optional_int(PS_CFG_PS_HEARTBEAT_INTERVAL, 0, 86400, &p.heartbeat_interval_s)) !=
            PS_OK ||
        (st = optional_int(PS_CFG_PS_HEARTBEAT_TIMEOUT, 0, 86400 * 7, &p.heartbeat_timeout_s)) !=
            PS_OK)
        return st;

    derive_heartbeat(&p);

    int busy = 0;
    st = ps_config_get_bool(PS_CFG_PS_BUSY_POLL, &busy);
    if (st == PS_OK)
        p.busy_poll = busy;
    else if (st != PS_ERR_NOT_FOUND)
        return PS_ERR_CONFIG;

    if ((st = group_from_env(&p, whole_group)) != PS_OK)
        return st;

    /* p.van stays "": start resolves it with ps_van_select_name(), so that
     * programs filling the struct themselves get the same rule. */
    *params_p = p;
    return PS_OK;
}
