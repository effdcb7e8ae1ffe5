/*
 * Joining the job (upstream's van start-up): a server or worker registers
 * with the scheduler (ADD_NODE carrying its address and preferred rank),
 * the scheduler waits for every node, assigns ids (node_table.c), connects
 * to each and sends them the table; each node finds itself in it, connects
 * to its peers (workers to servers, servers to workers) and announces its
 * id. A start that cannot succeed ends, on every node, with a status and
 * the scheduler's reason (who registered, which ranks clash, which node
 * was started with other DMLC_NUM_SERVER / DMLC_NUM_WORKER) instead of a
 * hang.
 *
 * Late registrations (recovery) are in postoffice_recovery.c.
 */
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "ps/base/config.h"
#include "ps/base/log.h"
#include "ps/base/sockaddr.h"
#include "ps/base/time.h"
#include "ps/net/auth.h"
#include "ps/net/node_table_internal.h"
#include "ps/net/params_internal.h"
#include "ps/net/postoffice_state_internal.h"

/* ---- registration (van thread) ---- */

/* A registration carries the job shape its node was started with, so that
 * nodes started with different DMLC_NUM_SERVER / DMLC_NUM_WORKER are told
 * at once instead of waiting for a count that never comes. */
#define PS__SHAPE_FMT "servers=%d workers=%d group=%d"

/* ---- the job's identity ---- */

static int job_id_char_ok(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '.' || c == '-' || c == '_';
}

/* PS_OK when `id` is a job id we can carry in a message and a log line. */
static ps_status_t job_id_check(const char *id)
{
    size_t n = strlen(id);
    if (n == 0 || n > PS_JOB_ID_MAX) {
        ps_error(PS_LOG_CORE, "PS_JOB_ID has %zu characters; expected 1 to %d", n,
                 PS_JOB_ID_MAX);
        return PS_ERR_CONFIG;
    }
    for (size_t i = 0; i < n; i++) {
        if (!job_id_char_ok(id[i])) {
            ps_error(PS_LOG_CORE, "PS_JOB_ID '%s' has a '%c'; expected letters, digits, '.', "
                     "'-' and '_'", id, id[i]);
            return PS_ERR_CONFIG;
        }
    }
    return PS_OK;
}

/* The job id after PS__JOB_KEY in a message body, or "". */
void ps__po_body_job_id(const char *body, char *out, size_t cap)
{
    out[0] = '\0';
    const char *key = &PS__JOB_KEY[1]; /* at the start of a body: no blank */
    const char *at = NULL;
    if (strncmp(body, key, strlen(key)) == 0)
        at = body + strlen(key);
    else if ((at = strstr(body, PS__JOB_KEY)) != NULL)
        at += strlen(PS__JOB_KEY);
    if (at == NULL)
        return;
    size_t n = 0;
    while (n + 1 < cap && job_id_char_ok(at[n])) {
        out[n] = at[n];
        n++;
    }
    out[n] = '\0';
}

ps_status_t ps__po_setup_identity(ps_postoffice_t *po)
{
    const char *given = ps_config_str_or(PS_CFG_PS_JOB_ID, "");
    if (given[0] != '\0' && job_id_check(given) != PS_OK)
        return PS_ERR_CONFIG;
    if (!po->is_scheduler) {
        snprintf(po->job_id_claim, sizeof(po->job_id_claim), "%s", given);
        return PS_OK;
    }
    int allow = 0;
    ps_status_t st = ps_config_get_bool(PS_CFG_PS_ALLOW_RECOVERY, &allow);
    if (st != PS_OK && st != PS_ERR_NOT_FOUND)
        return PS_ERR_CONFIG;
    po->sched.allow_recovery = allow;
    if (given[0] != '\0') {
        snprintf(po->job_id, sizeof(po->job_id), "%s", given);
        po->sched.job_id_given = 1;
    } else {
        /* Random: a second job on this port cannot guess it by accident. */
        uint8_t r[PS_AUTH_NONCE_BYTES];
        ps_auth_nonce(r);
        for (int i = 0; i < 8; i++)
            snprintf(po->job_id + 2 * i, sizeof(po->job_id) - 2 * (size_t)i, "%02x", r[i]);
    }
    po->sched.job_started_s = (int64_t)time(NULL);
    po->sched.job_started_ns = ps_time_now_ns();
    if (allow)
        ps_warn(PS_LOG_CORE, "PS_ALLOW_RECOVERY=1: any server or worker that registers after "
                "the job started may take over a dead node, whichever job it belongs to");
    return PS_OK;
}

