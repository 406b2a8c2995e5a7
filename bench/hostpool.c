// SPDX-License-Identifier: MIT
/*
 * bench/hostpool: a guest started in a fresh process attached to a populated gfad,
 * against the same start in the process that owns the pool, and against a process
 * that creates and populates a private memfd pool for itself; the per-vCPU cache path
 * on a client's pool against the in-process one; and SIGKILL of churning clients,
 * counting what comes back.  Every variant runs in each repetition, interleaved.
 *
 * The fresh process is this binary again (--child MODE SOCKET MIB), timed from before
 * its attach to after gfa_guest_create() returns, so the attach's round trips, the
 * client pool's setup and the lease batches are all in it.  Half the kills hit the
 * tests' client program (tests/hostpool/client.c, built beside us) in its churn rounds:
 * free page reporting in flight, collapses under writer threads, balloon.  A second
 * service of 1 TiB (unpopulated: its memfd is sparse) takes the same 128 MiB start, so
 * the attach's cost against the service's size shows (a client writes the metadata of
 * what it leases, allocator/deferred.c).
 */
#define _GNU_SOURCE
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <gfa/vmm.h>
#include "bench/bench_util.h"
#include "vmm/hostpool_proto.h"

#define MiB   (1ULL << 20)
#define BENCH "hostpool"

#define TIB_MIB (1ULL << 20)

static char sock[108], sock_tib[108];
static pid_t gfad_pid, tib_pid;

/* The services go with us, also when a bench_die() ends the run. */
static void stop_gfad(void)
{
	pid_t *pids[] = { &gfad_pid, &tib_pid };

	for (int i = 0; i < 2; i++)
		if (*pids[i] > 0 && getpid() != *pids[i]) {
			kill(*pids[i], SIGTERM);
			waitpid(*pids[i], NULL, 0);
			*pids[i] = 0;
		}
}

/* ---- the child: one measurement, printed as one number ---- */

/* Attach and create in this fresh process: both together, and the create alone. */
static double child_attach(const char *path, uint64_t mib, double *create_ns)
{
	struct gfa_guest_config cfg = { .mem_bytes = mib * MiB };
	uint64_t t0 = bench_now_ns();
	struct gfa_hostpool *hp = gfa_hostpool_attach(path, NULL);
	uint64_t t1 = bench_now_ns();
	struct gfa_guest *g =
		hp ? gfa_guest_create(gfa_hostpool_pool(hp), gfa_hostpool_backing(hp), &cfg) : NULL;
	double ns = (double)(bench_now_ns() - t0);

	*create_ns = ns - (double)(t1 - t0);

	if (!g)
		bench_die("child: attach and create: %s\n", gfa_strerror(-errno));
	gfa_guest_destroy(g);
	gfa_hostpool_detach(hp);
	return ns;
}

/*
 * The least any attach costs: this fresh process's socket, connect and HELLO round trip,
 * the zone memfds received and closed, nothing else (no pool, no mapping).  A client
 * cannot do less: the memfds come only over the socket.
 */
static double child_handshake(const char *path)
{
	static struct hp_msg m = { .magic = HP_MAGIC,
				   .version = HP_VERSION,
				   .type = HP_HELLO,
				   .seq = 1 };
	static struct hp_msg r;
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	char cbuf[CMSG_SPACE(sizeof(int) * GFA_MAX_ZONES)];
	struct iovec iov = { &r, sizeof(r) };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = cbuf,
			     .msg_controllen = sizeof(cbuf) };
	uint64_t t0 = bench_now_ns();
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	double ns;

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) ||
	    send(fd, &m, sizeof(m), MSG_NOSIGNAL) != (ssize_t)sizeof(m) ||
	    recvmsg(fd, &mh, MSG_CMSG_CLOEXEC) != (ssize_t)sizeof(r) || r.result)
		bench_die("child: handshake: %s (result %d)\n", strerror(errno), r.result);
	ns = (double)(bench_now_ns() - t0);
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
		for (size_t i = 0;
		     c->cmsg_type == SCM_RIGHTS && i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		     i++)
			close(((int *)(void *)CMSG_DATA(c))[i]);
	close(fd);
	return ns;
}

