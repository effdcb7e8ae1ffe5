/*
 * The AF (attention-FFN) tensor app, as StepMesh: attention instances are
 * workers, FFN instances are servers.
 *
 * A worker's batch (ps_af_worker_batch_push_pull) sends every push tensor
 * to every server and names, for each server, where that server's results
 * go: the pull tensors, laid out server-major (pull[i * per_server + j] is
 * server i's j-th slot). The whole batch has one handle; ps_af_worker_wait
 * bounds it with a deadline and says how it ended.
 *
 * A server sees each worker batch whole, once, in the order the worker
 * issued them (a reorder buffer per worker, driven by the sequence number
 * and message count every message carries): through a handler called once
 * per batch, or by polling (ps_af_server_get_batch: one batch of every
 * worker at a time). It answers with ps_af_server_respond: each result goes
 * straight into the worker's pull tensor where the transport can receive
 * into it (PS_CAP_RECV_INTO_DEST), else it is copied there once.
 *
 * On the wire every message of a batch is a tensor (the meta's is_tensor,
 * dtype, shape, key) with its own timestamp, a batch flag in the meta's
 * head (StepMesh's START / MIDDLE / END; a one-message batch carries 0, as
 * StepMesh's single-tensor calls) and, in its body, the batch's sequence
 * number, its message count and its own index.
 *
 * Tensors may lie in device memory: where the van cannot move device
 * memory (no PS_CAP_DEVICE_MEMORY), a push tensor and a server's result
 * are copied once to host memory before they are sent, and an answer is
 * copied once into a device pull tensor.
 *
 * Tracing (STEPMESH_ENABLE_TRACE=1): every pull slot's request and response
 * carry CLOCK_MONOTONIC stamps (ps_af_trace_t), the server copying the
 * request's into its response; ps_af_worker_fetch_trace reads them.
 */
#ifndef PS_APP_AF_H_
#define PS_APP_AF_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/buffer.h"
#include "ps/base/mem_kind.h"
#include "ps/base/status.h"
#include "ps/base/ids.h"
#include "ps/net/postoffice.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Element types, numbered as torch's ScalarType (the meta's dtype). */
typedef enum {
    PS_AF_UINT8 = 0, /* also FP8 carried as bytes */
    PS_AF_INT8 = 1,
    PS_AF_INT16 = 2,
    PS_AF_INT32 = 3,
    PS_AF_INT64 = 4,
    PS_AF_FLOAT16 = 5,
    PS_AF_FLOAT32 = 6,
    PS_AF_FLOAT64 = 7,
    PS_AF_BFLOAT16 = 15,
} ps_af_dtype_t;

/* Bytes per element; 0 for a value that is not a ps_af_dtype_t. */
size_t ps_af_dtype_size(int dtype);
/* "bfloat16", ...; "unknown" for other values. */
const char *ps_af_dtype_str(int dtype);

/* Most dimensions of a tensor (the wire meta's shape array). */
#define PS_AF_MAX_DIMS 8

/* A tensor: borrowed memory of a kind (host, CUDA, emulated device) with a
 * key, an element type and a shape (row-major, dense). */
typedef struct ps_af_tensor {
    uint64_t key;
    void *data;
    ps_mem_kind_t mem_kind;
    int device;    /* device ordinal for device memory, else 0 */
    int dtype;     /* a ps_af_dtype_t */
    uint32_t ndim; /* 0 .. PS_AF_MAX_DIMS; 0 is a scalar */
    int64_t shape[PS_AF_MAX_DIMS];
} ps_af_tensor_t;

/* Fills *t: host memory, device 0, the given key, dtype and shape. */
void ps_af_tensor_init(ps_af_tensor_t *t, uint64_t key, void *data, int dtype, uint32_t ndim,
                       const int64_t *shape);
/* Its byte size into *bytes_p; PS_ERR_INVALID_ARG for an unknown dtype,
 * ndim over PS_AF_MAX_DIMS, a negative dimension or a size that overflows. */
ps_status_t ps_af_tensor_bytes(const ps_af_tensor_t *t, uint64_t *bytes_p);

/* StepMesh's batch flags, in the meta's head. */
#define PS_AF_FLAG_SINGLE 0
#define PS_AF_FLAG_BATCH_START 1
#define PS_AF_FLAG_BATCH_MIDDLE 2
#define PS_AF_FLAG_BATCH_END 3

