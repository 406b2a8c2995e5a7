// SPDX-License-Identifier: MIT
/*
 * gfactl vmsnap: save a VM's RAM to a file and run it again from there, lazily.
 *
 *   gfactl vmsnap save FILE [--mem SIZE] [--vcpus N] [--seed N]
 *       a VM whose vCPUs write a pattern over all of their RAM, saved sparse to FILE
 *       (gfa_guest_save), its shape in FILE.json
 *   gfactl vmsnap restore FILE
 *       a lazy VM of that shape whose pages come from FILE at their first touch
 *       (GFA_LAZY_FILL_FD): the time to running again, then its vCPUs check the pattern
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <string.h>
#include <unistd.h>
#include <json.h>
#include "tools/gfactl.h"

struct snap_shape {
	uint64_t mem, vcpus, seed;
};

static void vmsnap_usage(FILE *f)
{
	fprintf(f, "usage: gfactl vmsnap save FILE [--mem SIZE] [--vcpus N] [--seed N]\n"
		   "       gfactl vmsnap restore FILE\n"
		   "save: a VM (default 256 MiB, 2 vCPUs) fills its RAM with a pattern and is\n"
		   "saved to FILE (sparse) and FILE.json; restore: a lazy VM runs from FILE,\n"
		   "each page read at its first touch, and checks the pattern\n");
}

/* A pool with room for the VM, and its backing (populated: the same head start a
 * restore and a full start get). */
static int snap_pool(uint64_t mem, struct gfa_pool **pool, struct gfa_backing **b)
{
	struct gfa_pool_config pc;
	struct gfa_backing_config bc = { .populate = true };

	gfa_pool_config_init(&pc, (mem + 64 * MiB) >> GFA_FRAME_SHIFT);
	*pool = gfa_pool_create(&pc);
	*b = *pool ? gfa_backing_create(*pool, &bc) : NULL;
	if (*b)
		return 0;
	fprintf(stderr, "gfactl vmsnap: pool of %lu MiB: %s\n",
		(unsigned long)((mem + 64 * MiB) / MiB), strerror(errno));
	gfa_pool_destroy(*pool);
	return -1;
}

static int shape_write(const char *file, const struct snap_shape *s)
{
	char path[4096];
	struct json_object *o = json_object_new_object();
	int err;

	snprintf(path, sizeof(path), "%s.json", file);
	json_object_object_add(o, "mem_bytes", json_object_new_int64((int64_t)s->mem));
	json_object_object_add(o, "vcpus", json_object_new_int64((int64_t)s->vcpus));
	json_object_object_add(o, "seed", json_object_new_int64((int64_t)s->seed));
	err = json_object_to_file_ext(path, o, JSON_C_TO_STRING_PRETTY);
	json_object_put(o);
	if (err)
		fprintf(stderr, "gfactl vmsnap: %s: %s\n", path, json_util_get_last_err());
	return err ? -1 : 0;
}

static bool shape_field(struct json_object *o, const char *key, uint64_t min, uint64_t max,
			uint64_t *out)
{
	struct json_object *v;
	int64_t x;

	if (!json_object_object_get_ex(o, key, &v) || !json_object_is_type(v, json_type_int))
		return false;
	x = json_object_get_int64(v);
	if (x < (int64_t)min || (uint64_t)x > max)
		return false;
	*out = (uint64_t)x;
	return true;
}

static int shape_read(const char *file, struct snap_shape *s)
{
	char path[4096];
	struct json_object *o;
	bool ok;

	snprintf(path, sizeof(path), "%s.json", file);
	o = json_object_from_file(path);
	if (!o) {
		fprintf(stderr, "gfactl vmsnap: %s: %s\n", path, json_util_get_last_err());
		return -1;
	}
	ok = shape_field(o, "mem_bytes", 4 * MiB, 1ULL << 40, &s->mem) && !(s->mem % (2 * MiB)) &&
	     shape_field(o, "vcpus", 1, 64, &s->vcpus) &&
	     shape_field(o, "seed", 0, INT64_MAX, &s->seed);
	json_object_put(o);
	if (!ok)
		fprintf(stderr,
			"gfactl vmsnap: %s: not a snapshot's shape (mem_bytes a multiple "
			"of 2 MiB from 4 MiB, vcpus 1-64, seed)\n",
			path);
	return ok ? 0 : -1;
}

static struct gfa_vm *snap_vm(struct gfa_pool *pool, struct gfa_backing *b,
			      const struct snap_shape *s, int restore_fd)
{
	struct gfa_vm_config vc = { .mem_bytes = s->mem,
				    .vcpus = (unsigned int)s->vcpus,
				    .kvm = GFA_VM_KVM_AUTO,
				    .restore = restore_fd >= 0,
				    .restore_fd = restore_fd };
	struct gfa_vm *vm = gfa_vm_create(pool, b, &vc);

	if (!vm)
		fprintf(stderr, "gfactl vmsnap: VM of %lu MiB: %s\n", (unsigned long)(s->mem / MiB),
			strerror(errno));
	return vm;
}

