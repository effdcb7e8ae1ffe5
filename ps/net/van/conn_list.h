/*
 * The list of a van's live connections: doubly linked through each
 * connection's own `prev`, `next` and `linked` fields and headed by a
 * pointer, whatever the van's connection type. Not thread-safe: the
 * thread that owns the connections' lifecycle keeps it.
 */
#ifndef PS_NET_VAN_CONN_LIST_H_
#define PS_NET_VAN_CONN_LIST_H_

/* Puts `_conn` first in the list `_head` (an lvalue) and marks it linked. */
#define PS_VAN_CONN_LINK(_head, _conn) \
    do {                               \
        (_conn)->linked = 1;           \
        (_conn)->prev = NULL;          \
        (_conn)->next = (_head);       \
        if ((_head) != NULL) {         \
            (_head)->prev = (_conn);   \
        }                              \
        (_head) = (_conn);             \
    } while (0)

/* Takes `_conn` out of the list `_head`; nothing when it is not linked. */
#define PS_VAN_CONN_UNLINK(_head, _conn)             \
    do {                                             \
        if ((_conn)->linked) {                       \
            (_conn)->linked = 0;                     \
            if ((_conn)->prev != NULL) {             \
                (_conn)->prev->next = (_conn)->next; \
            } else if ((_head) == (_conn)) {         \
                (_head) = (_conn)->next;             \
            }                                        \
            if ((_conn)->next != NULL) {             \
                (_conn)->next->prev = (_conn)->prev; \
            }                                        \
            (_conn)->next = (_conn)->prev = NULL;    \
        }                                            \
    } while (0)

#endif /* PS_NET_VAN_CONN_LIST_H_ */
