/* SPDX-License-Identifier: MIT */
/*
 * The host pool protocol between gfad (vmm/hostpool_server.c) and its clients
 * (vmm/hostpool.c), over an AF_UNIX SOCK_SEQPACKET socket: one message a packet, every
 * message one fixed size, each side's packets checked whole before any is acted on.
 * A lease is one order-9 block (2 MiB): the unit a guest's range is backed by, and few
 * enough per guest that a 2 GiB start is four round trips.  Not installed.
 */
#ifndef GFA_VMM_HOSTPOOL_PROTO_H
#define GFA_VMM_HOSTPOOL_PROTO_H
#include <stdint.h>

#define HP_MAGIC          0x68616667u /* "gfah" little endian */
#define HP_VERSION        2u          /* 2: claims */
#define HP_MAX_PFNS       256u        /* leases per message: 512 MiB */
#define HP_LEASE_ORDER    9u
#define HP_LEASE_FRAMES   (1ull << HP_LEASE_ORDER)
#define HP_PFN_DIRTY      1ull /* lease reply: the block may hold data */
#define HP_HELLO_REJOIN   1ull /* HELLO reply arg[1]: after a restart, HP_REJOIN takes us back */
#define HP_HELLO_LEASES   2ull /* HELLO reply arg[1]: the service answers HP_LEASES */
#define HP_LEASE_SHRINKER 1ull /* lease arg[1]: send our shrinker's eventfd with the reply */

enum hp_type {
	HP_HELLO = 1, /* -> zones (pfn[3z] start, [3z + 1] frames, [3z + 2] node), arg[0] id; the
			 * zone memfds ride along (SCM_RIGHTS) */
	HP_LEASE,     /* zone, count, arg[1] HP_LEASE_SHRINKER or 0 -> count pfns
		       * (| HP_PFN_DIRTY); fewer when short, and then arg[1] the other clients
		       * asked to shrink.  With HP_LEASE_SHRINKER the client's shrinker rides
		       * along: an eventfd the service adds to when another client's lease
		       * falls short, asking this one to compact its zones and give back the
		       * blocks that frees (a gfad that predates it ignores the bit) */
	HP_RETURN,    /* count pfns -> result; all or none, each must be the client's */
	HP_STAT,      /* -> the service's counters (arg[], pfn[]) and result: its check;
			 * a memfd with the text (buddyinfo, pagetypeinfo, vmstat) rides along */
	HP_REFUSED,   /* service -> client only: not admitted (result) then closed */
	HP_CLAIM,     /* zone, arg[0] frames -> result: gfa_zone_claim() for the client */
	HP_UNCLAIM,   /* zone -> arg[0] the frames it did not use, or result */
	HP_REJOIN,    /* instead of HELLO, to a restarted service that keeps its state
			 * (HELLO's arg[1] HP_HELLO_REJOIN): arg[0] the client's id -> HELLO's
			 * reply, arg[2] the frames leased to it; result GFA_ENOTFOUND when the
			 * service holds nothing for it (it was given up, not restarted) */
	HP_LEASES,    /* arg[0] a block number to start at -> count pfns of the client's
		       * leases from there, arg[0] where to go on, arg[1] 1 when that was
		       * the last (only to a service whose HELLO set HP_HELLO_LEASES) */
	HP_NR_TYPES
};

struct hp_msg {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint32_t seq;   /* a reply carries its request's */
	int32_t result; /* replies: 0 or a negative errno; requests: 0 */
	uint32_t zone;
	uint32_t count; /* pfn[] entries used; the rest are 0 */
	uint64_t arg[6];
	uint64_t pfn[HP_MAX_PFNS];
};

/* HP_STAT's arg[] and pfn[] slots */
enum hp_stat_slot {
	HP_ST_FRAMES,
	HP_ST_FREE,
	HP_ST_LEASED,
	HP_ST_CLIENTS,
	HP_ST_CLIENTS_TOTAL,
	HP_ST_MALFORMED,
	HP_ST_REFUSED,
	HP_ST_DENIED,
	HP_ST_LEASE_MSGS,
	HP_ST_RETURN_MSGS,
	HP_ST_GONE_FRAMES,
	HP_ST_MINE,
	HP_ST_DIRTY,
	HP_ST_CLAIMED,  /* all clients' claims, every zone */
	HP_ST_RESTORED, /* clients a restart took back, waiting for their HP_REJOIN */
	HP_ST_REJOINED, /* HP_REJOINs taken */
	HP_ST_NR
};

/* The fixed part of a message is checked the same way on both sides. */
static inline int hp_msg_valid(const struct hp_msg *m)
{
	if (m->magic != HP_MAGIC || m->version != HP_VERSION)
		return 0;
	if (!m->type || m->type >= HP_NR_TYPES || m->count > HP_MAX_PFNS)
		return 0;
	for (uint32_t i = m->count; i < HP_MAX_PFNS; i++)
		if (m->pfn[i])
			return 0;
	return 1;
}
#endif
