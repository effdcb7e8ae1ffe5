/*
 * The KV app: workers push and pull (key, value) pairs to and from servers.
 *
 * Keys are sorted, unique uint64; values are bytes with a data type. Each
 * key has vals_bytes / num_keys bytes, unless per-key lengths (in elements
 * of the data type, as upstream) are given. A request is sliced across
 * servers by the key ranges they own (ps_postoffice_server_key_range, as
 * upstream); one message per server that owns any of the keys. A request
 * with no keys completes at once (its callback runs before the call
 * returns).
 *
 * Zero-copy variants (ps_kv_zpush / ps_kv_zpull) take ref-counted slices:
 * the value goes from the caller's buffer to the wire, and a pull response
 * lands straight in the caller's buffer when the transport can do that
 * (PS_CAP_RECV_INTO_DEST); otherwise it is copied there once. The caller
 * must not touch the buffers until the request completed.
 *
 * A pull names its destination's exact size: every server's answer is
 * checked (its keys, its byte count, its per-key lengths when it sends
 * them, and its values' data type when both sides state one: PS_DATA_CHAR
 * and PS_DATA_OTHER are bytes of no stated type, which go with any; the
 * van does not receive values of another type into the destination); an
 * answer that does not match completes the request with
 * PS_ERR_PROTOCOL, one that reports a key with no value (length 0 where a
 * value was expected; the default store does this for keys never pushed)
 * with PS_ERR_NOT_FOUND.
 *
 * Completion: the callback runs exactly once per request, on a ps thread.
 * On success it runs before ps_kv_wait() returns; on failure (peer gone,
 * protocol error, shut down) it may run just after. A request whose wait
 * timed out stays outstanding and may still complete later.
 *
 * A pull's destination: after its wait returned PS_OK nothing writes into
 * it any more. After a timed-out or failed wait a response may still be
 * landing in it (a van receiving in place, PS_CAP_RECV_INTO_DEST; a server
 * given the destination's IPC handle, PS_DEVICE_IPC, which may write until
 * it answers or is declared dead): call ps_kv_cancel() and reuse or free
 * the buffer only once it returned PS_OK.
 *
 * With PS_DEVICE_IPC=1 over the shm van, a pull into device memory of a
 * kind with IPC handles sends its destination's handle and the server
 * writes the answer into it (ps/app/kv_ipc.h), outside this process's
 * stream order. The request goes once the work already queued on the
 * device's default stream is done (a thread of the worker waits, not the
 * caller), as a staged pull's copy would follow it (a push-pull given a
 * readiness waits for that instead); work on other streams that still
 * uses the destination must be done before the pull is made.
 */
#ifndef PS_APP_KV_H_
#define PS_APP_KV_H_

#include <stddef.h>
#include <stdint.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"
#include "ps/base/ids.h"
#include "ps/net/postoffice.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef uint64_t ps_key_t;

typedef struct ps_kv_worker ps_kv_worker_t;
typedef struct ps_kv_server ps_kv_server_t;

/* Completion callback: runs on a ps thread, once, with the request's final
 * status. Keep it short; it may issue new requests. */
typedef void (*ps_kv_done_func_t)(void *arg, int ts, ps_status_t status);

/* A request's data, borrowed (zero-copy variants) from the caller. */
typedef struct ps_kv_pairs {
    ps_slice_t keys;       /* num_keys * sizeof(ps_key_t) bytes, sorted */
    ps_slice_t vals;       /* value bytes */
    ps_slice_t lens;       /* optional: int32 per key, in elements; len 0 = uniform */
    ps_data_type_t type;   /* element type of vals (PS_DATA_CHAR for raw bytes) */
} ps_kv_pairs_t;

size_t ps_kv_pairs_num_keys(const ps_kv_pairs_t *kvs);

/* ---- worker ---- */

/* A worker (app_id, customer_id) of a started postoffice. */
ps_status_t ps_kv_worker_create(ps_postoffice_t *po, int app_id, int customer_id,
                                ps_kv_worker_t **worker_p);
