/*
 * The process environment, read and written under one lock. glibc's
 * setenv may move the environment's array while another thread's getenv
 * walks it (a crash seen when a van set its library's defaults while
 * another node of the same process read its settings): every read and
 * write of the environment in ps goes through here. The strings returned
 * stay valid (glibc never frees them); threads of the program that call
 * getenv themselves are not covered.
 */
#ifndef PS_BASE_ENV_H_
#define PS_BASE_ENV_H_

#ifdef __cplusplus
extern "C" {
#endif

/* getenv(name) under the lock; NULL for NULL or an unset name. */
const char *ps_env_get(const char *name);
/* Sets name to value unless it is set already (a library's default that
 * the user's environment may override). */
void ps_env_set_default(const char *name, const char *value);

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_ENV_H_ */
