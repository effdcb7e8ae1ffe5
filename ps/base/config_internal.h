/*
 * Hooks of the config table for its tests only.
 */
#ifndef PS_BASE_CONFIG_INTERNAL_H_
#define PS_BASE_CONFIG_INTERNAL_H_

#ifdef __cplusplus
extern "C" {
#endif

/* Forget which "deprecated"/"ignored" notes about legacy names were
 * logged, so each is logged once again. */
void ps__config_reset_notes(void);

#ifdef __cplusplus
}
#endif

#endif /* PS_BASE_CONFIG_INTERNAL_H_ */