/* One direction of a traced pull slot, CLOCK_MONOTONIC ns (as the meta
 * carries it): request — start (batch issued), postsend (message posted),
 * postrecv (received by the server), process (handed to the server's
 * handler); response — start (respond called), postsend (posted),
 * postrecv (received by the worker). 0 where not stamped; pre_start is
 * StepMesh's and the AF apps leave it 0. */
typedef struct {
    uint64_t pre_start;
    uint64_t start;
    uint64_t postsend;
    uint64_t postrecv;
    uint64_t process;
} ps_af_trace_t;

typedef struct ps_af_worker ps_af_worker_t;
typedef struct ps_af_server ps_af_server_t;
typedef struct ps_af_handle ps_af_handle_t;

/* ---- worker ---- */

/* A worker (app_id, customer_id) of a started postoffice; the servers'
 * app must be app_id too. Servers keep one batch sequence per worker
 * node: one AF worker per node and app. */
ps_status_t ps_af_worker_create(ps_postoffice_t *po, int app_id, int customer_id,
                                ps_af_worker_t **worker_p);
/* Fails batches still outstanding with PS_ERR_SHUTDOWN and frees. Not
 * while a thread waits in ps_af_worker_wait. Handles not yet released stay
 * valid for ps_af_handle_release only. */
void ps_af_worker_destroy(ps_af_worker_t *worker);

/* Registers memory the worker's tensors will lie in (StepMesh registers
 * every micro-batch's tensors once): a later batch's push or pull tensor
 * inside it is a slice of one buffer made here instead of a buffer made
 * for that batch, so what a transport attaches to the buffer (an RDMA
 * memory registration) is made once. Regions must not overlap
 * (PS_ERR_EXISTS); the memory must outlive the worker. */
ps_status_t ps_af_worker_register_tensor(ps_af_worker_t *worker, const ps_af_tensor_t *tensor);

/* Sends one batch: every push tensor to every server, pull tensors
 * server-major (num_pull a multiple of the number of servers, 0 allowed:
 * the servers then acknowledge the pushes). The tensors' memory must stay
 * valid (and the push tensors unchanged) until the batch completed; the
 * arrays themselves are read during the call only. At least one tensor.
 * On success *handle_p is the batch's handle, to wait for and release
 * (a batch whose messages could not all be sent is failed: wait says why;
 * a server that got part of it then holds back this worker's later
 * batches, as it cannot tell a lost message from a late one). */
ps_status_t ps_af_worker_batch_push_pull(ps_af_worker_t *worker, const ps_af_tensor_t *push,
                                         size_t num_push, const ps_af_tensor_t *pull,
                                         size_t num_pull, ps_af_handle_t **handle_p);
/* When a batch's device push tensors are ready (StepMesh passes a CUDA
 * event with its tensors): `event` (a ps_mem_event_h of the tensors'
 * kind, recorded by the caller), or the work queued so far on `stream`
 * (the kind's stream; ps records an event on it during the call). */
typedef struct ps_af_ready {
    struct ps_mem_event *event;
    void *stream;
} ps_af_ready_t;
/* ps_af_worker_batch_push_pull, sent once `ready` completed: the call
 * returns at once, a thread of the worker polls the event and then
 * stages and sends the batch. Host push tensors, or neither field set:
 * sent at the call. A batch not ready within PS_REQUEST_TIMEOUT_MS fails
 * with PS_ERR_TIMED_OUT, unsent; one whose worker is destroyed meanwhile
 * with PS_ERR_SHUTDOWN. Batches sent so take their sequence numbers when
 * they go, so a batch that never goes holds nothing back at the servers;
 * a batch issued later may reach them first. */
ps_status_t ps_af_worker_batch_push_pull_when(ps_af_worker_t *worker, const ps_af_tensor_t *push,
                                              size_t num_push, const ps_af_tensor_t *pull,
                                              size_t num_pull, const ps_af_ready_t *ready,
                                              ps_af_handle_t **handle_p);
/* Blocks until the batch completed or timeout_ms passed (< 0 means
 * PS_REQUEST_TIMEOUT_MS): PS_OK, PS_ERR_TIMED_OUT (the batch stays
 * outstanding; wait again or release), or why it failed (PS_ERR_PEER_GONE,
 * PS_ERR_PROTOCOL for an answer that does not fit its slot, ...). With
 * STEPMESH_BUSY_POLL_ENABLE (the default) it spins; where PS_BUSY_POLL is
 * also on and the van has a progress op (shm, tcp) it spins as
 * ps_customer_wait does, running the van's loop itself (the answers are
 * handled on this thread) for up to 2 ms per request before it sleeps. */
