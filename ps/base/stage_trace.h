/*
 * Stage marks of a small round trip: where the time of one push-pull goes
 * between worker, van, transport and server. A diagnostic build only
 * (`bazel build --define=ps_stage_trace=1`, tools/bench/stage_trace.sh);
 * in every other build the marks are empty inline functions.
 *
 * One traced message at a time: the worker's KV request arms the chain,
 * the van that posts it marks POSTED and arms FOUND for the answer; the
 * server's KV handler marks HANDLE with the time its van found the request
 * and arms POSTED for the response. That fits a latency loop (one request
 * outstanding, test_benchmark mode 4); with more in flight the marks fall
 * on whichever message comes next. Marks take the CPU's time-stamp counter
 * (the same clock in every process of the host) into a fixed array per
 * stage; at exit each process writes them to
 * $PS_STAGE_TRACE_FILE.<role>.<pid> (default /tmp/ps-stage).
 */
#ifndef PS_BASE_STAGE_TRACE_H_
#define PS_BASE_STAGE_TRACE_H_

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    PS_STAGE_ISSUE,  /* worker: a KV request begins */
    PS_STAGE_POSTED, /* a van handed the traced message to its transport */
    PS_STAGE_FOUND,  /* worker: its van first saw the answer */
    PS_STAGE_WAITED, /* worker: the wait for the request returned */
    PS_STAGE_HANDLE, /* server: when its van found the request now handled */
    PS_STAGE_COUNT
} ps_stage_t;

#ifdef PS_STAGE_TRACE
void ps_stage_begin(void);
void ps_stage_posted(void);
void ps_stage_found(void);
void ps_stage_handle(void);
void ps_stage_waited(void);
#else
static inline void ps_stage_begin(void) {}
static inline void ps_stage_posted(void) {}
static inline void ps_stage_found(void) {}
static inline void ps_stage_handle(void) {}
static inline void ps_stage_waited(void) {}
#endif

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_STAGE_TRACE_H_ */
