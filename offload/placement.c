/* offload/placement.c — binds a rank's threads (the whole process, before
 * the compute pool starts, so every later thread inherits the set) with
 * hwloc. CUDA runs: the cores of the package/NUMA node above the GPU's PCI
 * device, found without CUDA calls: the NVIDIA display/3D controllers in PCI
 * bus order, which is CUDA's order when CUDA_DEVICE_ORDER=PCI_BUS_ID (the
 * trainer sets it), indexed through a numeric CUDA_VISIBLE_DEVICES. CPU runs:
 * local rank l of L gets cores [l*C/L, (l+1)*C/L) of the C cores allowed.
 * A process the launcher already bound (its mask is not the whole machine)
 * is left as it is. */
#define _GNU_SOURCE
#include "offload/placement.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/env.h"

#ifdef SL_USE_HWLOC
#include <hwloc.h>

/* The PCI device of CUDA ordinal gpu, or NULL. */
static hwloc_obj_t gpu_pcidev(hwloc_topology_t topo, int gpu) {
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  if (vis && *vis) { /* ordinal -> physical index; UUIDs cannot be mapped without CUDA */
    int k = 1;
    for (const char *q = vis; (q = strchr(q, ',')); q++) k++;
    gpu %= k; /* as the CUDA context does (srun --gpus-per-task=1: one visible GPU per rank) */
    const char *p = vis;
    for (int i = 0; i < gpu && p; i++) {
      p = strchr(p, ',');
      if (p) p++;
    }
    char *end;
    long v = p ? strtol(p, &end, 10) : -1;
    if (!p || end == p || v < 0) return NULL;
    gpu = (int)v;
  }
  hwloc_obj_t devs[256];
  int n = 0;
  for (hwloc_obj_t o = NULL; (o = hwloc_get_next_pcidev(topo, o)) && n < 256;)
    if (o->attr->pcidev.vendor_id == 0x10de && (o->attr->pcidev.class_id >> 8) == 0x03) devs[n++] = o;
  for (int i = 1; i < n; i++) /* bus order */
    for (int j = i; j > 0; j--) {
      struct hwloc_pcidev_attr_s *a = &devs[j - 1]->attr->pcidev, *b = &devs[j]->attr->pcidev;
      unsigned ka = (unsigned)a->domain << 16 | (unsigned)a->bus << 8 | (unsigned)a->dev << 3 | a->func;
      unsigned kb = (unsigned)b->domain << 16 | (unsigned)b->bus << 8 | (unsigned)b->dev << 3 | b->func;
      if (ka <= kb) break;
      hwloc_obj_t t = devs[j];
      devs[j] = devs[j - 1];
      devs[j - 1] = t;
    }
  return n > 0 ? devs[gpu % n] : NULL;
}

static void describe(hwloc_topology_t topo, hwloc_const_cpuset_t set, sl_bind_info *out) {
  out->ncpus = hwloc_bitmap_weight(set);
  if (hwloc_bitmap_list_snprintf(out->cpus, sizeof out->cpus, set) >= (int)sizeof out->cpus)
    memcpy(out->cpus + sizeof out->cpus - 4, "...", 4);
  int first = hwloc_bitmap_first(set), n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < n && first >= 0; i++) {
    hwloc_obj_t o = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, i);
    if (o && hwloc_bitmap_isset(o->cpuset, (unsigned)first)) {
      out->numa = (int)o->os_index;
      break;
    }
  }
}

void sl_bind_local(int local_rank, int local_size, int gpu, sl_bind_info *out) {
  memset(out, 0, sizeof *out);
  out->numa = -1;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) {
    snprintf(out->why, sizeof out->why, "hwloc cannot read the topology");
    return;
  }
  if (gpu >= 0) hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
  hwloc_bitmap_t cur = hwloc_bitmap_alloc(), set = hwloc_bitmap_alloc();
  if (hwloc_topology_load(topo) != 0 || !cur || !set) {
    snprintf(out->why, sizeof out->why, "hwloc cannot read the topology");
    goto done;
  }
  hwloc_const_cpuset_t all = hwloc_topology_get_allowed_cpuset(topo);
  const char *env = sl_env_str("SL_BIND");
  if (hwloc_get_cpubind(topo, cur, HWLOC_CPUBIND_PROCESS) != 0) hwloc_bitmap_copy(cur, all);
  describe(topo, cur, out);
  if (env && !strcmp(env, "0")) {
    snprintf(out->why, sizeof out->why, "not bound (SL_BIND=0)");
    goto done;
  }
  if (!hwloc_bitmap_isequal(cur, all)) {
    snprintf(out->why, sizeof out->why, "bound by the launcher");
    goto done;
  }
  hwloc_obj_t dev = gpu >= 0 ? gpu_pcidev(topo, gpu) : NULL;
  hwloc_obj_t near = dev ? hwloc_get_non_io_ancestor_obj(topo, dev) : NULL;
  if (near && near->cpuset && !hwloc_bitmap_iszero(near->cpuset)) {
    hwloc_bitmap_and(set, near->cpuset, all);
    snprintf(out->why, sizeof out->why, "cores near GPU %d (PCI %04x:%02x:%02x.%x)", gpu, dev->attr->pcidev.domain,
             dev->attr->pcidev.bus, dev->attr->pcidev.dev, dev->attr->pcidev.func);
  } else {
    int C = hwloc_get_nbobjs_inside_cpuset_by_type(topo, all, HWLOC_OBJ_CORE);
    if (C < 1 || local_size > C || local_rank < 0 || local_rank >= local_size) {
      snprintf(out->why, sizeof out->why, "not bound: %d rank%s on this node share %d core%s", local_size,
               local_size == 1 ? "" : "s", C, C == 1 ? "" : "s");
      goto done;
    }
    for (int c = local_rank * C / local_size; c < (local_rank + 1) * C / local_size; c++)
      hwloc_bitmap_or(set, set, hwloc_get_obj_inside_cpuset_by_type(topo, all, HWLOC_OBJ_CORE, (unsigned)c)->cpuset);
    snprintf(out->why, sizeof out->why, "%s%d of the node's %d cores", gpu >= 0 ? "GPU not found by hwloc: " : "",
             (local_rank + 1) * C / local_size - local_rank * C / local_size, C);
  }
  if (hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) != 0) {
    snprintf(out->why, sizeof out->why, "not bound: the system refused the CPU binding");
    goto done;
  }
  out->bound = 1;
  describe(topo, set, out);
done:
  hwloc_bitmap_free(cur);
  hwloc_bitmap_free(set);
  hwloc_topology_destroy(topo);
}
#else
void sl_bind_local(int local_rank, int local_size, int gpu, sl_bind_info *out) {
  (void)local_rank;
  (void)local_size;
  (void)gpu;
  memset(out, 0, sizeof *out);
  out->numa = -1;
  out->ncpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
  snprintf(out->cpus, sizeof out->cpus, "0-%d", out->ncpus - 1);
  snprintf(out->why, sizeof out->why, "not bound (built without hwloc)");
}
#endif
