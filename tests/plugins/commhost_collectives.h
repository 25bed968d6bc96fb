/* commhost_collectives.h — what mini_plugin.c (built -DMINI_COLLECTIVES as
 * "commhost") and commhost_collectives.c share (C99). */
#ifndef COMMHOST_COLLECTIVES_H
#define COMMHOST_COLLECTIVES_H

#include <strata/plugin/strata_plugin.h>

#define COMMHOST_NAME "commhost"
/* mini's buffer magic (MINI_MAGIC): buffers are tpc_buffer handles. */
#define COMMHOST_MAGIC 0x4d494e49u

/* Whether `s` is the plugin's initialised state (mini_plugin.c). */
int commhost_state_ok(strata_plugin_state s);

/* The strata.collectives v1 extension (commhost_collectives.c). */
extern const strata_ext_collectives commhost_collectives;

#endif /* COMMHOST_COLLECTIVES_H */
