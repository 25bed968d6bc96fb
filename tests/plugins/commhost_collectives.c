/* commhost_collectives.c — strata.collectives v1 across processes through
 * POSIX shared memory, for the "commhost" test plugin (mini_plugin.c built
 * with -DMINI_COLLECTIVES): a device whose memory is host memory behind
 * handles, like mini, whose collectives take the path NCCL takes in the
 * CUDA plugin, without a GPU.
 *
 *  - comm_unique_id: 16 random bytes from /dev/urandom.
 *  - comm_create: shm_open("/strata-commhost-<32 hex digits>"); the rank
 *    that creates it (O_EXCL) sizes it and initialises a header with a
 *    process-shared mutex and condition variable, then marks it ready; the
 *    others wait for that. Every rank joins; the last to join unlinks the
 *    name (so that a crash leaves nothing behind), and comm_create returns
 *    once all `world_size` ranks joined.
 *  - Collectives move data in chunks of at most COMMHOST_SLOT bytes through
 *    one slot per rank: each rank writes its slot, barrier, each reads the
 *    slots (all_reduce reduces them in rank order, so every rank's result is
 *    bitwise the same), barrier.
 *  - Every wait is bounded (COMMHOST_TIMEOUT_S, or STRATA_COMMHOST_TIMEOUT_MS)
 *    and fails with STRATA_ERROR_DEVICE naming what it waited for.
 *  - Synchronous: the device has no streams.
 */
#define _POSIX_C_SOURCE 200809L

#include <strata/plugin/strata_plugin.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/test_plugin_common.h"
#include "commhost_collectives.h"

#define COMMHOST_SLOT ((size_t)1 << 20)
#define COMMHOST_TIMEOUT_S 30
#define COMMHOST_ID_BYTES 16
#define COMMHOST_READY 0x52454459u
#define COMMHOST_COMM_MAGIC 0x434f4d4du

typedef struct commhost_header {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint32_t ready; /* COMMHOST_READY once initialised (atomic) */
  int32_t world;
  int32_t joined;
  int32_t arrived;
  uint64_t generation;
} commhost_header;

typedef struct commhost_comm {
  uint32_t magic;
  int32_t rank;
  int32_t world;
  commhost_header* header;
  unsigned char* slots; /* world slots of COMMHOST_SLOT bytes */
  size_t mapped;
  char name[64];
} commhost_comm;

static size_t header_bytes(void) { return (sizeof(commhost_header) + 63u) & ~(size_t)63u; }

static long timeout_ms(void) {
  const char* v = getenv("STRATA_COMMHOST_TIMEOUT_MS");
  long ms = v != NULL ? strtol(v, NULL, 10) : 0;
  return ms > 0 ? ms : (long)COMMHOST_TIMEOUT_S * 1000L;
}

static struct timespec deadline_after(long ms) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_sec += ms / 1000;
  t.tv_nsec += (ms % 1000) * 1000000L;
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec += 1;
    t.tv_nsec -= 1000000000L;
  }
  return t;
}

static void sleep_ms(long ms) {
  struct timespec t;
  t.tv_sec = ms / 1000;
  t.tv_nsec = (ms % 1000) * 1000000L;
  nanosleep(&t, NULL);
}

static void name_of(const uint8_t* id, char* out, size_t cap) {
  static const char hex[] = "0123456789abcdef";
  size_t k, at = (size_t)snprintf(out, cap, "/strata-commhost-");
  for (k = 0; k < COMMHOST_ID_BYTES && at + 2 < cap; ++k) {
    out[at++] = hex[id[k] >> 4];
    out[at++] = hex[id[k] & 15];
  }
  out[at] = '\0';
}

