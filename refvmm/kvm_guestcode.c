// SPDX-License-Identifier: MIT
/*
 * The gfa test guest: 64-bit machine code that writes and verifies a pattern over
 * a guest-physical range and reports over port IO, and the host side of its
 * protocol (see "The test guest" in include/gfa/refvmm.h).
 *
 * The bytes were assembled from the listing in the comments (GNU as, Intel
 * syntax, .code64) and are position independent, so the code runs at any GPA the
 * identity map covers.  Registers on entry: rdi = start, rsi = end, rdx = seed,
 * rcx = flags.  No stack, no memory outside [start, end) and the code itself.
 */
#include <errno.h>
#include <string.h>

#include <gfa/refvmm.h>

const uint8_t gfa_kvm_test_guest_code[] = {
	/* 0x00 */ 0x49, 0x89, 0xd0,             /* mov  r8, rdx       ; seed        */
	/* 0x03 */ 0x49, 0x89, 0xca,             /* mov  r10, rcx      ; flags       */
	/* 0x06 */ 0x41, 0xf6, 0xc2, 0x01,       /* test r10b, FILL                  */
	/* 0x0a */ 0x74, 0x2b,                   /* jz   verify_maybe  ; -> 0x37     */
	/* 0x0c */ 0x49, 0x89, 0xfb,             /* mov  r11, rdi      ; p = start   */
	/* 0x0f */ 0x45, 0x31, 0xc9,             /* xor  r9d, r9d      ; sum = 0     */
						 /* fill: */
	/* 0x12 */ 0x49, 0x39, 0xf3,             /* cmp  r11, rsi                    */
	/* 0x15 */ 0x73, 0x15,                   /* jae  filled        ; -> 0x2c     */
	/* 0x17 */ 0x4c, 0x89, 0xd8,             /* mov  rax, r11                    */
	/* 0x1a */ 0x4c, 0x31, 0xc0,             /* xor  rax, r8       ; p ^ seed    */
	/* 0x1d */ 0x49, 0x89, 0x03,             /* mov  [r11], rax                  */
	/* 0x20 */ 0x49, 0xd1, 0xc1,             /* rol  r9, 1                       */
	/* 0x23 */ 0x49, 0x01, 0xc1,             /* add  r9, rax                     */
	/* 0x26 */ 0x49, 0x83, 0xc3, 0x08,       /* add  r11, 8                      */
	/* 0x2a */ 0xeb, 0xe6,                   /* jmp  fill          ; -> 0x12     */
						 /* filled: */
	/* 0x2c */ 0x4c, 0x89, 0xc8,             /* mov  rax, r9                     */
	/* 0x2f */ 0xe7, 0x10,                   /* out  RESULT_LO, eax              */
	/* 0x31 */ 0x48, 0xc1, 0xe8, 0x20,       /* shr  rax, 32                     */
	/* 0x35 */ 0xe7, 0x11,                   /* out  RESULT_HI, eax              */
						 /* verify_maybe: */
	/* 0x37 */ 0x41, 0xf6, 0xc2, 0x02,       /* test r10b, VERIFY                */
	/* 0x3b */ 0x74, 0x37,                   /* jz   done          ; -> 0x74     */
	/* 0x3d */ 0xb8, 0x01, 0x00, 0x00, 0x00, /* mov  eax, 1                      */
	/* 0x42 */ 0xe7, 0x12,                   /* out  CHECKPOINT, eax             */
						 /* verify: */
	/* 0x44 */ 0x49, 0x89, 0xfb,             /* mov  r11, rdi                    */
	/* 0x47 */ 0x45, 0x31, 0xc9,             /* xor  r9d, r9d      ; mismatches  */
						 /* vloop: */
	/* 0x4a */ 0x49, 0x39, 0xf3,             /* cmp  r11, rsi                    */
	/* 0x4d */ 0x73, 0x14,                   /* jae  vdone         ; -> 0x63     */
	/* 0x4f */ 0x4c, 0x89, 0xd8,             /* mov  rax, r11                    */
	/* 0x52 */ 0x4c, 0x31, 0xc0,             /* xor  rax, r8                     */
	/* 0x55 */ 0x49, 0x3b, 0x03,             /* cmp  rax, [r11]                  */
	/* 0x58 */ 0x74, 0x03,                   /* je   vnext         ; -> 0x5d     */
	/* 0x5a */ 0x49, 0xff, 0xc1,             /* inc  r9                          */
						 /* vnext: */
	/* 0x5d */ 0x49, 0x83, 0xc3, 0x08,       /* add  r11, 8                      */
	/* 0x61 */ 0xeb, 0xe7,                   /* jmp  vloop         ; -> 0x4a     */
						 /* vdone: */
	/* 0x63 */ 0x4c, 0x89, 0xc8,             /* mov  rax, r9                     */
	/* 0x66 */ 0xe7, 0x10,                   /* out  RESULT_LO, eax              */
	/* 0x68 */ 0x48, 0xc1, 0xe8, 0x20,       /* shr  rax, 32                     */
	/* 0x6c */ 0xe7, 0x11,                   /* out  RESULT_HI, eax              */
	/* 0x6e */ 0x41, 0xf6, 0xc2, 0x04,       /* test r10b, LOOP                  */
	/* 0x72 */ 0x75, 0xd0,                   /* jnz  verify        ; -> 0x44     */
						 /* done: */
	/* 0x74 */ 0x31, 0xc0,                   /* xor  eax, eax                    */
	/* 0x76 */ 0xe7, 0x13,                   /* out  DONE, eax                   */
	/* 0x78 */ 0xf4,                         /* hlt                              */
	/* 0x79 */ 0xeb, 0xf9,                   /* jmp  done          ; -> 0x74     */
};