/* PS_OK, or PS_ERR_CONFIG with why: the node's job shape differs from the
 * scheduler's. A registration without one (another implementation) is
 * not checked. */
ps_status_t ps__po_sched_check_shape(const ps_postoffice_t *po, const ps_msg_t *msg,
                                     const ps_node_t *node, char *why, size_t cap)
{
    char body[64];
    int servers;
    int workers;
    int group;
    char who[PS_NODE_HOSTNAME_MAX + 48];
    ps__msg_body(msg, body, sizeof(body));
    if (sscanf(body, PS__SHAPE_FMT, &servers, &workers, &group) != 3)
        return PS_OK;
    if (servers == po->params.num_servers && workers == po->params.num_workers &&
        group == po->params.group_size)
        return PS_OK;
    char node_group[32] = "";
    char sched_group[32] = "";
    if (group != 1 || po->params.group_size != 1) {
        snprintf(node_group, sizeof(node_group), " DMLC_GROUP_SIZE=%d", group);
        snprintf(sched_group, sizeof(sched_group), " DMLC_GROUP_SIZE=%d",
                 po->params.group_size);
    }
    snprintf(why, cap, "%s was started with DMLC_NUM_SERVER=%d DMLC_NUM_WORKER=%d%s, the "
             "scheduler with DMLC_NUM_SERVER=%d DMLC_NUM_WORKER=%d%s: every node of a job "
             "needs the same counts", ps__node_describe(node, who, sizeof(who)), servers,
             workers, node_group, po->params.num_servers, po->params.num_workers, sched_group);
    return PS_ERR_CONFIG;
}

/* Scheduler: answers a node it will not take. The node has no id; the van
 * needs one to address it: a throw-away id far above the real ones. */
void ps__po_sched_refuse(ps_postoffice_t *po, const ps_node_t *node, ps_status_t status,
                         const char *why)
{
    ps_node_t n = *node;
    ps_mutex_lock(&po->lock);
    po->sched.num_refused++;
    snprintf(po->sched.last_refusal, sizeof(po->sched.last_refusal), "%s", why);
    n.id = PS__REFUSE_ID_BASE + po->sched.refuse_seq;
    po->sched.refuse_seq = (po->sched.refuse_seq + 1) % PS__REFUSE_ID_SPAN;
    ps_mutex_unlock(&po->lock);
    if (po->van->ops->connect(po->van, &n, PS_SCHEDULER_ID) == PS_OK)
        ps__po_send_control(po, n.id, PS_CTRL_ADD_NODE, 0, status, 0, NULL, 0, why);
}