/* Every rank arrives; returns once all `world` did, or fails at the deadline. */
static strata_status barrier(commhost_comm* c, strata_error* error, const char* what) {
  commhost_header* h = c->header;
  long ms = timeout_ms();
  struct timespec deadline = deadline_after(ms);
  uint64_t gen;
  int rc = pthread_mutex_timedlock(&h->mu, &deadline);
  if (rc != 0) {
    return tpc_fail(error, STRATA_ERROR_DEVICE, COMMHOST_NAME ": %s on rank %d of %d: the shared-memory lock: %s", what,
                    (int)c->rank, (int)c->world, rc == ETIMEDOUT ? "timed out" : strerror(rc));
  }
  gen = h->generation;
  if (++h->arrived == h->world) {
    h->arrived = 0;
    h->generation++;
    pthread_cond_broadcast(&h->cv);
  } else {
    while (h->generation == gen) {
      rc = pthread_cond_timedwait(&h->cv, &h->mu, &deadline);
      if (rc == ETIMEDOUT && h->generation == gen) {
        int arrived = (int)h->arrived;
        pthread_mutex_unlock(&h->mu);
        return tpc_fail(error, STRATA_ERROR_DEVICE,
                        COMMHOST_NAME ": %s on rank %d of %d: timed out after %ld ms waiting for the other ranks "
                                      "(%d of %d arrived)",
                        what, (int)c->rank, (int)c->world, ms, arrived, (int)c->world);
      }
    }
  }
  pthread_mutex_unlock(&h->mu);
  return STRATA_OK;
}

/* ---- argument checks ------------------------------------------------------------------ */

static strata_status args_ok(strata_collective_args* a, const char* what) {
  if (a == NULL || a->struct_size < STRATA_COLLECTIVE_ARGS_MIN_SIZE) return STRATA_ERROR_INVALID_ARGUMENT;
  if (!commhost_state_ok(a->state) || a->device != 0) {
    return tpc_fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, COMMHOST_NAME ": %s: bad state or device %d", what,
                    (int)a->device);
  }
  return STRATA_OK;
}

static commhost_comm* comm_of(strata_collective_args* a, const char* what, strata_status* st) {
  commhost_comm* c = (commhost_comm*)a->comm;
  *st = args_ok(a, what);
  if (*st != STRATA_OK) return NULL;
  if (c == NULL || c->magic != COMMHOST_COMM_MAGIC) {
    *st = tpc_fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, COMMHOST_NAME ": %s: not a communicator of this plugin", what);
    return NULL;
  }
  return c;
}

/* A compact tensor of this plugin: its bytes and element count. */
static strata_status tensor_bytes(strata_collective_args* a, const strata_tensor* t, const char* what, const char* role,
                                  unsigned char** data, size_t* bytes, int64_t* numel) {
  int64_t n = 1, expect = 1;
  int32_t k;
  size_t elem;
  tpc_buffer* b;
  if (t == NULL || t->struct_size < STRATA_TENSOR_MIN_SIZE) {
    return tpc_fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, COMMHOST_NAME ": %s: no %s descriptor", what, role);
  }
  if (t->rank < 0 || t->rank > STRATA_MAX_RANK) {
    return tpc_fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, COMMHOST_NAME ": %s: %s has rank %d", what, role, (int)t->rank);
  }
  switch (t->dtype) {
    case STRATA_F32: elem = 4; break;
    case STRATA_I64: elem = 8; break;
    case STRATA_BOOL: elem = 1; break;
    default:
      return tpc_fail(a->error, STRATA_ERROR_UNSUPPORTED, COMMHOST_NAME ": %s: %s has dtype %d (f32, i64, bool only)", what,
                      role, (int)t->dtype);
  }
  for (k = t->rank - 1; k >= 0; --k) {
    if (t->shape[k] != 1 && t->strides[k] != expect) {
      return tpc_fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, COMMHOST_NAME ": %s: %s is not contiguous (dim %d stride %lld)",
                      what, role, (int)k, (long long)t->strides[k]);
    }
    expect *= t->shape[k];
    n *= t->shape[k];
  }
  b = tpc_buffer_of(t->buffer, COMMHOST_MAGIC);
  if (b == NULL || t->offset < 0 || !tpc_buffer_fits(t->buffer, COMMHOST_MAGIC, (size_t)t->offset * elem, (size_t)n * elem)) {
    return tpc_fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, COMMHOST_NAME ": %s: %s is not inside a buffer of this plugin",
                    what, role);
  }
  *data = b->data + (size_t)t->offset * elem;
  *bytes = (size_t)n * elem;
  *numel = n;
  return STRATA_OK;
}

/* ---- the extension -------------------------------------------------------------------- */

