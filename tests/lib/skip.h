/*
 * Ending a C test as skipped: prints "SKIPPED: <why>" and leaves the
 * marker file that tools/test.sh counts (Bazel 4 has no skipped state: a
 * test that exits 0 without the marker counts as passed). The shell
 * tests' twin is job_skip in job.sh.
 */
#ifndef PS_TESTS_LIB_SKIP_H_
#define PS_TESTS_LIB_SKIP_H_

#ifdef __cplusplus
extern "C" {
#endif

/* Prints the reason (printf format), writes the marker and exits 0. */
__attribute__((noreturn, format(printf, 1, 2))) void ps_test_skip(const char *fmt, ...);

#ifdef __cplusplus
}
#endif

#endif /* PS_TESTS_LIB_SKIP_H_ */