static double child_private(uint64_t mib)
{
	struct gfa_backing_config bc = { .populate = true };
	struct gfa_guest_config cfg = { .mem_bytes = mib * MiB };
	struct gfa_pool_config pc;
	uint64_t t0 = bench_now_ns();
	struct gfa_pool *pool;
	struct gfa_backing *b;
	struct gfa_guest *g;
	double ns;

	gfa_pool_config_init(&pc, mib * MiB >> GFA_FRAME_SHIFT);
	pool = gfa_pool_create(&pc);
	b = pool ? gfa_backing_create(pool, &bc) : NULL;
	g = b ? gfa_guest_create(pool, b, &cfg) : NULL;
	ns = (double)(bench_now_ns() - t0);
	if (!g)
		bench_die("child: private pool: %s\n", gfa_strerror(-errno));
	gfa_guest_destroy(g);
	gfa_backing_destroy(b);
	gfa_pool_destroy(pool);
	return ns;
}

/* Order-0 alloc+free pairs a second through a cache of pool's zone 0 (frames there). */
static double cache_rate(struct gfa_pool *pool, double secs)
{
	struct gfa_pcp *pcp = gfa_pcp_create(pool, 0);
	uint64_t t0, n = 0;
	double s;

	if (!pcp)
		bench_die("cache: %s\n", gfa_strerror(-errno));
	t0 = bench_now_ns();
	do {
		for (int i = 0; i < 4096; i++) {
			int64_t pfn = gfa_pcp_alloc(pcp, 0, GFA_MT_MOVABLE, 7, 0);

			if (pfn < 0 || gfa_pcp_free(pcp, (uint64_t)pfn, 0, 7))
				bench_die("cache: %s\n", gfa_strerror((int)pfn));
		}
		n += 4096;
		s = bench_sec_since(t0);
	} while (s < secs);
	gfa_pcp_destroy(pcp);
	return (double)n / s;
}

static double child_cache(const char *path, double secs)
{
	/* a guest's start leases 32 MiB; the slack keeps it when the guest stops */
	struct gfa_hostpool_config hc = { .slack_bytes = 32 * MiB };
	struct gfa_guest_config cfg = { .mem_bytes = 32 * MiB };
	struct gfa_hostpool *hp = gfa_hostpool_attach(path, &hc);
	struct gfa_guest *g =
		hp ? gfa_guest_create(gfa_hostpool_pool(hp), gfa_hostpool_backing(hp), &cfg) : NULL;
	double rate;

	if (!g)
		bench_die("child: cache: %s\n", gfa_strerror(-errno));
	gfa_guest_destroy(g);
	rate = cache_rate(gfa_hostpool_pool(hp), secs);
	gfa_hostpool_detach(hp);
	return rate;
}

static int child_main(char **argv)
{
	const char *mode = argv[2], *path = argv[3];
	uint64_t mib = strtoull(argv[4], NULL, 0);
	double v, part = 0;

	if (!strcmp(mode, "attach"))
		v = child_attach(path, mib, &part);
	else if (!strcmp(mode, "private"))
		v = child_private(mib);
	else if (!strcmp(mode, "handshake"))
		v = child_handshake(path);
	else if (!strcmp(mode, "cache"))
		v = child_cache(path, (double)mib / 1000);
	else if (!strcmp(mode, "churn"))
		for (;;)
			child_attach(path, mib, &part);
	else
		bench_die("child: mode %s\n", mode);
	printf("%.0f %.0f\n", v, part);
	return 0;
}

/* ---- the parent ---- */

