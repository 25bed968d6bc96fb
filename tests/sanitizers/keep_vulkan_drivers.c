/* keep_vulkan_drivers.c — preloaded (LD_PRELOAD) by the asan test preset only.
 *
 * The Vulkan loader dlclose()s Mesa's drivers (libvulkan_lvp.so, and the
 * hardware ones it tried) when an instance is destroyed. lavapipe allocates
 * process-lifetime state in a pthread_once initialiser and keeps it in its
 * own globals; once the library is unmapped LeakSanitizer no longer sees
 * those globals, reports the block as a leak and cannot even name the module
 * the allocation came from ("<unknown module>"), so no suppression can match
 * it. This dlclose() leaves the loader's drivers (files named libvulkan_*)
 * mapped, so their globals stay roots and their frames stay nameable; every
 * other handle, Strata's plugins included, is closed as usual.
 * docs/testing.md ("Sanitizers") has the whole story. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stddef.h>
#include <string.h>

__attribute__((visibility("default"))) int dlclose(void* handle) {
  static int (*real_dlclose)(void*) = NULL;
  if (real_dlclose == NULL) real_dlclose = (int (*)(void*))dlsym(RTLD_NEXT, "dlclose");
  struct link_map* map = NULL;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != NULL && map->l_name != NULL) {
    const char* base = strrchr(map->l_name, '/');
    base = base != NULL ? base + 1 : map->l_name;
    if (strncmp(base, "libvulkan_", 10) == 0) return 0; /* a Mesa driver: stays mapped */
  }
  return real_dlclose(handle);
}
