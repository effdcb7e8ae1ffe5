/*
 * Job ids and rendezvous-socket names of the shared-memory van.
 */
#include "ps/net/shm/shm_job.h"

#include <stdio.h>
#include <string.h>

#include "ps/base/config.h"
#include "ps/base/log.h"

unsigned long long ps__shm_hash(const char *s)
{
    unsigned long long h = 0xcbf29ce484222325ull;
    for (; *s != '\0'; ++s) {
        h ^= (unsigned char)*s;
        h *= 0x100000001b3ull;
    }
    return h;
}

static char safe_char(char c)
{
    return ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '.' || c == '-' || c == '_')
               ? c
               : '_';
}

/* Keeps what is safe in a name (anything else becomes '_'); a text too long
 * for cap keeps a readable prefix and is made unique by a hash. */
static void sanitize(const char *in, char *out, size_t cap)
{
    size_t n = strlen(in);
    char tail[24] = "";
    if (n + 1 > cap) {
        snprintf(tail, sizeof(tail), "~%016llx", ps__shm_hash(in));
        n = cap - 1 - strlen(tail);
    }
    for (size_t i = 0; i < n; ++i) {
        out[i] = safe_char(in[i]);
    }
    memcpy(out + n, tail, strlen(tail) + 1);
}

void ps__shm_job_id(char *buf, size_t cap)
{
    if (buf == NULL || cap == 0) {
        return;
    }
    char raw[512];
    const char *v = ps_config_str_or(PS_CFG_PS_JOB_ID, "");
    if (v[0] != '\0') {
        snprintf(raw, sizeof(raw), "%s", v);
    } else if (ps_config_is_set(PS_SHM_CFG(BYTEPS_JOB_ID))) {
        snprintf(raw, sizeof(raw), "%s", ps_config_str_or(PS_SHM_CFG(BYTEPS_JOB_ID), "0"));
    } else {
        /* Every process of a job is told the scheduler's address: the same
         * text everywhere, and two live jobs cannot share it. */
        const char *uri = ps_config_str_or(PS_CFG_DMLC_PS_ROOT_URI, "");
        const char *port = ps_config_str_or(PS_CFG_DMLC_PS_ROOT_PORT, "");
        if (uri[0] != '\0' && port[0] != '\0') {
            snprintf(raw, sizeof(raw), "%s-%s", uri, port);
        } else {
            snprintf(raw, sizeof(raw), "0");
        }
    }
    if (raw[0] == '\0') {
        snprintf(raw, sizeof(raw), "0");
    }
    sanitize(raw, buf, cap < PS__SHM_JOB_MAX + 1 ? cap : PS__SHM_JOB_MAX + 1);
}

ps_status_t ps__shm_sock_addr(const char *job, const char *host, int port,
                              struct sockaddr_un *addr_p, socklen_t *len_p)
{
    if (job == NULL || host == NULL || addr_p == NULL || len_p == NULL || port < 0 ||
        port > 65535) {
        return PS_ERR_INVALID_ARG;
    }
    char name[sizeof(addr_p->sun_path)];
    int n = snprintf(name, sizeof(name), "ps-shm/%s/%s:%d", job, host, port);
    if (n < 0 || (size_t)n + 1 >= sizeof(name)) {
        n = snprintf(name, sizeof(name), "ps-shm/%s/h%016llx:%d", job, ps__shm_hash(host), port);
        if (n < 0 || (size_t)n + 1 >= sizeof(name)) {
            return PS_ERR_TOO_LARGE;
        }
    }
    memset(addr_p, 0, sizeof(*addr_p));
    addr_p->sun_family = AF_UNIX;
    /* Abstract: a leading NUL, no terminator; the length says where it ends. */
    memcpy(addr_p->sun_path + 1, name, (size_t)n);
    *len_p = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    return PS_OK;
}

static const ps_config_entry_t shm_vars[] = {
#define PS_CONFIG_VAR PS_CONFIG_ENTRY
#include "ps/net/shm/shm_config_vars.h"
#undef PS_CONFIG_VAR
};
PS_CONFIG_TABLE(ps__shm_config, "shm", shm_vars)

PS_LOG_COMPONENT(ps__shm_log, "shm")