/* Scheduler: a node registers. */
void ps__po_sched_on_add_node(ps_postoffice_t *po, const ps_msg_t *msg)
{
    char who[PS_NODE_HOSTNAME_MAX + 48];
    size_t n;
    const ps_node_t *nodes = ps__msg_nodes(msg, &n);
    if (n < 1) {
        ps_warn(PS_LOG_CORE, "ignoring a registration without a node");
        return;
    }
    const ps_node_t *node = &nodes[0];
    int port = node->num_ports > 0 ? node->ports[0] : 0;
    size_t expected = (size_t)ps__po_server_nodes(po) + (size_t)ps__po_worker_nodes(po);

    ps_mutex_lock(&po->lock);
    if (po->ready || po->finalizing) {
        int late = po->ready;
        ps_status_t verdict = po->sched.verdict;
        char why[sizeof(po->sched.verdict_reason)];
        snprintf(why, sizeof(why), "%s", po->sched.verdict_reason);
        if (!late && verdict != PS_OK)
            po->sched.num_told++; /* the start failed: it hears why, like the others */
        ps_mutex_unlock(&po->lock);
        if (late)
            ps__po_sched_on_late_add_node(po, msg, node);
        else if (verdict != PS_OK)
            ps__po_sched_refuse(po, node, verdict, why);
        else
            ps_warn(PS_LOG_CORE, "ignoring the registration of %s: the job is finishing",
                    ps__node_describe(node, who, sizeof(who)));
        return;
    }
    if (po->sched.job_id_given) {
        /* Both sides were given a job id, and they differ: another job's
         * node. It is refused alone; the job still waits for its own. */
        char body[256];
        char claim[PS_JOB_ID_MAX + 1];
        ps__msg_body(msg, body, sizeof(body));
        ps__po_body_job_id(body, claim, sizeof(claim));
        if (claim[0] != '\0' && strcmp(claim, po->job_id) != 0) {
            char why[512];
            snprintf(why, sizeof(why), "its PS_JOB_ID=%s is not this job's (%s) at %s:%d: it "
                     "belongs to another job; a job needs its own DMLC_PS_ROOT_PORT", claim,
                     po->job_id, po->params.scheduler_host, po->params.scheduler_port);
            ps_mutex_unlock(&po->lock);
            ps_warn(PS_LOG_CORE, "refusing %s: %s", ps__node_describe(node, who, sizeof(who)),
                    why);
            ps__po_sched_refuse(po, node, PS_ERR_CONFIG, why);
            return;
        }
    }
    if (po->sched.verdict == PS_OK) {
        char why[512];
        if (ps__po_sched_check_shape(po, msg, node, why, sizeof(why)) != PS_OK) {
            po->sched.verdict = PS_ERR_CONFIG;
            snprintf(po->sched.verdict_reason, sizeof(po->sched.verdict_reason), "%s", why);
        }
    }
    int idx = ps__node_table_find(po->sched.reg_nodes, po->sched.num_reg, node->hostname, port);
    if (idx < 0) {
        if (po->sched.num_reg == po->sched.cap_reg) {
            size_t cap = po->sched.cap_reg ? po->sched.cap_reg * 2 : 16;
            ps_node_t *p = realloc(po->sched.reg_nodes, cap * sizeof(*p));
            if (p == NULL) {
                ps_mutex_unlock(&po->lock);
                ps_error(PS_LOG_CORE, "out of memory registering a node");
                return;
            }
            po->sched.reg_nodes = p;
            po->sched.cap_reg = cap;
        }
        idx = (int)po->sched.num_reg++;
    }
    po->sched.reg_nodes[idx] = *node;
    po->sched.reg_nodes[idx].id = PS_NODE_EMPTY;
    size_t count = po->sched.num_reg;
    ps_cond_broadcast(&po->cond);
    ps_mutex_unlock(&po->lock);
    ps_info(PS_LOG_CORE, "node registered: %s%s (%zu of %zu)",
            ps__node_describe(node, who, sizeof(who)),
            node->aux_id >= 0 ? " with a preferred rank"
            : node->aux_id < PS_NODE_AUX_ANY ? " for an instance" : "", count, expected);
}

/* Node: the scheduler's answer to our registration. */
void ps__po_node_on_add_node(ps_postoffice_t *po, const ps_msg_t *msg)
{
    size_t n;
    const ps_node_t *nodes = ps__msg_nodes(msg, &n);

    ps_mutex_lock(&po->lock);
    if (po->table_received) {
        ps_mutex_unlock(&po->lock);
        /* Once the table is known, ADD_NODE announces recovered nodes. */
        int any = 0;
        for (size_t i = 0; msg->meta.head >= 0 && i < n; i++) {
            if (nodes[i].is_recovery) {
                ps__po_node_recovered(po, &nodes[i]);
                any = 1;
            }
        }
        if (!any)
            ps_warn(PS_LOG_CORE, "ignoring a second node table from the scheduler");
        return;
    }
    if (msg->meta.head < 0) {
        po->start_failure = (ps_status_t)msg->meta.head;
        ps__msg_body(msg, po->start_reason, sizeof(po->start_reason));
    } else {
        ps_node_t *copy = n > 0 ? malloc(n * sizeof(*copy)) : NULL;
        if (copy == NULL) {
            po->start_failure = PS_ERR_NO_MEMORY;
            snprintf(po->start_reason, sizeof(po->start_reason),
                     "out of memory copying the node table");
        } else {
            memcpy(copy, nodes, n * sizeof(*copy));
            po->nodes = copy;
            po->num_nodes = n;
            char body[128];
            ps__msg_body(msg, body, sizeof(body));
            ps__po_body_job_id(body, po->job_id, sizeof(po->job_id));
        }
    }
    po->table_received = 1;
    ps_cond_broadcast(&po->cond);
    ps_mutex_unlock(&po->lock);
}

/* ---- start: scheduler ---- */

/* Tells every registered node that the job cannot start, and why. They
 * have no ids yet: temporary ones address them. Then waits (bounded) for
 * them to leave, so that they read it before the connections close; when
 * more nodes may still come (`wait_for_all`: the start failed before the
 * deadline), also for those: they are refused with the same words as they
 * register (ps__po_sched_on_add_node). */
