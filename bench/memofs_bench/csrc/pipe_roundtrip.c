/* pipe_roundtrip ITERS [CPU_A CPU_B]: one byte sent back and forth between two processes over
 * two pipes, ITERS times; prints the mean microseconds per round trip. With CPUs, the parent
 * runs on CPU_A and the child on CPU_B (the same number: both on one CPU); without, the
 * scheduler places them, as it places a FUSE caller and the server thread that answers it.
 * Each round trip is two wake-ups of a task sleeping in read(2): the floor under the cost of
 * any FUSE request that a caller waits for on this machine. Exits 1 with a message on any
 * failure (a child that dies ends the parent's read with end-of-file, never a hang). */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what)
{
	perror(what);
	_exit(1);
}

static void pin(const char *cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(atoi(cpu), &set);
	if (sched_setaffinity(0, sizeof(set), &set) != 0)
		die("sched_setaffinity");
}

/* Reads the byte from `in` and writes it to `out`, `n` times, starting with a write if
 * `first`. */
static void bounce(int in, int out, long n, int first)
{
	char c = 'x';
	for (long i = 0; i < n; i++) {
		if (first && write(out, &c, 1) != 1)
			die("write");
		if (read(in, &c, 1) != 1) {
			fprintf(stderr, "pipe_roundtrip: the other side went away\n");
			_exit(1);
		}
		if (!first && write(out, &c, 1) != 1)
			die("write");
	}
}

int main(int argc, char **argv)
{
	if (argc != 2 && argc != 4) {
		fprintf(stderr, "usage: pipe_roundtrip ITERS [CPU_A CPU_B]\n");
		return 2;
	}
	long iters = atol(argv[1]);
	if (iters <= 0) {
		fprintf(stderr, "pipe_roundtrip: ITERS must be positive\n");
		return 2;
	}
	signal(SIGPIPE, SIG_IGN); /* a write to a side that went away fails with EPIPE */
	int to_child[2], to_parent[2];
	if (pipe(to_child) || pipe(to_parent))
		die("pipe");
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		close(to_child[1]);
		close(to_parent[0]);
		if (argc == 4)
			pin(argv[3]);
		bounce(to_child[0], to_parent[1], iters + 1000, 0);
		_exit(0);
	}
	close(to_child[0]);
	close(to_parent[1]);
	if (argc == 4)
		pin(argv[2]);
	bounce(to_parent[0], to_child[1], 1000, 1); /* warm-up */
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	bounce(to_parent[0], to_child[1], iters, 1);
	clock_gettime(CLOCK_MONOTONIC, &b);
	int status;
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "pipe_roundtrip: the child failed\n");
		return 1;
	}
	double us = ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / 1e3 / iters;
	printf("%.2f\n", us);
	return 0;
}