static strata_status ch_unique_id(strata_collective_args* a) {
  FILE* f;
  size_t got;
  strata_status st = args_ok(a, "comm_unique_id");
  if (st != STRATA_OK) return st;
  if (a->unique_id == NULL || a->id_bytes < COMMHOST_ID_BYTES) {
    return tpc_fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, COMMHOST_NAME ": comm_unique_id: a buffer of %zu bytes, need %d",
                    a->id_bytes, COMMHOST_ID_BYTES);
  }
  f = fopen("/dev/urandom", "rb");
  if (f == NULL) return tpc_fail(a->error, STRATA_ERROR_DEVICE, COMMHOST_NAME ": comm_unique_id: /dev/urandom: %s", strerror(errno));
  got = fread(a->unique_id, 1, COMMHOST_ID_BYTES, f);
  fclose(f);
  if (got != COMMHOST_ID_BYTES) return tpc_fail(a->error, STRATA_ERROR_DEVICE, COMMHOST_NAME ": comm_unique_id: short read");
  a->id_bytes = COMMHOST_ID_BYTES;
  return STRATA_OK;
}

static strata_status init_header(commhost_header* h, int32_t world) {
  pthread_mutexattr_t ma;
  pthread_condattr_t ca;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
  pthread_condattr_init(&ca);
  pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  if (pthread_mutex_init(&h->mu, &ma) != 0 || pthread_cond_init(&h->cv, &ca) != 0) return STRATA_ERROR_DEVICE;
  pthread_mutexattr_destroy(&ma);
  pthread_condattr_destroy(&ca);
  h->world = world;
  h->joined = 0;
  h->arrived = 0;
  h->generation = 0;
  __atomic_store_n(&h->ready, COMMHOST_READY, __ATOMIC_RELEASE);
  return STRATA_OK;
}

static strata_status ch_create(strata_collective_args* a) {
  commhost_comm* c;
  size_t total;
  int fd, created = 0, last = 0;
  long waited = 0, limit = timeout_ms();
  void* map;
  strata_status st = args_ok(a, "comm_create");
  if (st != STRATA_OK) return st;
  if (a->unique_id == NULL || a->id_bytes != COMMHOST_ID_BYTES) {
    return tpc_fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, COMMHOST_NAME ": comm_create: a unique id of %zu bytes, want %d",
                    a->id_bytes, COMMHOST_ID_BYTES);
  }
  if (a->world_size < 1 || a->rank < 0 || a->rank >= a->world_size) {
    return tpc_fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, COMMHOST_NAME ": comm_create: rank %d of %d", (int)a->rank,
                    (int)a->world_size);
  }
  c = (commhost_comm*)calloc(1, sizeof(*c));
  if (c == NULL) return tpc_fail(a->error, STRATA_ERROR_OUT_OF_MEMORY, COMMHOST_NAME ": comm_create: out of memory");
  c->magic = COMMHOST_COMM_MAGIC;
  c->rank = a->rank;
  c->world = a->world_size;
  name_of(a->unique_id, c->name, sizeof(c->name));
  total = header_bytes() + (size_t)a->world_size * COMMHOST_SLOT;
  fd = shm_open(c->name, O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd >= 0) {
    created = 1;
    if (ftruncate(fd, (off_t)total) != 0) {
      st = tpc_fail(a->error, STRATA_ERROR_DEVICE, COMMHOST_NAME ": comm_create: ftruncate %s: %s", c->name, strerror(errno));
      close(fd);
      shm_unlink(c->name);
      free(c);
      return st;
    }
  } else {
    struct stat sb;
    /* Another rank creates it: wait until it exists and has its size. */
    for (;;) {
      fd = shm_open(c->name, O_RDWR, 0600);
      if (fd >= 0 && fstat(fd, &sb) == 0 && (size_t)sb.st_size >= total) break;
      if (fd >= 0) close(fd);
      if (waited >= limit) {
        tpc_fail(a->error, STRATA_ERROR_DEVICE,
                 COMMHOST_NAME ": comm_create on rank %d of %d: timed out after %ld ms waiting for %s to be created",
                 (int)a->rank, (int)a->world_size, limit, c->name);
        free(c); /* after the message, which names it */
        return STRATA_ERROR_DEVICE;
      }
      sleep_ms(2);
      waited += 2;
    }
  }
  map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    if (created) shm_unlink(c->name);
    free(c);
    return tpc_fail(a->error, STRATA_ERROR_DEVICE, COMMHOST_NAME ": comm_create: mmap of %zu bytes: %s", total, strerror(errno));
  }
  c->header = (commhost_header*)map;
  c->slots = (unsigned char*)map + header_bytes();
  c->mapped = total;
  if (created && init_header(c->header, a->world_size) != STRATA_OK) {
    munmap(map, total);
    shm_unlink(c->name);
    free(c);
    return tpc_fail(a->error, STRATA_ERROR_DEVICE, COMMHOST_NAME ": comm_create: cannot initialise the shared lock");
  }
  while (__atomic_load_n(&c->header->ready, __ATOMIC_ACQUIRE) != COMMHOST_READY) {
    if (waited >= limit) {
      tpc_fail(a->error, STRATA_ERROR_DEVICE, COMMHOST_NAME ": comm_create: %s was never initialised", c->name);
      munmap(map, total);
      free(c); /* after the message, which names it */
      return STRATA_ERROR_DEVICE;
    }
    sleep_ms(1);
    waited += 1;
  }
  if (c->header->world != a->world_size) {
    int other = (int)c->header->world;
    munmap(map, total);
    free(c);
    return tpc_fail(a->error, STRATA_ERROR_INVALID_ARGUMENT,
                    COMMHOST_NAME ": comm_create: rank %d says world size %d, the communicator was made for %d", (int)a->rank,
                    (int)a->world_size, other);
  }
  pthread_mutex_lock(&c->header->mu);
  last = ++c->header->joined == c->header->world;
  pthread_mutex_unlock(&c->header->mu);
  if (last) shm_unlink(c->name); /* everyone has it mapped */
  st = barrier(c, a->error, "comm_create");
  if (st != STRATA_OK) {
    munmap(map, total);
    free(c);
    return st;
  }
  a->comm = (strata_comm)c;
  return STRATA_OK;
}