static void sched_fail_start(ps_postoffice_t *po, ps_status_t status, const char *why,
                             int wait_for_all)
{
    size_t expected = (size_t)ps__po_server_nodes(po) + (size_t)ps__po_worker_nodes(po);
    ps_mutex_lock(&po->lock);
    size_t n = po->sched.num_reg;
    ps_node_t *nodes = n > 0 ? malloc(n * sizeof(*nodes)) : NULL;
    if (nodes != NULL)
        memcpy(nodes, po->sched.reg_nodes, n * sizeof(*nodes));
    else
        n = 0;
    po->finalizing = 1; /* count disconnections from here on */
    po->sched.verdict = status;
    snprintf(po->sched.verdict_reason, sizeof(po->sched.verdict_reason), "%s", why);
    ps_mutex_unlock(&po->lock);

    size_t told = 0;
    for (size_t i = 0; i < n; i++) {
        nodes[i].id = PS__TEMP_ID_BASE + (int)i;
        if (po->van->ops->connect(po->van, &nodes[i], PS_SCHEDULER_ID) != PS_OK)
            continue;
        if (ps__po_send_control(po, nodes[i].id, PS_CTRL_ADD_NODE, 0, status, 0, NULL, 0, why) ==
            PS_OK)
            told++;
    }
    free(nodes);

    ps_deadline_t linger = ps_deadline_from_ms(PS__LINGER_MS);
    ps_mutex_lock(&po->lock);
    po->sched.num_told += told;
    for (;;) {
        size_t gone = po->sched.num_left + po->num_dead;
        if (gone >= po->sched.num_told && (!wait_for_all || po->sched.num_told >= expected))
            break;
        if (ps_cond_wait(&po->cond, &po->lock, linger) == PS_ERR_TIMED_OUT)
            break;
    }
    size_t left = po->sched.num_left;
    size_t all_told = po->sched.num_told;
    ps_mutex_unlock(&po->lock);
    ps_debug(PS_LOG_CORE, "told %zu nodes the job cannot start; %zu left before the scheduler",
             all_told, left);
}

