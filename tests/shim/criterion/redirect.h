/* Stand-in for <criterion/redirect.h> under `make tsan` (see criterion.h here). */
#ifndef GFA_CRITERION_SHIM_REDIRECT_H
#define GFA_CRITERION_SHIM_REDIRECT_H
#include <criterion/criterion.h>

/* Send this test's stderr to a temporary file (a .init fixture). */
void cr_redirect_stderr(void);
/* What the test wrote to stderr since cr_redirect_stderr (static buffer). */
const char *shim_captured_stderr(void);

#define cr_assert_stderr_eq_str(s, ...) \
	SHIM_CHECK(!strcmp(shim_captured_stderr(), (s)), "stderr == " #s, __VA_ARGS__)
#endif
