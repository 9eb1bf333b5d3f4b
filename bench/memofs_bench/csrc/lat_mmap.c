/* lat_mmap FILE SIZE ITERS [page|lmbench]: lmbench lat_mmap style. Writes FILE with SIZE bytes
 * (1 MiB writes of a pattern, then fsync), then ITERS + 1 times: mmap the whole file
 * (MAP_SHARED), touch it, munmap. The first cycle warms up and is not timed.
 *   page:    PROT_READ, read one byte of every page of the file (the default)
 *   lmbench: PROT_READ|PROT_WRITE, write one byte every 16 KiB in the first tenth of the
 *            mapping, as lmbench's lat_mmap does by default
 * Prints "<mean usecs per cycle> <min usecs> <max usecs> <write seconds>". */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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
	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: %s FILE SIZE ITERS [page|lmbench]\n", argv[0]);
		return 2;
	}
	int lmb = argc == 5 && strcmp(argv[4], "lmbench") == 0;
	if (argc == 5 && !lmb && strcmp(argv[4], "page") != 0) {
		fprintf(stderr, "unknown touch mode %s\n", argv[4]);
		return 2;
	}
	size_t size = strtoull(argv[2], NULL, 0);
	int iters = atoi(argv[3]);
	long page = sysconf(_SC_PAGESIZE);
	size_t chunk = 1 << 20;
	char *buf = malloc(chunk);
	for (size_t i = 0; i < chunk; i++)
		buf[i] = (char)(i * 7 + 1);

	double t0 = now();
	int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	for (size_t off = 0; off < size; off += chunk) {
		size_t n = size - off < chunk ? size - off : chunk;
		if (write(fd, buf, n) != (ssize_t)n) {
			perror("write");
			return 1;
		}
	}
	if (fsync(fd) != 0) {
		perror("fsync");
		return 1;
	}
	double wsecs = now() - t0;

	double total = 0, mn = 1e30, mx = 0;
	volatile unsigned long sum = 0;
	for (int i = 0; i <= iters; i++) {
		double a = now();
		char *p = mmap(NULL, size, lmb ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
		if (p == MAP_FAILED) {
			perror("mmap");
			return 1;
		}
		if (lmb)
			for (size_t off = 0; off < size / 10; off += 16 << 10)
				((volatile char *)p)[off] = (char)i;
		else
			for (size_t off = 0; off < size; off += page)
				sum += ((volatile char *)p)[off];
		munmap(p, size);
		double us = (now() - a) * 1e6;
		if (i == 0)
			continue;
		total += us;
		mn = us < mn ? us : mn;
		mx = us > mx ? us : mx;
	}
	close(fd);
	printf("%.3f %.3f %.3f %.6f\n", iters ? total / iters : 0, iters ? mn : 0, mx, wsecs);
	return 0;
}
