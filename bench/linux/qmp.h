/* SPDX-License-Identifier: MIT */
/*
 * bench/linux's QMP client (bench/linux/qmp.c): the baseline QEMU's monitor socket,
 * over which the benchmark sets the guest's balloon.
 */
#ifndef GFA_BENCH_LINUX_QMP_H
#define GFA_BENCH_LINUX_QMP_H

/* Connect to the monitor at @path (retrying while QEMU starts) and leave its greeting
 * and capabilities negotiation behind: the socket, or -errno. */
int qmp_connect(const char *path);
/* Send @cmd (one JSON line) and wait for its "return" (events in between are skipped):
 * 0, -EINVAL (an "error" reply), -EIO, -EPROTO. */
int qmp_call(int fd, const char *cmd);

#endif