static void ch_destroy(strata_collective_args* a) {
  strata_status st;
  commhost_comm* c = comm_of(a, "comm_destroy", &st);
  if (c == NULL) return;
  munmap(c->header, c->mapped);
  c->magic = 0;
  free(c);
}

static void reduce_chunk(strata_dtype dtype, strata_reduce_op op, const commhost_comm* c, size_t off, size_t bytes,
                         unsigned char* out) {
  size_t i, n;
  int32_t r;
  if (dtype == STRATA_F32) {
    n = bytes / 4;
    for (i = 0; i < n; ++i) {
      float acc, v;
      memcpy(&acc, c->slots + off + i * 4, 4);
      for (r = 1; r < c->world; ++r) {
        memcpy(&v, c->slots + (size_t)r * COMMHOST_SLOT + off + i * 4, 4);
        switch (op) {
          case STRATA_REDUCE_PRODUCT: acc *= v; break;
          case STRATA_REDUCE_MIN: acc = v < acc ? v : acc; break;
          case STRATA_REDUCE_MAX: acc = v > acc ? v : acc; break;
          default: acc += v; break;
        }
      }
      if (op == STRATA_REDUCE_AVERAGE) acc /= (float)c->world;
      memcpy(out + i * 4, &acc, 4);
    }
  } else {
    n = bytes / 8;
    for (i = 0; i < n; ++i) {
      int64_t acc, v;
      memcpy(&acc, c->slots + off + i * 8, 8);
      for (r = 1; r < c->world; ++r) {
        memcpy(&v, c->slots + (size_t)r * COMMHOST_SLOT + off + i * 8, 8);
        switch (op) {
          case STRATA_REDUCE_PRODUCT: acc *= v; break;
          case STRATA_REDUCE_MIN: acc = v < acc ? v : acc; break;
          case STRATA_REDUCE_MAX: acc = v > acc ? v : acc; break;
          default: acc += v; break;
        }
      }
      memcpy(out + i * 8, &acc, 8);
    }
  }
}

static strata_status ch_all_reduce(strata_collective_args* a) {
  unsigned char *send, *recv;
  size_t bytes, rbytes, done, chunk;
  int64_t n, rn;
  strata_status st;
  commhost_comm* c = comm_of(a, "all_reduce", &st);
  if (c == NULL) return st;
  st = tensor_bytes(a, a->send, "all_reduce", "send", &send, &bytes, &n);
  if (st == STRATA_OK) st = tensor_bytes(a, a->recv, "all_reduce", "recv", &recv, &rbytes, &rn);
  if (st != STRATA_OK) return st;
  if (a->send->dtype != a->recv->dtype || n != rn || a->send->dtype == STRATA_BOOL) {
    return tpc_fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, COMMHOST_NAME ": all_reduce: send and recv differ or are bool");
  }
  if ((int)a->reduce < 0 || a->reduce > STRATA_REDUCE_AVERAGE || (a->reduce == STRATA_REDUCE_AVERAGE && a->send->dtype != STRATA_F32)) {
    return tpc_fail(a->error, STRATA_ERROR_UNSUPPORTED, COMMHOST_NAME ": all_reduce: reduce op %d for dtype %d", (int)a->reduce,
                    (int)a->send->dtype);
  }
  for (done = 0; done < bytes; done += chunk) {
    chunk = bytes - done < COMMHOST_SLOT ? bytes - done : COMMHOST_SLOT;
    memcpy(c->slots + (size_t)c->rank * COMMHOST_SLOT, send + done, chunk);
    if ((st = barrier(c, a->error, "all_reduce")) != STRATA_OK) return st;
    reduce_chunk(a->send->dtype, a->reduce, c, 0, chunk, recv + done);
    if ((st = barrier(c, a->error, "all_reduce")) != STRATA_OK) return st;
  }
  return STRATA_OK;
}

