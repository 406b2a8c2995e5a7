// SPDX-License-Identifier: MIT
/* bench/linux's QMP client: one JSON object per line, read a byte at a time. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <json.h>
#include "bench/linux/qmp.h"

static json_object *qmp_read(int fd)
{
	static char buf[4096];
	size_t have = 0;

	while (have < sizeof(buf) - 1) {
		ssize_t n = read(fd, buf + have, 1);

		if (n <= 0)
			return NULL;
		if (buf[have++] == '\n')
			break;
	}
	buf[have] = '\0';
	return json_tokener_parse(buf);
}

int qmp_call(int fd, const char *cmd)
{
	size_t len = strlen(cmd);

	if (write(fd, cmd, len) != (ssize_t)len)
		return -EIO;
	for (;;) {
		json_object *o = qmp_read(fd), *v;
		int r = 1;

		if (!o)
			return -EPROTO;
		if (json_object_object_get_ex(o, "return", &v))
			r = 0;
		else if (json_object_object_get_ex(o, "error", &v))
			r = -EINVAL;
		json_object_put(o);
		if (r <= 0)
			return r;
	}
}

int qmp_connect(const char *path)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	json_object *greeting;
	int fd = -1, err;

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	for (int i = 0; i < 2000; i++) {
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		if (!connect(fd, (struct sockaddr *)&a, sizeof(a)))
			break;
		close(fd);
		fd = -1;
		usleep(10000);
	}
	if (fd < 0)
		return -ETIMEDOUT;
	greeting = qmp_read(fd);
	if (!greeting) {
		close(fd);
		return -EPROTO;
	}
	json_object_put(greeting);
	err = qmp_call(fd, "{\"execute\":\"qmp_capabilities\"}\n");
	if (err) {
		close(fd);
		return err;
	}
	return fd;
}