ps_status_t ps__po_sched_start(ps_postoffice_t *po, ps_deadline_t deadline)
{
    char who[PS_NODE_HOSTNAME_MAX + 48];
    char why[512];
    size_t expected = (size_t)ps__po_server_nodes(po) + (size_t)ps__po_worker_nodes(po);

    ps_mutex_lock(&po->lock);
    while (po->sched.num_reg < expected && po->sched.verdict == PS_OK) {
        if (ps_cond_wait(&po->cond, &po->lock, deadline) == PS_ERR_TIMED_OUT &&
            po->sched.num_reg < expected)
            break;
    }
    if (po->sched.verdict != PS_OK) {
        ps_status_t verdict = po->sched.verdict;
        snprintf(why, sizeof(why), "%s", po->sched.verdict_reason);
        ps_mutex_unlock(&po->lock);
        ps_error(PS_LOG_CORE, "cannot start the job: %s", why);
        sched_fail_start(po, verdict, why, 1);
        return verdict;
    }
    size_t n = po->sched.num_reg;
    size_t ns = 0;
    for (size_t i = 0; i < n; i++)
        ns += po->sched.reg_nodes[i].role == PS_ROLE_SERVER;
    ps_node_t *table = malloc((n + 1) * sizeof(*table));
    if (table != NULL && n > 0)
        memcpy(table, po->sched.reg_nodes, n * sizeof(*table));
    ps_mutex_unlock(&po->lock);

    if (table == NULL) {
        ps_error(PS_LOG_CORE, "out of memory building the node table");
        sched_fail_start(po, PS_ERR_NO_MEMORY, "the scheduler ran out of memory", 0);
        return PS_ERR_NO_MEMORY;
    }
    if (n < expected) {
        ps_mutex_lock(&po->lock);
        size_t refused = po->sched.num_refused;
        char last[160];
        snprintf(last, sizeof(last), "%.150s", po->sched.last_refusal);
        ps_mutex_unlock(&po->lock);
        char also[256] = "";
        if (refused > 0)
            snprintf(also, sizeof(also), "; the scheduler refused %zu registration%s meanwhile "
                     "(the last: %s)", refused, refused == 1 ? "" : "s", last);
        snprintf(why, sizeof(why),
                 "start-up timed out after %d ms: %zu of %zu nodes registered with the "
                 "scheduler (%zu of %d servers, %zu of %d workers)%s",
                 po->params.start_timeout_ms, n, expected, ns, ps__po_server_nodes(po), n - ns,
                 ps__po_worker_nodes(po), also);
        ps_error(PS_LOG_CORE, "%s", why);
        free(table);
        sched_fail_start(po, PS_ERR_TIMED_OUT, why, 0);
        return PS_ERR_TIMED_OUT;
    }

    const char *ordered = ps_config_str_or(PS_CFG_BYTEPS_ORDERED_HOSTS, "");
    int mixed = ps_config_bool_or(PS_CFG_BYTEPS_ENABLE_MIXED_MODE, 0);
    ps_status_t st = ps__node_table_assign(table, n, po->params.num_servers,
                                           po->params.num_workers, po->params.group_size,
                                           ordered, mixed, why, sizeof(why));
    if (st != PS_OK) {
        ps_error(PS_LOG_CORE, "cannot start the job: %s", why);
        free(table);
        sched_fail_start(po, st, why, 0);
        return st;
    }
    table[n] = po->my_node;
    uint64_t *seen = calloc(n + 1, sizeof(*seen));
    if (seen == NULL) {
        free(table);
        sched_fail_start(po, PS_ERR_NO_MEMORY, "the scheduler ran out of memory", 0);
        return PS_ERR_NO_MEMORY;
    }
    uint64_t now = ps_time_now_ns();
    for (size_t i = 0; i <= n; i++)
        seen[i] = now;

    for (size_t i = 0; i < n; i++)
        ps_info(PS_LOG_CORE, "assigned id %d to %s", table[i].id,
                ps__node_describe(&table[i], who, sizeof(who)));
    for (size_t i = 0; i < n; i++) {
        st = po->van->ops->connect(po->van, &table[i], PS_SCHEDULER_ID);
        if (st != PS_OK) {
            snprintf(why, sizeof(why), "the scheduler cannot connect to %s: %s",
                     ps__node_describe(&table[i], who, sizeof(who)), ps_status_str(st));
            ps_error(PS_LOG_CORE, "cannot start the job: %s", why);
            free(seen);
            free(table);
            sched_fail_start(po, st, why, 0);
            return st;
        }
        ps_info(PS_LOG_CORE, "connected to %s as node %d",
                ps__node_describe(&table[i], who, sizeof(who)), table[i].id);
    }

    ps_mutex_lock(&po->lock);
    po->nodes = table;
    po->num_nodes = n + 1;
    __atomic_store_n(&po->sched.last_seen_ns, seen, __ATOMIC_RELEASE);
    po->ready = 1;
    ps_cond_broadcast(&po->cond);
    ps_cond_signal(&po->timer_cond);
    ps_mutex_unlock(&po->lock);

    char job[sizeof(PS__JOB_KEY) + PS_JOB_ID_MAX];
    snprintf(job, sizeof(job), "%s", &PS__JOB_KEY[1]);
    snprintf(job + strlen(job), sizeof(job) - strlen(job), "%s", po->job_id);
    for (size_t i = 0; i < n; i++) {
        st = ps__po_send_control(po, table[i].id, PS_CTRL_ADD_NODE, 0, 0, 0, table, n + 1, job);
        if (st != PS_OK)
            return st;
    }
    ps_info(PS_LOG_CORE, "all %zu nodes registered; node table sent; job %s started", n,
            po->job_id);
    return PS_OK;
}

/* ---- start: server / worker ---- */

static void sched_node(const ps_postoffice_t *po, ps_node_t *node)
{
    ps_node_init(node);
    node->role = PS_ROLE_SCHEDULER;
    node->id = PS_SCHEDULER_ID;
    snprintf(node->hostname, sizeof(node->hostname), "%s", po->params.scheduler_host);
    node->num_ports = 1;
    node->ports[0] = po->params.scheduler_port;
    node->dev_types[0] = PS_DEV_CPU;
}

/* Connects to the scheduler and sends our registration. */
static ps_status_t node_register(ps_postoffice_t *po)
{
    ps_node_t sched;
    sched_node(po, &sched);
    ps_status_t st = po->van->ops->connect(po->van, &sched, PS_NODE_EMPTY);
    if (st != PS_OK)
        return st;
    char shape[64 + sizeof(PS__JOB_KEY) + PS_JOB_ID_MAX];
    int w = snprintf(shape, sizeof(shape), PS__SHAPE_FMT, po->params.num_servers,
                     po->params.num_workers, po->params.group_size);
    if (po->job_id_claim[0] != '\0' && w > 0 && (size_t)w < sizeof(shape))
        snprintf(shape + w, sizeof(shape) - (size_t)w, "%s%s", PS__JOB_KEY, po->job_id_claim);
    return ps__po_send_control(po, PS_SCHEDULER_ID, PS_CTRL_ADD_NODE, 1, 0, 0, &po->my_node, 1,
                               shape);
}

