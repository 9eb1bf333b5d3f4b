/* par_read DIR MODE THREADS SECONDS: THREADS threads pread() 4 KiB blocks at pseudo-random
 * offsets for SECONDS, from one shared file (MODE "same") or one file each ("many").
 * The files (8 MiB each) are created first. Prints "<elapsed ns> <reads>".
 * Mount the target with direct_io so that every read reaches the server. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define FILE_SIZE (8L << 20)
#define BLOCK 4096

static atomic_int stop;
static int fds[256];

struct worker {
	int fd;
	unsigned seed;
	long reads;
	pthread_t tid;
};

static void *run(void *arg)
{
	struct worker *w = arg;
	char buf[BLOCK];
	while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
		w->seed = w->seed * 1103515245u + 12345u;
		off_t off = (off_t)(w->seed % (FILE_SIZE / BLOCK)) * BLOCK;
		if (pread(w->fd, buf, BLOCK, off) != BLOCK) {
			perror("pread");
			exit(1);
		}
		w->reads++;
	}
	return NULL;
}

static int make_file(const char *name)
{
	int fd = open(name, O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0) {
		perror(name);
		exit(1);
	}
	char *buf = malloc(1 << 20);
	memset(buf, 'x', 1 << 20);
	for (long done = 0; done < FILE_SIZE; done += 1 << 20)
		if (write(fd, buf, 1 << 20) != 1 << 20) {
			perror("write");
			exit(1);
		}
	free(buf);
	return fd;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: %s DIR same|many THREADS SECONDS\n", argv[0]);
		return 2;
	}
	int same = strcmp(argv[2], "same") == 0, n = atoi(argv[3]);
	double secs = atof(argv[4]);
	if (n < 1 || n > 256 || chdir(argv[1]) != 0) {
		fprintf(stderr, "bad arguments\n");
		return 2;
	}
	for (int i = 0; i < n; i++) {
		char name[32];
		snprintf(name, sizeof name, "data.%d", same ? 0 : i);
		fds[i] = (same && i > 0) ? fds[0] : make_file(name);
	}
	struct worker w[256];
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < n; i++) {
		w[i] = (struct worker){ .fd = fds[i], .seed = 7u * i + 1 };
		pthread_create(&w[i].tid, NULL, run, &w[i]);
	}
	struct timespec nap = { (time_t)secs, (long)((secs - (time_t)secs) * 1e9) };
	nanosleep(&nap, NULL);
	atomic_store(&stop, 1);
	long total = 0;
	for (int i = 0; i < n; i++) {
		pthread_join(w[i].tid, NULL);
		total += w[i].reads;
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("%lld %ld\n", (b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec), total);
	return 0;
}
