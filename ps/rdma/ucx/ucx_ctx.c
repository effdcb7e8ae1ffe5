/*
 * The UCP context and worker of a UCX van, and the few UCX settings ps
 * decides itself.
 *
 * UCX reads its own UCX_* variables (UCX_TLS, UCX_NET_DEVICES, UCX_RNDV_*,
 * ...) and ps leaves them alone, with one exception: the control
 * endpoints (how a peer's failure is noticed) need peer-failure handling,
 * which UCX 1.13 gives only over a network transport (it reports
 * "destination is unreachable" with UCX_TLS=sm). When UCX_TLS names none,
 * ps adds tcp and says so once; processes on one host still move their
 * data over shared memory, through the data endpoints (ucx_conn.c).
 *
 * The shared-memory transports of UCX_TLS get a context and worker of
 * their own (the data worker, ucx_internal.h says why); the control
 * context keeps the rest. That too only narrows what the user chose: a
 * transport UCX_TLS leaves out stays out of both.
 *
 * cma is left out unless UCX_TLS names it: with UCX_TLS unset, "all",
 * the "sm"/"shm" alias or a "^..." list that does not exclude it, ps asks
 * UCX for the same transports but cma and says so once. UCX 1.13 aborts
 * the process when a cma transfer fails on an endpoint without
 * peer-failure handling, as the same-host data endpoints are, and a peer
 * killed in the middle of one makes it fail. Without cma, large messages
 * between processes of one host go through the posix/sysv FIFOs instead
 * of a single copy.
 *
 * UCX_TCP_RX_SEG_SIZE is 512k unless the user sets it (UCX's default:
 * 64k). The endpoints are made from worker addresses, which UCX 1.13
 * gives no RMA lane over tcp (it does only to client-server endpoints),
 * so a large message's rendezvous moves as active-message fragments of
 * that size, each received into a segment and copied out: with 64k
 * fragments a 4 MiB push over loopback ran at 27 Gbit/s, with 512k at 35,
 * as with the RMA lane (docs/PERF.md). A receiving tcp connection holds
 * one such segment while a fragment arrives.
 *
 * Upstream refused to start without UCX_USE_MT_MUTEX=y and
 * UCX_SOCKADDR_CM_ENABLE=y. ps needs neither: it asks for a worker in
 * UCS_THREAD_MODE_MULTI (any thread may send) and fails with a clear
 * message if this UCX cannot give one; the connection manager is on by
 * default in UCX 1.13.
 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps/base/log.h"
#include "ps/rdma/ucx/ucx_internal.h"

/* UCX_TCP_RX_SEG_SIZE unless the user sets it (see above). */
#define PS__UCX_TCP_RX_SEG "512k"

ps_status_t ps__ucx_status(ucs_status_t st)
{
    switch (st) {
    case UCS_OK:
        return PS_OK;
    case UCS_INPROGRESS:
        return PS_INPROGRESS;
    case UCS_ERR_NO_MEMORY:
        return PS_ERR_NO_MEMORY;
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT:
        return PS_ERR_NO_RESOURCE;
    case UCS_ERR_BUSY:
        return PS_ERR_ADDRESS_IN_USE;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
        return PS_ERR_INVALID_ARG;
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NO_DEVICE:
        return PS_ERR_UNSUPPORTED;
    case UCS_ERR_TIMED_OUT:
        return PS_ERR_TIMED_OUT;
    case UCS_ERR_CANCELED:
        return PS_ERR_CANCELLED;
    case UCS_ERR_MESSAGE_TRUNCATED:
        return PS_ERR_PROTOCOL;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_CONNECTION_RESET:
        return PS_ERR_PEER_GONE;
    default:
        return PS_ERR_LINK_FAILED;
    }
}

/* The value UCX itself read for a variable (environment or ucx.conf),
 * from the config's own printout: "UCX_TLS=sm" -> "sm". */
static int config_value(const ucp_config_t *config, const char *name, char *buf, size_t cap)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (f == NULL) {
        return 0;
    }
    ucp_config_print(config, f, NULL, UCS_CONFIG_PRINT_CONFIG);
    fclose(f);
    int found = 0;
    size_t nlen = strlen(name);
    for (char *line = text; line != NULL && *line != '\0';) {
        char *end = strchr(line, '\n');
        if (end != NULL) {
            *end = '\0';
        }
        if (strncmp(line, name, nlen) == 0 && line[nlen] == '=') {
            snprintf(buf, cap, "%s", line + nlen + 1);
            found = 1;
            break;
        }
        line = end != NULL ? end + 1 : NULL;
    }
    free(text);
    return found;
}

