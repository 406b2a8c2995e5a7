# gfa — guest frame allocator.  `make` builds libgfa.{so,a}, gfactl, examples, benchmarks.
# `make run` runs the main job (gfactl vmstart); `make test` runs the Criterion suite.
# The version is defined once, in include/gfa/gfa.h (GFA_VERSION_MAJOR/MINOR/PATCH): the
# file names, gfa.pc and the man pages take it from there, and `make check-api` holds
# libgfa.map's newest version node to it.
VERSION   := $(shell sed -n 's/^\#define GFA_VERSION_\(MAJOR\|MINOR\|PATCH\) *\([0-9]*\)$$/\2/p' \
		include/gfa/gfa.h | paste -sd.)
SOVERSION := 2
PREFIX    ?= /usr/local
DESTDIR   ?=
BUILD     ?= build
CC        ?= cc
SAN       ?=
# libgfa needs libnuma and liburing only; the reference VMM (refvmm/) adds libvirt and
# libxml2, and so do the tools, tests and benchmarks that link it.  json-c is for
# gfactl's snapshots (and the tests that read them): never libgfa's.
LIB_PKGS   := numa liburing
REF_PKGS   := libvirt libxml-2.0 json-c
PKG_CFLAGS := $(shell pkg-config --cflags $(LIB_PKGS) 2>/dev/null)
LIB_LIBS   := $(shell pkg-config --libs $(LIB_PKGS) 2>/dev/null)
REF_CFLAGS := $(shell pkg-config --cflags $(REF_PKGS) 2>/dev/null)
REF_LIBS   := $(shell pkg-config --libs $(REF_PKGS) 2>/dev/null)
# Criterion cannot start under TSan (Snaipe/Criterion#274): `make tsan` sets SHIM=1 to
# build the same tests against tests/shim, a minimal runner with Criterion's macros.
ifeq ($(SHIM),1)
TEST_CFLAGS := -Itests/shim
TEST_LIBS   :=
else
TEST_CFLAGS := $(shell pkg-config --cflags criterion 2>/dev/null)
TEST_LIBS   := $(shell pkg-config --libs criterion 2>/dev/null)
endif

OPT     ?= -O2 -g
CFLAGS  += $(OPT) -std=gnu11 -Wall -Wextra -Werror -fPIC -pthread -Iinclude -I. $(SAN) $(PKG_CFLAGS)
LDFLAGS += -pthread $(SAN)
LDLIBS  += $(LIB_LIBS) -lm
# what links the reference VMM: it, then libgfa, then both's libraries
REF_LDLIBS := $(REF_LIBS) $(LDLIBS)