/* Waits (bounded by PS_REQUEST_TIMEOUT_MS) for outstanding requests, fails
 * the rest with PS_ERR_SHUTDOWN (callbacks run), then frees. Also valid
 * after ps_postoffice_finalize(). Not while a thread waits in ps_kv_wait. */
void ps_kv_worker_destroy(ps_kv_worker_t *worker);
/* The same, waiting up to timeout_ms (< 0: PS_REQUEST_TIMEOUT_MS) in all:
 * PS_OK, or PS_ERR_TIMED_OUT when a handler of the worker still runs then
 * (the worker is left allocated, and logged, rather than freed under it).
 * A van may keep a failed pull's destination until the van closes (a dead
 * peer's posted receive); destroy does not wait for it: the worker's last
 * memory goes when the van lets go, and ps_kv_cancel, called before
 * destroy, says when such a buffer may be freed. */
ps_status_t ps_kv_worker_destroy_timed(ps_kv_worker_t *worker, int timeout_ms);

/* Pull responses land straight in the destination when the van can
 * (PS_CAP_RECV_INTO_DEST) — the default, enable 1. With 0 the van receives
 * into its own buffers and the worker copies once (for comparing paths and
 * debugging a van). Call before issuing requests. */
void ps_kv_worker_set_recv_in_place(ps_kv_worker_t *worker, int enable);

/* A slicer (ps-lite's set_slicer): the server, by index 0 .. num_servers-1
 * (rank order), of each of a request's `num_keys` sorted keys, written to
 * server_of_key; an error status refuses the request. Called on the
 * issuing thread for every request. */
typedef ps_status_t (*ps_kv_slicer_func_t)(void *arg, const ps_key_t *keys, size_t num_keys,
                                           int num_servers, int *server_of_key);
/* Replaces the default slicing by the servers' key ranges (NULL restores
 * it). Call before issuing requests. A slicer that gives the keys to
 * servers in key order (servers non-decreasing along the keys) costs
 * nothing: each server's share is a window on the caller's buffers. One
 * that interleaves them (key % num_servers, say) costs a copy of the
 * request's keys, values and lengths, and a pull's values are copied into
 * the destination at completion; such requests take host memory only, and
 * ps_kv_pull_any refuses them. */
void ps_kv_worker_set_slicer(ps_kv_worker_t *worker, ps_kv_slicer_func_t fn, void *arg);

/* Copying variants: the data is copied before the call returns. */
ps_status_t ps_kv_push(ps_kv_worker_t *worker, const ps_key_t *keys, size_t num_keys,
                       const void *vals, size_t vals_bytes, const int32_t *lens,
                       ps_data_type_t type, int cmd, ps_kv_done_func_t done, void *arg,
                       int *ts_p);
/* Pulls into vals (vals_bytes must be the exact total). lens (per-key
 * lengths in elements, read only) says how vals is split across the keys;
 * NULL means uniform sizes. Keys and lens are copied; vals is written in
 * place and must stay valid until the request completed. */
ps_status_t ps_kv_pull(ps_kv_worker_t *worker, const ps_key_t *keys, size_t num_keys,
                       void *vals, size_t vals_bytes, const int32_t *lens,
                       ps_data_type_t type, int cmd, ps_kv_done_func_t done, void *arg,
                       int *ts_p);

/* Zero-copy variants: the slices are referenced, not copied, until the
 * request completed (the worker may drop the references a little later,
 * when it sends its next request or is destroyed; the data is not touched
 * after completion). */
ps_status_t ps_kv_zpush(ps_kv_worker_t *worker, const ps_kv_pairs_t *kvs, int cmd,
                        ps_kv_done_func_t done, void *arg, int *ts_p);
/* kvs->vals names the destination: its length must equal the total pulled. */
ps_status_t ps_kv_zpull(ps_kv_worker_t *worker, const ps_kv_pairs_t *kvs, int cmd,
                        ps_kv_done_func_t done, void *arg, int *ts_p);