/* 1 if the comma-separated transport list holds a token starting with one
 * of `prefixes` (NULL-terminated). */
static int tls_has(const char *tls, const char *const *prefixes)
{
    char copy[512];
    snprintf(copy, sizeof(copy), "%s", tls);
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') {
            ++tok;
        }
        for (int i = 0; prefixes[i] != NULL; ++i) {
            if (strncmp(tok, prefixes[i], strlen(prefixes[i])) == 0) {
                return 1;
            }
        }
    }
    return 0;
}

static const char *const k_net_tls[] = {"all", "tcp", "ib", "rc", "ud", "dc", NULL};
static const char *const k_shm_tls[] = {"all", "sm", "shm", "posix", "sysv", "cma", "knem",
                                        "xpmem", "mm", NULL};
static const char *const k_shm_only[] = {"sm", "shm", "posix", "sysv", "cma", "knem", "xpmem",
                                         "mm", NULL};

static void append_tok(char *buf, size_t cap, const char *tok)
{
    size_t len = strlen(buf);
    snprintf(buf + len, cap - len, "%s%s", len != 0 ? "," : "", tok);
}

/* Splits UCX_TLS into its shared-memory transports (shm, for the data
 * context) and the rest (ctl). 0 when there is nothing to split off, or
 * when a "^..." list excludes some shared-memory transport (kept whole). */
static int split_tls(const char *tls, char *shm, size_t shm_cap, char *ctl, size_t ctl_cap)
{
    shm[0] = ctl[0] = '\0';
    if (tls[0] == '^') {
        if (tls_has(tls + 1, k_shm_only)) {
            return 0;
        }
        snprintf(shm, shm_cap, "sm");
        snprintf(ctl, ctl_cap, "%s,sm", tls);
        return 1;
    }
    if (tls_has(tls, (const char *const[]){"all", NULL})) {
        snprintf(shm, shm_cap, "sm");
        snprintf(ctl, ctl_cap, "^sm");
        return 1;
    }
    char copy[512];
    snprintf(copy, sizeof(copy), "%s", tls);
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') {
            ++tok;
        }
        if (*tok == '\0') {
            continue;
        }
        int is_shm = tls_has(tok, k_shm_only);
        append_tok(is_shm ? shm : ctl, is_shm ? shm_cap : ctl_cap, tok);
    }
    return shm[0] != '\0';
}

/* 1 if the comma-separated list holds exactly `tok`. */
static int has_token(const char *list, const char *tok)
{
    size_t n = strlen(tok);
    for (const char *p = list; *p != '\0';) {
        size_t len = strcspn(p, ",");
        if (len == n && strncmp(p, tok, n) == 0) {
            return 1;
        }
        p += len + (p[len] == ',');
    }
    return 0;
}

/* 1 if `tls` brings in cma without naming it: "all", the "sm"/"shm" alias,
 * or a "^..." list that does not exclude it. */
static int cma_implicit(const char *tls)
{
    if (tls[0] == '^') {
        return !tls_has(tls + 1, (const char *const[]){"cma", "sm", "shm", NULL});
    }
    return !tls_has(tls, (const char *const[]){"cma", NULL}) &&
           tls_has(tls, (const char *const[]){"all", "sm", "shm", NULL});
}

/* The transports of a context's resources but cma, comma-separated, from
 * its printout ("#  resource 2  :  md 2  dev 0  flags -- cma/memory").
 * 1 if cma was among them. */
static int resources_but_cma(ucp_context_h ctx, char *buf, size_t cap)
{
    buf[0] = '\0';
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (f == NULL) {
        return 0;
    }
    ucp_context_print_info(ctx, f);
    fclose(f);
    int cma = 0;
    for (char *p = strstr(text, "resource "); p != NULL; p = strstr(p + 1, "resource ")) {
        char *eol = strchr(p, '\n');
        char *tl = strstr(p, "-- ");
        if (tl == NULL || (eol != NULL && tl > eol)) {
            continue;
        }
        tl += 3;
        char name[32];
        snprintf(name, sizeof(name), "%.*s", (int)strcspn(tl, "/ \n"), tl);
        if (strcmp(name, "cma") == 0) {
            cma = 1;
        } else if (name[0] != '\0' && !has_token(buf, name)) {
            append_tok(buf, cap, name);
        }
    }
    free(text);
    return cma;
}

/* ucp_init, leaving cma out when `tls` (what `config` says) brings it in
 * without naming it. UCX 1.13 makes a failed process_vm_readv/writev on an
 * endpoint without peer-failure handling fatal: a peer killed in the
 * middle of a transfer aborts this process. The data endpoints to
 * same-host peers have no such handling (ucx_internal.h says why), so cma
 * is used only where the user named it. */