static pid_t spawn(char *const argv[], int *out)
{
	int p[2];
	pid_t pid;

	if (pipe(p))
		bench_die("pipe: %s\n", strerror(errno));
	pid = fork();
	if (pid < 0)
		bench_die("fork: %s\n", strerror(errno));
	if (!pid) {
		dup2(p[1], 1);
		close(p[0]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(p[1]);
	if (out)
		*out = p[0];
	else
		close(p[0]);
	return pid;
}

/* Run this binary's child mode against the service at path and read its number (and
 * its part, where it has one). */
static double run_child_at(char *path, const char *mode, uint64_t arg, double *part)
{
	char a[32], buf[64], *end;
	char *argv[] = { "/proc/self/exe", "--child", (char *)mode, path, a, NULL };
	int fd, st;
	ssize_t n;
	pid_t pid;
	double v;

	snprintf(a, sizeof(a), "%lu", (unsigned long)arg);
	pid = spawn(argv, &fd);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	waitpid(pid, &st, 0);
	if (n <= 0 || !WIFEXITED(st) || WEXITSTATUS(st))
		bench_die("child %s failed\n", mode);
	buf[n] = '\0';
	v = strtod(buf, &end);
	if (part)
		*part = strtod(end, NULL);
	return v;
}

static double run_child_part(const char *mode, uint64_t arg, double *part)
{
	return run_child_at(sock, mode, arg, part);
}

static double run_child(const char *mode, uint64_t arg)
{
	return run_child_part(mode, arg, NULL);
}

static struct gfa_hostpool_stat service(struct gfa_hostpool *obs)
{
	struct gfa_hostpool_stat st;
	int n = gfa_hostpool_stat(obs, &st, NULL, 0);

	if (n < 0 || st.check)
		bench_die("service stat: %s, check %d\n", gfa_strerror(n), st.check);
	return st;
}

/* Until every frame is free and zeroed again (10 s at most); the ms it took. */
static double settle(struct gfa_hostpool *obs)
{
	uint64_t t0 = bench_now_ns();

	for (;;) {
		struct gfa_hostpool_stat st = service(obs);

		if (!st.leased_frames && !st.dirty_frames && st.free_frames == st.nr_frames)
			return bench_sec_since(t0) * 1e3;
		if (bench_sec_since(t0) > 60)
			bench_die("the service did not settle: %lu leased, %lu dirty\n",
				  (unsigned long)st.leased_frames, (unsigned long)st.dirty_frames);
		usleep(20000); /* (a stat runs the service's check: not too often) */
	}
}

static double inproc_create(struct gfa_pool *pool, struct gfa_backing *b, uint64_t mib)
{
	struct gfa_guest_config cfg = { .mem_bytes = mib * MiB };
	uint64_t t0 = bench_now_ns();
	struct gfa_guest *g = gfa_guest_create(pool, b, &cfg);
	double ns = (double)(bench_now_ns() - t0);

	if (!g)
		bench_die("in-process create: %s\n", gfa_strerror(-errno));
	gfa_guest_destroy(g);
	if (gfa_backing_zero_quiesce(b, 30000))
		bench_die("in-process zeroer did not finish\n");
	return ns;
}

/* gfad at path with mib of memory, populated or not. */
static pid_t start_gfad(char *path_sock, uint64_t mib, bool populate)
{
	char m[32],
		*argv[] = { "", "--socket", path_sock, "--mem", m, "--quiet", "--populate", NULL };
	char path[PATH_MAX], *slash;
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 16);

	/* BUILD/bench/hostpool: the service is BUILD/gfad */
	path[n > 0 ? n : 0] = '\0';
	slash = strrchr(path, '/');
	if (slash)
		*slash = '\0';
	slash = strrchr(path, '/');
	if (!slash)
		bench_die("where is gfad? (%s)\n", path);
	strcpy(slash + 1, "gfad");
	argv[0] = path;
	if (!populate)
		argv[6] = NULL;
	snprintf(m, sizeof(m), "%lu", (unsigned long)mib);
	return spawn(argv, NULL);
}

static struct gfa_hostpool *observe(const char *path)
{
	for (int i = 0; i < 3000; i++) {
		struct gfa_hostpool *hp = gfa_hostpool_attach(path, NULL);

		if (hp)
			return hp;
		usleep(10000);
	}
	bench_die("gfad did not come up at %s\n", path);
}

/* The tests' client program beside this binary ($BUILD/tests/), or NULL. */
static char *client_program(void)
{
	static char path[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 64);
	char *slash;

	if (n <= 0)
		return NULL;
	path[n] = '\0';
	slash = strrchr(path, '/');
	if (!slash)
		return NULL;
	*slash = '\0';
	slash = strrchr(path, '/'); /* $BUILD/bench -> $BUILD */
	if (!slash)
		return NULL;
	strcpy(slash, "/tests/gfa-hostpool-client");
	return access(path, X_OK) ? NULL : path;
}

/* SIGKILL churning clients at random points: the kills; *worst_ms the longest wait for
 * all frames back, *leaked what never came back, *in_churn the kills of churn rounds. */
static unsigned int kills(struct gfa_hostpool *obs, unsigned int n, double *worst_ms,
			  uint64_t *leaked, unsigned int *in_churn)
{
	char *argv[] = { "/proc/self/exe", "--child", "churn", sock, "16", NULL };
	char *churn[] = { client_program(), sock, "churn", "1000", "8", NULL };
	uint64_t seed = bench_now_ns();
	unsigned int k = 0;

	*worst_ms = 0;
	*in_churn = 0;
	if (!churn[0])
		printf("kills: no tests/gfa-hostpool-client beside this binary (make %s): create "
		       "and destroy only\n",
		       "build/tests/gfa-hostpool-client");
	for (unsigned int i = 0; i < n; i++) {
		bool rounds = churn[0] && i % 2; /* a round is about half a second */
		pid_t pid = spawn(rounds ? churn : argv, NULL);
		int st;
		uint64_t t0;

		usleep((useconds_t)(bench_rand(&seed) % (rounds ? 600000 : 150000)));
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
		if (!WIFSIGNALED(st))
			printf("kills: client %u ended by itself (status %d)\n", i, st);
		k += WIFSIGNALED(st);
		*in_churn += rounds && WIFSIGNALED(st);
		t0 = bench_now_ns();
		for (;;) {
			struct gfa_hostpool_stat s = service(obs);

			if (!s.leased_frames || bench_sec_since(t0) > 5) {
				*leaked += s.leased_frames;
				break;
			}
			usleep(200);
		}
		*worst_ms = fmax(*worst_ms, bench_sec_since(t0) * 1e3);
	}
	return k;
}

/* One run's samples and the pools they came from. */
struct hp_bench {
	struct bench_opts o;
	double att[2][64], cre[2][64], inp[2][64], prv[2][64], cc[64], ci[64], worst;
	double alone[2][64]; /* the attach alone, 128 MiB: [0] the 2.3 GiB service, [1] 1 TiB */
	double hs[64];       /* a fresh process's bare handshake (child_handshake) */
	struct bench_stat sa[2], sr[2], si[2], sp[2], sc, sci, sal[2], shs;
	uint64_t leaked;
	unsigned int nk, nk_churn;
	struct gfa_hostpool *obs;
	struct gfa_pool *pool;
	struct gfa_backing *b;
};

static const uint64_t hp_sizes[] = { 128, 2048 };

/* gfad, an observer attached to it, and the in-process pool of the same size. */
static void hp_setup(struct hp_bench *h)
{
	struct gfa_backing_config bc = { .populate = true };
	struct gfa_pool_config pc;

	snprintf(sock, sizeof(sock), "/tmp/gfa-bench-hostpool-%d.sock", (int)getpid());
	snprintf(sock_tib, sizeof(sock_tib), "/tmp/gfa-bench-hostpool-tib-%d.sock", (int)getpid());
	gfad_pid = start_gfad(sock, 2048 + 256, true);
	tib_pid = start_gfad(sock_tib, TIB_MIB, false);
	atexit(stop_gfad);
	h->obs = observe(sock);
	gfa_hostpool_detach(observe(sock_tib));
	gfa_pool_config_init(&pc, (2048 + 256) * MiB >> GFA_FRAME_SHIFT);
	h->pool = gfa_pool_create(&pc);
	h->b = h->pool ? gfa_backing_create(h->pool, &bc) : NULL;
	if (!h->b)
		bench_die("in-process pool: %s\n", gfa_strerror(-errno));
}

/* The starts and the cache path, each rep interleaving attached, in-process, private. */
static void hp_measure(struct hp_bench *h)
{
	struct bench_load load;

	/* warm-up: one of each, not counted */
	run_child("attach", 128);
	settle(h->obs);
	inproc_create(h->pool, h->b, 128);
	bench_load_begin_with(&load, gfad_pid);
	for (int r = 0; r < h->o.reps; r++) {
		for (int s = 0; s < 2; s++) {
			h->att[s][r] = run_child_part("attach", hp_sizes[s], &h->cre[s][r]) / 1e6;
			h->cre[s][r] /= 1e6;
			if (!s) {
				double c, t = run_child_at(sock_tib, "attach", 128, &c) / 1e6;

				h->alone[0][r] = h->att[0][r] - h->cre[0][r];
				h->alone[1][r] = t - c / 1e6;
				h->hs[r] = run_child("handshake", 0) / 1e6;
			}
			settle(h->obs);
			h->inp[s][r] = inproc_create(h->pool, h->b, hp_sizes[s]) / 1e6;
			h->prv[s][r] = run_child("private", hp_sizes[s]) / 1e6;
		}
		h->cc[r] = run_child("cache", (uint64_t)(h->o.rep_sec * 1000));
		settle(h->obs);
		h->ci[r] = cache_rate(h->pool, h->o.rep_sec);
	}
	bench_print_load(&load, "the starts");
}

static void hp_print(struct hp_bench *h)
{
	for (int s = 0; s < 2; s++) {
		h->sa[s] = bench_stat_of(h->att[s], h->o.reps);
		h->sr[s] = bench_stat_of(h->cre[s], h->o.reps);
		h->si[s] = bench_stat_of(h->inp[s], h->o.reps);
		h->sp[s] = bench_stat_of(h->prv[s], h->o.reps);
		printf("start %4lu MiB: attached process min %.2f median %.2f ms | in-process "
		       "min %.2f median %.2f ms | private pool min %.2f median %.2f ms\n",
		       (unsigned long)hp_sizes[s], h->sa[s].min, h->sa[s].median, h->si[s].min,
		       h->si[s].median, h->sp[s].min, h->sp[s].median);
		printf("start %4lu MiB: of it the create alone min %.2f median %.2f ms, the attach "
		       "median %.2f ms\n",
		       (unsigned long)hp_sizes[s], h->sr[s].min, h->sr[s].median,
		       h->sa[s].median - h->sr[s].median);
	}
	for (int s = 0; s < 2; s++)
		h->sal[s] = bench_stat_of(h->alone[s], h->o.reps);
	printf("attach alone (128 MiB start): 2.3 GiB service min %.2f median %.2f ms | 1 TiB "
	       "service min %.2f median %.2f ms\n",
	       h->sal[0].min, h->sal[0].median, h->sal[1].min, h->sal[1].median);
	h->shs = bench_stat_of(h->hs, h->o.reps);
	printf("handshake alone (a fresh process's socket, connect and HELLO round trip, no pool, "
	       "no mapping): min %.2f median %.2f ms; with the in-process create of 128 MiB "
	       "after it, %.2fx that create: the least an attach + create can be\n",
	       h->shs.min, h->shs.median, (h->shs.median + h->si[0].median) / h->si[0].median);
	h->sc = bench_stat_of(h->cc, h->o.reps);
	h->sci = bench_stat_of(h->ci, h->o.reps);
	printf("cache order-0 alloc+free: client pool median %.2f M/s | in-process median "
	       "%.2f M/s\n",
	       h->sc.median / 1e6, h->sci.median / 1e6);
}

/* Clients killed at random points: what the service had to take back, and how fast. */
static void hp_kills(struct hp_bench *h)
{
	struct gfa_hostpool_stat end;

	h->nk = kills(h->obs, h->o.quick ? 20 : 1000, &h->worst, &h->leaked, &h->nk_churn);
	settle(h->obs);
	end = service(h->obs);
	h->leaked += end.nr_frames - end.free_frames;
	printf("kills: %u (%u in churn rounds), every frame back within %.1f ms of its kill\n",
	       h->nk, h->nk_churn, h->worst);
}

static void hp_report(const struct hp_bench *h)
{
	const struct bench_stat *sa = h->sa, *si = h->si, *sp = h->sp;
	struct bench_result res;

	bench_goal(BENCH, "attach_vs_inproc_128m", sa[0].median / si[0].median, "<=", 1.5,
		   "attach + create in a fresh process / in-process create, 128 MiB");
	bench_goal(BENCH, "attach_vs_inproc_2g", sa[1].median / si[1].median, "<=", 1.5,
		   "the same at 2 GiB");
	bench_goal(BENCH, "vs_private_pool", sa[0].median / sp[0].median, "<=", 0.5,
		   "attach + create / private pool created, populated and a guest made, 128 MiB");
	bench_goal(BENCH, "vs_private_pool_2g", sa[1].median / sp[1].median, "<=", 0.5,
		   "the same at 2 GiB");
	bench_goal(BENCH, "cache_vs_inproc", h->sci.median / h->sc.median, "<=", 1.1,
		   "time per cached alloc+free, client pool / in-process pool");
	bench_goal(BENCH, "attach_tib_vs_2g", h->sal[1].median / h->sal[0].median, "<=", 1.2,
		   "the attach alone at a 1 TiB service / at the 2.3 GiB one (flat with size)");
	bench_result_init(&res, BENCH);
	bench_result_add(&res, "attach_vs_inproc_128m", "%.3f", sa[0].median / si[0].median);
	bench_result_add(&res, "attach_vs_inproc_2g", "%.3f", sa[1].median / si[1].median);
	bench_result_add(&res, "create_vs_inproc_128m", "%.3f", h->sr[0].median / si[0].median);
	bench_result_add(&res, "create_vs_inproc_2g", "%.3f", h->sr[1].median / si[1].median);
	bench_result_add(&res, "vs_private_pool", "%.3f", sa[0].median / sp[0].median);
	bench_result_add(&res, "vs_private_pool_2g", "%.3f", sa[1].median / sp[1].median);
	bench_result_add(&res, "cache_vs_inproc", "%.3f", h->sci.median / h->sc.median);
	bench_result_add(&res, "attach_tib_vs_2g", "%.3f", h->sal[1].median / h->sal[0].median);
	bench_result_add(&res, "handshake_ms", "%.3f", h->shs.median);
	bench_result_add(&res, "floor_vs_inproc_128m", "%.3f",
			 (h->shs.median + si[0].median) / si[0].median);
	bench_result_add(&res, "leaked_frames", "%lu", (unsigned long)h->leaked);
	bench_result_add(&res, "kill_points", "%u", h->nk);
	bench_result_add(&res, "kill_points_churn", "%u", h->nk_churn);
	bench_result_add(&res, "kill_back_ms_max", "%.1f", h->worst);
	bench_result_print(&res);
}

int main(int argc, char **argv)
{
	static struct hp_bench h;
	int ret;

	if (argc == 5 && !strcmp(argv[1], "--child"))
		return child_main(argv);
	ret = bench_parse_args(argc, argv, &h.o, 3, 0.2, 9, 0.5,
			       "A guest's start in a process attached to gfad against in-process "
			       "gfa_guest_create() and a private pool; the cache path; kills.");
	if (ret)
		return ret < 0 ? 2 : 0;
	if (h.o.reps > 64)
		h.o.reps = 64;
	bench_print_machine();
	hp_setup(&h);
	hp_measure(&h);
	hp_print(&h);
	hp_kills(&h);
	hp_report(&h);
	gfa_hostpool_detach(h.obs);
	gfa_backing_destroy(h.b);
	gfa_pool_destroy(h.pool);
	stop_gfad();
	return 0;
}
