// SPDX-License-Identifier: MIT
/*
 * The host pool service's state directory (vmm/hostpool_state.h): the zone files, the
 * mapped lease table, and who a recorded client is.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/magic.h>
#include "allocator/layers.h"
#include "vmm/backing_internal.h"
#include "vmm/hostpool_server.h"

static int state_lock_fd = -1; /* the table's fd, flock'ed while the state is open */

static size_t state_bytes(uint64_t nr_blocks)
{
	return sizeof(struct hps_state) + nr_blocks * sizeof(uint32_t);
}

/* Is the table one of this pool's?  (a new, empty file is not yet anyone's) */
static bool state_matches(const struct hps_state *st, const struct gfa_pool_config *cfg,
			  uint64_t nr_blocks)
{
	if (st->magic != HPS_STATE_MAGIC || st->version != HPS_STATE_VERSION ||
	    st->nr_zones != cfg->nr_zones || st->nr_blocks != nr_blocks)
		return false;
	for (unsigned int z = 0; z < cfg->nr_zones; z++)
		if (st->zone_frames[z] != cfg->zones[z].nr_frames)
			return false;
	return true;
}

/*
 * The zone's file.  With a new table (fresh) it is emptied first: data a pool whose
 * table was removed left in it must not reach a new client as clean memory.
 */
static int zone_file(int dfd, unsigned int z, uint64_t bytes, bool fresh)
{
	char name[32];
	struct stat sb;
	int fd;

	snprintf(name, sizeof(name), "zone%u", z);
	fd = openat(dfd, name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (fresh && ftruncate(fd, 0)) {
		close(fd);
		return -errno;
	}
	/* a file of another size is another pool's: the table check said it is ours */
	if (fstat(fd, &sb) || (sb.st_size && (uint64_t)sb.st_size != bytes) ||
	    (!sb.st_size && ftruncate(fd, (off_t)bytes))) {
		int err = sb.st_size && (uint64_t)sb.st_size != bytes ? -ESTALE : -errno;

		close(fd);
		return err;
	}
	return fd;
}

static int state_dir(const char *dir)
{
	struct statfs fs;
	int dfd;

	if (mkdir(dir, 0700) && errno != EEXIST)
		return -errno;
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	if (fstatfs(dfd, &fs) || (unsigned long)fs.f_type != TMPFS_MAGIC) {
		close(dfd);
		return -ENOTSUP;
	}
	return dfd;
}

/* The table, mapped: created and filled in when new.  0 or -errno. */
static int state_table(int dfd, const struct gfa_pool_config *cfg, uint64_t nr_blocks,
		       struct hps_state **state, bool *found)
{
	size_t bytes = state_bytes(nr_blocks);
	int fd = openat(dfd, "leases", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	struct hps_state *st;
	struct stat sb;

	if (fd < 0)
		return -errno;
	/* one service per directory: the lock lasts as long as this fd (the process) */
	if (flock(fd, LOCK_EX | LOCK_NB)) {
		int err = errno == EWOULDBLOCK ? -EBUSY : -errno;

		close(fd);
		return err;
	}
	if (fstat(fd, &sb) || (!sb.st_size && ftruncate(fd, (off_t)bytes))) {
		close(fd);
		return -errno;
	}
	*found = sb.st_size != 0;
	if (*found && (uint64_t)sb.st_size != bytes) {
		close(fd);
		return -ESTALE;
	}
	st = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (st == MAP_FAILED) {
		close(fd);
		return -errno;
	}
	/* a table a kill cut short before its magic was written is not one yet */
	if (*found && !__atomic_load_n(&st->magic, __ATOMIC_ACQUIRE)) {
		memset(st, 0, bytes);
		*found = false;
	}
	if (*found && !state_matches(st, cfg, nr_blocks)) {
		munmap(st, bytes);
		close(fd);
		return -ESTALE;
	}
	state_lock_fd = fd;
	if (!*found) {
		st->nr_zones = cfg->nr_zones;
		st->nr_blocks = nr_blocks;
		st->next_serial = 1;
		for (unsigned int z = 0; z < cfg->nr_zones; z++)
			st->zone_frames[z] = cfg->zones[z].nr_frames;
		st->version = HPS_STATE_VERSION;
		/* last: a table cut short by a kill before here is not one */
		__atomic_store_n(&st->magic, HPS_STATE_MAGIC, __ATOMIC_RELEASE);
	}
	*state = st;
	return 0;
}

int hps_state_open(const char *dir, const struct gfa_pool_config *cfg, uint64_t nr_blocks,
		   struct hps_state **state, int *fds, bool *found)
{
	int dfd = state_dir(dir), err = 0;
	unsigned int z = 0;

	*state = NULL;
	if (dfd < 0)
		err = dfd;
	if (!err)
		err = state_table(dfd, cfg, nr_blocks, state, found);
	for (; !err && z < cfg->nr_zones; z++) {
		fds[z] = zone_file(dfd, z, cfg->zones[z].nr_frames << GFA_FRAME_SHIFT, !*found);
		if (fds[z] < 0)
			err = fds[z];
	}
	if (dfd >= 0)
		close(dfd);
	if (err) {
		while (z-- > 0)
			if (fds[z] >= 0)
				close(fds[z]);
		hps_state_close(*state);
		*state = NULL;
	}
	return err;
}

void hps_state_close(struct hps_state *state)
{
	if (state)
		munmap(state, state_bytes(state->nr_blocks));
	if (state_lock_fd >= 0)
		close(state_lock_fd);
	state_lock_fd = -1;
}

uint64_t hps_pid_start_time(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long start = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* after "pid (comm) ": the comm may hold spaces and parentheses, the last ')' ends it */
	p = strrchr(buf, ')');
	/* state is field 3, starttime field 22: 19 fields after the state */
	if (!p || sscanf(p + 2,
			 "%*c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
			 "%*s %*s %*s %llu",
			 &start) != 1)
		return 0;
	return start;
}

int hps_pid_open(pid_t pid, uint64_t start_time)
{
	int fd = pid > 0 ? (int)syscall(SYS_pidfd_open, pid, 0) : -ESRCH;

	if (fd < 0)
		return pid > 0 ? -errno : fd;
	/* opened first, checked after: the pidfd pins the process the start time names */
	if (hps_pid_start_time(pid) != start_time) {
		close(fd);
		return -ESRCH;
	}
	return fd;
}

int hps_state_pool(const char *dir, const struct gfa_pool_config *cfg,
		   const struct gfa_backing_config *bc, struct hps_config *hc)
{
	int fds[GFA_MAX_ZONES];
	uint64_t start, n;
	int err;

	hc->pool = pool_create_held(cfg, HPS_RESTORE_OWNER);
	if (!hc->pool)
		return -errno;
	gfa_zone_span(hc->pool, gfa_pool_nr_zones(hc->pool) - 1, &start, &n);
	err = hps_state_open(dir, cfg, (start + n) / HP_LEASE_FRAMES + 1, &hc->state, fds,
			     &hc->state_found);
	if (err)
		return err;
	/* the zone files are the backing's from here, whatever happens */
	hc->b = backing_adopt(hc->pool, bc, fds);
	return hc->b ? 0 : -errno;
}