static ucs_status_t ctx_init(const ucp_params_t *params, ucp_config_t *config, const char *tls,
                             ucp_context_h *ctx_p)
{
    static int logged;
    ucs_status_t st = ucp_init(params, config, ctx_p);
    char rest[480];
    if (st != UCS_OK || !cma_implicit(tls) || !resources_but_cma(*ctx_p, rest, sizeof(rest)) ||
        rest[0] == '\0') {
        return st;
    }
    ucp_context_h with_cma = *ctx_p;
    if (ucp_config_modify(config, "TLS", rest) != UCS_OK ||
        ucp_init(params, config, ctx_p) != UCS_OK) {
        *ctx_p = with_cma; /* keep what works */
        return UCS_OK;
    }
    ucp_cleanup(with_cma);
    if (!__atomic_exchange_n(&logged, 1, __ATOMIC_RELAXED)) {
        ps_info(PS_LOG_UCX,
                "UCX_TLS=%s: using %s, without cma (a peer killed in the middle of "
                "a cma transfer would abort this process); name cma in UCX_TLS to use it",
                tls, rest);
    }
    return UCS_OK;
}

/* Destroys a worker, then its context (either may be NULL; both become
 * NULL). */
static void worker_and_context_destroy(ucp_worker_h *worker_p, ucp_context_h *context_p)
{
    if (*worker_p != NULL) {
        ucp_worker_destroy(*worker_p);
        *worker_p = NULL;
    }
    if (*context_p != NULL) {
        ucp_cleanup(*context_p);
        *context_p = NULL;
    }
}

/* 1 when the context lists CUDA among the memory types it moves (a UCX
 * built with its cuda transports; Debian's is not). */
static int moves_cuda(ucp_context_h ctx)
{
    ucp_context_attr_t a;
    memset(&a, 0, sizeof(a));
    a.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    return ucp_context_query(ctx, &a) == UCS_OK &&
           (a.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
}

/* The data context and worker: shared-memory transports only. On failure
 * everything is left as it was (one worker). */
static ps_status_t data_ctx_open(ps__ucx_van_t *van, const char *shm_tls)
{
    ucp_config_t *config = NULL;
    ucs_status_t st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK) {
        return ps__ucx_status(st);
    }
    st = ucp_config_modify(config, "TLS", shm_tls);
    if (st == UCS_OK) {
        ucp_params_t params;
        memset(&params, 0, sizeof(params));
        params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                            UCP_PARAM_FIELD_NAME;
        params.features = UCP_FEATURE_TAG | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
        params.mt_workers_shared = 0;
        params.name = "ps-shm";
        st = ctx_init(&params, config, shm_tls, &van->dcontext);
        if (st != UCS_OK) {
            van->dcontext = NULL;
        }
    }
    ucp_config_release(config);
    if (st == UCS_OK) {
        ucp_worker_params_t wp;
        memset(&wp, 0, sizeof(wp));
        wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
        wp.thread_mode = UCS_THREAD_MODE_MULTI;
        st = ucp_worker_create(van->dcontext, &wp, &van->dworker);
        if (st != UCS_OK) {
            van->dworker = NULL;
        }
    }
    if (st == UCS_OK) {
        ucp_worker_attr_t wa;
        memset(&wa, 0, sizeof(wa));
        wa.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE;
        st = ucp_worker_query(van->dworker, &wa);
        if (st == UCS_OK && wa.thread_mode != UCS_THREAD_MODE_MULTI) {
            st = UCS_ERR_UNSUPPORTED;
        }
    }
    if (st == UCS_OK) {
        st = ucp_worker_get_efd(van->dworker, &van->defd);
    }
    if (st == UCS_OK) {
        st = ucp_worker_get_address(van->dworker, &van->data_addr, &van->data_addr_len);
        if (st != UCS_OK) {
            van->data_addr = NULL;
        } else if (van->data_addr_len > PS__UCX_MAX_ADDR) {
            st = UCS_ERR_EXCEEDS_LIMIT;
        }
    }
    if (st != UCS_OK) {
        ps_debug(PS_LOG_UCX,
                 "no shared-memory worker of its own (UCX_TLS=%s: %s); one worker for "
                 "everything, data between processes of this host over the network transports",
                 shm_tls, ucs_status_string(st));
        if (van->dworker != NULL && van->data_addr != NULL) {
            ucp_worker_release_address(van->dworker, van->data_addr);
            van->data_addr = NULL;
        }
        worker_and_context_destroy(&van->dworker, &van->dcontext);
        van->defd = -1;
        return ps__ucx_status(st);
    }
    return PS_OK;
}

