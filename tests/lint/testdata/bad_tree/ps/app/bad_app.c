/* Planted violation for the layering lint test: an app reaching into a van. */
#include "ps/base/status.h"
#include "ps/net/tcp/tcp_van.h"
#include "ps/rdma/verbs/verbs_van.h"
