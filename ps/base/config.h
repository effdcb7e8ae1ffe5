/*
 * The config table: the single source of truth for every environment
 * variable ps reads. Each entry has a name, a type, a default (as text), a
 * section and help text; `ps_info` prints the table and the README's
 * environment reference is generated from it.
 *
 * The entries themselves are listed once, in config_vars.h (an X-macro), so
 * the enum below, the table and the docs cannot drift apart. A layer above
 * (each van) lists its own variables the same way in a file of its own and
 * registers them as a table (ps_config_register): they get ids after the
 * core's and are read, printed and validated like the core's.
 *
 * Values come from, in order: an override set with ps_config_set() (programs
 * that do not use the environment), the environment variable, a legacy alias
 * of it (logged as deprecated), and finally the default.
 */
#ifndef PS_BASE_CONFIG_H_
#define PS_BASE_CONFIG_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PS_CFG_TYPE_STRING,
    PS_CFG_TYPE_INT,      /* signed 64-bit decimal */
    PS_CFG_TYPE_BOOL,     /* 1/0, true/false, yes/no, on/off, y/n */
    PS_CFG_TYPE_DOUBLE,
    PS_CFG_TYPE_SIZE,     /* bytes, with optional k/m/g/t suffix (powers of 1024) */
} ps_config_type_t;

/* One id per variable: PS_CFG_DMLC_ROLE, PS_CFG_PS_VERBOSE, ... */
typedef enum {
#define PS_CONFIG_VAR(_name, _type, _default, _section, _alias, _help) PS_CFG_##_name,
#include "ps/base/config_vars.h"
#undef PS_CONFIG_VAR
    PS_CFG_COUNT
} ps_config_id_t;

typedef struct {
    const char *name;          /* environment variable */
    ps_config_type_t type;
    const char *default_value; /* text; "" means unset / not applicable */
    const char *section;       /* "bootstrap", "van", "rdma", ... */
    const char *alias;         /* legacy name still honoured, or NULL */
    const char *help;
} ps_config_entry_t;

/* The table entry of `id`; NULL for an out-of-range id. */
const ps_config_entry_t *ps_config_entry(ps_config_id_t id);

/* How many ids there are: the core's (PS_CFG_COUNT) and the registered
 * tables'. Ids run from 0 to this minus one. */
int ps_config_count(void);

/* A layer's own variables. `entries` lists them (PS_CONFIG_ENTRY over the
 * layer's X-macro file); first_id is 0 until registered. */
typedef struct ps_config_table {
    const char *owner; /* "tcp", "ucx", ... */
    const ps_config_entry_t *entries;
    int count;
    int first_id;
} ps_config_table_t;

/* Adds a table once (again: PS_OK, nothing changes). PS_ERR_EXISTS when a
 * name or alias of it is already taken, PS_ERR_NO_RESOURCE when the table
 * is full; both logged. */
ps_status_t ps_config_register(ps_config_table_t *table);

/* The id of entry `index` of a registered table (an invalid id before). */
static inline ps_config_id_t ps_config_table_id(const ps_config_table_t *table, int index)
{
    return table->first_id > 0 ? (ps_config_id_t)(table->first_id + index) : (ps_config_id_t)-1;
}

/* The X-macro expansions a layer's table is made of:
 *   enum { #define PS_CONFIG_VAR PS_CONFIG_INDEX ... };  -> PS_CFGI_<NAME>
 *   static const ps_config_entry_t e[] = { #define PS_CONFIG_VAR PS_CONFIG_ENTRY ... }; */
