#include "ps/base/env.h"

#include <pthread.h>
#include <stdlib.h>

static pthread_rwlock_t ps_env_lock = PTHREAD_RWLOCK_INITIALIZER;

const char *ps_env_get(const char *name)
{
    if (name == NULL)
        return NULL;
    pthread_rwlock_rdlock(&ps_env_lock);
    const char *v = getenv(name);
    pthread_rwlock_unlock(&ps_env_lock);
    return v;
}

void ps_env_set_default(const char *name, const char *value)
{
    pthread_rwlock_wrlock(&ps_env_lock);
    if (getenv(name) == NULL)
        (void)setenv(name, value, 0);
    pthread_rwlock_unlock(&ps_env_lock);
}
