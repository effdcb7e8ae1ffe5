#include "ps/base/config.h"
#include "ps/base/config_internal.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "ps/base/env.h"
#include "ps/base/log.h"

static const ps_config_entry_t ps_config_core[PS_CFG_COUNT] = {
#define PS_CONFIG_VAR(_name, _type, _default, _section, _alias, _help) \
    [PS_CFG_##_name] = {#_name, PS_CFG_TYPE_##_type, _default, _section, _alias, _help},
#include "ps/base/config_vars.h"
#undef PS_CONFIG_VAR
};

/* Variables of the layers above (each van's own), registered by their
 * tables after the core's ids. */
#define PS_CONFIG_MAX_REGISTERED 256
#define PS_CONFIG_CAPACITY (PS_CFG_COUNT + PS_CONFIG_MAX_REGISTERED)
static const ps_config_entry_t *ps_config_registered[PS_CONFIG_MAX_REGISTERED];
static int ps_config_num_ids = PS_CFG_COUNT; /* atomic */

/* Overrides are set before ps starts; the lock only keeps a late reader from
 * seeing a half-replaced pointer. It also orders registrations. */
static pthread_mutex_t ps_config_lock = PTHREAD_MUTEX_INITIALIZER;
static char *ps_config_overrides[PS_CONFIG_CAPACITY];

/* Per variable: bit 0 = "alias is deprecated" logged, bit 1 = "alias
 * ignored because the new name is set" logged. Each is said once. */
static unsigned ps_config_alias_logged[PS_CONFIG_CAPACITY];

#define PS_CONFIG_NUM_MAX 64 /* longest numeric text we accept */

int ps_config_count(void)
{
    return __atomic_load_n(&ps_config_num_ids, __ATOMIC_ACQUIRE);
}

static int ps_config_id_valid(ps_config_id_t id)
{
    return (int)id >= 0 && (int)id < ps_config_count();
}

/* The entry of a valid id. */
static const ps_config_entry_t *ps_config_at(int id)
{
    return id < PS_CFG_COUNT ? &ps_config_core[id] : ps_config_registered[id - PS_CFG_COUNT];
}

const ps_config_entry_t *ps_config_entry(ps_config_id_t id)
{
    return ps_config_id_valid(id) ? ps_config_at((int)id) : NULL;
}

static int ps_config_named(const ps_config_entry_t *e, const char *name)
{
    return !strcmp(e->name, name) || (e->alias != NULL && !strcmp(e->alias, name));
}

ps_status_t ps_config_register(ps_config_table_t *table)
{
    if (table == NULL || table->entries == NULL || table->count <= 0) {
        return PS_ERR_INVALID_ARG;
    }
    ps_status_t st = PS_OK;
    pthread_mutex_lock(&ps_config_lock);
    int n = ps_config_num_ids;
    if (table->first_id >= PS_CFG_COUNT) {
        goto out; /* registered already */
    }
    if (n + table->count > PS_CONFIG_CAPACITY) {
        st = PS_ERR_NO_RESOURCE;
        goto out;
    }
    for (int k = 0; k < table->count; ++k) {
        for (int i = 0; i < n; ++i) {
            const ps_config_entry_t *e = ps_config_at(i);
            if (ps_config_named(e, table->entries[k].name) ||
                (table->entries[k].alias != NULL && ps_config_named(e, table->entries[k].alias))) {
                st = PS_ERR_EXISTS;
                goto out;
            }
        }
    }
    for (int k = 0; k < table->count; ++k) {
        ps_config_registered[n - PS_CFG_COUNT + k] = &table->entries[k];
    }
    table->first_id = n;
    __atomic_store_n(&ps_config_num_ids, n + table->count, __ATOMIC_RELEASE);
out:
    pthread_mutex_unlock(&ps_config_lock);
    if (st != PS_OK) {
        ps_error(PS_LOG_BASE, "the config table of %s was not registered: %s", table->owner,
                 st == PS_ERR_EXISTS ? "a variable of it is already in the table"
                                     : "the table is full");
    }
    return st;
}

ps_status_t ps_config_find(const char *name, ps_config_id_t *id_p)
{
    if (name == NULL || id_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    int n = ps_config_count();
    for (int i = 0; i < n; ++i) {
        const ps_config_entry_t *e = ps_config_at(i);
        if (ps_config_named(e, name)) {
            *id_p = (ps_config_id_t)i;
            return PS_OK;
        }
    }
    return PS_ERR_NOT_FOUND;
}

const char *ps_config_type_name(ps_config_type_t type)
{
    switch (type) {
    case PS_CFG_TYPE_STRING: return "string";
    case PS_CFG_TYPE_INT: return "int";
    case PS_CFG_TYPE_BOOL: return "bool";
    case PS_CFG_TYPE_DOUBLE: return "double";
    case PS_CFG_TYPE_SIZE: return "size";
    }
    return "?";
}

const char *ps_config_source_name(ps_config_source_t source)
{
    switch (source) {
    case PS_CFG_SRC_DEFAULT: return "default";
    case PS_CFG_SRC_ENV: return "env";
    case PS_CFG_SRC_ALIAS: return "alias";
    case PS_CFG_SRC_OVERRIDE: return "override";
    }
    return "?";
}

static const char *ps_config_getenv(const char *name)
{
    const char *v = ps_env_get(name);
    return v != NULL && *v != '\0' ? v : NULL;
}

static void ps_config_alias_note(ps_config_id_t id, unsigned bit, const char *fmt_kind)
{
    const ps_config_entry_t *e = ps_config_at((int)id);
    if (__atomic_fetch_or(&ps_config_alias_logged[id], bit, __ATOMIC_RELAXED) & bit) {
        return;
    }
    if (bit == 1u) {
        ps_warn(PS_LOG_BASE, "%s is deprecated, use %s (%s)", e->alias, e->name, fmt_kind);
    } else {
        ps_warn(PS_LOG_BASE, "%s is ignored because %s is also set (%s)", e->alias, e->name,
                fmt_kind);
    }
}

void ps__config_reset_notes(void)
{
    for (int i = 0; i < PS_CONFIG_CAPACITY; ++i) {
        __atomic_store_n(&ps_config_alias_logged[i], 0u, __ATOMIC_RELAXED);
    }
}

ps_status_t ps_config_get_raw(ps_config_id_t id, const char **value_p,
                              ps_config_source_t *source_p)
{
    if (!ps_config_id_valid(id) || value_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    const ps_config_entry_t *e = ps_config_at((int)id);
    const char *value;
    ps_config_source_t source;

    pthread_mutex_lock(&ps_config_lock);
    const char *ov = ps_config_overrides[id];
    pthread_mutex_unlock(&ps_config_lock);

    if (ov != NULL) {
        /* An empty override masks the environment: the variable reads as
         * unset. */
        value = *ov != '\0' ? ov : e->default_value;
        source = *ov != '\0' ? PS_CFG_SRC_OVERRIDE : PS_CFG_SRC_DEFAULT;
    } else if ((value = ps_config_getenv(e->name)) != NULL) {
        source = PS_CFG_SRC_ENV;
        if (ps_config_getenv(e->alias) != NULL) {
            ps_config_alias_note(id, 2u, "set only the new name");
        }
    } else if ((value = ps_config_getenv(e->alias)) != NULL) {
        source = PS_CFG_SRC_ALIAS;
        ps_config_alias_note(id, 1u, "old name still honoured");
    } else {
        value = e->default_value;
        source = PS_CFG_SRC_DEFAULT;
    }
    *value_p = value;
    if (source_p != NULL) {
        *source_p = source;
    }
    return PS_OK;
}

int ps_config_is_set(ps_config_id_t id)
{
    ps_config_source_t source;
    const char *value;
    if (ps_config_get_raw(id, &value, &source) != PS_OK) {
        return 0;
    }
    return source != PS_CFG_SRC_DEFAULT;
}

/* ---- parsers ---- */

/* Copies `text` without leading and trailing blanks into buf; 0 if it does
 * not fit or is empty. */
static int ps_config_trim(const char *text, char *buf, size_t cap)
{
    if (text == NULL) {
        return 0;
    }
    while (isspace((unsigned char)*text)) {
        ++text;
    }
    size_t n = strlen(text);
    while (n > 0 && isspace((unsigned char)text[n - 1])) {
        --n;
    }
    if (n == 0 || n >= cap) {
        return 0;
    }
    memcpy(buf, text, n);
    buf[n] = '\0';
    return 1;
}

ps_status_t ps_config_parse_bool(const char *text, int *value_p)
{
    static const char *const yes[] = {"1", "true", "yes", "on", "y"};
    static const char *const no[] = {"0", "false", "no", "off", "n"};
    char buf[16];

    if (value_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if (!ps_config_trim(text, buf, sizeof(buf))) {
        return PS_ERR_PARSE;
    }
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); ++i) {
        if (!strcasecmp(buf, yes[i])) {
            *value_p = 1;
            return PS_OK;
        }
        if (!strcasecmp(buf, no[i])) {
            *value_p = 0;
            return PS_OK;
        }
    }
    return PS_ERR_PARSE;
}

ps_status_t ps_config_parse_int(const char *text, int64_t *value_p)
{
    char buf[PS_CONFIG_NUM_MAX];
    char *end;

    if (value_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if (!ps_config_trim(text, buf, sizeof(buf))) {
        return PS_ERR_PARSE;
    }
    /* strtoll would skip blanks after a sign; insist on a digit there. */
    const char *digits = buf[0] == '-' || buf[0] == '+' ? buf + 1 : buf;
    if (!isdigit((unsigned char)*digits)) {
        return PS_ERR_PARSE;
    }
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno == ERANGE || *end != '\0') {
        return PS_ERR_PARSE;
    }
    *value_p = (int64_t)v;
    return PS_OK;
}

ps_status_t ps_config_parse_size(const char *text, uint64_t *value_p)
{
    char buf[PS_CONFIG_NUM_MAX];
    char *end;
    unsigned shift = 0;

    if (value_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if (!ps_config_trim(text, buf, sizeof(buf)) || !isdigit((unsigned char)buf[0])) {
        return PS_ERR_PARSE; /* also rejects a sign: strtoull would wrap "-1" */
    }
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (errno == ERANGE) {
        return PS_ERR_PARSE;
    }
    switch (tolower((unsigned char)*end)) {
    case '\0': break;
    case 'b': break;
    case 'k': shift = 10; ++end; break;
    case 'm': shift = 20; ++end; break;
    case 'g': shift = 30; ++end; break;
    case 't': shift = 40; ++end; break;
    default: return PS_ERR_PARSE;
    }
    /* Accept "4g", "4gb", "4gib" and "512b" alike. */
    if (shift != 0 && tolower((unsigned char)*end) == 'i') {
        ++end;
        if (tolower((unsigned char)*end) != 'b') {
            return PS_ERR_PARSE;
        }
    }
    if (tolower((unsigned char)*end) == 'b') {
        ++end;
    }
    if (*end != '\0') {
        return PS_ERR_PARSE;
    }
    if (shift != 0 && v > (UINT64_MAX >> shift)) {
        return PS_ERR_PARSE;
    }
    *value_p = (uint64_t)v << shift;
    return PS_OK;
}

ps_status_t ps_config_parse_double(const char *text, double *value_p)
{
    char buf[PS_CONFIG_NUM_MAX];
    char *end;

    if (value_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    if (!ps_config_trim(text, buf, sizeof(buf))) {
        return PS_ERR_PARSE;
    }
    errno = 0;
    double v = strtod(buf, &end);
    if (end == buf || *end != '\0' || errno == ERANGE || !isfinite(v)) {
        return PS_ERR_PARSE;
    }
    *value_p = v;
    return PS_OK;
}

/* ---- typed getters ---- */

static const char *ps_config_expected(ps_config_type_t type)
{
    switch (type) {
    case PS_CFG_TYPE_INT: return "a decimal integer";
    case PS_CFG_TYPE_BOOL: return "1/0, true/false, yes/no, on/off or y/n";
    case PS_CFG_TYPE_DOUBLE: return "a finite number";
    case PS_CFG_TYPE_SIZE: return "bytes, optionally with a k/m/g/t suffix (powers of 1024)";
    case PS_CFG_TYPE_STRING: return "text";
    }
    return "?";
}

static void ps_config_log_bad(ps_config_id_t id, ps_config_type_t as, const char *text,
                              ps_config_source_t source, const char *why)
{
    const ps_config_entry_t *e = ps_config_at((int)id);
    const char *name = source == PS_CFG_SRC_ALIAS ? e->alias : e->name;

    ps_error(PS_LOG_BASE, "bad value '%s' for %s (from %s): expected %s%s", text, name,
             ps_config_source_name(source), ps_config_expected(as), why);
}

/* Fetches the text of `id` for a getter of type `want`: checks the id and the
 * type, and maps "unset with no default" to PS_ERR_NOT_FOUND. */
static ps_status_t ps_config_text(ps_config_id_t id, ps_config_type_t want,
                                  const char **text_p, ps_config_source_t *source_p)
{
    if (!ps_config_id_valid(id)) {
        ps_error(PS_LOG_BASE, "config id %d is out of range", (int)id);
        return PS_ERR_INVALID_ARG;
    }
    ps_config_type_t have = ps_config_at((int)id)->type;
    int compatible = have == want || want == PS_CFG_TYPE_STRING ||
                     (want == PS_CFG_TYPE_INT && have == PS_CFG_TYPE_SIZE) ||
                     (want == PS_CFG_TYPE_SIZE && have == PS_CFG_TYPE_INT) ||
                     (want == PS_CFG_TYPE_DOUBLE && have == PS_CFG_TYPE_INT);
    if (!compatible) {
        ps_error(PS_LOG_BASE, "%s is a %s variable, read as %s", ps_config_at((int)id)->name,
                 ps_config_type_name(have), ps_config_type_name(want));
        return PS_ERR_INVALID_ARG;
    }
    ps_status_t st = ps_config_get_raw(id, text_p, source_p);
    if (st != PS_OK) {
        return st;
    }
    return **text_p != '\0' ? PS_OK : PS_ERR_NOT_FOUND;
}

ps_status_t ps_config_get_str(ps_config_id_t id, const char **value_p)
{
    const char *text;
    ps_config_source_t source;

    if (value_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_status_t st = ps_config_text(id, PS_CFG_TYPE_STRING, &text, &source);
    if (st == PS_OK) {
        *value_p = text;
    }
    return st;
}

ps_status_t ps_config_get_int(ps_config_id_t id, int64_t *value_p)
{
    const char *text;
    ps_config_source_t source;
    int64_t v;

    if (value_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_status_t st = ps_config_text(id, PS_CFG_TYPE_INT, &text, &source);
    if (st != PS_OK) {
        return st;
    }
    if (ps_config_at((int)id)->type == PS_CFG_TYPE_SIZE) {
        uint64_t u;
        if (ps_config_parse_size(text, &u) != PS_OK) {
            ps_config_log_bad(id, PS_CFG_TYPE_SIZE, text, source, "");
            return PS_ERR_CONFIG;
        }
        if (u > (uint64_t)INT64_MAX) {
            ps_config_log_bad(id, PS_CFG_TYPE_SIZE, text, source, ", below 2^63");
            return PS_ERR_CONFIG;
        }
        v = (int64_t)u;
    } else if (ps_config_parse_int(text, &v) != PS_OK) {
        ps_config_log_bad(id, PS_CFG_TYPE_INT, text, source, " in 64 bits");
        return PS_ERR_CONFIG;
    }
    *value_p = v;
    return PS_OK;
}

ps_status_t ps_config_get_bool(ps_config_id_t id, int *value_p)
{
    const char *text;
    ps_config_source_t source;
    int v;

    if (value_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_status_t st = ps_config_text(id, PS_CFG_TYPE_BOOL, &text, &source);
    if (st != PS_OK) {
        return st;
    }
    if (ps_config_parse_bool(text, &v) != PS_OK) {
        ps_config_log_bad(id, PS_CFG_TYPE_BOOL, text, source, "");
        return PS_ERR_CONFIG;
    }
    *value_p = v;
    return PS_OK;
}

ps_status_t ps_config_get_double(ps_config_id_t id, double *value_p)
{
    const char *text;
    ps_config_source_t source;
    double v;

    if (value_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_status_t st = ps_config_text(id, PS_CFG_TYPE_DOUBLE, &text, &source);
    if (st != PS_OK) {
        return st;
    }
    if (ps_config_parse_double(text, &v) != PS_OK) {
        ps_config_log_bad(id, PS_CFG_TYPE_DOUBLE, text, source, "");
        return PS_ERR_CONFIG;
    }
    *value_p = v;
    return PS_OK;
}

ps_status_t ps_config_get_size(ps_config_id_t id, uint64_t *value_p)
{
    const char *text;
    ps_config_source_t source;
    uint64_t v;

    if (value_p == NULL) {
        return PS_ERR_INVALID_ARG;
    }
    ps_status_t st = ps_config_text(id, PS_CFG_TYPE_SIZE, &text, &source);
    if (st != PS_OK) {
        return st;
    }
    if (ps_config_at((int)id)->type == PS_CFG_TYPE_INT) {
        int64_t i;
        if (ps_config_parse_int(text, &i) != PS_OK || i < 0) {
            ps_config_log_bad(id, PS_CFG_TYPE_INT, text, source, ", not negative");
            return PS_ERR_CONFIG;
        }
        v = (uint64_t)i;
    } else if (ps_config_parse_size(text, &v) != PS_OK) {
        ps_config_log_bad(id, PS_CFG_TYPE_SIZE, text, source, "");
        return PS_ERR_CONFIG;
    }
    *value_p = v;
    return PS_OK;
}

int64_t ps_config_int_or(ps_config_id_t id, int64_t fallback)
{
    int64_t v;
    return ps_config_get_int(id, &v) == PS_OK ? v : fallback;
}

int ps_config_bool_or(ps_config_id_t id, int fallback)
{
    int v;
    return ps_config_get_bool(id, &v) == PS_OK ? v : fallback;
}

uint64_t ps_config_size_or(ps_config_id_t id, uint64_t fallback)
{
    uint64_t v;
    return ps_config_get_size(id, &v) == PS_OK ? v : fallback;
}

double ps_config_double_or(ps_config_id_t id, double fallback)
{
    double v;
    return ps_config_get_double(id, &v) == PS_OK ? v : fallback;
}

const char *ps_config_str_or(ps_config_id_t id, const char *fallback)
{
    const char *v;
    return ps_config_get_str(id, &v) == PS_OK ? v : fallback;
}

/* ---- overrides ---- */

ps_status_t ps_config_set(ps_config_id_t id, const char *value)
{
    char *copy = NULL;

    if (!ps_config_id_valid(id)) {
        return PS_ERR_INVALID_ARG;
    }
    if (value != NULL && (copy = strdup(value)) == NULL) {
        return PS_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&ps_config_lock);
    char *old = ps_config_overrides[id];
    ps_config_overrides[id] = copy;
    pthread_mutex_unlock(&ps_config_lock);
    free(old);
    return PS_OK;
}

void ps_config_clear_overrides(void)
{
    char *old[PS_CONFIG_CAPACITY];

    pthread_mutex_lock(&ps_config_lock);
    memcpy(old, ps_config_overrides, sizeof(old));
    memset(ps_config_overrides, 0, sizeof(ps_config_overrides));
    pthread_mutex_unlock(&ps_config_lock);
    for (int i = 0; i < PS_CONFIG_CAPACITY; ++i) {
        free(old[i]);
    }
}

/* ---- whole table ---- */

ps_status_t ps_config_validate(void)
{
    int bad = 0;

    int n = ps_config_count();
    for (int i = 0; i < n; ++i) {
        ps_config_id_t id = (ps_config_id_t)i;
        if (!ps_config_is_set(id)) {
            continue;
        }
        ps_status_t st = PS_OK;
        union {
            int64_t i;
            int b;
            double d;
            uint64_t u;
        } v;
        switch (ps_config_at(i)->type) {
        case PS_CFG_TYPE_STRING: break;
        case PS_CFG_TYPE_INT: st = ps_config_get_int(id, &v.i); break;
        case PS_CFG_TYPE_BOOL: st = ps_config_get_bool(id, &v.b); break;
        case PS_CFG_TYPE_DOUBLE: st = ps_config_get_double(id, &v.d); break;
        case PS_CFG_TYPE_SIZE: st = ps_config_get_size(id, &v.u); break;
        }
        if (st != PS_OK && st != PS_ERR_NOT_FOUND) {
            ++bad;
        }
    }
    return bad ? PS_ERR_CONFIG : PS_OK;
}

ps_status_t ps_config_print(int fd, int set_only)
{
    const char *section = NULL;
    int printed = 0;

    if (fd < 0) {
        return PS_ERR_INVALID_ARG;
    }

    int n = ps_config_count();
    for (int i = 0; i < n; ++i) {
        const ps_config_entry_t *e = ps_config_at(i);
        const char *value;
        ps_config_source_t source;

        ps_config_get_raw((ps_config_id_t)i, &value, &source);
        if (set_only && source == PS_CFG_SRC_DEFAULT) {
            continue;
        }
        if (section == NULL || strcmp(section, e->section) != 0) {
            section = e->section;
            if (dprintf(fd, "%s# %s\n", printed ? "\n" : "", section) < 0) {
                return ps_status_from_errno(errno);
            }
        }
        /* The job secret is never printed: ps_info output ends up in bug
         * reports and CI logs. */
        if (i == PS_CFG_PS_JOB_SECRET && value != NULL && value[0] != '\0') {
            value = "(set, not shown)";
        }
        if (dprintf(fd, "%s=%s  [%s%s%s]  %s\n", e->name, value,
                    ps_config_source_name(source),
                    source == PS_CFG_SRC_ALIAS ? " " : "",
                    source == PS_CFG_SRC_ALIAS ? e->alias : "", e->help) < 0) {
            return ps_status_from_errno(errno);
        }
        printed = 1;
    }
    return PS_OK;
}
