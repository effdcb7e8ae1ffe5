/*
 * The progress thread's side of the progress op (van.h): standing back
 * while a busy-poll waiter drives the van's loop (the waiter's side is
 * drive.c).
 */
#include <poll.h>

#include "ps/net/van/van.h"

int ps_van_park(int wakefd, int park_ms, const int *stop, int *handback,
                const uint64_t *drive_seq, uint64_t *seen)
{
    struct pollfd pfd = {.fd = wakefd, .events = POLLIN};
    while (!__atomic_load_n(stop, __ATOMIC_SEQ_CST)) {
        if (__atomic_exchange_n(handback, 0, __ATOMIC_ACQ_REL)) {
            return 0;
        }
        if (poll(&pfd, 1, park_ms) != 0) {
            return 1; /* work, or EINTR: a round sorts it out */
        }
        uint64_t cur = __atomic_load_n(drive_seq, __ATOMIC_ACQUIRE);
        if (cur == *seen) {
            return 0; /* nobody drove for a whole period */
        }
        *seen = cur;
    }
    return 0;
}
