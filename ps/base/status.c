#include "ps/base/status.h"

#include <errno.h>

#define PS_STATUS_TABLE(X)                                                  \
    X(PS_OK, "success")                                                     \
    X(PS_INPROGRESS, "operation in progress")                               \
    X(PS_ERR_INVALID_ARG, "invalid argument")                               \
    X(PS_ERR_UNSUPPORTED, "operation not supported")                        \
    X(PS_ERR_NOT_FOUND, "not found")                                        \
    X(PS_ERR_EXISTS, "already exists")                                      \
    X(PS_ERR_TOO_LARGE, "too large")                                        \
    X(PS_ERR_BAD_STATE, "not allowed in the current state")                 \
    X(PS_ERR_AGAIN, "resource temporarily unavailable, try again")          \
    X(PS_ERR_PARSE, "cannot parse value")                                   \
    X(PS_ERR_NO_MEMORY, "out of memory")                                    \
    X(PS_ERR_NO_RESOURCE, "out of resources")                               \
    X(PS_ERR_REGISTRATION, "memory registration failed")                    \
    X(PS_ERR_ADDRESS_IN_USE, "address already in use")                      \
    X(PS_ERR_IO, "input/output error")                                      \
    X(PS_ERR_TIMED_OUT, "timed out")                                        \
    X(PS_ERR_CANCELLED, "cancelled")                                        \
    X(PS_ERR_PEER_GONE, "peer gone")                                        \
    X(PS_ERR_PEER_REFUSED, "peer refused")                                  \
    X(PS_ERR_PROTOCOL, "protocol error")                                    \
    X(PS_ERR_UNREACHABLE, "destination unreachable")                        \
    X(PS_ERR_AUTH, "authentication failed")                                 \
    X(PS_ERR_LINK_FAILED, "link failed")                                    \
    X(PS_ERR_DEVICE, "device error")                                        \
    X(PS_ERR_CONFIG, "job misconfigured")                                   \
    X(PS_ERR_SHUTDOWN, "shut down")                                         \
    X(PS_ERR_FATAL, "fatal error")

const char *ps_status_str(ps_status_t status)
{
    switch (status) {
#define PS_STATUS_STR_CASE(_name, _text) case _name: return _text;
    PS_STATUS_TABLE(PS_STATUS_STR_CASE)
#undef PS_STATUS_STR_CASE
    }
    return "unknown status";
}

const char *ps_status_name(ps_status_t status)
{
    switch (status) {
#define PS_STATUS_NAME_CASE(_name, _text) case _name: return #_name;
    PS_STATUS_TABLE(PS_STATUS_NAME_CASE)
#undef PS_STATUS_NAME_CASE
    }
    return "PS_STATUS_UNKNOWN";
}

ps_status_t ps_status_from_errno(int err)
{
    switch (err) {
    case 0: return PS_OK;
    case EINPROGRESS: return PS_INPROGRESS;
    case EINVAL: return PS_ERR_INVALID_ARG;
    case ENOSYS: case EOPNOTSUPP: return PS_ERR_UNSUPPORTED;
    case ENOENT: case ENODEV: case ENXIO: return PS_ERR_NOT_FOUND;
    case EEXIST: return PS_ERR_EXISTS;
    case E2BIG: case EMSGSIZE: case EOVERFLOW: return PS_ERR_TOO_LARGE;
    case EAGAIN: case EINTR: return PS_ERR_AGAIN;
    case ENOMEM: return PS_ERR_NO_MEMORY;
    case EMFILE: case ENFILE: case ENOBUFS: case ENOSPC: return PS_ERR_NO_RESOURCE;
    case EADDRINUSE: return PS_ERR_ADDRESS_IN_USE;
    case ETIMEDOUT: return PS_ERR_TIMED_OUT;
    case ECANCELED: return PS_ERR_CANCELLED;
    case ECONNRESET: case EPIPE: case ENOTCONN: case ESHUTDOWN: return PS_ERR_PEER_GONE;
    case ECONNREFUSED: return PS_ERR_PEER_REFUSED;
    case EPROTO: case EBADMSG: return PS_ERR_PROTOCOL;
    case EHOSTUNREACH: case ENETUNREACH: case EADDRNOTAVAIL: return PS_ERR_UNREACHABLE;
    case EACCES: case EPERM: return PS_ERR_AUTH;
    case ENETDOWN: case ECONNABORTED: return PS_ERR_LINK_FAILED;
    default: return PS_ERR_IO;
    }
}