/* Push `push->vals`, then pull the result into `out->vals` in one request
 * per server (the server answers the push with the pulled value). out->keys
 * may be empty (the push's keys) or must equal push->keys; out->lens / the
 * uniform size of out->vals split the destination. */
ps_status_t ps_kv_zpushpull(ps_kv_worker_t *worker, const ps_kv_pairs_t *push,
                            const ps_kv_pairs_t *out, int cmd,
                            ps_kv_done_func_t done, void *arg, int *ts_p);

/* A pull whose value lengths the servers decide (ps-lite's ZPull with an
 * empty destination and lens to fill): each server answers its keys with
 * whatever values it has, and their per-key lengths (in elements of
 * `type`; without them its bytes are split evenly over its keys). Keys are
 * referenced, as for ps_kv_zpull. Once the request completed with PS_OK
 * its result is kept by the worker until ps_kv_pull_result() takes it (or
 * the worker is destroyed); a failed one keeps nothing. Host memory only. */
ps_status_t ps_kv_pull_any(ps_kv_worker_t *worker, const ps_slice_t *keys, ps_data_type_t type,
                           int cmd, ps_kv_done_func_t done, void *arg, int *ts_p);
/* Hands over the result of server-sized pull ts: *vals_p the values of
 * every key back to back in key order, *lens_p an int32 per key (its
 * element count); both the caller's to ps_slice_unref. The values may be
 * the van's receive buffer itself (one server answered), so drop them when
 * done rather than keep them for long. PS_ERR_NOT_FOUND when ts has no
 * result (not completed, failed, not such a pull, or taken already). */
ps_status_t ps_kv_pull_result(ps_kv_worker_t *worker, int ts, ps_slice_t *vals_p,
                              ps_slice_t *lens_p);

/* When pushed device values are ready: the push is sent once `event` (a
 * ps_mem_event_h of the values' memory kind, ps/gpu/mem.h, recorded by the
 * caller) completed, or once the work queued so far on `stream` (the kind's
 * stream, a cudaStream_t for CUDA; ps records an event on it during the
 * call) is done. Neither set, or host values: ready at the call. The call
 * returns at once either way; a thread of the worker polls the event, so
 * neither the caller nor a van's progress loop waits on the device. Pushes
 * waiting so go out in the order they were made. One whose data is not
 * ready within PS_REQUEST_TIMEOUT_MS fails with PS_ERR_TIMED_OUT, unsent.
 * Without either, device values are taken as they are at the call, in the
 * device's default-stream order: a staged push copies them on the default
 * stream; a push as an IPC handle (PS_DEVICE_IPC) waits, off the caller's
 * thread, for the work already queued there, since the server's process
 * reads the memory outside this process's stream order. */
typedef struct ps_kv_ready {
    struct ps_mem_event *event;
    void *stream;
} ps_kv_ready_t;

ps_status_t ps_kv_zpush_when(ps_kv_worker_t *worker, const ps_kv_pairs_t *kvs,
                             const ps_kv_ready_t *ready, int cmd, ps_kv_done_func_t done,
                             void *arg, int *ts_p);
ps_status_t ps_kv_zpushpull_when(ps_kv_worker_t *worker, const ps_kv_pairs_t *push,
                                 const ps_kv_pairs_t *out, const ps_kv_ready_t *ready, int cmd,
                                 ps_kv_done_func_t done, void *arg, int *ts_p);

/* Blocks until request ts completed; timeout_ms < 0 = PS_REQUEST_TIMEOUT_MS.
 * Returns PS_OK or why not (timed out, peer gone, shut down, ...). */
ps_status_t ps_kv_wait(ps_kv_worker_t *worker, int ts, int timeout_ms);