void ps__ucx_ep_transports(ucp_ep_h ep, char *buf, size_t cap)
{
    buf[0] = '\0';
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (f == NULL) {
        return;
    }
    ucp_ep_print_info(ep, f);
    fclose(f);
    size_t pos = 0;
    /* "#   lane[1]:  2:cma/memory.0 md[3] -> ..." -> "cma/memory.0" */
    for (char *p = strstr(text, "lane["); p != NULL; p = strstr(p + 1, "lane[")) {
        char *colon = strstr(p, "]:");
        if (colon == NULL) {
            break;
        }
        char *tok = colon + 2;
        while (*tok == ' ') {
            ++tok;
        }
        if (strncmp(tok, "cm ", 3) == 0) {
            continue; /* the connection manager, not a data transport */
        }
        char *digits_end = tok;
        while (*digits_end >= '0' && *digits_end <= '9') {
            ++digits_end;
        }
        if (*digits_end == ':') {
            tok = digits_end + 1;
        }
        size_t n = strcspn(tok, " \n");
        char name[64];
        snprintf(name, sizeof(name), "%.*s", (int)(n < sizeof(name) - 1 ? n : sizeof(name) - 1),
                 tok);
        if (name[0] == '\0' || strstr(buf, name) != NULL) {
            continue;
        }
        int w = snprintf(buf + pos, cap - pos, "%s%s", pos ? " " : "", name);
        if (w < 0 || (size_t)w >= cap - pos) {
            break;
        }
        pos += (size_t)w;
    }
    free(text);
}

