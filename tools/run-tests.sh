#!/usr/bin/env bash
# Runs the test binary given as $1 with the rest of the arguments, keeps its output in
# $GFA_BUILD/test.log, and when it fails prints its failing tests and assertions again at
# the end: a CI log is read from its tail, and with -j2 the failure is often far above it.
set -uo pipefail
log="${GFA_BUILD:-build}/test.log"
mkdir -p "$(dirname "$log")"
"$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" != 0 ]; then
	echo "== run-tests: exit $rc; the failures (all of them in $log):"
	grep -E '^\[(FAIL|----)\]|Assertion|ERROR: .*Sanitizer|WARNING: ThreadSanitizer' "$log" | tail -60
fi
exit "$rc"
