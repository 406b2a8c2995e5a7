/* SPDX-License-Identifier: MIT */
/*
 * The host pool service's state in a directory (gfad --state DIR), so that a restarted
 * service takes its running clients back: the zones' memory in files there (zone0,
 * zone1, ...) instead of memfds, and the lease table with a record per client in a
 * file the service maps shared (leases).  Every change the service makes to a lease or
 * a client is a store into that mapping, so a service killed at any point leaves the
 * table as it last was.  DIR must be on tmpfs: guest memory never goes
 * to a disk (hugetlbfs, untested here, is refused too).  Not installed.
 */
#ifndef GFA_VMM_HOSTPOOL_STATE_H
#define GFA_VMM_HOSTPOOL_STATE_H
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <gfa/allocator.h>
#include "vmm/hostpool_proto.h"

#define HPS_STATE_MAGIC   0x6574617473616667ull /* "gfastate" little endian */
#define HPS_STATE_VERSION 1u
#define HPS_STATE_CLIENTS 256u /* HPS_MAX_CLIENTS */

/* One client, by its slot in the service's table; serial 0: a free slot. */
struct hps_state_client {
	uint64_t serial;
	uint64_t start_time; /* the process's start (/proc/PID/stat): a pid reused is not it */
	int32_t pid;
	uint32_t uid;
	uint64_t claim_left[GFA_MAX_ZONES]; /* frames its claims still reserve, per zone */
};

struct hps_state {
	uint64_t magic, version;
	uint64_t nr_zones, nr_blocks, next_serial;
	uint64_t zone_frames[GFA_MAX_ZONES];
	struct hps_state_client client[HPS_STATE_CLIENTS];
	uint32_t lease[]; /* per order-9 block of pfn space: holder's slot + 1, or 0 */
};

/*
 * Open the state in dir for a pool of cfg's zones (nr_blocks order-9 blocks of pfn
 * space), creating what is missing: the mapped table (*state, unmapped by
 * hps_state_close) and each zone's file, sized to the zone, in fds[] (the caller's).
 * *found says whether a table was there already.  0, or -errno:
 * -ENOTSUP (dir is not tmpfs), -ESTALE (a table of another pool), -EBUSY (another
 * service has it open).  With a new table the zone files are emptied.
 */
int hps_state_open(const char *dir, const struct gfa_pool_config *cfg, uint64_t nr_blocks,
		   struct hps_state **state, int *fds, bool *found);
void hps_state_close(struct hps_state *state);
/* The start time of process pid (clock ticks since boot), 0 if it is gone. */
uint64_t hps_pid_start_time(pid_t pid);
/* A pidfd of pid if it is the process that started at start_time; -ESRCH if that
 * process is gone; another -errno if it cannot be told (no pidfd_open, no fds). */
int hps_pid_open(pid_t pid, uint64_t start_time);
#endif
