/*
 * Sends the library's log to /dev/null for the rest of a fuzzing run:
 * every rejection logs a line, far too many while fuzzing. A target's
 * broken invariants print to stderr themselves.
 */
#ifndef TESTS_FUZZ_FUZZ_QUIET_H_
#define TESTS_FUZZ_FUZZ_QUIET_H_

/* Idempotent; the first call of a process does it. */
void fuzz_quiet_logs(void);

#endif /* TESTS_FUZZ_FUZZ_QUIET_H_ */
