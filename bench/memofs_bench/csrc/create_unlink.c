/* create_unlink DIR N: in DIR (which must be empty), create N empty files (open with
 * O_CREAT|O_EXCL|O_WRONLY, then close), then unlink them all, in creation order.
 * Prints "<create seconds> <unlink seconds>". Every call's result is checked. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s DIR N\n", argv[0]);
		return 2;
	}
	long n = atol(argv[2]);
	int dir = open(argv[1], O_RDONLY | O_DIRECTORY);
	if (dir < 0 || n <= 0) {
		perror(argv[1]);
		return 1;
	}
	char name[32];
	double t0 = now();
	for (long i = 0; i < n; i++) {
		snprintf(name, sizeof name, "f%ld", i);
		int fd = openat(dir, name, O_CREAT | O_EXCL | O_WRONLY, 0644);
		if (fd < 0 || close(fd) != 0) {
			perror(name);
			return 1;
		}
	}
	double t1 = now();
	for (long i = 0; i < n; i++) {
		snprintf(name, sizeof name, "f%ld", i);
		if (unlinkat(dir, name, 0) != 0) {
			perror(name);
			return 1;
		}
	}
	double t2 = now();
	printf("%.6f %.6f\n", t1 - t0, t2 - t1);
	return 0;
}