/* Resolves DMLC_PS_ROOT_URI before the first registration, so that a bad
 * name is said once: a name that does not exist (EAI_NONAME, EAI_FAIL)
 * fails at once; a temporary failure (EAI_AGAIN) is retried quietly, with
 * growing pauses, until the start deadline. */
static ps_status_t node_resolve_sched(ps_postoffice_t *po, ps_deadline_t deadline)
{
    const char *host = po->params.scheduler_host;
    ps_sockaddr_t numeric;
    if (ps_sockaddr_parse(host, 0, &numeric) == PS_OK)
        return PS_OK;
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    int pause_ms = PS__RESOLVE_BACKOFF_MIN_MS;
    int tries = 0;
    for (;;) {
        struct addrinfo *res = NULL;
        int rc = getaddrinfo(host, NULL, &hints, &res);
        tries++;
        if (rc == 0) {
            freeaddrinfo(res);
            if (tries > 1)
                ps_info(PS_LOG_CORE, "DMLC_PS_ROOT_URI=%s resolved after %d tries", host, tries);
            return PS_OK;
        }
        if (rc != EAI_AGAIN) {
            ps_error(PS_LOG_CORE, "cannot resolve the scheduler's address DMLC_PS_ROOT_URI=%s: "
                     "%s", host, rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
            return rc == EAI_MEMORY ? PS_ERR_NO_MEMORY : PS_ERR_CONFIG;
        }
        if (tries == 1)
            ps_warn(PS_LOG_CORE, "cannot resolve the scheduler's address DMLC_PS_ROOT_URI=%s "
                    "yet (%s); retrying quietly until the start deadline", host,
                    gai_strerror(rc));
        if (ps_deadline_expired(deadline)) {
            ps_error(PS_LOG_CORE, "start-up timed out: DMLC_PS_ROOT_URI=%s could not be "
                     "resolved in %d tries (%s)", host, tries, gai_strerror(rc));
            return PS_ERR_TIMED_OUT;
        }
        ps_deadline_t until = ps_deadline_min(deadline, ps_deadline_from_ms(pause_ms));
        if (!ps_deadline_is_infinite(until))
            (void)ps_sleep_until(until);
        pause_ms = pause_ms * 2 > PS__RESOLVE_BACKOFF_MAX_MS ? PS__RESOLVE_BACKOFF_MAX_MS
                                                            : pause_ms * 2;
    }
}

ps_status_t ps__po_node_start(ps_postoffice_t *po, ps_deadline_t deadline)
{
    char who[PS_NODE_HOSTNAME_MAX + 48];
    char sched_desc[PS_NODE_HOSTNAME_MAX + 48];
    ps_node_t sched;
    sched_node(po, &sched);
    ps__node_describe(&sched, sched_desc, sizeof(sched_desc));

    ps_status_t last = node_resolve_sched(po, deadline);
    if (last != PS_OK)
        return last;
    ps_info(PS_LOG_CORE, "registering with the %s as %s%s", sched_desc,
            ps__node_describe(&po->my_node, who, sizeof(who)),
            po->my_node.aux_id >= 0 ? " with a preferred rank"
            : po->my_node.aux_id < PS_NODE_AUX_ANY ? " for an instance" : "");
    last = node_register(po);
    int retries = 0;

    /* Wait a little longer than the scheduler, which starts about when we
     * do: its verdict on a failed start (saying who came) then arrives
     * before our own deadline. */
    int waited_ms = po->params.start_timeout_ms;
    if (!ps_deadline_is_infinite(deadline)) {
        int grace = waited_ms / 4;
        grace = grace < PS__START_GRACE_MIN_MS ? PS__START_GRACE_MIN_MS
                : grace > PS__START_GRACE_MAX_MS ? PS__START_GRACE_MAX_MS : grace;
        deadline = ps_deadline_at_ns(deadline.at_ns + (uint64_t)grace * PS_NSEC_PER_MSEC);
        waited_ms += grace;
    }

    ps_mutex_lock(&po->lock);
    for (;;) {
        if (po->table_received)
            break;
        if (last == PS_ERR_AUTH) {
            /* A van that connects synchronously (shm) was refused for the
             * job secret (it logged which side): retrying cannot help. */
            ps_mutex_unlock(&po->lock);
            ps_error(PS_LOG_CORE, "the scheduler could not start the job: no authenticated "
                     "connection to it (wrong or missing PS_JOB_SECRET)");
            return PS_ERR_AUTH;
        }
        if (po->sched_conn_lost || last != PS_OK) {
            /* Not up yet (or restarting): retry until the deadline. */
            po->sched_conn_lost = 0;
            ps_mutex_unlock(&po->lock);
            if (retries++ == 0)
                ps_info(PS_LOG_CORE, "the %s is not reachable yet; retrying until the start "
                        "deadline", sched_desc);
            po->van->ops->disconnect(po->van, PS_SCHEDULER_ID);
            ps_deadline_t pause = ps_deadline_min(deadline, ps_deadline_from_ms(PS__RECONNECT_MS));
            if (!ps_deadline_is_infinite(pause))
                (void)ps_sleep_until(pause);
            ps_mutex_lock(&po->lock);
            if (po->table_received)
                break;
            if (ps_deadline_expired(deadline)) {
                ps_mutex_unlock(&po->lock);
                ps_error(PS_LOG_CORE, "start-up timed out after %d ms: could not reach the %s",
                         waited_ms, sched_desc);
                return PS_ERR_TIMED_OUT;
            }
            ps_mutex_unlock(&po->lock);
            last = node_register(po);
            ps_mutex_lock(&po->lock);
            continue;
        }
        if (ps_cond_wait(&po->cond, &po->lock, deadline) == PS_ERR_TIMED_OUT &&
            !po->table_received && !po->sched_conn_lost) {
            ps_mutex_unlock(&po->lock);
            ps_error(PS_LOG_CORE,
                     "start-up timed out after %d ms: no node table from the %s (not "
                     "reachable, or still waiting for some of the %d servers and %d workers)",
                     waited_ms, sched_desc, ps__po_server_nodes(po),
                     ps__po_worker_nodes(po));
            return PS_ERR_TIMED_OUT;
        }
    }
    if (po->start_failure != PS_OK) {
        ps_status_t st = po->start_failure;
        ps_mutex_unlock(&po->lock);
        ps_error(PS_LOG_CORE, "start failed; the %s answered: %s", sched_desc,
                 po->start_reason);
        return st;
    }
    /* Find ourselves. */
    int idx = ps__node_table_find(po->nodes, po->num_nodes, po->my_node.hostname,
                                  po->my_node.ports[0]);
    size_t n = po->num_nodes;
    ps_node_t *table = po->nodes;
    ps_mutex_unlock(&po->lock);

    if (idx < 0 || table[idx].role != po->params.role) {
        ps_error(PS_LOG_CORE, "the scheduler's node table does not list this node (%s)",
                 ps__node_describe(&po->my_node, who, sizeof(who)));
        return PS_ERR_PROTOCOL;
    }
    int my_id = table[idx].id;
    ps_mutex_lock(&po->lock);
    po->recovered = table[idx].is_recovery;
    ps_mutex_unlock(&po->lock);
    po->my_node.id = my_id;
    __atomic_store_n(&po->my_id, my_id, __ATOMIC_RELEASE);
    char prefix[48];
    snprintf(prefix, sizeof(prefix), "%s %d", ps_role_str(po->params.role), my_id);
    ps_log_set_prefix(prefix);
    ps_info(PS_LOG_CORE, "assigned id %d (%s rank %d) by the scheduler%s", my_id,
            ps_role_str(po->params.role), ps_id_to_rank(my_id),
            po->recovered ? ", taking over from a dead process" : "");

    /* Workers talk to servers and servers to workers; nobody else. */
    for (size_t i = 0; i < n; i++) {
        const ps_node_t *peer = &table[i];
        if (peer->role == po->params.role || peer->role == PS_ROLE_SCHEDULER)
            continue;
        ps_mutex_lock(&po->lock);
        int dead = ps__po_is_dead_locked(po, peer->id);
        ps_mutex_unlock(&po->lock);
        if (dead) {
            ps_info(PS_LOG_CORE, "not connecting to node %d: it is dead", peer->id);
            continue;
        }
        ps_status_t st = po->van->ops->connect(po->van, peer, my_id);
        if (st != PS_OK) {
            ps_error(PS_LOG_CORE, "cannot connect to %s (node %d): %s",
                     ps__node_describe(peer, who, sizeof(who)), peer->id, ps_status_str(st));
            return st;
        }
        ps_info(PS_LOG_CORE, "connected to %s as node %d",
                ps__node_describe(peer, who, sizeof(who)), peer->id);
    }
    ps_status_t st = po->van->ops->set_node_id(po->van, my_id);
    if (st != PS_OK) {
        ps_error(PS_LOG_CORE, "the van refused node id %d: %s", my_id, ps_status_str(st));
        return st;
    }

    ps_mutex_lock(&po->lock);
    __atomic_store_n(&po->sched_seen_ns, ps_time_now_ns(), __ATOMIC_RELAXED);
    if (po->sched_conn_lost) {
        ps_mutex_unlock(&po->lock);
        ps_error(PS_LOG_CORE, "lost the %s during start-up", sched_desc);
        return PS_ERR_PEER_GONE;
    }
    po->ready = 1;
    ps_cond_signal(&po->timer_cond);
    ps_mutex_unlock(&po->lock);
    return PS_OK;
}

/* ---- parameters ---- */

ps_status_t ps__po_check_params(const ps_start_params_t *p)
{
    if (p->role != PS_ROLE_SCHEDULER && p->role != PS_ROLE_SERVER &&
        p->role != PS_ROLE_WORKER && p->role != PS_ROLE_JOINT) {
        ps_error(PS_LOG_CORE, "start: unknown role %d", (int)p->role);
        return PS_ERR_CONFIG;
    }
    if (p->role == PS_ROLE_JOINT) {
        ps_error(PS_LOG_CORE, "DMLC_ROLE=joint: a joint process starts with "
                 "ps_postoffice_start_joint() (a server and a worker postoffice); this program "
                 "starts one postoffice");
        return PS_ERR_UNSUPPORTED;
    }
    if (p->scheduler_host[0] == '\0') {
        ps_error(PS_LOG_CORE, "the scheduler's address (DMLC_PS_ROOT_URI) is not set");
        return PS_ERR_CONFIG;
    }
    if (p->scheduler_port < 1 || p->scheduler_port > 65535) {
        ps_error(PS_LOG_CORE, "the scheduler's port (DMLC_PS_ROOT_PORT) is %d; expected 1 to "
                 "65535", p->scheduler_port);
        return PS_ERR_CONFIG;
    }
    if (p->num_servers < 0 || p->num_workers < 0) {
        ps_error(PS_LOG_CORE, "DMLC_NUM_SERVER (%d) and DMLC_NUM_WORKER (%d) must not be "
                 "negative", p->num_servers, p->num_workers);
        return PS_ERR_CONFIG;
    }
    if (p->port < 0 || p->port > 65535) {
        ps_error(PS_LOG_CORE, "DMLC_PORT is %d; expected 0 to 65535", p->port);
        return PS_ERR_CONFIG;
    }
    if (p->group_size < 1 || p->group_size > PS_GROUP_SIZE_MAX ||
        p->instance >= p->group_size) {
        ps_error(PS_LOG_CORE, "DMLC_GROUP_SIZE is %d and the instance %d; expected a group size "
                 "of 1 to %d and an instance below it (or -1)", p->group_size, p->instance,
                 PS_GROUP_SIZE_MAX);
        return PS_ERR_CONFIG;
    }
    if (p->role != PS_ROLE_SCHEDULER && p->preferred_rank >= 0) {
        int n = (p->role == PS_ROLE_SERVER ? p->num_servers : p->num_workers) * p->group_size;
        if (p->preferred_rank >= n) {
            ps_error(PS_LOG_CORE, "preferred rank %d (DMLC_RANK) is out of range: %s ranks are "
                     "0 to %d", p->preferred_rank, ps_role_str(p->role), n - 1);
            return PS_ERR_CONFIG;
        }
    }
    return ps__start_params_check_instance(p);
}

ps_status_t ps__po_select_host(const ps_start_params_t *p, char *host, size_t cap)
{
    ps_sockaddr_t sched;
    int family = AF_UNSPEC;
    if (ps_sockaddr_parse(p->scheduler_host, 0, &sched) == PS_OK)
        family = ps_sockaddr_family(&sched); /* same family as the scheduler */
    /* DMLC_INTERFACE=auto (StepMesh: the NIC nearest the GPU) is resolved by
     * the GPU layer when present; here it means the first usable one. */
    const char *ifname = strcmp(p->interface, "auto") == 0 ? "" : p->interface;
    ps_sockaddr_t addr;
    ps_status_t st = ps_node_host_select(p->node_host, ifname, family, &addr);
    if (st != PS_OK)
        return st == PS_ERR_NOT_FOUND ? PS_ERR_CONFIG : st;
    st = ps_sockaddr_format_host(&addr, host, cap);
    if (st != PS_OK)
        ps_error(PS_LOG_CORE, "cannot format this node's address: %s", ps_status_str(st));
    return st;
}
