/*
 * Shared segments (memfd) and the buffers on them: what ps_shm_buf_alloc()
 * is made of, what the van's staging pool reuses, and how the van tells
 * that a buffer lives in one (so that it sends a descriptor, not bytes).
 */
#ifndef PS_NET_SHM_SHM_SEG_H_
#define PS_NET_SHM_SHM_SEG_H_

#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>

#include "ps/base/buffer.h"
#include "ps/base/status.h"

typedef struct {
    uint64_t id;  /* unique in this process, never reused */
    int fd;       /* the memfd, open while the segment lives */
    void *base;   /* where it is mapped here */
    size_t size;  /* bytes mapped (page-rounded) */
} ps__shm_seg_t;

/* ---- memfds shared with peers ----
 * Every memfd ps hands to a peer is sealed against resizing once sized
 * (F_SEAL_SHRINK, F_SEAL_GROW, F_SEAL_SEAL), and a memfd a peer hands to ps
 * is mapped only if it carries those seals: a holder of the descriptor who
 * shrank it would make the next access to the mapping a SIGBUS in every
 * process that maps it. */
#define PS__SHM_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

/* A new memfd of exactly `size` bytes (zero-filled), sealed; errors are
 * logged (`label` names it there and in /proc/PID/fd). */
ps_status_t ps__shm_memfd_new(const char *label, size_t size, int *fd_p);

/* Whether a peer's memfd may be mapped for `size` bytes: it carries
 * PS__SHM_SEALS and is at least that long. PS_ERR_PROTOCOL with *why_p
 * saying why (for the caller's log line) when not. */
ps_status_t ps__shm_memfd_check(int fd, uint64_t size, const char **why_p);

/* A new zero-filled segment of at least `size` bytes, labelled `what` (in
 * /proc/PID/fd, with the job id). Errors are logged. */
ps_status_t ps__shm_seg_create(size_t size, const char *what, ps__shm_seg_t **seg_p);
void ps__shm_seg_destroy(ps__shm_seg_t *seg);

/* Called when the last reference of a buffer on a segment goes. */
typedef void (*ps__shm_seg_release_func_t)(ps__shm_seg_t *seg, void *arg);

/* A buffer (memory kind PS_BUF_MEM_SHM) on the first `len` bytes of seg;
 * `release(seg, arg)` runs when its last reference goes. */
ps_status_t ps__shm_seg_wrap(ps__shm_seg_t *seg, size_t len, ps__shm_seg_release_func_t release,
                             void *arg, ps_buf_t **buf_p);

/* The segment under a buffer made by ps__shm_seg_wrap() (or
 * ps_shm_buf_alloc()), or NULL. */
const ps__shm_seg_t *ps__shm_seg_of(const ps_buf_t *buf);

/* Installs shared segments as the process's provider of shared host
 * blocks (ps/base/shared_block.h): the van does when it opens, so that
 * what the layers above stage for it travels as SEG descriptors. */
void ps__shm_provide_blocks(void);

/* ---- the buffers of ps_shm_buf_alloc() that are alive, by address ----
 * A pull's destination named only by its address (meta.addr) is found here,
 * so that the van can have the answer written straight into it. */

/* Calls fn(seg, offset, arg) with the registry locked (the segment cannot
 * go away meanwhile) if [addr, addr + len) lies in a live buffer of
 * ps_shm_buf_alloc(), and returns what fn returned; else returns
 * PS_ERR_NOT_FOUND. fn must not allocate or free shared buffers. */
ps_status_t ps__shm_seg_with_addr(uint64_t addr, uint64_t len,
                                  ps_status_t (*fn)(const ps__shm_seg_t *seg, uint64_t off,
                                                    void *arg),
                                  void *arg);

/* Copies len bytes at off of live segment id (of ps_shm_buf_alloc()) to
 * dst; PS_ERR_NOT_FOUND if it is gone or too small. */
ps_status_t ps__shm_seg_copy_out(uint64_t id, uint64_t off, void *dst, uint64_t len);

#endif /* PS_NET_SHM_SHM_SEG_H_ */
