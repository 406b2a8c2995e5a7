/*
 * A minimal stand-in for <criterion/criterion.h>, used only by `make tsan`.
 *
 * Why: Criterion's sandbox (BoxFort) maps a shared arena at a random address between
 * 0x2000'0000'0000 and 0x7f00'0000'0000, which ThreadSanitizer reserves for its shadow
 * memory, so every Criterion binary built with -fsanitize=thread aborts with "Could not
 * initialize inheritable arena" (upstream Snaipe/Criterion#274, open).  This header
 * keeps the test sources unchanged: the same Test() bodies and cr_assert_* checks run,
 * each test in a forked child with its timeout, and the run ends with Criterion's
 * synthesis line.  Only the subset of Criterion that gfa's tests use is provided.
 */
#ifndef GFA_CRITERION_SHIM_H
#define GFA_CRITERION_SHIM_H
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct criterion_test_extra_data {
	void (*init)(void);
	void (*fini)(void);
	int signal;
	int exit_code;
	bool disabled;
	const char *description;
	double timeout;
	void *data;
};

struct shim_test {
	const char *suite, *name;
	void (*fn)(void);
	struct criterion_test_extra_data *opts;
};

void shim_register(struct shim_test t);
void shim_fail(const char *file, int line, const char *expr, const char *fmt, ...)
	__attribute__((noreturn));
void shim_skip(const char *fmt, ...) __attribute__((noreturn));
void shim_log(const char *fmt, ...);

#define Test(suite, name, ...)                                                           \
	static void suite##_##name##_impl(void);                                         \
	static struct criterion_test_extra_data suite##_##name##_opts = { __VA_ARGS__ }; \
	__attribute__((constructor)) static void suite##_##name##_reg(void)              \
	{                                                                                \
		shim_register((struct shim_test){ #suite, #name, suite##_##name##_impl,  \
						  &suite##_##name##_opts });             \
	}                                                                                \
	static void suite##_##name##_impl(void)

#define SHIM_CHECK(cond, expr, ...)                                          \
	do {                                                                 \
		if (!(cond))                                                 \
			shim_fail(__FILE__, __LINE__, expr, "" __VA_ARGS__); \
	} while (0)

#define cr_assert(c, ...)            SHIM_CHECK((c), #c, __VA_ARGS__)
#define cr_expect(c, ...)            SHIM_CHECK((c), #c, __VA_ARGS__)
#define cr_assert_not(c, ...)        SHIM_CHECK(!(c), "!(" #c ")", __VA_ARGS__)
#define cr_assert_eq(a, b, ...)      SHIM_CHECK((a) == (b), #a " == " #b, __VA_ARGS__)
#define cr_assert_neq(a, b, ...)     SHIM_CHECK((a) != (b), #a " != " #b, __VA_ARGS__)
#define cr_assert_lt(a, b, ...)      SHIM_CHECK((a) < (b), #a " < " #b, __VA_ARGS__)
#define cr_assert_leq(a, b, ...)     SHIM_CHECK((a) <= (b), #a " <= " #b, __VA_ARGS__)
#define cr_assert_gt(a, b, ...)      SHIM_CHECK((a) > (b), #a " > " #b, __VA_ARGS__)
#define cr_assert_geq(a, b, ...)     SHIM_CHECK((a) >= (b), #a " >= " #b, __VA_ARGS__)
#define cr_assert_null(p, ...)       SHIM_CHECK((p) == NULL, #p " == NULL", __VA_ARGS__)
#define cr_assert_not_null(p, ...)   SHIM_CHECK((p) != NULL, #p " != NULL", __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...)  SHIM_CHECK(!strcmp((a), (b)), #a " streq " #b, __VA_ARGS__)
#define cr_assert_str_neq(a, b, ...) SHIM_CHECK(strcmp((a), (b)), #a " strneq " #b, __VA_ARGS__)
#define cr_assert_arr_eq(a, b, size, ...) \
	SHIM_CHECK(!memcmp((a), (b), (size)), "memcmp(" #a ", " #b ") == 0", __VA_ARGS__)
/* the shim stops a test at its first failed expectation, as at an assertion */
#define cr_expect_not       cr_assert_not
#define cr_expect_eq        cr_assert_eq
#define cr_expect_neq       cr_assert_neq
#define cr_expect_lt        cr_assert_lt
#define cr_expect_leq       cr_assert_leq
#define cr_expect_gt        cr_assert_gt
#define cr_expect_geq       cr_assert_geq
#define cr_expect_null      cr_assert_null
#define cr_expect_not_null  cr_assert_not_null
#define cr_expect_str_eq    cr_assert_str_eq
#define cr_expect_str_neq   cr_assert_str_neq
#define cr_expect_arr_eq    cr_assert_arr_eq
#define cr_assert_fail(...) shim_fail(__FILE__, __LINE__, "fail", "" __VA_ARGS__)
#define cr_skip_test(...)   shim_skip("" __VA_ARGS__)
#define cr_log_info(...)    shim_log(__VA_ARGS__)
#define cr_log_warn(...)    shim_log(__VA_ARGS__)
#define cr_log_error(...)   shim_log(__VA_ARGS__)
#endif
