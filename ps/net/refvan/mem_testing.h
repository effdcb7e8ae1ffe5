/*
 * For tests of the mem van's receive side: a raw end dialled to a mem van,
 * which writes bytes no van would (hostile input) and sees the van close
 * the connection.
 */
#ifndef PS_NET_REFVAN_MEM_TESTING_H_
#define PS_NET_REFVAN_MEM_TESTING_H_

#include <stddef.h>

#include "ps/base/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ps__mem_test_raw ps__mem_test_raw_t;

/* PS_ERR_NOT_FOUND when no mem van listens at host:port. */
ps_status_t ps__mem_test_raw_dial(const char *host, int port, ps__mem_test_raw_t **raw_p);
/* Writes what fits of buf[len) (the pipe is bounded); returns it. */
size_t ps__mem_test_raw_write(ps__mem_test_raw_t *raw, const void *buf, size_t len);
/* Drops what the van sent; 1 once the van closed its end. */
int ps__mem_test_raw_closed(ps__mem_test_raw_t *raw);
void ps__mem_test_raw_close(ps__mem_test_raw_t *raw);

#ifdef __cplusplus
}
#endif

#endif /* PS_NET_REFVAN_MEM_TESTING_H_ */
