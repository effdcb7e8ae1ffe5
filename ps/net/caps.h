/*
 * Transport capabilities, as the layers above the vans see them. The app
 * layer picks zero-copy or copying paths from these flags and never asks
 * which van is in use.
 */
#ifndef PS_NET_CAPS_H_
#define PS_NET_CAPS_H_

enum {
    PS_CAP_ZCOPY_SEND = 1u << 0,        /* sends user buffers without a staging copy (but
                                         * where one is faster: tcp, large unaligned) */
    PS_CAP_RECV_INTO_DEST = 1u << 1,    /* pull responses land in the buffer the worker named */
    PS_CAP_REMOTE_WRITE = 1u << 2,      /* one-sided write into a peer's registered buffer */
    PS_CAP_MEM_REGISTRATION = 1u << 3,  /* memory registration with a cache */
    PS_CAP_DEVICE_MEMORY = 1u << 4,     /* moves GPU memory directly */
    PS_CAP_MULTI_STREAM = 1u << 5,      /* several connections/QPs per peer */
    PS_CAP_SAME_HOST_ONLY = 1u << 6,    /* reaches only processes on this host */
    PS_CAP_BUSY_POLL = 1u << 7,         /* can spin instead of sleeping */
    PS_CAP_SEND_AS_WRITTEN = 1u << 8,   /* sends a segment's front while its producer still
                                         * writes the rest (ps_slice_being_written) */
};

#endif /* PS_NET_CAPS_H_ */