LIB_SRC   := $(sort $(wildcard allocator/*.c numa/*.c vmm/*.c))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o)
# the same sources with GFA_BUG_ON compiled in, for the test binary only
# (docs/decisions.md, entry 19)
DEBUG_OBJ := $(LIB_SRC:%.c=$(BUILD)/debug/%.o)
REF_SRC   := $(sort $(wildcard refvmm/*.c))
REF_OBJ   := $(REF_SRC:%.c=$(BUILD)/%.o)
TEST_SRC  := $(sort $(wildcard tests/*.c)) $(if $(filter 1,$(SHIM)),tests/shim/shim_main.c)
TEST_OBJ  := $(TEST_SRC:%.c=$(BUILD)/%.o)
BENCH_SRC := $(filter-out bench/peer_llfree.c,$(sort $(wildcard bench/*.c)))
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/bench/%)
EX_SRC    := $(sort $(wildcard examples/*.c))
EX_BIN    := $(EX_SRC:examples/%.c=$(BUILD)/examples/%)
TOOL_SRC  := $(sort $(wildcard tools/*.c))
HEADERS   := $(filter-out include/gfa/refvmm.h,$(wildcard include/gfa/*.h))

SO      := $(BUILD)/libgfa.so.$(VERSION)
# one section 3 man page per public function, from its kernel-doc (tools/kernel_doc_man.py)
MAN_DIR   := $(BUILD)/man
MAN_STAMP := $(MAN_DIR)/.stamp
A       := $(BUILD)/libgfa.a
A_DEBUG := $(BUILD)/libgfa-debug.a
REF_A   := $(BUILD)/libgfa-refvmm.a
GFACTL  := $(BUILD)/gfactl
TESTBIN := $(BUILD)/tests/gfa-tests

.PHONY: all deps deps-test run linux test test-linux-cloud check asan tsan bench install install-refvmm clean tidy cppcheck \
        check-api format format-check \
        sanitized-test bench-buddy bench-pcp bench-thpscale bench-release bench-peer
# The memory checker a Linux guest runs from its initramfs (tools/linux-initramfs.sh):
# static, since the initramfs has no libraries; no sanitizer for the same reason.
LINUX_CHECKER := $(BUILD)/tests/linux/gfacheck
all: $(SO) $(A) $(REF_A) $(GFACTL) $(EX_BIN) $(BENCH_BIN) $(LINUX_CHECKER) $(MAN_STAMP)

$(LINUX_CHECKER): tests/linux/gfacheck.c
	@mkdir -p $(dir $@)
	$(CC) -static -O2 -g -std=gnu11 -Wall -Wextra -Werror -o $@ $<

deps:
	@tools/deps.sh build
deps-test:
	@tools/deps.sh test

LIB_HDRS := $(wildcard include/gfa/*.h common/*.h allocator/*.h numa/*.h vmm/*.h refvmm/*.h)
$(BUILD)/%.o: %.c $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@
$(BUILD)/debug/%.o: %.c $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -DGFA_DEBUG=1 -c $< -o $@
$(BUILD)/refvmm/%.o: refvmm/%.c $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(REF_CFLAGS) -c $< -o $@
$(BUILD)/tools/%.o: tools/%.c $(LIB_HDRS) $(wildcard tools/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(REF_CFLAGS) -c $< -o $@
$(BUILD)/bench/%.o: bench/%.c $(LIB_HDRS) $(wildcard bench/*.h bench/*/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(REF_CFLAGS) -c $< -o $@
$(BUILD)/examples/%.o: examples/%.c $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(REF_CFLAGS) -c $< -o $@

$(A): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(A_DEBUG): $(DEBUG_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
$(REF_A): $(REF_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^
# -z defs: every symbol libgfa uses is its own or its listed libraries' (libnuma, liburing)
$(SO): $(LIB_OBJ) libgfa.map
	$(CC) -shared -Wl,-soname,libgfa.so.$(SOVERSION) -Wl,--version-script=libgfa.map \
	    -Wl,-z,defs -Wl,--as-needed $(LDFLAGS) -o $@ $(LIB_OBJ) $(LDLIBS)
	ln -sf libgfa.so.$(VERSION) $(BUILD)/libgfa.so.$(SOVERSION)
	ln -sf libgfa.so.$(SOVERSION) $(BUILD)/libgfa.so

$(MAN_STAMP): tools/kernel_doc_man.py tools/fuzz_null_calls.py $(HEADERS)
	@rm -rf $(MAN_DIR) && mkdir -p $(MAN_DIR)
	python3 tools/kernel_doc_man.py $(MAN_DIR) $(VERSION) $(sort $(HEADERS))
	@touch $@

$(GFACTL): $(TOOL_SRC:%.c=$(BUILD)/%.o) $(REF_A) $(A)
	$(CC) $(LDFLAGS) -o $@ $^ $(REF_LDLIBS)
	ln -sf gfactl $(BUILD)/gfad
# A host pool client the tests fork and exec (tests/hostpool/client.c), each its own
# process attached to a gfad
HP_CLIENT := $(BUILD)/tests/gfa-hostpool-client
$(HP_CLIENT): tests/hostpool/client.c refvmm/guest_writers.h $(A) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(A) $(LDLIBS)
$(BUILD)/examples/%: $(BUILD)/examples/%.o $(REF_A) $(A)
	$(CC) $(LDFLAGS) -o $@ $^ $(REF_LDLIBS)
$(BUILD)/bench/%: $(BUILD)/bench/%.o $(REF_A) $(A)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(filter %.a,$^) $(REF_LDLIBS)
# A benchmark's parts, bench/NAME/*.c, link into bench/NAME (their objects go to
# bench-parts/: bench/NAME is the binary's name)
BENCH_PART_DIRS := $(sort $(dir $(wildcard bench/*/*.c)))
$(foreach d,$(BENCH_PART_DIRS),$(eval $(BUILD)/bench/$(notdir $(d:/=)): \
	$(patsubst bench/%.c,$(BUILD)/bench-parts/%.o,$(wildcard $(d)*.c))))
$(BUILD)/bench-parts/%.o: bench/%.c $(LIB_HDRS) $(wildcard bench/*.h bench/*/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(REF_CFLAGS) -c $< -o $@

# bench/peer runs LLFree beside gfa.  LLFree comes from the shared peers folder next to
# the clone, built with clang (its header needs it) into the build folder, behind the
# plain interface of bench/peer_llfree.c; without the folder bench/peer only says so.
PEERS      ?= $(CURDIR)/../shared/peers
LLFREE_TAR := $(wildcard $(PEERS)/llfree-c-970bb3d.tar.gz)
LLFREE_DIR := $(BUILD)/peers/llfree-c
ifneq ($(LLFREE_TAR),)
LLFREE_LIB := $(LLFREE_DIR)/build/libllc.a
$(LLFREE_LIB): $(LLFREE_TAR)
	rm -rf $(LLFREE_DIR) && mkdir -p $(BUILD)/peers && tar xzf $< -C $(BUILD)/peers
	CFLAGS=-DNO_LOG $(MAKE) -C $(LLFREE_DIR) DEBUG=0 CC=clang
$(BUILD)/bench/peer_llfree.o: bench/peer_llfree.c bench/peer_llfree.h $(LLFREE_LIB)
	@mkdir -p $(dir $@)
	clang -O2 -g -std=gnu11 -Wall -Wextra -Werror -I. -I$(LLFREE_DIR)/include -I$(LLFREE_DIR)/std \
	    -DSTD -DNO_LOG -c $< -o $@
$(BUILD)/bench/peer.o: CFLAGS += -DPEER_LLFREE=1 -DPEER_DIR='"$(PEERS)"'
$(BUILD)/bench/peer.o: $(LLFREE_LIB)
$(BUILD)/bench/peer: $(BUILD)/bench/peer.o $(BUILD)/bench/peer_llfree.o $(LLFREE_LIB) $(REF_A) $(A)
	$(CC) $(LDFLAGS) -o $@ $^ $(REF_LDLIBS)
# bench/scale runs LLFree's rand_9 beside gfa's at both sizes
$(BUILD)/bench/scale.o: CFLAGS += -DPEER_LLFREE=1 -DPEER_DIR='"$(PEERS)"'
$(BUILD)/bench/scale.o: $(LLFREE_LIB)
$(BUILD)/bench/scale: $(BUILD)/bench/peer_llfree.o $(LLFREE_LIB)
else
$(BUILD)/bench/peer.o: CFLAGS += -DPEER_LLFREE=0 -DPEER_DIR='"$(PEERS)"'
$(BUILD)/bench/scale.o: CFLAGS += -DPEER_LLFREE=0 -DPEER_DIR='"$(PEERS)"'
endif

$(BUILD)/tests/%.o: tests/%.c $(LIB_HDRS) $(wildcard tests/*.h tests/shim/criterion/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(REF_CFLAGS) $(TEST_CFLAGS) -c $< -o $@
$(TESTBIN): $(TEST_OBJ) $(REF_A) $(A_DEBUG) | $(GFACTL) $(HP_CLIENT)
	$(CC) $(LDFLAGS) -o $@ $^ $(REF_LDLIBS) $(TEST_LIBS)

# The README's test command.  Installs missing packages, builds everything, runs the suite.
test: deps-test
	$(MAKE) all $(TESTBIN) $(if $(KVMTOOL_FOUND),kvmtool)
	GFA_BUILD=$(BUILD) tools/run-tests.sh $(TESTBIN) $(TEST_ARGS)
check: test

# Suite linux_boot (in the QEMU harness where KVM cannot boot Linux) on Debian's cloud
# kernel flavour, fetched into $(BUILD)/cloud (tools/linux-cloud-kernel.sh, about 27 MB
# once): no MP table parser, so its CPUs and IOAPIC come from the VMM's ACPI tables.
# Without apt-get or the network it skips, except under CI=true.
# LINUX_TESTS (a Criterion pattern) runs some of its tests: CI runs the three that
# depend on the kernel's own view of the machine (CPUs, boot_params, PCI and INTx).
LINUX_TESTS ?=
LINUX_CLOUD_CI_TESTS := @(boots_to_init_with_two_vcpus*|a_bzimage_boots*|a_balloon_returns*)
test-linux-cloud: deps-test
	$(MAKE) all $(TESTBIN)
	@kv=$$(tools/linux-cloud-kernel.sh --out $(BUILD)/cloud); st=$$?; \
	  if [ $$st = 77 ] && [ "$${CI:-}" != true ]; then exit 0; fi; \
	  case $$kv in kernel=*) ;; *) echo "test-linux-cloud: no cloud kernel" >&2; exit 1 ;; esac; \
	  k=$${kv#kernel=}; k=$${k%% modules=*}; m=$${kv##* modules=}; \
	  GFA_LINUX_TEST_KERNEL=$$k GFA_LINUX_TEST_MODULES=$$m GFA_LINUX_TEST_FILTER='$(LINUX_TESTS)' \
	    GFA_BUILD=$(BUILD) tools/run-tests.sh $(TESTBIN) --filter 'linux_qemu/*' $(TEST_ARGS)

# Sanitizer builds run the same suite (KVM-in-QEMU cases skip themselves under sanitizers).
asan: deps-test
	$(MAKE) BUILD=build/asan SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined" \
	    TEST_ARGS="$(TEST_ARGS)" GFA_SANITIZER=asan sanitized-test
tsan: deps-test
	$(MAKE) BUILD=build/tsan SAN="-fsanitize=thread" OPT="-O1 -g" SHIM=1 \
	    TEST_ARGS="$(TEST_ARGS)" GFA_SANITIZER=tsan sanitized-test
# Criterion itself leaks one small block at exit; tests/lsan.supp names only it.
sanitized-test: $(SO) $(TESTBIN) $(GFACTL) $(EX_BIN) $(MAN_STAMP) $(LINUX_CHECKER)
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	    TSAN_OPTIONS="suppressions=$(CURDIR)/tests/tsan.supp halt_on_error=0 history_size=7" G_SLICE=always-malloc \
	    GFA_SANITIZER=$(GFA_SANITIZER) \
	    GFA_BUILD=$(BUILD) tools/run-tests.sh $(TESTBIN) $(TEST_ARGS)

# The README's main job.
run: deps-test
	$(MAKE) all
	$(GFACTL) vmstart $(ARGS)
	@echo "== the same VMs lazy (RAM taken at first touch; each start then touches all of it) =="
	$(GFACTL) vmstart --lazy --no-baseline --quiet $(LAZY_ARGS)

# Linux guests on gfa (gfactl linux); inside the QEMU harness where KVM cannot boot Linux
# (no /dev/kvm, or the software kvm_pvm), with shmem THP on there so KVM maps 2 MiB pages.
linux: deps-test
	$(MAKE) all
	tools/linux-initramfs.sh --out $(BUILD)/linux --checker $(LINUX_CHECKER) >/dev/null
	@if [ -e /sys/module/kvm_pvm ] || [ ! -w /dev/kvm ]; then \
	  tools/kvm-in-qemu.sh --build $(BUILD) --mem 2048 --timeout 900 -- sh -c \
	    'echo advise >/sys/kernel/mm/transparent_hugepage/shmem_enabled; $(GFACTL) linux $(ARGS)'; \
	else $(GFACTL) linux $(ARGS); fi

# (a static pattern rule: GNU make skips implicit rules for .PHONY targets)
BENCH_TARGETS := $(BENCH_SRC:bench/%.c=bench-%)
$(BENCH_TARGETS): bench-%: deps
	$(MAKE) $(BUILD)/bench/$* $(if $(filter hostpool,$*),$(HP_CLIENT))
	$(BUILD)/bench/$* $(ARGS)
bench: deps
	$(MAKE) all
	tools/bench-all.sh $(BUILD)

install: $(SO) $(A) $(MAN_STAMP)
	install -d $(DESTDIR)$(PREFIX)/include/gfa $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin \
	    $(DESTDIR)$(PREFIX)/share/man/man3
	install -m 644 $(MAN_DIR)/*.3 $(DESTDIR)$(PREFIX)/share/man/man3/
	install -m 644 $(HEADERS) $(DESTDIR)$(PREFIX)/include/gfa/
	install -m 755 $(SO) $(DESTDIR)$(PREFIX)/lib/
	ln -sf libgfa.so.$(VERSION) $(DESTDIR)$(PREFIX)/lib/libgfa.so.$(SOVERSION)
	ln -sf libgfa.so.$(SOVERSION) $(DESTDIR)$(PREFIX)/lib/libgfa.so
	install -m 644 $(A) $(DESTDIR)$(PREFIX)/lib/
	[ ! -x $(GFACTL) ] || install -m 755 $(GFACTL) $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' gfa.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/gfa.pc
# The reference VMM, for a VMM author who wants gfa's KVM wrapper or libvirt import too.
install-refvmm: install $(REF_A)
	install -m 644 include/gfa/refvmm.h $(DESTDIR)$(PREFIX)/include/gfa/
	install -m 644 $(REF_A) $(DESTDIR)$(PREFIX)/lib/
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' refvmm/gfa-refvmm.pc.in \
	    > $(DESTDIR)$(PREFIX)/lib/pkgconfig/gfa-refvmm.pc

# The public API's conventions (tools/check_api.py): kernel-doc, reserved words, GFA_E*
# names, the map against the headers, 100 columns in the library's sources and headers.
# And numa/ and vmm/ in layers (tools/check_layers.py): no file calls or includes its
# users (vmm/backing.c reaches the zeroer, the reporter and the host return by hooks);
# the guest's files are one object.
API_LINES := $(sort $(wildcard common/*.h allocator/*.[ch] numa/*.[ch] vmm/*.[ch])) \
	     include/gfa/refvmm.h
LAYER_SRC := $(sort $(wildcard numa/*.c vmm/*.c))
check-api:
	@python3 tools/check_api.py --map libgfa.map $(sort $(HEADERS)) --lines $(API_LINES)
	@python3 tools/check_layers.py --unit 'vmm/guest*.c' $(LAYER_SRC)

# The C style: .clang-format (the kernel's, 100 columns).  format-check fails on any line
# clang-format would change, naming it; format rewrites the files in place.  FORMAT_SRC
# may name other files (tests/test_format_check.c gives it a broken copy).
FORMAT_DIRS  := allocator numa vmm refvmm tools bench examples common include tests
# (tests/data holds checkers' fixtures: data, whatever their names)
FORMAT_SRC   ?= $(filter-out tests/data/%,$(sort $(foreach d,$(FORMAT_DIRS),\
		$(wildcard $(d)/*.[ch] $(d)/*/*.[ch] $(d)/*/*/*.[ch]))))
CLANG_FORMAT ?= clang-format
format-check:
	@command -v $(CLANG_FORMAT) >/dev/null || tools/deps.sh build
	@$(CLANG_FORMAT) --style=file:$(CURDIR)/.clang-format --dry-run --Werror $(FORMAT_SRC)
	@echo "format-check: $(words $(FORMAT_SRC)) files as .clang-format writes them"
format:
	@command -v $(CLANG_FORMAT) >/dev/null || tools/deps.sh build
	$(CLANG_FORMAT) --style=file:$(CURDIR)/.clang-format -i $(FORMAT_SRC)

tidy:
	clang-tidy $(LIB_SRC) $(REF_SRC) -- -std=gnu11 -DGFA_DEBUG=1 -Iinclude -I. $(PKG_CFLAGS) $(REF_CFLAGS)
cppcheck:
	cppcheck --quiet --inline-suppr --enable=warning,performance,portability --error-exitcode=1 -DGFA_DEBUG=1 -Iinclude -I. $(LIB_SRC) $(REF_SRC) $(TOOL_SRC)

clean:
	rm -rf build

# ---- fuzzing and soaking (tests/fuzz/) ----
# A libFuzzer target over the public API with a reference model (tests/fuzz/fuzz_api.c),
# built with clang over libgfa's sources.  `make fuzz FUZZ_SECONDS=N` runs it from the
# checked-in seed corpus (new inputs go to build/fuzz/corpus, crashes to build/fuzz/);
# a crash's input belongs in tests/fuzz/corpus/ as a regression input.
FUZZ_CC      ?= clang
FUZZ_SECONDS ?= 60
FUZZ_DIR     := build/fuzz
FUZZ_CFLAGS  := -O2 -g -std=gnu11 -Wall -Wextra -Werror -pthread -Iinclude -I. -DGFA_DEBUG=1 $(PKG_CFLAGS)
FUZZ_BIN     := $(FUZZ_DIR)/fuzz_api
FUZZ_COV_BIN := $(FUZZ_DIR)/fuzz_api_cov
FUZZ_OPTS    ?=
# The table of NULL calls, generated from the public headers: every public function is
# called with each of its pointer arguments NULL, or the generator says why not (the
# header's "Not covered" list) or stops the build.
FUZZ_NULL_H  := $(FUZZ_DIR)/fuzz_null_calls.h
FUZZ_NULL_SRC := include/gfa/allocator.h include/gfa/numa.h include/gfa/vmm.h
.PHONY: fuzz fuzz-build fuzz-cov soak soak-hostpool
$(FUZZ_NULL_H): tools/fuzz_null_calls.py $(FUZZ_NULL_SRC)
	@mkdir -p $(dir $@)
	python3 tools/fuzz_null_calls.py $@ $(FUZZ_NULL_SRC)
$(FUZZ_BIN): tests/fuzz/fuzz_api.c tests/fuzz/ignore.txt $(FUZZ_NULL_H) $(LIB_SRC) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -I$(FUZZ_DIR) -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	    -fsanitize-ignorelist=tests/fuzz/ignore.txt -fsanitize-coverage-ignorelist=tests/fuzz/ignore.txt \
	    -o $@ tests/fuzz/fuzz_api.c $(LIB_SRC) $(LIB_LIBS) -lm
# the same target with clang's source coverage, to run the corpus through
$(FUZZ_COV_BIN): tests/fuzz/fuzz_api.c $(FUZZ_NULL_H) $(LIB_SRC) $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -I$(FUZZ_DIR) -fsanitize=fuzzer -fprofile-instr-generate -fcoverage-mapping \
	    -o $@ tests/fuzz/fuzz_api.c $(LIB_SRC) $(LIB_LIBS) -lm
# The host pool service's message handler, with a model of every lease
# (tests/fuzz/fuzz_hostpool.c); `make fuzz` runs it after fuzz_api, as long
FUZZ_HP_BIN  := $(FUZZ_DIR)/fuzz_hostpool
$(FUZZ_HP_BIN): tests/fuzz/fuzz_hostpool.c $(LIB_SRC) tests/fuzz/fuzz_input.h $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	    -o $@ tests/fuzz/fuzz_hostpool.c $(LIB_SRC) $(LIB_LIBS) -lm
# Its restart (gfad --state) from a damaged table, with a model of what is taken back
# (tests/fuzz/fuzz_hostpool_restore.c); its state directory is in /dev/shm
FUZZ_HPR_BIN := $(FUZZ_DIR)/fuzz_hostpool_restore
$(FUZZ_HPR_BIN): tests/fuzz/fuzz_hostpool_restore.c $(LIB_SRC) tests/fuzz/fuzz_input.h $(LIB_HDRS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	    -o $@ tests/fuzz/fuzz_hostpool_restore.c $(LIB_SRC) $(LIB_LIBS) -lm
fuzz-build: deps-test $(FUZZ_BIN) $(FUZZ_HP_BIN) $(FUZZ_HPR_BIN)
fuzz: fuzz-build
	@mkdir -p $(FUZZ_DIR)/corpus $(FUZZ_DIR)/corpus_hostpool
	$(FUZZ_BIN) -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 -artifact_prefix=$(FUZZ_DIR)/ \
	    $(FUZZ_OPTS) $(FUZZ_DIR)/corpus tests/fuzz/corpus
	$(FUZZ_HP_BIN) -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_DIR)/hostpool- $(FUZZ_OPTS) $(FUZZ_DIR)/corpus_hostpool \
	    tests/fuzz/corpus_hostpool
	@mkdir -p $(FUZZ_DIR)/corpus_restore
	$(FUZZ_HPR_BIN) -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_DIR)/restore- $(FUZZ_OPTS) $(FUZZ_DIR)/corpus_restore; \
	    rc=$$?; rm -rf /dev/shm/gfa-fuzz-restore-*; exit $$rc
# line coverage of allocator/ and vmm/ from the seed corpus and what fuzzing added
fuzz-cov: deps-test $(FUZZ_COV_BIN)
	@mkdir -p $(FUZZ_DIR)/corpus
	LLVM_PROFILE_FILE=$(FUZZ_DIR)/fuzz.profraw $(FUZZ_COV_BIN) -runs=0 $(FUZZ_DIR)/corpus tests/fuzz/corpus
	llvm-profdata merge -sparse $(FUZZ_DIR)/fuzz.profraw -o $(FUZZ_DIR)/fuzz.profdata
	llvm-cov report $(FUZZ_COV_BIN) -instr-profile=$(FUZZ_DIR)/fuzz.profdata allocator vmm
# The multi-threaded stress (tests/test_xstress.c, xstress/soak) for SOAK_SECONDS under
# ASan+UBSan, then under TSan: for the long runs CI has no time for.  Its RESULT lines
# give operations, frames moved, checks and violations.
SOAK_SECONDS ?= 600
soak:
	GFA_XSTRESS_SOAK_SECS=$(SOAK_SECONDS) $(MAKE) asan TEST_ARGS="--filter 'xstress/soak'"
	GFA_XSTRESS_SOAK_SECS=$(SOAK_SECONDS) $(MAKE) tsan TEST_ARGS="--filter 'xstress/soak'"
# Eight VMM processes on one gfad churning for SOAK_SECONDS (tests/test_hostpool.c,
# hostpool/eight_clients_churn_and_lose_nothing; the suite runs it for 15 s).
soak-hostpool:
	GFA_HOSTPOOL_SOAK_SECS=$(SOAK_SECONDS) $(MAKE) test \
	    TEST_ARGS="--filter 'hostpool/eight_clients_churn*' --verbose"

# ---- kvmtool on gfa (contrib/kvmtool/) ----
include contrib/kvmtool/kvmtool.mk