static strata_status ch_broadcast(strata_collective_args* a) {
  unsigned char *send = NULL, *recv;
  size_t bytes, sbytes = 0, done, chunk;
  int64_t n, sn;
  strata_status st;
  commhost_comm* c = comm_of(a, "broadcast", &st);
  if (c == NULL) return st;
  if (a->root < 0 || a->root >= c->world) {
    return tpc_fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, COMMHOST_NAME ": broadcast: root %d of %d", (int)a->root, (int)c->world);
  }
  st = tensor_bytes(a, a->recv, "broadcast", "recv", &recv, &bytes, &n);
  if (st == STRATA_OK && c->rank == a->root) {
    st = tensor_bytes(a, a->send != NULL ? a->send : a->recv, "broadcast", "send", &send, &sbytes, &sn);
    if (st == STRATA_OK && sbytes != bytes) {
      st = tpc_fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, COMMHOST_NAME ": broadcast: send of %zu bytes, recv of %zu", sbytes, bytes);
    }
  }
  if (st != STRATA_OK) return st;
  for (done = 0; done < bytes; done += chunk) {
    chunk = bytes - done < COMMHOST_SLOT ? bytes - done : COMMHOST_SLOT;
    if (c->rank == a->root) memcpy(c->slots, send + done, chunk);
    if ((st = barrier(c, a->error, "broadcast")) != STRATA_OK) return st;
    if (c->rank != a->root) {
      memcpy(recv + done, c->slots, chunk);
    } else if (recv != send) {
      memmove(recv + done, send + done, chunk);
    }
    if ((st = barrier(c, a->error, "broadcast")) != STRATA_OK) return st;
  }
  return STRATA_OK;
}

static strata_status ch_all_gather(strata_collective_args* a) {
  unsigned char *send, *recv;
  size_t bytes, rbytes, done, chunk;
  int64_t n, rn;
  int32_t r;
  strata_status st;
  commhost_comm* c = comm_of(a, "all_gather", &st);
  if (c == NULL) return st;
  st = tensor_bytes(a, a->send, "all_gather", "send", &send, &bytes, &n);
  if (st == STRATA_OK) st = tensor_bytes(a, a->recv, "all_gather", "recv", &recv, &rbytes, &rn);
  if (st != STRATA_OK) return st;
  if (rbytes != bytes * (size_t)c->world || a->send->dtype != a->recv->dtype) {
    return tpc_fail(a->error, STRATA_ERROR_INVALID_ARGUMENT, COMMHOST_NAME ": all_gather: recv of %zu bytes for %d x %zu", rbytes,
                    (int)c->world, bytes);
  }
  for (done = 0; done < bytes; done += chunk) {
    chunk = bytes - done < COMMHOST_SLOT ? bytes - done : COMMHOST_SLOT;
    memcpy(c->slots + (size_t)c->rank * COMMHOST_SLOT, send + done, chunk);
    if ((st = barrier(c, a->error, "all_gather")) != STRATA_OK) return st;
    for (r = 0; r < c->world; ++r) memcpy(recv + (size_t)r * bytes + done, c->slots + (size_t)r * COMMHOST_SLOT, chunk);
    if ((st = barrier(c, a->error, "all_gather")) != STRATA_OK) return st;
  }
  return STRATA_OK;
}

const strata_ext_collectives commhost_collectives = {
    {sizeof(strata_ext_collectives), STRATA_EXT_COLLECTIVES, STRATA_EXT_COLLECTIVES_VERSION, NULL},
    ch_unique_id,
    ch_create,
    ch_destroy,
    ch_all_reduce,
    ch_broadcast,
    ch_all_gather,
};
