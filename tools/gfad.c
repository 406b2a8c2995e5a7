// SPDX-License-Identifier: MIT
/*
 * gfad: the host pool service.  `gfad --socket PATH --mem 8G` (gfactl's binary under
 * the name gfad, or `gfactl gfad ...`): one pool, its zones' memfds and every lease,
 * served on an AF_UNIX socket to the VMM processes of one trust domain
 * (vmm/hostpool_server.c).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <gfa/numa.h>
#include "tools/gfactl.h"
#include "vmm/hostpool_server.h"

struct gfad_opts {
	const char *sock, *state;
	uint64_t mem, nodes, reserve;
	mode_t mode;
	bool populate, numa;
};

static volatile sig_atomic_t gfad_stop;

static void on_signal(int sig)
{
	(void)sig;
	gfad_stop = 1;
}

static void gfad_help(void)
{
	printf("usage: gfad --socket PATH --mem SIZE [options]\n\n"
	       "Serve one host pool to the VMM processes that attach to it\n"
	       "(gfa_hostpool_attach()).\n"
	       "  --socket PATH     the AF_UNIX socket to listen on (replaced if there)\n"
	       "  --mem SIZE        the pool's memory (e.g. 8G; a bare number is MiB)\n"
	       "  --nodes N         N zones, one per NUMA node label 0..N-1 (default 1)\n"
	       "  --numa            a zone per real NUMA node (libnuma), its memory bound\n"
	       "                    there, so the pages clients fault in land on it too\n"
	       "  --populate        fault every frame in at start (guests start resident)\n"
	       "  --reserve SIZE    keep SIZE of free memory populated (split over the\n"
	       "                    zones) and return the rest to the host, through\n"
	       "                    io_uring, as it is freed (default: keep everything)\n"
	       "  --allow-uid U     admit this uid (repeatable; default: our own uid only)\n"
	       "  --allow-gid G     admit this primary gid (repeatable)\n"
	       "  --mode OCTAL      the socket's mode, 0660 or stricter (default 0660)\n"
	       "  --state DIR       keep the pool's memory and lease table in DIR (tmpfs):\n"
	       "                    a restarted gfad takes its running clients back (they\n"
	       "                    rejoin); a stop leaves them running\n"
	       "  --quiet           no line per refused connection\n");
}

static bool add_id(const char *flag, const char *val, uint32_t *ids, unsigned int *n)
{
	uint64_t v;

	if (*n >= HPS_MAX_ALLOW) {
		fprintf(stderr, "gfad: %s: at most %u\n", flag, HPS_MAX_ALLOW);
		return false;
	}
	if (!parse_u64(flag, val, 0, UINT32_MAX - 1, &v))
		return false;
	ids[(*n)++] = (uint32_t)v;
	return true;
}

/*
 * Free memory beyond `reserve` (split over the zones) goes back to the host: each zone's
 * release policy keeps its share populated (HIGH; LOW at half, as gfactl vmstart's
 * reserve).  0, or an exit code.
 */
static int gfad_host_return(struct hps_config *hc, uint64_t reserve)
{
	unsigned int nz = gfa_pool_nr_zones(hc->pool);
	struct gfa_release_policy rp = { .high = (reserve >> GFA_FRAME_SHIFT) / nz,
					 .min_empty_frac = 4 };

	rp.low = rp.high / 2;
	for (unsigned int z = 0; z < nz; z++)
		if (gfa_zone_set_release_policy(hc->pool, z, &rp))
			return 1;
	hc->hr = gfa_host_return_start(hc->pool, hc->b, NULL);
	if (!hc->hr) {
		fprintf(stderr, "gfad: --reserve: the host return: %s\n", gfa_strerror(-errno));
		return 1;
	}
	return 0;
}

/* The pool and backing of pc in --state's files: 0 or an exit code. */
static int gfad_state_pool(const struct gfad_opts *o, const struct gfa_pool_config *pc,
			   const struct gfa_backing_config *bc, struct hps_config *hc)
{
	int err = hps_state_pool(o->state, pc, bc, hc);

	if (err)
		fprintf(stderr, "gfad: --state %s: %s\n", o->state,
			err == -ENOTSUP ? "not on tmpfs (guest memory stays off disks)" :
			err == -ESTALE  ? "the state of another pool (other --mem, --nodes or "
					  "NUMA nodes): start with those, or remove it" :
			err == -EBUSY   ? "another gfad has it open" :
					  gfa_strerror(err));
	return err ? 1 : 0;
}

