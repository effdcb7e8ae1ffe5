/*
 * The header of a ps_buf_t, for ps's own layers: the pools that keep a
 * buffer's header inside their blocks (ps_buf_init_wrapped), and the
 * transports that hang a registration (an MR, a memory key) on a buffer.
 * Not part of ps/ps.h: a program using ps sees ps_buf_t as opaque.
 */
#ifndef PS_BASE_BUFFER_INTERNAL_H_
#define PS_BASE_BUFFER_INTERNAL_H_

#include <stdint.h>

#include "ps/base/buffer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Registration slots a transport may hang its handle on; slot numbers are
 * handed out by the layer above. */
#define PS_BUF_REG_SLOTS 4

/* Undoes a registration hung on `slot`; called when the last reference goes,
 * before the memory itself is released. */
typedef void (*ps_buf_reg_release_func_t)(ps_buf_t *buf, unsigned slot, void *reg);

struct ps_buf {
    void *data;
    size_t length;
    uint32_t refcount;  /* atomic; use ps_buf_ref/unref */
    uint16_t mem_kind;  /* ps_buf_mem_t */
    uint16_t flags;     /* buffer.c's */
    int device;         /* device ordinal for device memory, else 0 */
    ps_buf_release_func_t release; /* NULL: borrowed, or inline (alloc) */
    void *release_arg;
    /* Use ps_buf_reg_* (atomic); NULL when empty. */
    void *reg[PS_BUF_REG_SLOTS];
    ps_buf_reg_release_func_t reg_release[PS_BUF_REG_SLOTS];
    /* ps_buf_set_fill_hook's; NULL when none. */
    ps_buf_fill_func_t fill;
    void *fill_arg;
    /* ps_buf_set_written_hook's; NULL when none. */
    ps_buf_written_func_t written;
    void *written_arg;
};

/* ps_buf_wrap with the header in storage the caller provides (`buf`, e.g.
 * a field of a pooled block), for buffers handed out again and again: no
 * allocation per use. When the last reference goes, `release` runs and the
 * header is not touched after it (release may free the storage holding
 * it). The storage must not be reused before then. */
void ps_buf_init_wrapped(ps_buf_t *buf, void *data, size_t len, ps_buf_release_func_t release,
                         void *arg);

/* 1 when `buf` was wrapped with `release` (ps_buf_wrap*), so a layer can
 * tell its own buffers from others. */
int ps_buf_released_by(const ps_buf_t *buf, ps_buf_release_func_t release);

/* Hangs a registration on `slot`: PS_ERR_EXISTS if the slot is taken (another
 * thread won the race: use ps_buf_reg_get), PS_ERR_INVALID_ARG for a bad
 * slot or NULL reg. `release` may be NULL if the owner undoes it itself.
 * Concurrent attaches to one slot are safe (one wins); an attach and a
 * detach of the same slot must not race (the slot's owner orders them). */
ps_status_t ps_buf_reg_attach(ps_buf_t *buf, unsigned slot, void *reg,
                              ps_buf_reg_release_func_t release);
/* The registration on `slot`, or NULL. */
void *ps_buf_reg_get(const ps_buf_t *buf, unsigned slot);
/* Takes the registration off `slot` without calling its release; the caller
 * undoes it. PS_ERR_NOT_FOUND if the slot is empty. */
ps_status_t ps_buf_reg_detach(ps_buf_t *buf, unsigned slot, void **reg_p);

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_BUFFER_INTERNAL_H_ */