static int snap_save(const char *file, const struct snap_shape *s)
{
	struct gfa_pool *pool;
	struct gfa_backing *b;
	struct gfa_vm *vm;
	int64_t n = -1;
	double t0;
	int fd, err;

	if (snap_pool(s->mem, &pool, &b))
		return 1;
	vm = snap_vm(pool, b, s, -1);
	fd = vm ? open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
	err = vm ? gfa_vm_run(vm, GFA_KVM_TEST_FILL, s->seed, NULL) : -EINVAL;
	if (vm && err)
		fprintf(stderr, "gfactl vmsnap: the vCPUs' fill failed: %s\n", strerror(-err));
	if (vm && fd < 0)
		fprintf(stderr, "gfactl vmsnap: %s: %s\n", file, strerror(errno));
	t0 = now_ms();
	if (!err && fd >= 0)
		n = gfa_guest_save(gfa_vm_guest(vm), fd, 0);
	if (!err && fd >= 0 && n < 0)
		fprintf(stderr, "gfactl vmsnap: saving to %s: %s\n", file, strerror((int)-n));
	if (n >= 0 && !shape_write(file, s))
		printf("saved %lu MiB VM (%lu vCPUs, seed %lu) to %s: %ld MiB of data in %.1f ms\n",
		       (unsigned long)(s->mem / MiB), (unsigned long)s->vcpus,
		       (unsigned long)s->seed, file, (long)(n / (int64_t)MiB), now_ms() - t0);
	else
		n = -1;
	if (fd >= 0)
		close(fd);
	gfa_vm_destroy(vm);
	gfa_backing_destroy(b);
	gfa_pool_destroy(pool);
	return n >= 0 ? 0 : 1;
}

static int snap_restore(const char *file)
{
	struct snap_shape s;
	struct gfa_pool *pool;
	struct gfa_backing *b;
	struct gfa_guest_stat st;
	struct gfa_vm *vm;
	uint64_t bad = 0;
	double t0, running, checked;
	int fd, err;

	if (shape_read(file, &s))
		return 1;
	fd = open(file, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fprintf(stderr, "gfactl vmsnap: %s: %s\n", file, strerror(errno));
		return 1;
	}
	if (snap_pool(s.mem, &pool, &b)) {
		close(fd);
		return 1;
	}
	t0 = now_ms();
	vm = snap_vm(pool, b, &s, fd);
	running = now_ms() - t0;
	close(fd); /* the guest holds its own */
	err = vm ? gfa_vm_run(vm, GFA_KVM_TEST_VERIFY, s.seed, &bad) : -EINVAL;
	checked = now_ms() - t0;
	if (vm) {
		gfa_guest_stat(gfa_vm_guest(vm), &st);
		printf("restored %lu MiB VM from %s: ready to run in %.2f ms; its vCPUs checked all "
		       "of it in %.0f ms: %lu mismatches%s; %lu MiB read from the file, %lu first "
		       "touches (%lu at 2 MiB)\n",
		       (unsigned long)(s.mem / MiB), file, running, checked, (unsigned long)bad,
		       err ? " (the run failed)" : "", (unsigned long)(st.lazy_filled_bytes / MiB),
		       (unsigned long)st.lazy_faults, (unsigned long)st.lazy_huge_faults);
		printf("RESULT vmsnap restore_ms=%.3f mismatches=%lu\n", running,
		       (unsigned long)bad);
	}
	if (vm && err)
		fprintf(stderr, "gfactl vmsnap: the vCPUs' check failed: %s\n", strerror(-err));
	gfa_vm_destroy(vm);
	gfa_backing_destroy(b);
	gfa_pool_destroy(pool);
	return vm && !err && !bad ? 0 : 1;
}

int cmd_vmsnap(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "mem", required_argument, NULL, 'm' },
		{ "vcpus", required_argument, NULL, 'c' },
		{ "seed", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct snap_shape s = { 256 * MiB, 2, 0x5eed };
	bool ok = true;
	int c;

	optind = 0; /* 0, not 1: glibc then sets up again and permutes (options may
			 * follow save/restore and FILE; the dispatcher stopped at the command) */
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (c == 'h') {
			vmsnap_usage(stdout);
			return 0;
		}
		ok = ok && (c == 'm' ? parse_mib("--mem", optarg, &s.mem) :
			    c == 'c' ? parse_u64("--vcpus", optarg, 1, 64, &s.vcpus) :
			    c == 's' ? parse_u64("--seed", optarg, 0, INT64_MAX, &s.seed) :
				       false);
	}
	if (ok && optind + 2 == argc && !strcmp(argv[optind], "save"))
		return snap_save(argv[optind + 1], &s);
	if (ok && optind + 2 == argc && !strcmp(argv[optind], "restore"))
		return snap_restore(argv[optind + 1]);
	vmsnap_usage(stderr);
	return 2;
}