/* Gives request ts up: if it is still outstanding it completes with
 * PS_ERR_CANCELLED (its callback runs), so no response is taken from now
 * on; then waits up to timeout_ms (< 0: PS_REQUEST_TIMEOUT_MS) until no
 * van or response still holds its pull destination. PS_OK: the
 * destination is the caller's again (also for a request that completed,
 * however). PS_ERR_TIMED_OUT: something may still write into it; call
 * again before freeing it. PS_ERR_INVALID_ARG for a bad worker or ts. */
ps_status_t ps_kv_cancel(ps_kv_worker_t *worker, int ts, int timeout_ms);

/* Counters of a worker since its creation (for benchmarks and tests). */
typedef struct ps_kv_worker_stats {
    uint64_t requests;            /* push, pull and push-pull calls accepted */
    uint64_t messages;            /* request messages sent (one per server share) */
    uint64_t pull_bytes_in_place; /* pulled value bytes the van wrote into the destination */
    uint64_t pull_bytes_copied;   /* pulled value bytes copied once on arrival */
    uint64_t pull_bytes_small;    /* pulled value bytes that came inline in a small-lane
                                   * response (PS_SMALL_LANE), copied once by design */
    uint64_t lane_messages;       /* of `messages`, those sent on the small lane */
    uint64_t push_bytes_staged;   /* device values pushed out of a host copy */
    uint64_t push_bytes_piped;    /* of those, handed to the van while still being copied
                                   * out, chunk by chunk (PS_CAP_SEND_AS_WRITTEN) */
    uint64_t push_bytes_ipc;      /* device values pushed as IPC handles (PS_DEVICE_IPC) */
    uint64_t pull_bytes_ipc;      /* pulled value bytes the server wrote into the device
                                   * destination through its IPC handle (PS_DEVICE_IPC) */
    uint64_t pull_bytes_staged;   /* of pull_bytes_copied, those the van received into a
                                   * page-locked staging block for a device destination */
    uint64_t pull_bytes_piped;    /* of pull_bytes_staged, those copied into the device
                                   * while the rest of their value was still arriving */
} ps_kv_worker_stats_t;
void ps_kv_worker_stats(ps_kv_worker_t *worker, ps_kv_worker_stats_t *stats_p);

/* ---- server ---- */

/* What a server's handler learns about a request. */
typedef struct ps_kv_meta {
    int cmd;          /* the worker's cmd (upstream's head) */
    int push;         /* 1 push (or push-pull), 0 pull */
    int pull;         /* 1 pull (or push-pull) */
    int sender;       /* worker node id */
    int timestamp;
    int customer_id;
    int app_id;
    uint64_t key;     /* first key */
    ps_data_type_t type;
    uint64_t val_len; /* bytes the worker expects back (pull) */
    uint64_t addr;    /* the worker's value buffer address (echoed back) */
    int option;       /* transport data (an RDMA key), echoed back */
} ps_kv_meta_t;

/* Called on a ps thread for each request; must eventually call
 * ps_kv_server_respond() exactly once for it (possibly later, from another
 * thread, with a copy of *meta). The request's slices are valid during the
 * call; take ps_slice_ref() of what you keep. */
typedef void (*ps_kv_handler_func_t)(void *arg, const ps_kv_meta_t *meta,
                                     const ps_kv_pairs_t *req, ps_kv_server_t *server);

/* A server: the customer (app_id, app_id) of a started postoffice, whose
 * handler runs inline on the van's progress thread. */
ps_status_t ps_kv_server_create(ps_postoffice_t *po, int app_id,
                                ps_kv_handler_func_t handler, void *arg,
                                ps_kv_server_t **server_p);
/* Waits up to the postoffice's finalize_timeout_ms for a handler call in
 * progress; when one still runs then, logs an error and leaves the server
 * allocated (never freed under it). */
void ps_kv_server_destroy(ps_kv_server_t *server);

