/*
 * ps: the public API in one include.
 *
 *   ps/base/...        status codes, logging, config table, buffers, roles
 *                      and value types (ids.h)
 *   ps/net/postoffice.h  joining a job (scheduler, servers, workers), barriers;
 *                      group.h and joint.h: several postoffices in a process
 *   ps/app/kv.h        push / pull / push-pull of key-value data
 *   ps/app/af.h        attention-FFN tensor batches (StepMesh's AF API)
 *   ps/app/simple_app.h  head/body requests to a group
 *   ps/gpu/mem.h       memory kinds (host, CUDA)
 */
#ifndef PS_PS_H_
#define PS_PS_H_

#include "ps/version.h"
#include "ps/base/buffer.h"
#include "ps/base/config.h"
#include "ps/base/ids.h"
#include "ps/base/log_level.h"
#include "ps/base/status.h"
#include "ps/net/group.h"
#include "ps/net/joint.h"
#include "ps/net/postoffice.h"
#include "ps/app/af.h"
#include "ps/app/kv.h"
#include "ps/app/simple_app.h"
#include "ps/gpu/mem.h"

#endif /* PS_PS_H_ */
