// SPDX-License-Identifier: MIT
/* KVM binary statistics of a VM or a vCPU, looked up by name (refvmm/kvm_internal.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "refvmm/kvm_internal.h"

static int pread_full(int fd, void *buf, size_t len, off_t off)
{
	ssize_t n = pread(fd, buf, len, off);

	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EIO;
}

/*
 * Look @name up in a KVM stats fd: header, then num_desc descriptors of
 * sizeof(struct kvm_stats_desc) + name_size bytes each, then the data block.
 */
static int stats_fd_lookup(int sfd, const char *name, uint64_t *val)
{
	struct kvm_stats_header hdr;
	size_t desc_size;
	char *descs;
	int r;

	r = pread_full(sfd, &hdr, sizeof(hdr), 0);
	if (r)
		return r;
	if (hdr.name_size == 0 || hdr.num_desc > 100000)
		return -EIO;
	desc_size = sizeof(struct kvm_stats_desc) + hdr.name_size;
	descs = malloc(desc_size * hdr.num_desc);
	if (!descs)
		return -ENOMEM;
	r = pread_full(sfd, descs, desc_size * hdr.num_desc, hdr.desc_offset);
	if (r)
		goto out;
	r = -ENOENT;
	for (uint32_t i = 0; i < hdr.num_desc; i++) {
		struct kvm_stats_desc *d = (void *)(descs + i * desc_size);

		if (strnlen(d->name, hdr.name_size) == hdr.name_size || strcmp(d->name, name) != 0)
			continue;
		if (d->size != 1) {
			r = -EINVAL; /* a histogram: several values */
			break;
		}
		r = pread_full(sfd, val, sizeof(*val), (off_t)hdr.data_offset + d->offset);
		break;
	}
out:
	free(descs);
	return r;
}

static int stats_lookup(int owner_fd, int check_fd, const char *name, uint64_t *val)
{
	int sfd, r;

	if (kvm_ioctl(check_fd, KVM_CHECK_EXTENSION, KVM_CAP_BINARY_STATS_FD) <= 0)
		return -EOPNOTSUPP;
	sfd = kvm_ioctl(owner_fd, KVM_GET_STATS_FD, 0);
	if (sfd < 0)
		return sfd == -ENOTTY || sfd == -EINVAL ? -EOPNOTSUPP : sfd;
	r = stats_fd_lookup(sfd, name, val);
	close(sfd);
	return r;
}

int gfa_kvm_vm_stat(struct gfa_kvm_vm *vm, const char *name, uint64_t *val)
{
	if (!vm || !name || !val)
		return -EFAULT;
	return stats_lookup(vm->fd, vm->fd, name, val);
}

int gfa_kvm_vcpu_stat(struct gfa_kvm_vcpu *vcpu, const char *name, uint64_t *val)
{
	if (!vcpu || !name || !val)
		return -EFAULT;
	return stats_lookup(vcpu->fd, vcpu->vm->fd, name, val);
}