/*
 * --numa: the zones on the real nodes, each zone's memory bound to its node before any
 * page is faulted in.  mbind on a shared mapping sets the memfd's (or --state's zone
 * file's) shared policy, so a client's fault through its own mapping allocates there
 * too; with --state the files keep it across a restart, and a restart's binding again
 * moves nothing.  0 or an exit code.
 */
static int gfad_numa(const struct gfad_opts *o, struct hps_config *hc)
{
	struct gfa_numa_topology *t = gfa_numa_topology_discover();
	struct gfa_backing_config bc = { .populate = false };
	struct gfa_numa_pool *np = NULL;
	struct gfa_pool_config pc;
	int err = t ? gfa_numa_pool_config(&pc, t, (o->mem >> GFA_FRAME_SHIFT) / t->nr_nodes) :
		      -errno;

	if (!err && o->state && gfad_state_pool(o, &pc, &bc, hc)) {
		gfa_numa_topology_free(t);
		return 1;
	}
	if (!err && !o->state && !(hc->pool = gfa_pool_create(&pc)))
		err = -errno;
	if (!err && !o->state && !(hc->b = gfa_backing_create(hc->pool, &bc)))
		err = -errno;
	if (!err && !(np = gfa_numa_attach(hc->pool, t)))
		err = -errno;
	err = err ? err : gfa_numa_bind_pool(np);
	err = err || !o->populate ? err : gfa_numa_populate_pool(np);
	if (err)
		fprintf(stderr, "gfad: --numa: %s\n", gfa_strerror(err));
	else
		printf("gfad: %u NUMA node(s), each zone's memory bound to its node\n",
		       t->nr_nodes);
	gfa_numa_detach(np);
	gfa_numa_topology_free(t);
	return err ? 1 : 0;
}

/* The pool and its backing: a zone per node label, or per real node.  0 or an exit code. */
static int gfad_pool(const struct gfad_opts *o, struct hps_config *hc)
{
	struct gfa_backing_config bc = { .populate = o->populate };
	uint64_t per = (o->mem >> GFA_FRAME_SHIFT) / o->nodes;
	struct gfa_pool_config pc;

	if (o->numa)
		return gfad_numa(o, hc);
	per -= per % GFA_PAGEBLOCK_FRAMES;
	gfa_pool_config_init(&pc, per);
	pc.nr_zones = (unsigned int)o->nodes;
	for (unsigned int z = 0; z < o->nodes; z++)
		pc.zones[z] = (struct gfa_zone_config){ .nr_frames = per, .node = (int)z };
	if (o->state)
		return gfad_state_pool(o, &pc, &bc, hc);
	hc->pool = gfa_pool_create(&pc);
	hc->b = hc->pool ? gfa_backing_create(hc->pool, &bc) : NULL;
	return 0;
}

/* What a restart with --state took back. */
static void gfad_restored(struct hps *s, const char *dir, bool found)
{
	struct hps_stat st;

	hps_stat(s, &st);
	if (found)
		printf("gfad: --state %s: %" PRIu64 " client(s) taken back, %" PRIu64
		       " MiB leased to them, waiting for them to rejoin\n",
		       dir, st.v[HP_ST_RESTORED], st.v[HP_ST_LEASED] >> (20 - GFA_FRAME_SHIFT));
	else
		printf("gfad: --state %s: a new pool\n", dir);
}

