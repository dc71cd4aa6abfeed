/* offload/host.c — host buffers for offloaded optimizer state: pinned
 * (cudaHostAlloc) when a GPU is present, else aligned + mlock'ed; first-touch
 * zeroing inside the OpenMP threads; NUMA binding of the thread pool (hwloc).
 * Every buffer is accounted in SL_ARENA_HOST_OPTIM.
 */
#include "offload/offload.h"

#include <errno.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "base/base.h"

#ifdef SL_USE_CUDA
#if defined(__has_include)
#if __has_include(<cuda_runtime_api.h>)
#include <cuda_runtime_api.h>
#define SL_HOST_HAVE_CUDA_HDR 1
#endif
#endif
#ifndef SL_HOST_HAVE_CUDA_HDR
/* The few runtime entry points used here (C ABI of libcudart). */
int cudaHostAlloc(void **p, size_t bytes, unsigned int flags);
int cudaFreeHost(void *p);
int cudaGetDeviceCount(int *count);
const char *cudaGetErrorString(int err);
#define cudaSuccess 0
#define cudaHostAllocPortable 1
#endif
#endif

#ifdef SL_USE_HWLOC
#include <hwloc.h>
#endif

/* The header sits one page before the pointer handed out, so the user
 * pointer stays 4096-aligned (O_DIRECT) whatever allocator is behind it. */
#define HOST_HDR 4096
#define HOST_MAGIC 0x534c484f53544255ull /* "SLHOSTBU" */
enum { HOST_PLAIN = 0, HOST_LOCKED = 1, HOST_PINNED = 2 };
typedef struct {
  uint64_t magic;
  size_t bytes; /* user bytes */
  int kind;
} host_hdr;

static host_hdr *hdr_of(const void *p) { return (host_hdr *)((char *)(uintptr_t)p - HOST_HDR); }

void sl_host_first_touch(void *p, size_t bytes) {
  if (!p || bytes == 0) return;
  char *c = (char *)p;
  if (bytes < ((size_t)1 << 20) || omp_in_parallel()) {
    memset(c, 0, bytes);
    return;
  }
#pragma omp parallel
  {
    /* the same contiguous split (64-byte granules) as the AdamW kernel */
    int t = omp_get_thread_num(), T = omp_get_num_threads();
    size_t gran = (bytes + 63) / 64;
    size_t b0 = gran * (size_t)t / (size_t)T * 64;
    size_t b1 = gran * (size_t)(t + 1) / (size_t)T * 64;
    if (b1 > bytes) b1 = bytes;
    if (b1 > b0) memset(c + b0, 0, b1 - b0);
  }
}

#ifdef SL_USE_CUDA
static int host_have_gpu(void) {
  static int cached = -1;
  int c = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
  if (c < 0) {
    int cnt = 0;
    c = (cudaGetDeviceCount(&cnt) == cudaSuccess && cnt > 0) ? 1 : 0;
    __atomic_store_n(&cached, c, __ATOMIC_RELEASE);
  }
  return c;
}
#endif

void *sl_host_alloc(size_t bytes, const char *what) {
  if (!what) what = "host buffer";
  size_t total = bytes + HOST_HDR;
  if (total < bytes) {
    sl_fail(SL_ENOMEM, "sl_host_alloc(%s): size %zu overflows", what, bytes);
    return NULL;
  }
  void *base = NULL;
  int kind = HOST_PLAIN;
#ifdef SL_USE_CUDA
  if (host_have_gpu()) {
    int e = (int)cudaHostAlloc(&base, total, cudaHostAllocPortable);
    if (e != cudaSuccess) {
      sl_log(SL_LOG_WARN, "cudaHostAlloc(%zu bytes) for %s failed (%s); using pageable memory", total, what,
             cudaGetErrorString(e));
      base = NULL;
    } else {
      kind = HOST_PINNED;
    }
  }
#endif
  if (!base) {
    int e = posix_memalign(&base, 4096, total);
    if (e != 0) {
      sl_fail(SL_ENOMEM, "sl_host_alloc(%s): cannot allocate %zu bytes: %s", what, bytes, strerror(e));
      return NULL;
    }
  }
  char *user = (char *)base + HOST_HDR;
  /* first touch (and zero) from the threads that will update the state */
  sl_host_first_touch(user, bytes);
  if (kind == HOST_PLAIN && bytes > 0) {
    if (mlock(user, bytes) == 0) kind = HOST_LOCKED;
    else sl_log(SL_LOG_DEBUG, "mlock(%zu bytes) for %s failed: %s (continuing unlocked)", bytes, what, strerror(errno));
  }
  host_hdr *h = (host_hdr *)base;
  h->magic = HOST_MAGIC;
  h->bytes = bytes;
  h->kind = kind;
  sl_mem_add(SL_ARENA_HOST_OPTIM, (int64_t)bytes);
  return user;
}

int sl_host_is_pinned(const void *p) {
  if (!p) return 0;
  const host_hdr *h = hdr_of(p);
  return h->magic == HOST_MAGIC && h->kind == HOST_PINNED;
}

void sl_host_free(void *p) {
  if (!p) return;
  host_hdr *h = hdr_of(p);
  if (h->magic != HOST_MAGIC) {
    sl_log(SL_LOG_ERROR, "sl_host_free: %p was not allocated by sl_host_alloc (leaked)", p);
    return;
  }
  size_t bytes = h->bytes;
  int kind = h->kind;
  h->magic = 0;
  sl_mem_sub(SL_ARENA_HOST_OPTIM, (int64_t)bytes);
  if (kind == HOST_LOCKED) munlock(p, bytes);
#ifdef SL_USE_CUDA
  if (kind == HOST_PINNED) {
    cudaFreeHost(h);
    return;
  }
#endif
  free(h);
}

int sl_numa_bind_pool(int *node_out) {
  if (node_out) *node_out = -1;
#ifdef SL_USE_HWLOC
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0)
    return sl_fail(SL_EINTERNAL, "hwloc: cannot load the machine topology: %s", strerror(errno));
  int rc = SL_OK;
  hwloc_bitmap_t where = hwloc_bitmap_alloc();
  hwloc_obj_t node = NULL;
  if (hwloc_get_last_cpu_location(topo, where, HWLOC_CPUBIND_THREAD) == 0) {
    int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
    for (int i = 0; i < n; i++) {
      hwloc_obj_t o = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i);
      if (o && hwloc_bitmap_intersects(o->cpuset, where)) {
        node = o;
        break;
      }
    }
  }
  if (!node) {
    sl_log(SL_LOG_DEBUG, "hwloc: no NUMA node found for the calling thread; not binding");
    goto done;
  }
  if (node_out) *node_out = (int)node->os_index;
  {
    hwloc_const_cpuset_t cpus = node->cpuset;
    hwloc_const_nodeset_t nodes = node->nodeset;
    int failures = 0;
#pragma omp parallel reduction(+ : failures)
    {
      if (hwloc_set_cpubind(topo, cpus, HWLOC_CPUBIND_THREAD) != 0) failures++;
      /* best effort: some kernels / containers refuse membind */
      hwloc_set_membind(topo, nodes, HWLOC_MEMBIND_BIND, HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET);
    }
    if (hwloc_set_cpubind(topo, cpus, HWLOC_CPUBIND_THREAD) != 0) failures++;
    if (failures)
      sl_log(SL_LOG_WARN, "hwloc: %d thread(s) could not be bound to NUMA node %u", failures, node->os_index);
  }
done:
  hwloc_bitmap_free(where);
  hwloc_topology_destroy(topo);
  return rc;
#else
  return SL_OK;
#endif
}
