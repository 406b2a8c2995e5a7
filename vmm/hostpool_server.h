/* SPDX-License-Identifier: MIT */
/*
 * The host pool service (gfad): the message handler (hps_handle, no I/O, so a fuzz
 * target drives it) and the socket loop around it (hps_serve).  Not installed.
 */
#ifndef GFA_VMM_HOSTPOOL_SERVER_H
#define GFA_VMM_HOSTPOOL_SERVER_H
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <gfa/vmm.h>
#include "vmm/hostpool_proto.h"
#include "vmm/hostpool_state.h"

#define HPS_MAX_CLIENTS HPS_STATE_CLIENTS
#define HPS_MAX_ALLOW   32u

struct hps;
struct hps_client;

struct hps_config {
	struct gfa_pool *pool;
	struct gfa_backing *b; /* the pool's; its zone memfds go to the clients */
	uint32_t allow_uid[HPS_MAX_ALLOW], allow_gid[HPS_MAX_ALLOW];
	unsigned int nr_uid, nr_gid; /* none of either: only the service's own uid */
	bool quiet;                  /* no line on stderr per refusal */
	/* returns the free memory beyond the zones' release policy to the host and zeroes
	 * what clients give back (its idle scrub); NULL: the service zeroes while idle */
	struct gfa_host_return *hr;
	/*
	 * The state directory's table (gfad --state): leases and clients live in it, and
	 * hps_create() takes back what it records.  The pool then starts with every frame
	 * held by HPS_RESTORE_OWNER (hps_state_pool()).  NULL: nothing outlives the service.
	 */
	struct hps_state *state;
	bool state_found; /* the table was there: the free frames may hold old data */
};

/* The service's counters (HP_STAT) */
struct hps_stat {
	uint64_t v[HP_ST_NR];
};

#define HPS_RESTORE_OWNER (7ull << 56) /* a restored pool's frames before hps_create() */

/*
 * With cfg->state: the clients it records whose processes live are taken back, each
 * waiting for its HP_REJOIN with its leases and claims; the other leases are free.
 */
struct hps *hps_create(const struct hps_config *cfg);
/* Frees every client's leases first; with a state, leaves the table as it is. */
void hps_destroy(struct hps *s);
/* Whether a peer with these credentials is admitted (counted in HP_ST_DENIED if not). */
bool hps_admit(struct hps *s, uid_t uid, gid_t gid);
/* A connection admitted: NULL when the client table is full. */
struct hps_client *hps_client_new(struct hps *s, pid_t pid, uid_t uid);
/* A connection gone (EOF, error, malformed): every lease it held is free again. */
void hps_client_gone(struct hps *s, struct hps_client *c);
/*
 * One packet of len bytes from c.  Fills *reply (always a whole message) and up to
 * GFA_MAX_ZONES fds to send with it (*nr_fds; *close_fd, when >= 0, is one of them the
 * caller closes after sending).  Returns 0 (reply and go on), 1 (reply then close: a
 * refused or finished client) or a negative errno (malformed: close, no reply; counted).
 */
int hps_handle(struct hps *s, struct hps_client *c, const void *msg, size_t len,
	       struct hp_msg *reply, int *fds, unsigned int *nr_fds, int *close_fd);
void hps_stat(struct hps *s, struct hps_stat *st);
/* Frames leased to c now. */
uint64_t hps_client_leased(const struct hps_client *c);
/*
 * The pool and backing of a service with a state directory (gfad --state dir): zones
 * as cfg, their memory in the directory's files, every frame held by HPS_RESTORE_OWNER
 * for hps_create() to sort out; *state the table.  0 or -errno: hps_state_open()'s, or
 * the pool's or backing's.
 */
int hps_state_pool(const char *dir, const struct gfa_pool_config *cfg,
		   const struct gfa_backing_config *bc, struct hps_config *hc);

/* A listening SOCK_SEQPACKET socket at path (an old socket file there replaced), mode
 * applied to the file: its fd or -errno. */
int hps_listen(const char *path, mode_t mode);
/* Serve on listen_fd until *stop is set (a signal handler's): 0 or -errno. */
int hps_serve(struct hps *s, int listen_fd, volatile sig_atomic_t *stop);
#endif
