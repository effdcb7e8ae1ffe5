/*
 * Message profile: see profile_internal.h.
 */
#include "ps/net/profile_internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ps/base/config.h"
#include "ps/base/log.h"

struct ps__profile {
    FILE *f; /* stdio's own lock keeps each line whole */
    char path[4096];
};

static uint64_t wall_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

ps_status_t ps__profile_open(const char *role, ps__profile_t **prof_p)
{
    *prof_p = NULL;
    if (!ps_config_bool_or(PS_CFG_ENABLE_PROFILING, 0))
        return PS_OK;
    ps__profile_t *prof = calloc(1, sizeof(*prof));
    if (prof == NULL)
        return PS_ERR_NO_MEMORY;
    const char *prefix = ps_config_str_or(PS_CFG_PROFILE_PATH, "");
    int n = snprintf(prof->path, sizeof(prof->path), "%s%s_%" PRIu64,
                     prefix[0] != '\0' ? prefix : "pslite_profile_van_", role, wall_us());
    if (n < 0 || (size_t)n >= sizeof(prof->path)) {
        ps_error(PS_LOG_CORE, "ENABLE_PROFILING: PROFILE_PATH '%s' is too long", prefix);
        free(prof);
        return PS_ERR_CONFIG;
    }
    prof->f = fopen(prof->path, "w");
    if (prof->f == NULL) {
        ps_error(PS_LOG_CORE, "ENABLE_PROFILING: cannot create the profile %s: %m", prof->path);
        free(prof);
        return PS_ERR_IO;
    }
    fputs("recv_us,sender,recver,app_id,customer_id,timestamp,kind,key,bytes\n", prof->f);
    ps_info(PS_LOG_CORE, "ENABLE_PROFILING: writing received messages to %s", prof->path);
    *prof_p = prof;
    return PS_OK;
}

const char *ps__profile_path(const ps__profile_t *prof)
{
    return prof != NULL ? prof->path : "";
}

static const char *kind_of(const ps_meta_t *meta)
{
    if (ps_meta_is_control(meta))
        return "control";
    if (meta->push)
        return meta->request ? "push_request" : "push_response";
    if (meta->pull)
        return meta->request ? "pull_request" : "pull_response";
    return meta->request ? "request" : "response";
}

void ps__profile_msg(ps__profile_t *prof, const ps_meta_t *meta)
{
    if (prof == NULL)
        return;
    fprintf(prof->f, "%" PRIu64 ",%d,%d,%d,%d,%d,%s,%" PRIu64 ",%" PRIu64 "\n", wall_us(),
            meta->sender, meta->recver, meta->app_id, meta->customer_id, meta->timestamp,
            kind_of(meta), meta->key, meta->data_size);
}

void ps__profile_lane(ps__profile_t *prof, int sender, int recver, int app_id, int customer_id,
                      size_t len)
{
    if (prof == NULL)
        return;
    fprintf(prof->f, "%" PRIu64 ",%d,%d,%d,%d,-1,lane,0,%zu\n", wall_us(), sender, recver,
            app_id, customer_id, len);
}

void ps__profile_close(ps__profile_t *prof)
{
    if (prof == NULL)
        return;
    if (fclose(prof->f) != 0)
        ps_warn(PS_LOG_CORE, "ENABLE_PROFILING: closing %s: %m", prof->path);
    free(prof);
}
