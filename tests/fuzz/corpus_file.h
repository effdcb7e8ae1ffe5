/*
 * The corpus generators' one way to write a seed file.
 */
#ifndef TESTS_FUZZ_CORPUS_FILE_H_
#define TESTS_FUZZ_CORPUS_FILE_H_

#include <stddef.h>

/* Writes `prefix` (prefix_len bytes; none when 0), then `bytes` to
 * DIR/name. 0 when written; 1 after saying why on stderr. */
int fuzz_corpus_write(const char *dir, const char *name, const void *prefix, size_t prefix_len,
                      const void *bytes, size_t len);

#endif /* TESTS_FUZZ_CORPUS_FILE_H_ */
