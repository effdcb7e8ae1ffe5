/*
 * ps_status_t: the one status type of ps.
 *
 * PS_OK is 0, PS_INPROGRESS is 1, errors are negative and grouped by how much
 * of the system they break, so a caller knows what to tear down:
 *   -1 .. -19   the call itself (bad argument, unsupported, not found, ...)
 *   -20 .. -39  local resources (memory, registration, descriptors, ...)
 *   -40 .. -59  time (a deadline passed, the operation was cancelled)
 *   -60 .. -79  one peer (gone, refused us, broke the protocol)
 *   -80 .. -99  a link (connection or device failed; every peer on it)
 *   -100 ..     the job (misconfigured, shut down, fatal)
 */
#ifndef PS_BASE_STATUS_H_
#define PS_BASE_STATUS_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PS_OK = 0,
    PS_INPROGRESS = 1,

    /* the call */
    PS_ERR_INVALID_ARG = -1,
    PS_ERR_UNSUPPORTED = -2,
    PS_ERR_NOT_FOUND = -3,
    PS_ERR_EXISTS = -4,
    PS_ERR_TOO_LARGE = -5,
    PS_ERR_BAD_STATE = -6,
    PS_ERR_AGAIN = -7,
    PS_ERR_PARSE = -8,

    /* local resources */
    PS_ERR_NO_MEMORY = -20,
    PS_ERR_NO_RESOURCE = -21,
    PS_ERR_REGISTRATION = -22,
    PS_ERR_ADDRESS_IN_USE = -23,
    PS_ERR_IO = -24,

    /* time */
    PS_ERR_TIMED_OUT = -40,
    PS_ERR_CANCELLED = -41,

    /* one peer */
    PS_ERR_PEER_GONE = -60,
    PS_ERR_PEER_REFUSED = -61,
    PS_ERR_PROTOCOL = -62,
    PS_ERR_UNREACHABLE = -63,
    PS_ERR_AUTH = -64,

    /* a link */
    PS_ERR_LINK_FAILED = -80,
    PS_ERR_DEVICE = -81,

    /* the job */
    PS_ERR_CONFIG = -100,
    PS_ERR_SHUTDOWN = -101,
    PS_ERR_FATAL = -102,
} ps_status_t;

#define PS_STATUS_IS_ERR(_s)        ((_s) < 0)
#define PS_STATUS_IS_CALL_ERR(_s)   ((_s) <= -1 && (_s) > -20)
#define PS_STATUS_IS_RESOURCE_ERR(_s) ((_s) <= -20 && (_s) > -40)
#define PS_STATUS_IS_TIME_ERR(_s)   ((_s) <= -40 && (_s) > -60)
#define PS_STATUS_IS_PEER_ERR(_s)   ((_s) <= -60 && (_s) > -80)
#define PS_STATUS_IS_LINK_ERR(_s)   ((_s) <= -80 && (_s) > -100)
#define PS_STATUS_IS_JOB_ERR(_s)    ((_s) <= -100)

/* A short lower-case description; never NULL, also for unknown values. */
const char *ps_status_str(ps_status_t status);

/* The enumerator's name ("PS_ERR_TIMED_OUT"); never NULL. */
const char *ps_status_name(ps_status_t status);

/* Maps an errno value from a failed system call to a status. */
ps_status_t ps_status_from_errno(int err);

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_STATUS_H_ */