ps_status_t ps_af_worker_wait(ps_af_worker_t *worker, ps_af_handle_t *handle, int timeout_ms);
/* Pull slots of the batch (num_pull), for ps_af_worker_fetch_trace. */
size_t ps_af_handle_num_slots(const ps_af_handle_t *handle);
/* The traces of pull slot `slot` (server-major, as the pull tensors) once
 * its answer arrived; PS_ERR_NOT_FOUND before, or when tracing is off. */
ps_status_t ps_af_worker_fetch_trace(ps_af_worker_t *worker, const ps_af_handle_t *handle,
                                     size_t slot, ps_af_trace_t *request_p,
                                     ps_af_trace_t *response_p);
/* Gives the handle back. A batch still outstanding goes on without it (its
 * memory must stay valid until it ends or the worker is destroyed). */
void ps_af_handle_release(ps_af_worker_t *worker, ps_af_handle_t *handle);

/* ---- server ---- */

/* One worker batch as the server sees it. push[] are views of where the
 * pushed tensors landed (a registered receive tensor, or the transport's
 * buffer), valid until the batch ended; pull[] are the worker's slots for
 * this server: key, dtype, shape, no data. */
typedef struct ps_af_batch {
    int sender; /* worker node id */
    int worker_rank;
    uint64_t seq; /* the worker's batch number, from 0 */
    size_t num_push;
    const ps_af_tensor_t *push;
    size_t num_pull;
    const ps_af_tensor_t *pull;
} ps_af_batch_t;

/* Called once per worker batch, in order per worker, on a ps thread; it
 * must answer the batch (ps_af_server_respond) then or later. */
typedef void (*ps_af_handler_func_t)(void *arg, ps_af_server_t *server, ps_af_batch_t *batch);

/* A server: the customer (app_id, app_id). With a handler, batches go to
 * it; with handler NULL they queue for ps_af_server_get_batch. */
ps_status_t ps_af_server_create(ps_postoffice_t *po, int app_id, ps_af_handler_func_t handler,
                                void *arg, ps_af_server_t **server_p);
/* Drops batches still being assembled or queued for get_batch (their
 * workers' waits end by their deadlines or when the job ends) and frees.
 * Threads in ps_af_server_get_batch return PS_ERR_SHUTDOWN first (destroy
 * waits for them, up to PS_REQUEST_TIMEOUT_MS). Answer every batch handed
 * out before. */
void ps_af_server_destroy(ps_af_server_t *server);

/* Waits until every worker has a batch ready, then takes the oldest of
 * each: batches_p[r] is worker rank r's (cap >= number of workers; the
 * count is returned in *num_p). PS_ERR_TIMED_OUT when timeout_ms (< 0:
 * PS_REQUEST_TIMEOUT_MS) passed first, PS_ERR_BAD_STATE for a server with
 * a handler, PS_ERR_SHUTDOWN once destroy began. Spins while it waits
 * when STEPMESH_BUSY_POLL_ENABLE is 1 (the default), running the van's
 * loop itself where PS_BUSY_POLL is also on (see ps_af_worker_wait), else
 * sleeps. */
ps_status_t ps_af_server_get_batch(ps_af_server_t *server, ps_af_batch_t **batches_p, size_t cap,
                                   size_t *num_p, int timeout_ms);

/* Answers pull slots of `batch` with `results`, matched by key; each
 * result's byte size must equal its slot's. Several calls may share a
 * batch's slots; when every slot is answered the batch ends (it and its
 * push views must not be used any more). A batch without pull slots is
 * answered (its pushes acknowledged) with num_results 0. The results are
 * sent zero-copy: their memory must stay valid and unchanged until the
 * worker's batch completed (StepMesh's rule), unless a result names the
 * buffer that holds it (`owners[i]`, may be NULL), which the transport
 * then keeps referenced. PS_ERR_INVALID_ARG, nothing sent, for a result
 * whose key matches no unanswered slot or whose size differs. */
ps_status_t ps_af_server_respond(ps_af_server_t *server, ps_af_batch_t *batch,
                                 const ps_af_tensor_t *results, ps_buf_t *const *owners,
                                 size_t num_results);