/* Registers where the values of a push from worker `worker_rank` whose
 * first key is `key` land (ps-lite's RegisterRecvBuffer): a van that
 * receives in place (PS_CAP_RECV_INTO_DEST) writes them into `buffer`
 * when they fit, and the handler's req->vals is then a slice of it; else
 * they arrive as usual (the small lane included: small values come
 * inline). A push that comes as an IPC handle (PS_DEVICE_IPC, kv_ipc.h)
 * is copied into `buffer` by the server, one device-to-device copy,
 * whatever the van, when `buffer` is device memory of the pushed values'
 * kind and they fit; else (host memory, another kind) they arrive in a
 * pinned host buffer of the server's. The buffer is referenced until
 * the server is destroyed; over ibverbs, where the sender's NIC writes
 * pushes into it through grants that later pushes reuse, until the
 * worker's connection closes as well: memory ps does not own must stay
 * valid until ps_finalize. Every
 * such push writes into it, so the handler must be done with one before
 * the worker pushes the next (as in ps-lite). PS_ERR_EXISTS when (rank,
 * key) has a buffer already. */
ps_status_t ps_kv_server_register_recv_buffer(ps_kv_server_t *server, int worker_rank,
                                              ps_key_t key, const ps_slice_t *buffer);

/* Answers a request: `res` NULL (or no keys) for a push acknowledgement;
 * for a pull, the keys and values, and optionally per-key lengths (sent
 * zero-copy: the transport takes its own references, so the caller may
 * drop its own when this returns, but the bytes must not change while the
 * transport may still be sending them — answer from a buffer that is not
 * written again, as the default store does). The meta is echoed as
 * upstream: timestamp, key, addr, val_len, option, customer_id, push,
 * pull, cmd; sent to meta->sender. */
ps_status_t ps_kv_server_respond(ps_kv_server_t *server, const ps_kv_meta_t *meta,
                                 const ps_kv_pairs_t *res);
/* ps_kv_server_respond once `res`'s device values are ready: once `ready`'s
 * event completed, or the work queued so far on its stream (ps records an
 * event on it during the call) is done (StepMesh's response event). The
 * call returns at once; a thread of the server polls the event, so neither
 * the handler nor the van's progress loop waits on the device, and answers
 * waiting so go out in the order they were made. Host values, or neither
 * field set: answered at the call. The slices are referenced until then.
 * An answer not ready within PS_REQUEST_TIMEOUT_MS fails the request with
 * PS_ERR_TIMED_OUT instead; one still waiting when the server is destroyed
 * fails it with PS_ERR_SHUTDOWN. */
ps_status_t ps_kv_server_respond_when(ps_kv_server_t *server, const ps_kv_meta_t *meta,
                                      const ps_kv_pairs_t *res, const ps_kv_ready_t *ready);

/* Fails a request instead of answering it (exactly once per request, in
 * place of ps_kv_server_respond): the worker's wait and callback get
 * `status`, an error status (< 0, of the ranges in ps/base/status.h, e.g.
 * PS_ERR_NOT_FOUND or PS_ERR_INVALID_ARG). This server writes nothing into
 * a pull's destination; a request cut across several servers fails when
 * any of them fails it. PS_ERR_INVALID_ARG for a status that is no error. */
ps_status_t ps_kv_server_respond_error(ps_kv_server_t *server, const ps_kv_meta_t *meta,
                                       ps_status_t status);

/* The default handler: a store per key; pushes are summed element-wise for
 * the numeric types (integers wrap; FLOAT16/BFLOAT16 via float, rounded to
 * nearest even), CHAR/OTHER replaced; pulls answered with the stored value
 * and per-key lengths (length 0 for a key never pushed). Details and the
 * store's own functions in kv_store.h. `store` is a ps_kv_store_t. */
typedef struct ps_kv_store ps_kv_store_t;
ps_status_t ps_kv_store_create(ps_kv_store_t **store_p);
void ps_kv_store_destroy(ps_kv_store_t *store);
void ps_kv_store_handler(void *store, const ps_kv_meta_t *meta,
                         const ps_kv_pairs_t *req, ps_kv_server_t *server);

#ifdef __cplusplus
}
#endif

#endif /* PS_APP_KV_H_ */
