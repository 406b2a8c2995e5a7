// SPDX-License-Identifier: MIT
/*
 * The host pool service with real processes: gfad (build/gfad) and its clients
 * (build/tests/gfa-hostpool-client, each a VMM of its own) forked and exec'd, killed
 * at random points; the test itself attaches as one more client to read the service's
 * counters and its check.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <numaif.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <gfa/numa.h>
#include <gfa/refvmm.h>
#include <gfa/vmm.h>
#include "common/ktime.h"
#include "refvmm/guest_writers.h"
#include "vmm/hostpool_proto.h"
#include "vmm/hostpool_state.h"

#define MiB      (1ULL << 20)
#define POOL_MIB 256

static char sock[108];
static pid_t gfad_pid = -1;

static const char *build_dir(void)
{
	const char *b = getenv("GFA_BUILD");

	return b ? b : "build";
}

static char *bin(const char *name)
{
	static char path[2][512];
	static int i;
	char *p = path[i++ % 2];

	snprintf(p, 512, "%s/%s", build_dir(), name);
	if (access(p, X_OK))
		cr_skip_test("%s not built", p);
	return p;
}

/* fork and exec argv; in/out: the child's stdin and stdout as pipes (or NULL). */
static pid_t spawn(char *const argv[], int *in, int *out)
{
	int pi[2], po[2];
	pid_t pid;

	cr_assert_eq(pipe2(pi, O_CLOEXEC), 0);
	cr_assert_eq(pipe2(po, O_CLOEXEC), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (!pid) {
		int null = open("/dev/null", O_WRONLY);

		/* a test that crashes takes its gfad and clients along: left running, they
		 * would hold the suite's output pipe open and its runner would wait forever */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(pi[0], 0);
		dup2(out ? po[1] : null, 1); /* gfad's "serving" line is not the test's */
		execv(argv[0], argv);
		_exit(127);
	}
	close(pi[0]);
	close(po[1]);
	if (in)
		*in = pi[1];
	else
		close(pi[1]);
	if (out)
		*out = po[0];
	else
		close(po[0]);
	return pid;
}

static int wait_exit(pid_t pid)
{
	int st;

	cr_assert_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The service, up: attach works. */
static void gfad_start(const char *extra)
{
	char *argv[12] = { bin("gfad"), "--socket", sock, "--mem", "256", "--quiet" };
	unsigned int n = 6;
	char e[192];

	if (extra) {
		snprintf(e, sizeof(e), "%s", extra);
		argv[n++] = strtok(e, " ");
		while (n < 11 && (argv[n] = strtok(NULL, " ")))
			n++;
	}
	argv[n] = NULL;
	gfad_pid = spawn(argv, NULL, NULL);
	for (int i = 0; i < 500; i++) {
		struct gfa_hostpool *hp = gfa_hostpool_attach(sock, NULL);

		if (hp) {
			gfa_hostpool_detach(hp);
			return;
		}
		usleep(10000);
	}
	cr_assert_fail("gfad did not come up at %s", sock);
}

/* The service with a state directory (state_dir). */
static char state_dir[128];
static void gfad_start_state(void)
{
	char extra[160];

	snprintf(extra, sizeof(extra), "--state %s", state_dir);
	gfad_start(extra);
}

static void setup(void)
{
	snprintf(sock, sizeof(sock), "/tmp/gfa-hostpool-test-%d.sock", (int)getpid());
	gfad_start(NULL);
}

static void teardown(void)
{
	if (gfad_pid > 0) {
		kill(gfad_pid, SIGTERM);
		waitpid(gfad_pid, NULL, 0);
	}
	unlink(sock);
}

/* Skip the test: the service goes first (a skipped test's .fini does not run). */
#define hp_skip(...)                       \
	do {                               \
		teardown();                \
		gfad_pid = -1;             \
		cr_skip_test(__VA_ARGS__); \
	} while (0)

/* The service's counters, its check clean. */
static struct gfa_hostpool_stat service_stat(struct gfa_hostpool *hp)
{
	struct gfa_hostpool_stat st;
	int n = gfa_hostpool_stat(hp, &st, NULL, 0);

	cr_assert_geq(n, 0, "gfa_hostpool_stat: %s", gfa_strerror(n));
	cr_assert_eq(st.check, 0, "the service's check: %s", gfa_strerror(st.check));
	return st;
}

/* Wait (1 s at most) until no frame is leased: the time it took, in ms. */
static double wait_all_back(struct gfa_hostpool *hp)
{
	uint64_t t0 = ktime_get_ns();
	struct gfa_hostpool_stat st;

	for (;;) {
		st = service_stat(hp);
		if (!st.leased_frames && st.free_frames == st.nr_frames)
			return (double)(ktime_get_ns() - t0) / 1e6;
		cr_assert_lt(ktime_get_ns() - t0, 1000000000ULL,
			     "%lu frames still leased 1 s after the clients ended",
			     (unsigned long)st.leased_frames);
		usleep(1000);
	}
}

/* Every test starts its own gfad and stops it. */
#define HP_TEST(name, ...) Test(hostpool, name, .init = setup, .fini = teardown, __VA_ARGS__)

static int run_client(const char *ops)
{
	char *argv[32] = { bin("tests/gfa-hostpool-client"), sock };
	unsigned int n = 2;
	char o[256];

	snprintf(o, sizeof(o), "%s", ops);
	argv[n++] = strtok(o, " ");
	while (n < 31 && (argv[n] = strtok(NULL, " ")))
		n++;
	return wait_exit(spawn(argv, NULL, NULL));
}

HP_TEST(a_guest_in_another_process_runs_and_gives_everything_back, .timeout = 120)
{
	struct gfa_hostpool *hp = gfa_hostpool_attach(sock, NULL);
	struct gfa_hostpool_stat st;

	cr_assert_not_null(hp);
	cr_assert_eq(run_client("create 32 verify inflate 16 deflate 16 verify destroy "
				"create 16 verify"),
		     0);
	wait_all_back(hp);
	st = service_stat(hp);
	cr_assert_eq(st.nr_frames, POOL_MIB * MiB / 4096);
	cr_assert_eq(st.malformed + st.refused + st.denied, 0u);
	cr_assert_geq(st.clients_total, 2u);
	gfa_hostpool_detach(hp);
}

HP_TEST(two_clients_at_once_keep_their_own_frames, .timeout = 120)
{
	char *argv[] = { bin("tests/gfa-hostpool-client"),
			 sock,
			 "create",
			 "32",
			 "ready",
			 "hold",
			 "verify",
			 "destroy",
			 NULL };
	struct gfa_hostpool *hp = gfa_hostpool_attach(sock, NULL);
	int in[2], out[2];
	pid_t pid[2];
	char line[16];

	cr_assert_not_null(hp);
	for (int i = 0; i < 2; i++) {
		pid[i] = spawn(argv, &in[i], &out[i]);
		cr_assert_gt(read(out[i], line, sizeof(line)), 0, "client %d did not start", i);
	}
	/* each holds its own 32 MiB, the observer nothing */
	cr_assert_eq(service_stat(hp).leased_frames, 2 * 32 * MiB / 4096);
	cr_assert_eq(service_stat(hp).mine_frames, 0u);
	for (int i = 0; i < 2; i++) {
		close(in[i]);
		cr_assert_eq(wait_exit(pid[i]), 0, "client %d", i);
		close(out[i]);
	}
	wait_all_back(hp);
	gfa_hostpool_detach(hp);
}

HP_TEST(sigkill_at_random_points_leaks_no_frame, .timeout = 240)
{
	char *argv[] = { bin("tests/gfa-hostpool-client"), sock, "loop", "100000", "16", NULL };
	char *churn[] = { bin("tests/gfa-hostpool-client"), sock, "churn", "1000", "8", NULL };
	struct gfa_hostpool *hp = gfa_hostpool_attach(sock, NULL);
	unsigned int seed = (unsigned int)time(NULL), kills = 0;
	double worst = 0;

	cr_assert_not_null(hp);
	srand(seed);
	for (int i = 0; i < 40; i++) {
		/* a survivor beside the victim: it notices nothing */
		pid_t pid = spawn(i % 2 ? churn : argv, NULL, NULL);
		pid_t other = i % 8 ? -1 : spawn(argv, NULL, NULL);
		double ms;

		/*
		 * from the attach on: creates, lease batches, balloon, destroys, returns; and
		 * in a churn round's half second also reports in flight and moves
		 */
		usleep((useconds_t)(rand() % (i % 2 ? 600000 : 200000)));
		kill(pid, SIGKILL);
		cr_assert_eq(wait_exit(pid), 128 + SIGKILL, "seed %u: the client ended first",
			     seed);
		kills++;
		if (other > 0) {
			usleep(20000);
			kill(other, SIGTERM); /* (its own loop would fail first) */
			cr_assert_eq(wait_exit(other), 128 + SIGTERM, "seed %u: the survivor",
				     seed);
		}
		ms = wait_all_back(hp);
		worst = ms > worst ? ms : worst;
	}
	/* the service zeroes what the killed clients wrote while it is idle */
	for (int i = 0; service_stat(hp).dirty_frames; i++) {
		cr_assert_lt(i, 5000, "%lu frames still dirty after 5 s",
			     (unsigned long)service_stat(hp).dirty_frames);
		usleep(1000);
	}
	/* and a block given back dirty reads zero at its next lease (the client checks) */
	cr_assert_eq(run_client("create 64 verify destroy"), 0);
	wait_all_back(hp);
	cr_log_info("hostpool: %u kills, 0 frames leaked, all back within %.1f ms", kills, worst);
	gfa_hostpool_detach(hp);
}

HP_TEST(a_uid_not_admitted_is_refused_with_a_clear_message, .timeout = 120)
{
	struct gfa_hostpool *hp = gfa_hostpool_attach(sock, NULL);
	pid_t pid;
	int st;

	cr_assert_not_null(hp);
	/* the socket opened to nogroup, so the refusal is the service's, not the mode's */
	cr_assert_eq(chown(sock, 0, 65534), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (!pid) {
		struct gfa_hostpool *c;

		if (setgroups(0, NULL) || setgid(65534) || setuid(65534))
			_exit(3);
		c = gfa_hostpool_attach(sock, NULL);
		if (c)
			_exit(1);
		_exit(errno == -GFA_EACCES ? 0 : errno > 200 ? 200 : 10 + errno);
	}
	st = wait_exit(pid);
	cr_assert_eq(st, 0,
		     "uid 65534: not refused with GFA_EACCES (exit %d: 1 admitted, "
		     "3 no setuid, else 10 + errno)",
		     st);
	cr_assert_eq(service_stat(hp).denied, 1u);
	cr_assert_str_eq(gfa_strerror(GFA_EACCES), "Permission denied");
	gfa_hostpool_detach(hp);
}

/* A raw connection past the HELLO, as a hostile client would make it. */
static int raw_client(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	struct hp_msg m = { .magic = HP_MAGIC, .version = HP_VERSION, .type = HP_HELLO, .seq = 1 };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	strcpy(a.sun_path, sock);
	cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(send(fd, &m, sizeof(m), 0), (ssize_t)sizeof(m));
	cr_assert_eq(recv(fd, &m, sizeof(m), 0), (ssize_t)sizeof(m)); /* (its fds closed) */
	cr_assert_eq(m.result, 0);
	return fd;
}

static int raw_return(int fd, uint64_t pfn)
{
	struct hp_msg m = { .magic = HP_MAGIC,
			    .version = HP_VERSION,
			    .type = HP_RETURN,
			    .seq = 2,
			    .count = 1 };

	m.pfn[0] = pfn;
	cr_assert_eq(send(fd, &m, sizeof(m), 0), (ssize_t)sizeof(m));
	cr_assert_eq(recv(fd, &m, sizeof(m), 0), (ssize_t)sizeof(m));
	return m.result;
}

HP_TEST(another_clients_block_is_refused_and_bad_packets_close_only_theirs, .timeout = 120)
{
	struct gfa_hostpool *hp = gfa_hostpool_attach(sock, NULL);
	struct gfa_guest_config cfg = { .mem_bytes = 8 * MiB };
	struct gfa_guest *g;
	struct gfa_hostpool_stat st;
	uint64_t pfn;
	char junk[7] = "garbage", *p;
	int fd;

	cr_assert_not_null(hp);
	g = gfa_guest_create(gfa_hostpool_pool(hp), gfa_hostpool_backing(hp), &cfg);
	cr_assert_not_null(g, "create: %s", gfa_strerror(-errno));
	p = gfa_guest_hva(g);
	memset(p, 0x5a, 8 * MiB);
	cr_assert_eq(gfa_guest_gpa_to_pfn(g, 0, &pfn), 0);
	fd = raw_client();
	cr_assert_eq(raw_return(fd, pfn & ~511ULL), GFA_EOWNER); /* ours, not its */
	cr_assert_eq(raw_return(fd, pfn | 1), GFA_EINVAL);
	st = service_stat(hp);
	cr_assert_eq(st.refused, 2u);
	cr_assert_eq(st.mine_frames, 8 * MiB / 4096);
	/* a packet that does not parse ends its connection, and only its */
	cr_assert_eq(send(fd, junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
	cr_assert_eq(recv(fd, junk, sizeof(junk), 0), 0);
	close(fd);
	st = service_stat(hp);
	cr_assert_eq(st.malformed, 1u);
	cr_assert_eq(st.mine_frames, 8 * MiB / 4096);
	for (uint64_t i = 0; i < 8 * MiB; i++)
		cr_assert_eq((unsigned char)p[i], 0x5a);
	gfa_guest_destroy(g);
	wait_all_back(hp);
	gfa_hostpool_detach(hp);
}

/*
 * A libgfa of another protocol version (older or newer) is told which one the service
 * speaks, in a header of its own version, and closed; the service goes on.
 */
HP_TEST(a_client_of_another_protocol_version_is_told_the_service_version, .timeout = 60)
{
	static const uint16_t versions[] = { HP_VERSION - 1, HP_VERSION + 1 };
	struct gfa_hostpool *hp = gfa_hostpool_attach(sock, NULL);
	uint64_t refused;

	cr_assert_not_null(hp);
	refused = service_stat(hp).refused;
	for (unsigned int i = 0; i < 2; i++) {
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		struct hp_msg m = { .magic = HP_MAGIC,
				    .version = versions[i],
				    .type = HP_HELLO,
				    .seq = 7 };
		int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

		strcpy(a.sun_path, sock);
		cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
		cr_assert_eq(send(fd, &m, sizeof(m), 0), (ssize_t)sizeof(m));
		cr_assert_eq(recv(fd, &m, sizeof(m), 0), (ssize_t)sizeof(m));
		cr_assert(m.magic == HP_MAGIC && m.version == versions[i] && m.type == HP_HELLO &&
				  m.seq == 7,
			  "version %u: a reply it cannot parse", versions[i]);
		cr_assert_eq(m.result, GFA_EPROTO);
		cr_assert_eq(m.arg[0], HP_VERSION);
		cr_assert_eq(recv(fd, &m, sizeof(m), 0), 0, "not closed after the reply");
		close(fd);
	}
	cr_assert_eq(service_stat(hp).refused, refused + 2);
	cr_assert_str_eq(gfa_strerror(GFA_EPROTO), "Protocol error");
	gfa_hostpool_detach(hp);
}

HP_TEST(the_service_gone_guests_keep_memory_and_calls_fail_clearly, .timeout = 120)
{
	struct gfa_hostpool *hp = gfa_hostpool_attach(sock, NULL);
	struct gfa_guest_config cfg = { .mem_bytes = 8 * MiB };
	struct gfa_hostpool_stat st;
	struct gfa_guest *g;
	char *p;

	cr_assert_not_null(hp);
	g = gfa_guest_create(gfa_hostpool_pool(hp), gfa_hostpool_backing(hp), &cfg);
	cr_assert_not_null(g);
	p = gfa_guest_hva(g);
	memset(p, 0x33, 8 * MiB);
	kill(gfad_pid, SIGKILL);
	waitpid(gfad_pid, NULL, 0);
	gfad_pid = -1;
	/* the mappings are ours: the guest's memory stays */
	for (uint64_t i = 0; i < 8 * MiB; i += 4096)
		cr_assert_eq(p[i], 0x33);
	cr_assert_eq(gfa_hostpool_stat(hp, &st, NULL, 0), GFA_ECONNRESET);
	gfa_guest_destroy(g);
	cfg.mem_bytes = 16 * MiB;
	cr_assert_null(gfa_guest_create(gfa_hostpool_pool(hp), gfa_hostpool_backing(hp), &cfg));
	cr_assert_eq(errno, -GFA_ECONNRESET);
	gfa_hostpool_detach(hp);
}

HP_TEST(gfactl_stat_prints_the_service_pool, .timeout = 120)
{
	char cmd[700], out[1 << 16];
	size_t n;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "%s stat --socket %s", bin("gfactl"), sock);
	f = popen(cmd, "r");
	cr_assert_not_null(f);
	n = fread(out, 1, sizeof(out) - 1, f);
	out[n] = '\0';
	cr_assert_eq(pclose(f), 0, "%s", out);
	cr_assert_not_null(strstr(out, "# buddyinfo\nNode 0, zone"), "%s", out);
	cr_assert_not_null(strstr(out, "# pagetypeinfo\n"), "%s", out);
	cr_assert_not_null(strstr(out, "# vmstat\npgalloc"), "%s", out);
	cr_assert_not_null(strstr(out, "check clean"), "%s", out);
}

/* Until the writers made one more pass over the guest (10 s at most). */
static void let_write(struct gw_set *ws)
{
	uint64_t want = gw_writes(ws) + ws->pages;

	for (int i = 0; i < 20000 && gw_writes(ws) < want; i++)
		usleep(500);
}

/*
 * Moves go through the client: a small-only guest on a client, written by two threads
 * that are not vCPUs, collapses into blocks leased for the purpose (the client's pool
 * has no spare block of its own), loses no write, and the sources go back to the
 * service as whole blocks.
 */
HP_TEST(a_client_collapses_its_guest_while_it_is_written, .timeout = 120)
{
	static const enum gw_kind stores[] = { GW_STORE, GW_STORE };
	const uint64_t frames = 16 * MiB / GFA_FRAME_SIZE;
	struct gfa_hostpool *hp = gfa_hostpool_attach(sock, NULL);
	struct gfa_guest_config cfg = { .mem_bytes = 16 * MiB, .small_only = true };
	struct gfa_hostpool_stat st;
	struct gfa_guest_stat gs;
	struct gfa_guest *g;
	struct gw_set ws;
	char msg[256];
	uint64_t lost;
	int n;

	cr_assert_not_null(hp);
	g = gfa_guest_create(gfa_hostpool_pool(hp), gfa_hostpool_backing(hp), &cfg);
	cr_assert_not_null(g, "guest: %s", strerror(errno));
	cr_assert_eq(gfa_guest_stat(g, &gs), 0);
	if (gs.wp_errno)
		hp_skip("no userfaultfd write protection here: %s", strerror(gs.wp_errno));
	cr_assert_eq(gs.huge_ranges, 0);
	cr_assert_eq(service_stat(hp).leased_frames, frames, "the guest's leases only");
	cr_assert_eq(gw_start(&ws, gfa_guest_hva(g), gfa_guest_size(g), 2, stores), 0);
	let_write(&ws);
	n = gfa_guest_collapse(g, 64);
	let_write(&ws);
	lost = gw_stop(&ws);
	cr_assert_eq(gfa_guest_stat(g, &gs), 0);
	cr_assert_eq(n, 8, "%d of 8 ranges collapsed", n);
	cr_assert_eq(lost, 0, "%lu writes lost over %lu moves", (unsigned long)lost,
		     (unsigned long)gs.collapses);
	cr_assert_eq(gs.huge_ranges, 8);
	cr_assert_eq(gs.pauses, 0);
	st = service_stat(hp);
	cr_assert_eq(st.leased_frames, frames, "%lu frames leased for a 16 MiB guest",
		     (unsigned long)st.leased_frames);
	/* compaction on a client walks the blocks it holds for the service: harmless */
	gfa_compact_zone(gfa_hostpool_pool(hp), 0, -1, GFA_COMPACT_SYNC);
	cr_assert_eq(gfa_pool_check(gfa_hostpool_pool(hp), msg, sizeof(msg)), 0, "%s", msg);
	gfa_guest_destroy(g);
	cr_assert_eq(service_stat(hp).leased_frames, 0u);
	gfa_hostpool_detach(hp);
}

/* The bytes of host memory behind zone 0's memfd (what the kernel allocated to it). */
static uint64_t memfd_bytes(struct gfa_hostpool *hp)
{
	struct stat st;

	cr_assert_eq(fstat(gfa_backing_zone_fd(gfa_hostpool_backing(hp), 0), &st), 0);
	return (uint64_t)st.st_blocks * 512;
}

/* Until zone 0's memfd holds at most `bytes` (10 s at most): what it holds then. */
static uint64_t wait_memfd_at_most(struct gfa_hostpool *hp, uint64_t bytes)
{
	uint64_t held = memfd_bytes(hp);

	for (int i = 0; i < 1000 && held > bytes; i++) {
		usleep(10000);
		held = memfd_bytes(hp);
	}
	return held;
}

static void setup_reserve(void)
{
	snprintf(sock, sizeof(sock), "/tmp/gfa-hostpool-test-%d.sock", (int)getpid());
	gfad_start("--populate --reserve 32");
}

/*
 * gfad --reserve: of a populated 256 MiB pool, 32 MiB stays populated and the rest goes
 * back to the host; a client's 128 MiB guest gets its memory (written and checked in
 * its process), and once the client is gone the host gets all but the reserve back
 * again, the service's check clean.
 */
Test(hostpool, a_reserve_returns_the_rest_of_the_pool_to_the_host, .init = setup_reserve,
     .fini = teardown, .timeout = 120)
{
	struct gfa_hostpool *hp = gfa_hostpool_attach(sock, NULL);
	struct gfa_hostpool_stat st;
	uint64_t held;

	cr_assert_not_null(hp);
	held = wait_memfd_at_most(hp, 48 * MiB);
	cr_assert_leq(held, 48 * MiB, "%lu MiB still populated of 256, reserve 32",
		      (unsigned long)(held / MiB));
	cr_assert_eq(run_client("create 128 verify"), 0);
	wait_all_back(hp);
	held = wait_memfd_at_most(hp, 48 * MiB);
	cr_assert_leq(held, 48 * MiB, "%lu MiB still populated after the client left",
		      (unsigned long)(held / MiB));
	st = service_stat(hp);
	cr_assert_eq(st.free_frames, st.nr_frames);
	cr_log_info("gfad --reserve 32: %lu MiB populated after a 128 MiB guest came and went",
		    (unsigned long)(held / MiB));
	gfa_hostpool_detach(hp);
}

struct churn {
	struct gfa_hostpool *hp;
	uint64_t mib;
	unsigned int rounds, failed;
	int err;
};

static void *churn_guests(void *arg)
{
	struct churn *c = arg;
	struct gfa_guest_config cfg = { .mem_bytes = c->mib * MiB };

	for (unsigned int i = 0; i < c->rounds; i++) {
		struct gfa_guest *g = gfa_guest_create(gfa_hostpool_pool(c->hp),
						       gfa_hostpool_backing(c->hp), &cfg);

		if (!g) {
			c->failed++;
			c->err = errno;
			continue;
		}
		gfa_guest_destroy(g);
	}
	return NULL;
}

/*
 * Two threads of one client create and destroy guests at once: the blocks one create
 * leased are never given back by the other's destroy before it takes them, so no create
 * fails while the service has room.
 */
HP_TEST(a_destroy_never_gives_back_what_another_create_leased, .timeout = 120)
{
	struct gfa_hostpool *hp = gfa_hostpool_attach(sock, NULL);
	struct churn c[2] = { { hp, 32, 300, 0, 0 }, { hp, 16, 600, 0, 0 } };
	pthread_t t[2];

	cr_assert_not_null(hp);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(pthread_create(&t[i], NULL, churn_guests, &c[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(c[i].failed, 0, "%u of %u creates of %lu MiB failed: %s", c[i].failed,
			     c[i].rounds, (unsigned long)c[i].mib, strerror(c[i].err));
	cr_assert_eq(service_stat(hp).leased_frames, 0u);
	gfa_hostpool_detach(hp);
}

/*
 * A client's guest maps its window in as few runs as the in-process one: it takes its
 * blocks in pfn order whatever order its leases came into its lists in (decisions 36).
 * In list order a 192 MiB guest made 48 mappings (and as many write-protect
 * registrations), one per 4 MiB.
 */
HP_TEST(a_client_guest_maps_its_window_in_few_runs, .timeout = 60)
{
	struct gfa_hostpool *hp = gfa_hostpool_attach(sock, NULL);
	struct gfa_guest_config cfg = { .mem_bytes = 192ULL << 20 };
	struct gfa_guest_stat st;
	struct gfa_guest *g;

	cr_assert_not_null(hp);
	g = gfa_guest_create(gfa_hostpool_pool(hp), gfa_hostpool_backing(hp), &cfg);
	cr_assert_not_null(g, "create: %s", strerror(errno));
	cr_assert_eq(gfa_guest_stat(g, &st), 0);
	cr_assert_eq(st.huge_ranges, 96);
	/* a fresh service leases in pfn order, a batch at a time */
	cr_assert_leq(st.window_mappings, 2, "%lu mappings for 96 blocks",
		      (unsigned long)st.window_mappings);
	gfa_guest_destroy(g);
	wait_all_back(hp);
	gfa_hostpool_detach(hp);
}

struct churn_client {
	pid_t pid;
	int out;
	unsigned long rounds, collapses, reported, lost, nowp, shorts;
};

/* A churn client's exit and its tally line. */
static void churn_collect(struct churn_client *c, int i)
{
	char buf[256];
	ssize_t n = read(c->out, buf, sizeof(buf) - 1);

	buf[n > 0 ? n : 0] = '\0';
	close(c->out);
	cr_assert_eq(wait_exit(c->pid), 0, "churn client %d: %s", i, buf);
	cr_assert_eq(sscanf(buf,
			    "churn rounds %lu collapses %lu reported %lu lost %lu nowp %lu "
			    "short %lu",
			    &c->rounds, &c->collapses, &c->reported, &c->lost, &c->nowp,
			    &c->shorts),
		     6, "churn client %d: '%s'", i, buf);
	cr_assert_eq(c->lost, 0, "churn client %d lost %lu writes", i, c->lost);
}

/*
 * Eight VMM processes churn at once for GFA_HOSTPOOL_SOAK_SECS seconds (15 unless set;
 * make soak-hostpool runs 600): create, writer threads that are not vCPUs, free page
 * reporting, collapse under the writers, balloon, verify, destroy.  The service's check
 * stays clean while they run, no write is lost, and once they are gone every frame is
 * back.
 */
HP_TEST(eight_clients_churn_and_lose_nothing, .timeout = 1800)
{
	const char *env = getenv("GFA_HOSTPOOL_SOAK_SECS");
	char secs[16];
	char *argv[] = { bin("tests/gfa-hostpool-client"), sock, "churn", secs, "8", NULL };
	struct gfa_hostpool *hp = gfa_hostpool_attach(sock, NULL);
	struct churn_client c[8];
	unsigned long rounds = 0, collapses = 0, reported = 0, nowp = 0, checks = 0;
	uint64_t end;
	struct gfa_hostpool_stat st;

	snprintf(secs, sizeof(secs), "%s", env ? env : "15");
	cr_assert_not_null(hp);
	for (int i = 0; i < 8; i++)
		c[i].pid = spawn(argv, NULL, &c[i].out);
	/* the service checks its pool at every stat: conservation while they churn */
	end = ktime_get_ns() + strtoull(secs, NULL, 10) * 1000000000ULL;
	for (; ktime_get_ns() < end; checks++) {
		service_stat(hp);
		usleep(250000);
	}
	for (int i = 0; i < 8; i++) {
		churn_collect(&c[i], i);
		rounds += c[i].rounds, collapses += c[i].collapses;
		reported += c[i].reported, nowp += c[i].nowp;
	}
	wait_all_back(hp);
	st = service_stat(hp);
	cr_assert_eq(st.malformed + st.refused + st.denied, 0u);
	cr_assert_geq(rounds, 8u);
	cr_assert(collapses > 0 || nowp == rounds, "no collapse in %lu rounds", rounds);
	cr_log_info("hostpool churn: 8 clients, %s s, %lu rounds, %lu collapses, %lu frames "
		    "reported, 0 writes lost, %lu clean checks",
		    secs, rounds, collapses, reported, checks);
	gfa_hostpool_detach(hp);
}

/* Run cmd (stderr with stdout) into out: its exit status. */
static int run_cmd(const char *cmd, char *out, size_t size)
{
	char full[1024];
	size_t n;
	FILE *f;
	int st;

	snprintf(full, sizeof(full), "%s 2>&1", cmd);
	f = popen(full, "r");
	cr_assert_not_null(f);
	n = fread(out, 1, size - 1, f);
	out[n] = '\0';
	st = pclose(f);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/*
 * gfactl vmstart --socket: three VMs, each in a process of its own (fork and exec of
 * gfactl's runner), on the service's frames; KVM guests that boot and check their
 * memory where KVM runs (the QEMU harness), host-thread vCPUs elsewhere.  The service
 * leased exactly their memory while they ran, and has all of it back after.
 */
HP_TEST(gfactl_vmstart_runs_each_vm_in_its_own_process, .timeout = 300)
{
	char cmd[700], out[1 << 16], why[256];
	unsigned long running, after, procs;
	const char *res;
	int kvm;

	/* full, then lazy: all their RAM touched at the start, leased as it is touched */
	for (int lazy = 0; lazy < 2; lazy++) {
		snprintf(cmd, sizeof(cmd),
			 "%s vmstart --socket %s --vms 3 --mem 32M --kvm auto --quiet%s",
			 bin("gfactl"), sock, lazy ? " --lazy" : "");
		cr_assert_eq(run_cmd(cmd, out, sizeof(out)), 0, "%s", out);
		res = strstr(out, "RESULT vmstart_socket ");
		cr_assert_not_null(res, "%s", out);
		cr_assert_eq(sscanf(strstr(res, "leased_running="),
				    "leased_running=%lu leased_after=%lu processes=%lu kvm=%d",
				    &running, &after, &procs, &kvm),
			     4, "%s", res);
		cr_assert_eq(procs, 3u);
		cr_assert_eq(running, 3 * 32 * MiB / 4096, "%s", res);
		cr_assert_eq(after, 0u, "%s", res);
		cr_assert_eq(kvm, gfa_kvm_available(why, sizeof(why)) ? 1 : 0, "%s (%s)", res, why);
		cr_assert_not_null(strstr(out, "check clean"), "%s", out);
	}
}

/* Without a service, or with options that have nothing to act on there: a clear refusal. */
Test(hostpool, gfactl_vmstart_socket_refuses_clearly, .timeout = 60)
{
	char cmd[700], out[4096];

	snprintf(cmd, sizeof(cmd), "%s vmstart --socket /nonexistent/gfad.sock --vms 1",
		 bin("gfactl"));
	cr_assert_eq(run_cmd(cmd, out, sizeof(out)), 1, "%s", out);
	cr_assert_not_null(strstr(out, "No such file or directory (is gfad running there?)"), "%s",
			   out);
	snprintf(cmd, sizeof(cmd), "%s vmstart --socket /nonexistent/gfad.sock --rounds 2",
		 bin("gfactl"));
	cr_assert_eq(run_cmd(cmd, out, sizeof(out)), 2, "%s", out);
	cr_assert_not_null(strstr(out, "--rounds does not go with --socket"), "%s", out);
	snprintf(cmd, sizeof(cmd), "%s vmstart --runner 3,0", bin("gfactl"));
	cr_assert_eq(run_cmd(cmd, out, sizeof(out)), 2, "%s", out);
	cr_assert_not_null(strstr(out, "--runner is internal to --socket"), "%s", out);
}

/* Until the service's claims are down to `frames` (1 s at most): the stat then. */
static struct gfa_hostpool_stat wait_claimed(struct gfa_hostpool *hp, uint64_t frames)
{
	struct gfa_hostpool_stat st = service_stat(hp);

	for (int i = 0; i < 1000 && st.claimed_frames > frames; i++) {
		usleep(1000);
		st = service_stat(hp);
	}
	return st;
}

/*
 * Claims across processes: a client that claimed 192 MiB of the 256 keeps a second
 * client's 128 MiB start out (a 32 MiB one fits beside it) and starts its own 128 MiB
 * guest within its claim; once it is gone, killed or not, the claim is too.
 */
HP_TEST(a_claim_keeps_other_clients_out, .timeout = 120)
{
	char *argv[] = { bin("tests/gfa-hostpool-client"),
			 sock,
			 "claim",
			 "192",
			 "ready",
			 "hold",
			 "create",
			 "128",
			 "verify",
			 "destroy",
			 NULL };
	struct gfa_hostpool *hp = gfa_hostpool_attach(sock, NULL);
	const uint64_t claim = 192 * MiB / 4096;
	char line[16];
	int in, out;
	pid_t pid;

	cr_assert_not_null(hp);
	for (int round = 0; round < 2; round++) {
		pid = spawn(argv, &in, &out);
		cr_assert_gt(read(out, line, sizeof(line)), 0, "the claiming client did not start");
		cr_assert_eq(service_stat(hp).claimed_frames, claim);
		cr_assert_eq(run_client("create 128"), 1, "a start beyond the unclaimed frames");
		cr_assert_eq(run_client("create 32 verify destroy"), 0);
		cr_assert_eq(service_stat(hp).claimed_frames, claim, "the others took none of it");
		if (round)
			kill(pid, SIGKILL);
		close(in);
		cr_assert_eq(wait_exit(pid), round ? 128 + SIGKILL : 0, "the claiming client");
		close(out);
		cr_assert_eq(wait_claimed(hp, 0).claimed_frames, 0u, "its claim went with it");
		wait_all_back(hp);
	}
	cr_assert_eq(run_client("create 128 verify destroy"), 0);
	gfa_hostpool_detach(hp);
}

/* The claim calls' errors, each counted by the service and changing nothing. */
HP_TEST(claim_calls_refuse_bad_requests, .timeout = 60)
{
	struct gfa_hostpool *hp = gfa_hostpool_attach(sock, NULL);
	struct gfa_vmstat before, after;
	uint64_t refused;

	cr_assert_not_null(hp);
	refused = service_stat(hp).refused;
	cr_assert_eq(gfa_pool_vmstat(gfa_hostpool_pool(hp), &before), 0);
	cr_assert_eq(gfa_hostpool_claim(NULL, 0, 1), GFA_EFAULT);
	cr_assert_eq(gfa_hostpool_claim(hp, 0, 0), GFA_EINVAL);
	cr_assert_eq(gfa_hostpool_claim(hp, 1, 1), GFA_ERANGE);
	cr_assert_eq(gfa_pool_vmstat(gfa_hostpool_pool(hp), &after), 0);
	cr_assert_eq(after.err_inval - before.err_inval, 1u, "counted in the client's pool");
	cr_assert_eq(after.err_range - before.err_range, 1u);
	cr_assert_eq(gfa_hostpool_claim(hp, 0, POOL_MIB * MiB / 4096 + 1), GFA_ENOSPC);
	cr_assert_eq(gfa_hostpool_unclaim(hp, 0), GFA_ENOTFOUND);
	cr_assert_eq(service_stat(hp).refused, refused + 2, "the two the service saw");
	cr_assert_eq(gfa_hostpool_claim(hp, 0, 1000), 0);
	cr_assert_eq(gfa_hostpool_claim(hp, 0, 1000), GFA_EEXIST);
	cr_assert_eq(service_stat(hp).claimed_frames, 1000u);
	cr_assert_eq(gfa_hostpool_unclaim(hp, 0), 1000);
	cr_assert_eq(service_stat(hp).claimed_frames, 0u);
	gfa_hostpool_detach(hp);
}

/* Every 4 KiB page of [from, to) of g reads v (or, with write, gets it): the misses. */
static uint64_t touch(struct gfa_guest *g, uint64_t from, uint64_t to, unsigned char v, bool write)
{
	volatile unsigned char *p = gfa_guest_hva(g);
	uint64_t bad = 0;

	for (uint64_t off = from; off < to; off += 4096) {
		if (write)
			p[off] = v;
		bad += p[off] != v;
	}
	return bad;
}

/*
 * A lazy guest on a client: its create leases nothing, and its first touches, served
 * from the touching thread's cache, lease from the service as they go (16 MiB a round
 * trip), zeroed and at 2 MiB; its destroy gives everything back.
 */
HP_TEST(a_lazy_guest_on_a_client_leases_at_first_touch, .timeout = 120)
{
	struct gfa_guest_config cfg = { .mem_bytes = 64 * MiB, .flags = GFA_GUEST_LAZY };
	struct gfa_hostpool *hp = gfa_hostpool_attach(sock, NULL);
	struct gfa_guest_stat gs;
	struct gfa_pcp *pcp;
	struct gfa_guest *g;
	uint64_t mine;
	char msg[256];

	cr_assert_not_null(hp);
	g = gfa_guest_create(gfa_hostpool_pool(hp), gfa_hostpool_backing(hp), &cfg);
	if (!g && errno != -GFA_ENOMEM)
		hp_skip("no lazy guest here (userfaultfd): %s", strerror(errno));
	cr_assert_not_null(g, "lazy guest: %s", strerror(errno));
	pcp = gfa_pcp_create(gfa_hostpool_pool(hp), 0);
	cr_assert_not_null(pcp);
	cr_assert_eq(gfa_guest_vcpu_cache(g, (int)gettid(), pcp), 0);
	cr_assert_eq(service_stat(hp).mine_frames, 0u, "a lazy create leases nothing");
	cr_assert_eq(touch(g, 0, 24 * MiB, 0x5a, true), 0);
	cr_assert_eq(gfa_guest_stat(g, &gs), 0);
	mine = service_stat(hp).mine_frames;
	cr_assert_eq(gs.lazy_faults, 12u, "one fault per 2 MiB range");
	cr_assert_eq(gs.lazy_huge_faults, 12u);
	cr_assert_eq(gs.lazy_cache_faults, 12u, "served from the toucher's cache");
	cr_assert_eq(gs.lazy_leases, 2u, "16 MiB a lease round trip");
	cr_assert_eq(mine, 32 * MiB / 4096, "%lu frames leased for 24 MiB touched",
		     (unsigned long)mine);
	/* reads are first touches too: zero, never another client's data */
	cr_assert_eq(touch(g, 24 * MiB, 64 * MiB, 0, false), 0);
	cr_assert_eq(touch(g, 0, 24 * MiB, 0x5a, false), 0);
	cr_assert_eq(gfa_guest_stat(g, &gs), 0);
	cr_assert_eq(gs.populated_bytes, 64 * MiB);
	cr_assert_eq(gs.lazy_refused, 0u);
	cr_assert_eq(service_stat(hp).mine_frames, 64 * MiB / 4096);
	cr_assert_eq(gfa_pool_check(gfa_hostpool_pool(hp), msg, sizeof(msg)), 0, "%s", msg);
	gfa_guest_destroy(g);
	gfa_pcp_destroy(pcp);
	cr_assert_eq(service_stat(hp).leased_frames, 0u, "the destroy gave it all back");
	gfa_hostpool_detach(hp);
}

/*
 * A client's guest of zone z, every page faulted in by the client through its own
 * mapping, lives on node (move_pages(2) says so).
 */
static void guest_on_node(struct gfa_hostpool *hp, unsigned int z, int node)
{
	struct gfa_guest_config cfg = { .mem_bytes = 32 * MiB, .zone = z };
	struct gfa_guest *g =
		gfa_guest_create(gfa_hostpool_pool(hp), gfa_hostpool_backing(hp), &cfg);
	char *p;

	cr_assert_not_null(g, "zone %u: %s", z, strerror(errno));
	p = gfa_guest_hva(g);
	cr_assert_eq(touch(g, 0, 32 * MiB, (unsigned char)(z + 1), true), 0);
	for (uint64_t off = 0; off < 32 * MiB; off += 64 * 4096) {
		void *page = p + off;
		int status = -1;

		cr_assert_eq(move_pages(0, 1, &page, NULL, &status, 0), 0, "move_pages: %s",
			     strerror(errno));
		cr_assert_eq(status, node, "zone %u's guest: page %lu on node %d, not %d", z,
			     (unsigned long)(off >> 12), status, node);
	}
	gfa_guest_destroy(g);
}

static void setup_numa(void)
{
	snprintf(sock, sizeof(sock), "/tmp/gfa-hostpool-test-%d.sock", (int)getpid());
	gfad_start("--numa");
}

/*
 * gfad --numa on two real nodes (suite numa_real: the QEMU harness's two-node guest
 * where the host has one): a client's guest of zone k, every page faulted in by the
 * client through its own mapping, lives on node k (move_pages(2) says so): the service
 * bound each zone's memfd, and that is the memfd's shared policy.
 */
Test(numa_real, a_client_guest_lands_on_its_zone_node, .init = setup_numa, .fini = teardown,
     .timeout = 300)
{
	struct gfa_numa_topology *t = gfa_numa_topology_discover();
	struct gfa_hostpool *hp;

	if (!t || t->nr_nodes < 2) {
		cr_assert_not(getenv("GFA_IN_QEMU"), "fewer than two nodes in the QEMU guest");
		gfa_numa_topology_free(t);
		hp_skip("one NUMA node here: numa_qemu runs this in a two-node guest");
	}
	hp = gfa_hostpool_attach(sock, NULL);
	cr_assert_not_null(hp);
	cr_assert_eq(gfa_pool_nr_zones(gfa_hostpool_pool(hp)), t->nr_nodes);
	for (unsigned int z = 0; z < 2; z++)
		guest_on_node(hp, z, t->nodes[z].phys_node);
	gfa_hostpool_detach(hp);
	gfa_numa_topology_free(t);
}

/* ---- a restart with a state directory (gfad --state) ---- */

/* This test process's socket and state directory. */
static void state_paths(void)
{
	snprintf(sock, sizeof(sock), "/tmp/gfa-hostpool-test-%d.sock", (int)getpid());
	snprintf(state_dir, sizeof(state_dir), "/dev/shm/gfa-hostpool-test-%d.state",
		 (int)getpid());
}

static void setup_state(void)
{
	state_paths();
	gfad_start_state();
}

static void teardown_state(void)
{
	char path[192];

	teardown();
	for (unsigned int z = 0; z < GFA_MAX_ZONES; z++) {
		snprintf(path, sizeof(path), "%s/zone%u", state_dir, z);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/leases", state_dir);
	unlink(path);
	rmdir(state_dir);
}

/* The service on the real nodes, with a state directory. */
static void gfad_numa_state(void)
{
	char extra[160];

	snprintf(extra, sizeof(extra), "--numa --state %s", state_dir);
	gfad_start(extra);
}

/* The service killed (SIGKILL), as a crash would: nothing of it runs any more. */
static void gfad_kill(void)
{
	kill(gfad_pid, SIGKILL);
	cr_assert_eq(wait_exit(gfad_pid), 128 + SIGKILL);
	gfad_pid = -1;
}

/* One line of a client's stdout (it prints a line at a time). */
static void read_line(int fd, char *line, size_t size)
{
	size_t n = 0;

	while (n + 1 < size && read(fd, line + n, 1) == 1 && line[n] != '\n')
		n++;
	line[n] = '\0';
}

Test(hostpool, a_restarted_service_takes_its_clients_back, .init = setup_state,
     .fini = teardown_state, .timeout = 120)
{
	char *keeps[] = { bin("tests/gfa-hostpool-client"),
			  sock,
			  "create",
			  "32",
			  "claim",
			  "16",
			  "ready",
			  "hold",
			  "verify",
			  "stat",
			  "destroy",
			  "create",
			  "16",
			  "verify",
			  NULL };
	char *dies[] = {
		bin("tests/gfa-hostpool-client"), sock, "create", "16", "ready", "hold", NULL
	};
	struct gfa_hostpool *hp;
	struct gfa_hostpool_stat st;
	unsigned long mine = 0, rejoins = 0;
	int in[2], out[2];
	pid_t pid[2];
	char line[64];

	pid[0] = spawn(keeps, &in[0], &out[0]);
	pid[1] = spawn(dies, &in[1], &out[1]);
	for (int i = 0; i < 2; i++) {
		read_line(out[i], line, sizeof(line));
		cr_assert_str_eq(line, "ready", "client %d did not start", i);
	}
	gfad_kill();
	/* one client dies while there is no service: the restart frees what it held */
	kill(pid[1], SIGKILL);
	cr_assert_eq(wait_exit(pid[1]), 128 + SIGKILL);
	gfad_start_state();
	hp = gfa_hostpool_attach(sock, NULL);
	cr_assert_not_null(hp);
	st = service_stat(hp);
	cr_assert_eq(st.leased_frames, 32 * MiB / 4096, "the survivor's 32 MiB, held for it");
	cr_assert_eq(st.claimed_frames, 16 * MiB / 4096, "its claim, back");
	/* its guest's memory held what it wrote through both deaths, and it goes on */
	close(in[0]);
	read_line(out[0], line, sizeof(line));
	cr_assert_eq(sscanf(line, "mine %lu rejoins %lu", &mine, &rejoins), 2, "'%s'", line);
	cr_assert_eq(mine, 32 * MiB / 4096);
	cr_assert_eq(rejoins, 1u);
	cr_assert_eq(wait_exit(pid[0]), 0, "the surviving client");
	close(in[1]);
	close(out[0]);
	close(out[1]);
	wait_all_back(hp);
	st = service_stat(hp);
	cr_assert_eq(st.claimed_frames, 0u);
	cr_assert_eq(st.malformed, 0u);
	gfa_hostpool_detach(hp);
}

/*
 * What a kill between a lease and its reply leaves, made in the table of a killed
 * service: blocks the table gives the client that it never saw.  The rejoin lists the
 * client's leases and gives those back; without it they stay leased to the client,
 * unused, until it detaches.
 */
Test(hostpool, a_rejoin_gives_back_the_leases_the_client_never_saw, .init = setup_state,
     .fini = teardown_state, .timeout = 60)
{
	char *keeps[] = { bin("tests/gfa-hostpool-client"),
			  sock,
			  "create",
			  "32",
			  "ready",
			  "hold",
			  "verify",
			  "stat",
			  NULL };
	unsigned long mine = 0, rejoins = 0;
	uint64_t start, n, b, nr_blocks;
	struct gfa_hostpool *hp;
	struct hps_state *st;
	unsigned int slot = HPS_STATE_CLIENTS, added = 0;
	char line[64], path[192];
	struct stat sb;
	int in, out, fd;
	pid_t pid;

	pid = spawn(keeps, &in, &out);
	read_line(out, line, sizeof(line));
	cr_assert_str_eq(line, "ready");
	hp = gfa_hostpool_attach(sock, NULL);
	cr_assert_not_null(hp);
	cr_assert_eq(gfa_zone_span(gfa_hostpool_pool(hp), 0, &start, &n), 0);
	gfa_hostpool_detach(hp);
	gfad_kill();

	snprintf(path, sizeof(path), "%s/leases", state_dir);
	fd = open(path, O_RDWR | O_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(fstat(fd, &sb), 0);
	st = mmap(NULL, (size_t)sb.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	cr_assert_neq(st, MAP_FAILED);
	nr_blocks = st->nr_blocks;
	for (unsigned int i = 0; i < HPS_STATE_CLIENTS; i++)
		if (st->client[i].serial && st->client[i].pid == (int32_t)pid)
			slot = i;
	cr_assert_lt(slot, HPS_STATE_CLIENTS, "the client's record");
	for (b = start / HP_LEASE_FRAMES; b < (start + n) / HP_LEASE_FRAMES && added < 2; b++) {
		cr_assert_lt(b, nr_blocks);
		if (!st->lease[b]) {
			st->lease[b] = slot + 1;
			added++;
		}
	}
	cr_assert_eq(added, 2u);
	munmap(st, (size_t)sb.st_size);
	close(fd);

	gfad_start_state();
	hp = gfa_hostpool_attach(sock, NULL);
	cr_assert_not_null(hp);
	cr_assert_eq(service_stat(hp).leased_frames, 36 * MiB / 4096, "the table's, restored");
	close(in);
	read_line(out, line, sizeof(line));
	cr_assert_eq(sscanf(line, "mine %lu rejoins %lu", &mine, &rejoins), 2, "'%s'", line);
	cr_assert_eq(mine, 32 * MiB / 4096, "the two blocks it never saw went back");
	cr_assert_eq(rejoins, 1u);
	cr_assert_eq(wait_exit(pid), 0);
	close(out);
	wait_all_back(hp);
	cr_assert_eq(service_stat(hp).malformed, 0u);
	gfa_hostpool_detach(hp);
}

static void setup_numa_state(void)
{
	state_paths();
	gfad_numa_state();
}

/*
 * gfad --numa --state, killed and started again: the zones of the real nodes in zone
 * files, the client rejoins with its data, and what is faulted in after the restart
 * still lands on each zone's node (the files keep their shared policy; the restart
 * binds again).  On a one-node host it proves the restore of a --numa pool; in a
 * two-node one, the placement.
 */
static void numa_restart(void)
{
	char *keeps[] = { bin("tests/gfa-hostpool-client"),
			  sock,
			  "create",
			  "16",
			  "ready",
			  "hold",
			  "verify",
			  "stat",
			  NULL };
	struct gfa_numa_topology *t = gfa_numa_topology_discover();
	unsigned long mine = 0, rejoins = 0;
	struct gfa_hostpool *hp;
	char line[64];
	int in, out;
	pid_t pid;

	cr_assert_not_null(t);
	pid = spawn(keeps, &in, &out);
	read_line(out, line, sizeof(line));
	cr_assert_str_eq(line, "ready");
	gfad_kill();
	gfad_numa_state();
	close(in);
	read_line(out, line, sizeof(line));
	cr_assert_eq(sscanf(line, "mine %lu rejoins %lu", &mine, &rejoins), 2, "'%s'", line);
	cr_assert_eq(mine, 16 * MiB / 4096);
	cr_assert_eq(rejoins, 1u);
	cr_assert_eq(wait_exit(pid), 0, "the client verified its guest after the restart");
	close(out);
	hp = gfa_hostpool_attach(sock, NULL);
	cr_assert_not_null(hp);
	cr_assert_eq(gfa_pool_nr_zones(gfa_hostpool_pool(hp)), t->nr_nodes);
	for (unsigned int z = 0; z < t->nr_nodes && z < 2; z++)
		guest_on_node(hp, z, t->nodes[z].phys_node);
	wait_all_back(hp);
	gfa_hostpool_detach(hp);
	gfa_numa_topology_free(t);
}

Test(hostpool, a_restarted_numa_service_keeps_its_zones_on_their_nodes, .init = setup_numa_state,
     .fini = teardown_state, .timeout = 120)
{
	numa_restart();
}

/* The same in the QEMU harness's two-node guest (suite numa_qemu runs numa_real there). */
Test(numa_real, a_restarted_numa_service_keeps_its_zones_on_their_nodes, .init = setup_numa_state,
     .fini = teardown_state, .timeout = 120)
{
	struct gfa_numa_topology *t = gfa_numa_topology_discover();
	unsigned int nodes = t ? t->nr_nodes : 0;

	gfa_numa_topology_free(t);
	if (nodes < 2) {
		cr_assert_not(getenv("GFA_IN_QEMU"), "fewer than two nodes in the QEMU guest");
		teardown_state(); /* a skipped test's .fini does not run */
		gfad_pid = -1;
		cr_skip_test("one NUMA node here: numa_qemu runs this in a two-node guest");
	}
	numa_restart();
}

Test(hostpool, a_rejoin_of_a_client_the_service_does_not_hold_is_refused, .init = setup_state,
     .fini = teardown_state, .timeout = 60)
{
	struct hp_msg m = { .magic = HP_MAGIC, .version = HP_VERSION, .type = HP_REJOIN, .seq = 1 };
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	struct hp_msg r = { 0 };
	struct gfa_hostpool *hp;

	strcpy(a.sun_path, sock);
	cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	m.arg[0] = 12345; /* no client of that id was restored */
	cr_assert_eq(send(fd, &m, sizeof(m), 0), (ssize_t)sizeof(m));
	cr_assert_eq(recv(fd, &r, sizeof(r), 0), (ssize_t)sizeof(r));
	cr_assert_eq(r.type, HP_REJOIN);
	cr_assert_eq(r.result, GFA_ENOTFOUND);
	close(fd);
	hp = gfa_hostpool_attach(sock, NULL);
	cr_assert_not_null(hp);
	cr_assert_geq(service_stat(hp).refused, 1u);
	gfa_hostpool_detach(hp);
}

Test(hostpool, a_service_killed_under_churn_takes_its_clients_back, .init = setup_state,
     .fini = teardown_state, .timeout = 180)
{
	char *churn[] = { bin("tests/gfa-hostpool-client"), sock, "churn", "6", "16", "stat", NULL };
	unsigned int seed = (unsigned int)time(NULL);
	unsigned long rounds, collapses, reported, lost, nowp, mine, rejoins;
	struct gfa_hostpool *hp;
	int out[2];
	pid_t pid[2];
	char line[160];

	srand(seed);
	for (int i = 0; i < 2; i++)
		pid[i] = spawn(churn, NULL, &out[i]);
	/* killed at random points of their rounds: leases, returns, collapses in flight */
	for (int k = 0; k < 4; k++) {
		usleep((useconds_t)(300000 + rand() % 700000));
		gfad_kill();
		gfad_start_state();
	}
	for (int i = 0; i < 2; i++) {
		read_line(out[i], line, sizeof(line));
		cr_assert_eq(sscanf(line,
				    "churn rounds %lu collapses %lu reported %lu lost %lu nowp %lu",
				    &rounds, &collapses, &reported, &lost, &nowp),
			     5, "client %d (seed %u): '%s'", i, seed, line);
		cr_assert_eq(lost, 0u, "client %d lost writes", i);
		read_line(out[i], line, sizeof(line));
		cr_assert_eq(sscanf(line, "mine %lu rejoins %lu", &mine, &rejoins), 2, "'%s'",
			     line);
		cr_assert_geq(rejoins, 1u, "client %d never rejoined (seed %u)", i, seed);
		cr_assert_eq(wait_exit(pid[i]), 0, "client %d (seed %u)", i, seed);
		close(out[i]);
	}
	hp = gfa_hostpool_attach(sock, NULL);
	cr_assert_not_null(hp);
	wait_all_back(hp);
	cr_assert_eq(service_stat(hp).malformed, 0u);
	gfa_hostpool_detach(hp);
}

/*
 * Compaction across clients: a client whose guest ballooned out 3 of every 4 pages holds
 * 192 MiB of leases a quarter used, and the 256 MiB service has 64 MiB free.  Another
 * client's 128 MiB guest is short; the service asks the first client's shrinker, which
 * compacts its pool (moving its guest's pages, the data kept) and gives back the blocks
 * that frees, and the create goes through.  Without the shrinker it fails: no process
 * but the first can use a block that is partly its.
 */
HP_TEST(a_short_lease_makes_another_client_give_back_the_room_its_guest_left, .timeout = 120)
{
	char *sparse[] = { bin("tests/gfa-hostpool-client"),
			   sock,
			   "create",
			   "192",
			   "sparse",
			   "192",
			   "ready",
			   "hold",
			   "verify",
			   "stat",
			   NULL };
	struct gfa_guest_config cfg = { .mem_bytes = 128 * MiB };
	unsigned long mine = 0, rejoins = 0, asks = 0;
	struct gfa_guest *g = NULL;
	struct gfa_hostpool *hp;
	uint64_t t0, t1;
	char line[64], text[64 << 10], *at;
	int in, out;
	pid_t pid;

	pid = spawn(sparse, &in, &out);
	read_line(out, line, sizeof(line));
	cr_assert_str_eq(line, "ready");
	hp = gfa_hostpool_attach(sock, NULL);
	cr_assert_not_null(hp);
	cr_assert_eq(service_stat(hp).leased_frames, 192 * MiB / 4096, "the sparse guest's");
	/* each create waits GFA_HOSTPOOL_SHRINK_MS at most: a sanitizer build moves slower */
	t0 = ktime_get_ns();
	for (int i = 0; i < 3 && !g; i++)
		g = gfa_guest_create(gfa_hostpool_pool(hp), gfa_hostpool_backing(hp), &cfg);
	t1 = ktime_get_ns();
	cr_assert_not_null(g, "the 128 MiB guest: %s", strerror(errno));
	cr_assert_eq(touch(g, 0, 128 * MiB, 0x3c, true), 0);
	cr_assert_geq(gfa_hostpool_stat(hp, &(struct gfa_hostpool_stat){ 0 }, text, sizeof(text)),
		      0);
	at = strstr(text, "shrink_asks ");
	cr_assert(at && sscanf(at, "shrink_asks %lu", &asks) == 1 && asks >= 1, "%s", text);
	close(in);
	read_line(out, line, sizeof(line));
	cr_assert_eq(sscanf(line, "mine %lu rejoins %lu", &mine, &rejoins), 2, "'%s'", line);
	cr_assert_leq(mine, 128 * MiB / 4096, "the sparse guest kept %lu frames leased", mine);
	fprintf(stderr,
		"hostpool: the short 128 MiB create took %.0f ms (shrinkers asked %lu times); the "
		"sparse client kept %lu MiB of its 192\n",
		(double)(t1 - t0) / 1e6, asks, (unsigned long)(mine * 4096 / MiB));
	cr_assert_eq(wait_exit(pid), 0, "the sparse guest's pages kept what was written");
	close(out);
	cr_assert_eq(touch(g, 0, 128 * MiB, 0x3c, false), 0);
	gfa_guest_destroy(g);
	wait_all_back(hp);
	gfa_hostpool_detach(hp);
}

/*
 * Eight VMM processes churn on a service too small for all of them at once (8 x 40 MiB
 * guests, their collapse targets and balloons on 256 MiB): creates, deflates and move
 * targets fall short now and then, and each short lease sets the other clients'
 * shrinkers compacting their pools under their own writers, moves and balloons.  No
 * write is lost, the service's check stays clean at every stat, and once they are gone
 * every frame is back.
 */
HP_TEST(eight_squeezed_clients_give_room_to_each_other, .timeout = 300)
{
	char *argv[] = { bin("tests/gfa-hostpool-client"), sock, "squeeze", "10", "40", NULL };
	struct gfa_hostpool *hp = gfa_hostpool_attach(sock, NULL);
	unsigned long rounds = 0, shorts = 0, asks = 0, checks = 0;
	struct churn_client c[8];
	char text[64 << 10], *at;
	uint64_t end;

	cr_assert_not_null(hp);
	for (int i = 0; i < 8; i++)
		c[i].pid = spawn(argv, NULL, &c[i].out);
	end = ktime_get_ns() + 10 * 1000000000ULL;
	for (; ktime_get_ns() < end; checks++) {
		service_stat(hp);
		usleep(250000);
	}
	for (int i = 0; i < 8; i++) {
		churn_collect(&c[i], i);
		rounds += c[i].rounds, shorts += c[i].shorts;
	}
	wait_all_back(hp);
	cr_assert_geq(gfa_hostpool_stat(hp, &(struct gfa_hostpool_stat){ 0 }, text, sizeof(text)),
		      0);
	at = strstr(text, "shrink_asks ");
	cr_assert(at && sscanf(at, "shrink_asks %lu", &asks) == 1, "%s", text);
	cr_assert_geq(asks, 1u, "the service was never short: no squeeze");
	cr_assert_geq(rounds, 4u, "14-21 rounds here, under the sanitizers too");
	cr_assert_eq(service_stat(hp).malformed + service_stat(hp).refused, 0u);
	fprintf(stderr,
		"hostpool squeeze: 8 clients, 10 s, %lu rounds, %lu short, shrinkers asked %lu "
		"times, 0 writes lost, %lu clean checks\n",
		rounds, shorts, asks, checks);
	gfa_hostpool_detach(hp);
}