const size_t gfa_kvm_test_guest_size = sizeof(gfa_kvm_test_guest_code);

int gfa_kvm_test_guest_load(struct gfa_kvm_vm *vm, uint64_t code_gpa)
{
	void *hva;

	if (!vm)
		return -EFAULT;
	hva = gfa_kvm_gpa_to_hva(vm, code_gpa, sizeof(gfa_kvm_test_guest_code));
	if (!hva)
		return -EFAULT;
	memcpy(hva, gfa_kvm_test_guest_code, sizeof(gfa_kvm_test_guest_code));
	return 0;
}

int gfa_kvm_test_guest_enter(struct gfa_kvm_vcpu *vcpu, uint64_t code_gpa, uint64_t start,
			     uint64_t end, uint64_t seed, uint32_t flags)
{
	const uint32_t known = GFA_KVM_TEST_FILL | GFA_KVM_TEST_VERIFY | GFA_KVM_TEST_LOOP;
	struct gfa_kvm_entry entry = {
		.rip = code_gpa,
		.args = { start, end, seed, flags },
	};

	if (!vcpu)
		return -EFAULT;
	if ((start | end) & 7 || start > end || flags & ~known)
		return -EINVAL;
	return gfa_kvm_vcpu_enter_long_mode(vcpu, &entry);
}

uint64_t gfa_kvm_test_pattern_sum(uint64_t start, uint64_t end, uint64_t seed)
{
	uint64_t sum = 0;

	for (uint64_t p = start; p < end; p += 8) {
		uint64_t v = p ^ seed;

		sum = ((sum << 1) | (sum >> 63)) + v; /* rol 1, add: as the guest */
	}
	return sum;
}

/* A completed 64-bit result: store it, publish the count, tell the callback. */
static int test_result(struct gfa_kvm_vcpu *vcpu, struct gfa_kvm_test_ctx *t, uint64_t v)
{
	unsigned int n = t->nr_results;

	if (n < GFA_KVM_TEST_MAX_RESULTS)
		t->results[n] = v;
	__atomic_store_n(&t->nr_results, n + 1, __ATOMIC_RELEASE);
	return t->on_result ? t->on_result(vcpu, v, t->arg) : GFA_KVM_IO_CONTINUE;
}

int gfa_kvm_test_io(struct gfa_kvm_vcpu *vcpu, const struct gfa_kvm_io *io, void *ctx)
{
	struct gfa_kvm_test_ctx *t = ctx;
	uint32_t v;

	if (!t || !io)
		return -EFAULT;
	if (!io->out || io->size != 4 || io->count != 1)
		return -EPROTO;
	v = gfa_kvm_io_value(io);
	switch (io->port) {
	case GFA_KVM_PORT_RESULT_LO:
		t->lo = v;
		t->have_lo = true;
		return GFA_KVM_IO_CONTINUE;
	case GFA_KVM_PORT_RESULT_HI:
		if (!t->have_lo)
			return -EPROTO;
		t->have_lo = false;
		return test_result(vcpu, t, (uint64_t)v << 32 | t->lo);
	case GFA_KVM_PORT_CHECKPOINT:
		t->checkpoint = v;
		return t->on_checkpoint ? t->on_checkpoint(vcpu, v, t->arg) : GFA_KVM_IO_STOP;
	case GFA_KVM_PORT_DONE:
		t->done = true;
		t->status = v;
		return GFA_KVM_IO_CONTINUE;
	default:
		return -EPROTO;
	}
}
