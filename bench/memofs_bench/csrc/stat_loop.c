/* stat_loop DIR NAME COUNT: chdir(DIR), then stat(NAME) COUNT times in one process.
 * NAME should not exist. Prints "<elapsed ns> <count> <misses>" (misses = ENOENT results). */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s DIR NAME COUNT\n", argv[0]);
		return 2;
	}
	if (chdir(argv[1]) != 0) {
		perror(argv[1]);
		return 1;
	}
	long n = atol(argv[3]), misses = 0;
	struct stat st;
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++) {
		if (stat(argv[2], &st) != 0) {
			if (errno != ENOENT) {
				perror("stat");
				return 1;
			}
			misses++;
		}
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	long long ns = (b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
	printf("%lld %ld %ld\n", ns, n, misses);
	return 0;
}
