/* The runner behind tests/shim/criterion/criterion.h (TSan builds only). */
#define _GNU_SOURCE /* FNM_EXTMATCH: Criterion-style @(a|b) filters */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <fnmatch.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define SHIM_MAX_TESTS 1024
#define SHIM_SKIP_CODE 77
static struct shim_test tests[SHIM_MAX_TESTS];
static int ntests;

void shim_register(struct shim_test t)
{
	if (ntests < SHIM_MAX_TESTS)
		tests[ntests++] = t;
}

/* the running test's .fini: Criterion runs it after a failed assertion too */
static void (*shim_fini)(void);

void shim_fail(const char *file, int line, const char *expr, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "[----] %s:%d: Assertion Failed\n[----]   %s\n[----]   ", file, line, expr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	if (shim_fini) {
		void (*fini)(void) = shim_fini;

		shim_fini = NULL; /* a failure inside .fini does not recurse */
		fini();
	}
	_exit(1);
}

void shim_skip(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "[SKIP] ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	_exit(SHIM_SKIP_CODE);
}

void shim_log(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "[----] ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
}

static FILE *captured;

void cr_redirect_stderr(void)
{
	fflush(stderr);
	captured = tmpfile();
	if (captured)
		dup2(fileno(captured), 2);
}

const char *shim_captured_stderr(void)
{
	static char buf[65536];
	size_t n;

	fflush(stderr);
	if (!captured)
		return "";
	rewind(captured);
	n = fread(buf, 1, sizeof(buf) - 1, captured);
	buf[n] = '\0';
	return buf;
}

static int run_one(struct shim_test *t)
{
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		alarm(t->opts->timeout > 0 ? (unsigned int)t->opts->timeout : 600);
		if (t->opts->init)
			t->opts->init();
		shim_fini = t->opts->fini;
		t->fn();
		if (t->opts->fini)
			t->opts->fini();
		_exit(0);
	}
	waitpid(pid, &status, 0);
	if (WIFSIGNALED(status))
		return t->opts->signal && WTERMSIG(status) == t->opts->signal ? 0 :
										-WTERMSIG(status);
	return WEXITSTATUS(status) == t->opts->exit_code ? 0 : WEXITSTATUS(status);
}

int main(int argc, char **argv)
{
	const char *filter = NULL;
	int pass = 0, fail = 0, crash = 0, skip = 0;

	for (int i = 1; i < argc; i++) {
		if (!strncmp(argv[i], "--filter=", 9))
			filter = argv[i] + 9;
		else if (!strcmp(argv[i], "--filter") && i + 1 < argc)
			filter = argv[++i];
	}
	for (int i = 0; i < ntests; i++) {
		char full[256];
		int rc;

		snprintf(full, sizeof(full), "%s/%s", tests[i].suite, tests[i].name);
		if ((filter && fnmatch(filter, full, FNM_EXTMATCH)) || tests[i].opts->disabled)
			continue;
		rc = run_one(&tests[i]);
		if (rc == SHIM_SKIP_CODE) {
			skip++;
			fprintf(stderr, "[SKIP] %s::%s\n", tests[i].suite, tests[i].name);
		} else if (rc == 0) {
			pass++;
			fprintf(stderr, "[PASS] %s::%s\n", tests[i].suite, tests[i].name);
		} else if (rc < 0) {
			crash++;
			fprintf(stderr, "[FAIL] %s::%s: CRASH (signal %d)\n", tests[i].suite,
				tests[i].name, -rc);
		} else {
			fail++;
			fprintf(stderr, "[FAIL] %s::%s (exit %d)\n", tests[i].suite, tests[i].name,
				rc);
		}
	}
	fprintf(stderr,
		"[====] Synthesis: Tested: %d | Passing: %d | Failing: %d | Crashing: %d \n",
		pass + fail + crash, pass, fail, crash);
	printf("%d passed, %d failed, %d skipped\n", pass, fail + crash, skip);
	return fail + crash ? 1 : 0;
}
