/*
 * The waiter's side of the progress op (van.h): taking a van's loop for
 * one round, or handing it back to the progress thread.
 */
#include <errno.h>
#include <unistd.h>

#include "ps/net/van/van.h"

void ps_van_wake_fd(int wakefd)
{
    uint64_t one = 1;
    ssize_t r;
    do {
        r = write(wakefd, &one, sizeof(one));
    } while (r < 0 && errno == EINTR);
    /* EAGAIN: the counter is already non-zero, a wake-up is pending. */
}

int ps_van_drive_enter(unsigned budget, pthread_mutex_t *prog_lock, int wakefd,
                       uint64_t *drive_seq, int *handback, const int *sleeping, int *kicked,
                       uint64_t *seq_p)
{
    if (budget == 0) {
        __atomic_store_n(handback, 1, __ATOMIC_RELEASE);
        ps_van_wake_fd(wakefd);
        return 0;
    }
    uint64_t seq = __atomic_add_fetch(drive_seq, 1, __ATOMIC_ACQ_REL);
    if (seq_p != NULL) {
        *seq_p = seq;
    }
    if (pthread_mutex_trylock(prog_lock) != 0) {
        if (__atomic_load_n(sleeping, __ATOMIC_SEQ_CST) &&
            !__atomic_exchange_n(kicked, 1, __ATOMIC_ACQ_REL)) {
            ps_van_wake_fd(wakefd);
        }
        return 0;
    }
    return 1;
}