/* ps_af_server_respond once the device results are ready (StepMesh's
 * response event, Response(..., need_event)): once `ready`'s event
 * completed, or the work queued so far on its stream (ps records an event
 * on it during the call) is done. The results are matched to the batch's
 * slots now (PS_ERR_INVALID_ARG, nothing queued, as for
 * ps_af_server_respond) and sent later by a thread of the server, so
 * neither the handler nor the van's progress loop waits on the device;
 * answers waiting so go out in the order they were made. The tensors are
 * copied and the owners referenced; the results' memory follows
 * ps_af_server_respond's rule. Host results, or neither field set:
 * answered at the call. An answer not ready within PS_REQUEST_TIMEOUT_MS,
 * or still waiting when the server is destroyed, is not sent (the
 * worker's batch fails by its own deadline) and its slots count as
 * answered. */
ps_status_t ps_af_server_respond_when(ps_af_server_t *server, ps_af_batch_t *batch,
                                      const ps_af_tensor_t *results, ps_buf_t *const *owners,
                                      size_t num_results, const ps_af_ready_t *ready);

/* Where worker_ranks[i]'s pushes of keys[i] land: at the start of the
 * i-th of n equal parts of `tensor` (its byte size must divide by n), as
 * StepMesh's RegisterRecvTensor. Used when the transport receives into a
 * destination (PS_CAP_RECV_INTO_DEST) and the push fits in the part;
 * otherwise pushes land in the transport's buffers. Each push of the key
 * overwrites the part: batches in flight together need distinct keys (as
 * StepMesh's micro-batches have). The memory must outlive the server;
 * over ibverbs, where workers' connections hold grants into it that
 * outlive the server, it must stay valid until ps_finalize.
 * PS_ERR_EXISTS for a (rank, key) registered already. */
ps_status_t ps_af_server_register_recv_tensor(ps_af_server_t *server, const ps_af_tensor_t *tensor,
                                              const int *worker_ranks, const uint64_t *keys,
                                              size_t n);

/* Counters (for tests and benchmarks). */
typedef struct ps_af_server_stats {
    uint64_t batches;             /* delivered */
    uint64_t push_bytes_in_place; /* pushed bytes that landed in a registered tensor */
    uint64_t push_bytes;          /* all pushed bytes */
    uint64_t dropped;             /* malformed messages dropped */
} ps_af_server_stats_t;
void ps_af_server_stats(ps_af_server_t *server, ps_af_server_stats_t *stats_p);

typedef struct ps_af_worker_stats {
    uint64_t batches;
    uint64_t pull_bytes_in_place; /* result bytes the transport wrote into the pull tensor */
    uint64_t pull_bytes_copied;   /* result bytes copied once on arrival */
    uint64_t pull_bytes_staged;   /* of those, received into a page-locked staging block for
                                   * a pull tensor in device memory */
    uint64_t pull_bytes_piped;    /* of pull_bytes_staged, those copied into the device while
                                   * the rest of their tensor was still arriving */
} ps_af_worker_stats_t;
void ps_af_worker_stats(ps_af_worker_t *worker, ps_af_worker_stats_t *stats_p);

/* ---- CPU placement ---- */

/* StepMesh's BindCpuCore: with STEPMESH_BIND_CPU_CORE=1, pins the calling
 * thread (say, the one that issues batches and busy-waits for them) to
 * core offset of the cores set aside for GPU STEPMESH_GPU, and says which
 * in *core_p (may be NULL; -1 when pinning is off, the call then does
 * nothing). GPU g's cores: with s = STEPMESH_CPU_CORES_PER_SOCKET,
 * c = STEPMESH_CPU_CORES_PER_GPU, o = STEPMESH_CPU_START_OFFSET and
 * k = (s - o) / c GPUs per socket, core (g / k) * s + o + (g % k) * c +
 * offset. PS_ERR_INVALID_ARG for an offset outside [0, c) or a core the
 * thread may not run on; PS_ERR_CONFIG for settings that leave no core. */
ps_status_t ps_af_bind_cpu_core(int offset, int *core_p);

/* StepMesh's threads poll without pause; ps's sleep when idle unless
 * PS_BUSY_POLL=1 (the KV default). An AF program applies AF's default to
 * the parameters it starts with: busy polling (PS_BUSY_POLL's, so the
 * van's threads and the waits that drive them) on when STEPMESH_BUSY_POLL_ENABLE
 * is 1 (the default), unless PS_BUSY_POLL itself is set, which wins. The
 * scheduler never spins. test_benchmark_af starts so. */
void ps_af_start_params(ps_start_params_t *params);

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_AF_H_ */