#define PS_CONFIG_INDEX(_name, _type, _default, _section, _alias, _help) PS_CFGI_##_name,
#define PS_CONFIG_ENTRY(_name, _type, _default, _section, _alias, _help) \
    {#_name, PS_CFG_TYPE_##_type, _default, _section, _alias, _help},

/* Defines the table `_table` of `_owner` over the array `_entries`, and
 * registers it when the object defining it is linked, before main. */
#define PS_CONFIG_TABLE(_table, _owner, _entries)                                       \
    ps_config_table_t _table = {_owner, _entries,                                       \
                                (int)(sizeof(_entries) / sizeof((_entries)[0])), 0};    \
    __attribute__((constructor)) static void ps__config_register_##_table(void)         \
    {                                                                                   \
        (void)ps_config_register(&(_table));                                            \
    }

/* Looks a variable up by its name (or alias). */
ps_status_t ps_config_find(const char *name, ps_config_id_t *id_p);

const char *ps_config_type_name(ps_config_type_t type);

/* Where the value in effect came from. */
typedef enum {
    PS_CFG_SRC_DEFAULT,
    PS_CFG_SRC_ENV,
    PS_CFG_SRC_ALIAS,
    PS_CFG_SRC_OVERRIDE,
} ps_config_source_t;

/* The text in effect and its source; `*value_p` is "" when unset with no
 * default. A variable set to the empty string counts as unset, so
 * `DMLC_INTERFACE=` falls back like an absent one. Never fails for a valid
 * id; PS_ERR_INVALID_ARG otherwise. */
ps_status_t ps_config_get_raw(ps_config_id_t id, const char **value_p,
                              ps_config_source_t *source_p);

/* 1 if the variable was given (override, env or alias), 0 if only defaulted. */
int ps_config_is_set(ps_config_id_t id);

/* "default", "env", "alias", "override". */
const char *ps_config_source_name(ps_config_source_t source);

/* Typed getters. A value that does not parse returns PS_ERR_CONFIG and logs
 * one line naming the variable, the text and what was expected; the
 * out-parameter is then left untouched. An empty value with an empty default
 * returns PS_ERR_NOT_FOUND (for required variables such as DMLC_ROLE).
 *
 * get_str works for every type. get_int also reads a SIZE variable, get_size
 * a non-negative INT one, get_double an INT one; any other mismatch of the
 * getter and the variable's type is a programming error: PS_ERR_INVALID_ARG,
 * logged. Strings returned stay valid until the environment or the override
 * of that variable changes. */
ps_status_t ps_config_get_str(ps_config_id_t id, const char **value_p);
ps_status_t ps_config_get_int(ps_config_id_t id, int64_t *value_p);
ps_status_t ps_config_get_bool(ps_config_id_t id, int *value_p);
ps_status_t ps_config_get_double(ps_config_id_t id, double *value_p);
ps_status_t ps_config_get_size(ps_config_id_t id, uint64_t *value_p);

/* Convenience: the typed value, or `fallback` if it is unset or invalid (the
 * invalid case is still logged). A bad value never gets this far in a job:
 * ps_postoffice_start() runs ps_config_validate() first and refuses to
 * start (PS_ERR_CONFIG) when any variable that is set does not parse. */
int64_t ps_config_int_or(ps_config_id_t id, int64_t fallback);
int ps_config_bool_or(ps_config_id_t id, int fallback);
uint64_t ps_config_size_or(ps_config_id_t id, uint64_t fallback);
double ps_config_double_or(ps_config_id_t id, double fallback);
const char *ps_config_str_or(ps_config_id_t id, const char *fallback);

/* Process-local override, taking precedence over the environment; NULL
 * removes it, "" masks the environment (the variable reads as unset, i.e.
 * its default). The string is copied. Not for use while other threads read
 * the config (set overrides before ps starts): a string returned earlier for
 * this variable is freed when its override is replaced. */
ps_status_t ps_config_set(ps_config_id_t id, const char *value);
void ps_config_clear_overrides(void);

/* Parses every variable that is set; logs each bad one and returns
 * PS_ERR_CONFIG if any failed. */
ps_status_t ps_config_validate(void);

/* Writes the table to `fd`, one line per variable grouped by section:
 * "NAME=value  [source]  help". With `set_only`, only variables that were
 * given. For ps_info and debugging. PS_JOB_SECRET's value is not shown. */
ps_status_t ps_config_print(int fd, int set_only);

/* Standalone parsers (also used by the getters). They do not log; leading
 * and trailing blanks are ignored; PS_ERR_PARSE on bad text (including
 * overflow), out-parameter untouched. */
ps_status_t ps_config_parse_bool(const char *text, int *value_p);
ps_status_t ps_config_parse_int(const char *text, int64_t *value_p);
ps_status_t ps_config_parse_size(const char *text, uint64_t *value_p);
ps_status_t ps_config_parse_double(const char *text, double *value_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_CONFIG_H_ */
