/*
 * ps: the public API in one include.
 *
 *   ps/base/...        status codes, logging, config table, buffers
 *   ps/net/postoffice.h  joining a job (scheduler, servers, workers), barriers
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
#include "ps/base/log.h"
#include "ps/base/status.h"
#include "ps/net/codec/message.h"
#include "ps/net/postoffice.h"
#include "ps/app/af.h"
#include "ps/app/kv.h"
#include "ps/app/simple_app.h"
#include "ps/gpu/mem.h"

#endif /* PS_PS_H_ */
