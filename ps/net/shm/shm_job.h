/*
 * The job id the shared-memory van puts in every name it creates, and the
 * name of a node's rendezvous socket.
 *
 * Nothing of the shared-memory van lives in the file system: segments are
 * anonymous (memfd) and handed over a unix socket, and that socket has an
 * abstract name, which the kernel drops with its last descriptor. The job
 * id in those names (and in memfd labels, for /proc/PID/fd) keeps two jobs
 * on one host apart; the handshake also refuses a peer of another job.
 */
#ifndef PS_NET_SHM_SHM_JOB_H_
#define PS_NET_SHM_SHM_JOB_H_

#include <stddef.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "ps/base/config.h"
#include "ps/base/log_level.h"
#include "ps/base/status.h"

/* Longest job id kept (longer ones become a prefix and a hash). */
#define PS__SHM_JOB_MAX 48

/* The job id: PS_JOB_ID, else BYTEPS_JOB_ID when set, else the scheduler's
 * DMLC_PS_ROOT_URI and DMLC_PS_ROOT_PORT, else "0"; reduced to letters,
 * digits, '.', '-' and '_'. Always NUL-terminated in buf[cap]. */
void ps__shm_job_id(char *buf, size_t cap);

/* The abstract unix-socket address of the node (host, port) of `job`:
 * "\0ps-shm/<job>/<host>:<port>" (the host hashed when too long). */
ps_status_t ps__shm_sock_addr(const char *job, const char *host, int port,
                              struct sockaddr_un *addr_p, socklen_t *len_p);

/* 64-bit FNV-1a of a string, for names that would be too long. */
unsigned long long ps__shm_hash(const char *s);

/* This van's log component "shm" (registered by shm_job.c). */
extern ps_log_component_t ps__shm_log;
#define PS_LOG_SHM ps__shm_log

/* This van's own variables (shm_config_vars.h), a config table of their own:
 * read them as ps_config_*(PS_SHM_CFG(NAME), ...). */
typedef enum {
#define PS_CONFIG_VAR PS_CONFIG_INDEX
#include "ps/net/shm/shm_config_vars.h"
#undef PS_CONFIG_VAR
} ps__shm_config_index_t;
extern ps_config_table_t ps__shm_config;
#define PS_SHM_CFG(_name) ps_config_table_id(&ps__shm_config, PS_CFGI_##_name)

#endif /* PS_NET_SHM_SHM_JOB_H_ */
