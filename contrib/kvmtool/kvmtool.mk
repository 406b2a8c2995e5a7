# `make kvmtool`: kvmtool (lkvm) from the peers archive, twice: patched with
# contrib/kvmtool/gfa.patch and linked to libgfa as a VMM author would link it (libgfa
# staged by `make install` under build/kvmtool/prefix, found through pkg-config, its
# folder in lkvm's rpath), and unpatched, the baseline.  kvmtool is GPL-2.0: it is built
# beside libgfa, never into it (contrib/kvmtool/README.md).
KVMTOOL_TAR   := $(PEERS)/kvmtool-b48735e.tar.gz
KVMTOOL_FOUND := $(wildcard $(KVMTOOL_TAR))
KVMTOOL_DIR   := $(BUILD)/kvmtool
KVMTOOL_STAGE := $(abspath $(KVMTOOL_DIR)/prefix)
KVMTOOL_PC    := $(KVMTOOL_DIR)/prefix/usr/lib/pkgconfig/gfa.pc
KVMTOOL_LKVM  := $(KVMTOOL_DIR)/src/lkvm
KVMTOOL_BASE  := $(KVMTOOL_DIR)/base/lkvm
.PHONY: kvmtool
kvmtool: $(KVMTOOL_LKVM) $(KVMTOOL_BASE)
# bench/kvmtool.c runs both (make bench-kvmtool ARGS=--quick)
bench-kvmtool: kvmtool

$(KVMTOOL_PC): $(SO) $(A) $(MAN_STAMP) $(HEADERS) gfa.pc.in
	$(MAKE) install DESTDIR=$(KVMTOOL_STAGE) PREFIX=/usr
# (tar, patch, then kvmtool's own make: it needs no package beyond libc's headers)
$(KVMTOOL_LKVM): $(KVMTOOL_TAR) contrib/kvmtool/gfa.patch $(KVMTOOL_PC)
	rm -rf $(KVMTOOL_DIR)/src && mkdir -p $(KVMTOOL_DIR)/src
	tar xzf $(KVMTOOL_TAR) -C $(KVMTOOL_DIR)/src --strip-components=1
	patch -s -d $(KVMTOOL_DIR)/src -p1 < contrib/kvmtool/gfa.patch
	PKG_CONFIG_PATH=$(KVMTOOL_STAGE)/usr/lib/pkgconfig PKG_CONFIG_SYSROOT_DIR=$(KVMTOOL_STAGE) \
	    $(MAKE) -C $(KVMTOOL_DIR)/src lkvm GFA_LDFLAGS=-Wl,-rpath,$(KVMTOOL_STAGE)/usr/lib
$(KVMTOOL_BASE): $(KVMTOOL_TAR)
	rm -rf $(KVMTOOL_DIR)/base && mkdir -p $(KVMTOOL_DIR)/base
	tar xzf $(KVMTOOL_TAR) -C $(KVMTOOL_DIR)/base --strip-components=1
	$(MAKE) -C $(KVMTOOL_DIR)/base lkvm