/* The pool, its backing and the service from the options: 0 or an exit code. */
static int gfad_run(const struct gfad_opts *o, struct hps_config *hc)
{
	struct sigaction sa = { .sa_handler = on_signal };
	uint64_t frames = 0;
	struct hps *s;
	int lfd, err;

	if (gfad_pool(o, hc))
		return 1;
	if (hc->b && o->reserve != UINT64_MAX && gfad_host_return(hc, o->reserve))
		return 1;
	s = hc->b ? hps_create(hc) : NULL;
	if (!s) {
		fprintf(stderr, "gfad: the pool: %s\n", gfa_strerror(errno));
		return 1;
	}
	if (o->state)
		gfad_restored(s, o->state, hc->state_found);
	lfd = hps_listen(o->sock, o->mode);
	if (lfd < 0) {
		fprintf(stderr, "gfad: --socket %s: %s\n", o->sock, gfa_strerror(lfd));
		return 1;
	}
	for (unsigned int z = 0; z < gfa_pool_nr_zones(hc->pool); z++) {
		uint64_t start, n;

		if (!gfa_zone_span(hc->pool, z, &start, &n))
			frames += n;
	}
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	printf("gfad: serving %s: %" PRIu64 " MiB in %u zone(s)", o->sock,
	       frames >> (20 - GFA_FRAME_SHIFT), gfa_pool_nr_zones(hc->pool));
	if (hc->hr)
		printf(", %" PRIu64 " MiB of it kept populated when free", o->reserve >> 20);
	printf("\n");
	fflush(stdout);
	err = hps_serve(s, lfd, &gfad_stop);
	close(lfd);
	unlink(o->sock);
	hps_destroy(s);
	gfa_host_return_stop(hc->hr);
	gfa_backing_destroy(hc->b);
	gfa_pool_destroy(hc->pool);
	hps_state_close(hc->state);
	if (err)
		fprintf(stderr, "gfad: %s\n", gfa_strerror(err));
	return err ? 1 : 0;
}

int cmd_gfad(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "mem", required_argument, NULL, 'm' },
		{ "nodes", required_argument, NULL, 'n' },
		{ "numa", no_argument, NULL, 'N' },
		{ "populate", no_argument, NULL, 'p' },
		{ "reserve", required_argument, NULL, 'r' },
		{ "allow-uid", required_argument, NULL, 'u' },
		{ "allow-gid", required_argument, NULL, 'g' },
		{ "mode", required_argument, NULL, 'M' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "state", required_argument, NULL, 'S' },
		{ "help", no_argument, NULL, 'h' },
		{ 0 },
	};
	struct hps_config hc;
	struct gfad_opts o = { .nodes = 1, .mode = 0660, .reserve = UINT64_MAX };
	uint64_t mode;
	bool ok = true;
	int c;

	memset(&hc, 0, sizeof(hc));
	while (ok && (c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'h':
			gfad_help();
			return 0;
		case 's':
			o.sock = optarg;
			break;
		case 'm':
			ok = parse_mib("--mem", optarg, &o.mem);
			break;
		case 'n':
			ok = parse_u64("--nodes", optarg, 1, GFA_MAX_ZONES, &o.nodes);
			break;
		case 'N':
			o.numa = true;
			break;
		case 'p':
			o.populate = true;
			break;
		case 'r':
			ok = parse_mib("--reserve", optarg, &o.reserve);
			break;
		case 'u':
			ok = add_id("--allow-uid", optarg, hc.allow_uid, &hc.nr_uid);
			break;
		case 'g':
			ok = add_id("--allow-gid", optarg, hc.allow_gid, &hc.nr_gid);
			break;
		case 'M':
			mode = strtoull(optarg, NULL, 8);
			/* a zone memfd maps every guest: never for others, never executable */
			ok = !(mode & ~0660ULL);
			o.mode = (mode_t)mode;
			if (!ok)
				fprintf(stderr, "gfad: --mode %s: 0660 or stricter\n", optarg);
			break;
		case 'q':
			hc.quiet = true;
			break;
		case 'S':
			o.state = optarg;
			break;
		default:
			ok = false;
			break;
		}
	}
	if (ok && (!o.sock || !o.mem || optind < argc)) {
		fprintf(stderr, "gfad: --socket and --mem are needed (see --help)\n");
		ok = false;
	}
	if (ok && o.numa && o.nodes != 1) {
		fprintf(stderr, "gfad: --numa takes the nodes there are: not with --nodes\n");
		ok = false;
	}
	if (ok && o.mem / o.nodes < (GFA_PAGEBLOCK_FRAMES << GFA_FRAME_SHIFT)) {
		fprintf(stderr, "gfad: --mem: at least 2 MiB per node\n");
		ok = false;
	}
	if (!ok)
		return 2;
	return gfad_run(&o, &hc);
}
