/*
 * Shared by the memory kinds of ps/gpu only: the registry hook, the event
 * object every kind fills, and the "unsupported" stubs that fill the slots a
 * kind cannot do.
 */
#ifndef PS_GPU_MEM_INTERNAL_H_
#define PS_GPU_MEM_INTERNAL_H_

#include "ps/gpu/mem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One struct for every kind, so ps_mem_event_*() can dispatch on kind. */
struct ps_mem_event {
    ps_mem_kind_t kind;
    int device;
    void *impl; /* the kind's own event (cudaEvent_t), NULL for host */
};

/* Installs a kind's table; called from the kind's constructor, before main().
 * Returns PS_ERR_EXISTS if another table holds the slot, PS_ERR_INVALID_ARG
 * for a table that is too small or has a NULL slot. */
ps_status_t ps__mem_register(ps_mem_kind_t kind, const ps_mem_ops_t *ops);

/* Checks that every slot of ops is set and that ops->size covers them. */
bool ps__mem_ops_complete(const ps_mem_ops_t *ops);

/* Stubs: every one returns PS_ERR_UNSUPPORTED (is_addr returns false). */
ps_status_t ps__mem_unsup_init(void);
void ps__mem_unsup_cleanup(void);
ps_status_t ps__mem_unsup_describe(ps_mem_info_t *info_p);
ps_status_t ps__mem_unsup_device_count(int *count_p);
ps_status_t ps__mem_unsup_alloc(size_t len, int device, void **ptr_p);
ps_status_t ps__mem_unsup_free(void *ptr);
ps_status_t ps__mem_unsup_copy(void *dst, const void *src, size_t len);
ps_status_t ps__mem_unsup_memset(void *ptr, int value, size_t len);
bool ps__mem_unsup_is_addr(const void *ptr, int *device_p);
ps_status_t ps__mem_unsup_register_host(void *ptr, size_t len);
ps_status_t ps__mem_unsup_unregister_host(void *ptr);
ps_status_t ps__mem_unsup_ipc_get_handle(void *ptr, ps_mem_ipc_handle_t *handle_p);
ps_status_t ps__mem_unsup_ipc_open_handle(const ps_mem_ipc_handle_t *handle, int device,
                                          void **ptr_p);
ps_status_t ps__mem_unsup_ipc_close(void *ptr);
ps_status_t ps__mem_unsup_event_create(int device, ps_mem_event_h *event_p);
ps_status_t ps__mem_unsup_event_record(ps_mem_event_h event, void *stream);
ps_status_t ps__mem_unsup_event_query(ps_mem_event_h event);
ps_status_t ps__mem_unsup_event_destroy(ps_mem_event_h event);
ps_status_t ps__mem_unsup_stream_create(int device, void **stream_p);
ps_status_t ps__mem_unsup_stream_destroy(void *stream);
ps_status_t ps__mem_unsup_copy_async(void *dst, const void *src, size_t len, void *stream);
ps_status_t ps__mem_unsup_memset_async(void *ptr, int value, size_t len, void *stream);
ps_status_t ps__mem_unsup_launch_host_func(void *stream, void (*fn)(void *arg), void *arg);
ps_status_t ps__mem_unsup_addr_range(const void *ptr, void **base_p, size_t *len_p);
ps_status_t ps__mem_unsup_dmabuf_fd(const void *ptr, size_t len, int *fd_p, uint64_t *offset_p);
ps_status_t ps__mem_unsup_in_use(int *device_p);

/* The host kind's table (host.c). */
extern const ps_mem_ops_t ps__mem_host_ops;

#ifdef __cplusplus
}
#endif

#endif /* PS_GPU_MEM_INTERNAL_H_ */