ps_status_t ps__ucx_ctx_open(ps__ucx_van_t *van)
{
    ucp_config_t *config = NULL;
    ucs_status_t st = ucp_config_read(NULL, NULL, &config);
    if (st != UCS_OK) {
        ps_error(PS_LOG_UCX, "cannot read the ucx configuration: %s", ucs_status_string(st));
        return PS_ERR_CONFIG;
    }
    char tls[480] = "all";
    (void)config_value(config, "UCX_TLS", tls, sizeof(tls));
    /* "^a,b" means every transport but a and b. */
    int negated = tls[0] == '^';
    int has_shm = negated ? !tls_has(tls + 1, (const char *const[]){"sm", "shm", NULL})
                          : tls_has(tls, k_shm_tls);
    van->defd = -1;
    char shm_tls[480], ctl_tls[512];
    if (has_shm && split_tls(tls, shm_tls, sizeof(shm_tls), ctl_tls, sizeof(ctl_tls)) &&
        data_ctx_open(van, shm_tls) == PS_OK) {
        if (ctl_tls[0] != '\0') { /* else tcp, below */
            st = ucp_config_modify(config, "TLS", ctl_tls);
            if (st != UCS_OK) {
                ps_warn(PS_LOG_UCX, "cannot set UCX_TLS=%s for the control worker (%s)",
                        ctl_tls, ucs_status_string(st));
            }
        }
        ps_debug(PS_LOG_UCX, "UCX_TLS=%s: shared memory (%s) in a worker of its own, %s in the "
                 "control worker", tls, shm_tls, ctl_tls);
    }
    /* What the control context has now. */
    const char *cur = van->dworker != NULL ? ctl_tls : tls;
    char with_tcp[520];
    if (cur[0] == '^') {
        if (tls_has(cur + 1, (const char *const[]){"tcp", NULL})) {
            ps_warn(PS_LOG_UCX, "UCX_TLS=%s excludes tcp: the control endpoints (peer-failure "
                    "handling) then need an RDMA device, or connections fail",
                    tls);
        }
    } else if (!tls_has(cur, k_net_tls)) {
        snprintf(with_tcp, sizeof(with_tcp), "%s%stcp", cur, cur[0] ? "," : "");
        st = ucp_config_modify(config, "TLS", with_tcp);
        if (st != UCS_OK) {
            ps_warn(PS_LOG_UCX, "cannot add tcp to UCX_TLS=%s (%s); connections may fail", tls,
                    ucs_status_string(st));
        } else {
            cur = with_tcp;
            ps_info(PS_LOG_UCX,
                    "UCX_TLS=%s names no network transport, which the control endpoints need "
                    "(peer-failure handling): using %s%s",
                    tls, with_tcp,
                    has_shm ? "; data between processes of this host still goes over shared memory"
                            : "");
        }
    }

    if (getenv("UCX_TCP_RX_SEG_SIZE") == NULL &&
        (st = ucp_config_modify(config, "RX_SEG_SIZE", PS__UCX_TCP_RX_SEG)) != UCS_OK) {
        ps_debug(PS_LOG_UCX, "cannot set UCX_TCP_RX_SEG_SIZE=%s: %s", PS__UCX_TCP_RX_SEG,
                 ucs_status_string(st));
    }

    ucp_params_t params;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                        UCP_PARAM_FIELD_NAME;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
    params.mt_workers_shared = 0;
    params.name = "ps";
    st = ctx_init(&params, config, cur, &van->context);
    ucp_config_release(config);
    if (st != UCS_OK) {
        ps_error(PS_LOG_UCX, "cannot initialise ucx: %s (UCX_TLS=%s)", ucs_status_string(st), tls);
        van->context = NULL;
        return PS_ERR_UNSUPPORTED;
    }
    int cuda = moves_cuda(van->context) && (van->dcontext == NULL || moves_cuda(van->dcontext));
    van->device_kinds = cuda ? PS_VAN_DEVICE(PS_BUF_MEM_CUDA) : 0;
    if (van->device_kinds != 0)
        ps_info(PS_LOG_UCX, "ucx moves CUDA memory itself (its cuda transports): device "
                "segments go to it as they are");

    ucp_worker_params_t wp;
    memset(&wp, 0, sizeof(wp));
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_MULTI;
    st = ucp_worker_create(van->context, &wp, &van->worker);
    if (st != UCS_OK) {
        ps_error(PS_LOG_UCX, "cannot create a ucx worker: %s", ucs_status_string(st));
        van->worker = NULL;
        return ps__ucx_status(st);
    }
    ucp_worker_attr_t wa;
    memset(&wa, 0, sizeof(wa));
    wa.field_mask = UCP_WORKER_ATTR_FIELD_THREAD_MODE;
    st = ucp_worker_query(van->worker, &wa);
    if (st != UCS_OK || wa.thread_mode != UCS_THREAD_MODE_MULTI) {
        ps_error(PS_LOG_UCX, "this ucx cannot share a worker between threads (thread mode %d); "
                 "build ucx with --enable-mt", st == UCS_OK ? (int)wa.thread_mode : -1);
        return PS_ERR_UNSUPPORTED;
    }
    st = ucp_worker_get_efd(van->worker, &van->efd);
    if (st != UCS_OK) {
        ps_error(PS_LOG_UCX, "cannot get the ucx worker's event fd: %s", ucs_status_string(st));
        return ps__ucx_status(st);
    }

    /* The control endpoints' address: the network transports only (those
     * give peer-failure handling); the whole address if UCX cannot say. */
    memset(&wa, 0, sizeof(wa));
    wa.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS;
    wa.address_flags = UCP_WORKER_ADDRESS_FLAG_NET_ONLY;
    st = ucp_worker_query(van->worker, &wa);
    if (st == UCS_OK) {
        van->ctl_addr = wa.address;
        van->ctl_addr_len = wa.address_length;
    } else {
        st = ucp_worker_get_address(van->worker, &van->ctl_addr, &van->ctl_addr_len);
    }
    if (st != UCS_OK || van->ctl_addr_len > PS__UCX_MAX_ADDR) {
        ps_error(PS_LOG_UCX, "cannot get the ucx worker's address: %s",
                 st != UCS_OK ? ucs_status_string(st) : "too long");
        return st != UCS_OK ? ps__ucx_status(st) : PS_ERR_NO_RESOURCE;
    }
    if (van->dworker != NULL) {
        ps_info(PS_LOG_UCX, "ucx %s, UCX_TLS=%s, worker addresses %zu (control) and %zu "
                "(shared memory) bytes", ucp_get_version_string(), tls, van->ctl_addr_len,
                van->data_addr_len);
    } else {
        ps_info(PS_LOG_UCX, "ucx %s, UCX_TLS=%s, worker address %zu bytes",
                ucp_get_version_string(), tls, van->ctl_addr_len);
    }
    return PS_OK;
}

void ps__ucx_ctx_close(ps__ucx_van_t *van)
{
    if (van->ctl_addr != NULL) {
        ucp_worker_release_address(van->worker, van->ctl_addr);
        van->ctl_addr = NULL;
    }
    if (van->data_addr != NULL) {
        ucp_worker_release_address(van->dworker, van->data_addr);
        van->data_addr = NULL;
    }
    worker_and_context_destroy(&van->dworker, &van->dcontext);
    worker_and_context_destroy(&van->worker, &van->context);
}
