/*
 * Names and sizes of the shared vocabulary (ids.h).
 */
#include "ps/base/ids.h"

size_t ps_data_type_size(ps_data_type_t type)
{
    switch (type) {
    case PS_DATA_CHAR:
    case PS_DATA_INT8:
    case PS_DATA_UINT8:
        return 1;
    case PS_DATA_INT16:
    case PS_DATA_UINT16:
    case PS_DATA_FLOAT16:
    case PS_DATA_BFLOAT16:
        return 2;
    case PS_DATA_INT32:
    case PS_DATA_UINT32:
    case PS_DATA_FLOAT:
        return 4;
    case PS_DATA_INT64:
    case PS_DATA_UINT64:
    case PS_DATA_DOUBLE:
        return 8;
    case PS_DATA_OTHER:
        break;
    }
    return 0;
}

const char *ps_role_str(ps_role_t role)
{
    switch (role) {
    case PS_ROLE_SERVER:
        return "server";
    case PS_ROLE_WORKER:
        return "worker";
    case PS_ROLE_SCHEDULER:
        return "scheduler";
    case PS_ROLE_JOINT:
        return "joint";
    }
    return "unknown";
}

const char *ps_data_type_str(ps_data_type_t type)
{
    switch (type) {
    case PS_DATA_CHAR:
        return "char";
    case PS_DATA_INT8:
        return "int8";
    case PS_DATA_INT16:
        return "int16";
    case PS_DATA_INT32:
        return "int32";
    case PS_DATA_INT64:
        return "int64";
    case PS_DATA_UINT8:
        return "uint8";
    case PS_DATA_UINT16:
        return "uint16";
    case PS_DATA_UINT32:
        return "uint32";
    case PS_DATA_UINT64:
        return "uint64";
    case PS_DATA_FLOAT:
        return "float";
    case PS_DATA_DOUBLE:
        return "double";
    case PS_DATA_OTHER:
        return "other";
    case PS_DATA_FLOAT16:
        return "float16";
    case PS_DATA_BFLOAT16:
        return "bfloat16";
    }
    return "unknown";
}
