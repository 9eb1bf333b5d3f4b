/* fifo_messaging DIR GROUPS LOOPS: perf bench sched messaging over named FIFOs in DIR.
 * Each group has 20 receivers, each owning a FIFO DIR/fifo-G-R, and 20 senders; every sender
 * writes LOOPS messages of 100 bytes to every receiver of its group. All processes are forked
 * and wait on a start pipe; the clock runs from the start signal until every process has
 * exited, and includes opening the FIFOs (a path lookup on the filesystem under test).
 * Prints "<seconds>". */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NUM_FDS 20
#define DATASIZE 100

static const char *dir;
static int loops;

static void fifo_path(char *buf, size_t n, int g, int r)
{
	snprintf(buf, n, "%s/fifo-%d-%d", dir, g, r);
}

static void die(const char *what)
{
	perror(what);
	_exit(1);
}

static void wait_start(int ready_w, int wake_r)
{
	char c = 'R';
	if (write(ready_w, &c, 1) != 1)
		die("ready");
	if (read(wake_r, &c, 1) != 0)	/* returns 0 when the parent closes the write end */
		die("wakeup");
}

static void receiver(int g, int r)
{
	char path[4096], data[DATASIZE];
	fifo_path(path, sizeof path, g, r);
	/* O_RDWR never blocks on a FIFO and keeps it open for all senders */
	int fd = open(path, O_RDWR);
	if (fd < 0)
		die(path);
	long left = (long)NUM_FDS * loops * DATASIZE;
	while (left > 0) {
		ssize_t n = read(fd, data, left < DATASIZE ? left : DATASIZE);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("receiver read");
		left -= n;
	}
	close(fd);
}

static void sender(int g)
{
	char path[4096], data[DATASIZE];
	int fds[NUM_FDS];
	memset(data, 'S', sizeof data);
	for (int r = 0; r < NUM_FDS; r++) {
		fifo_path(path, sizeof path, g, r);
		fds[r] = open(path, O_WRONLY);
		if (fds[r] < 0)
			die(path);
	}
	for (int i = 0; i < loops; i++)
		for (int r = 0; r < NUM_FDS; r++) {
			ssize_t done = 0;
			while (done < DATASIZE) {
				ssize_t n = write(fds[r], data + done, DATASIZE - done);
				if (n < 0 && errno == EINTR)
					continue;
				if (n <= 0)
					die("sender write");
				done += n;
			}
		}
	for (int r = 0; r < NUM_FDS; r++)
		close(fds[r]);
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s DIR GROUPS LOOPS\n", argv[0]);
		return 2;
	}
	dir = argv[1];
	int groups = atoi(argv[2]);
	loops = atoi(argv[3]);
	char path[4096];
	for (int g = 0; g < groups; g++)
		for (int r = 0; r < NUM_FDS; r++) {
			fifo_path(path, sizeof path, g, r);
			unlink(path);
			if (mkfifo(path, 0600) != 0) {
				perror(path);
				return 1;
			}
		}

	int ready[2], wake[2];
	if (pipe(ready) || pipe(wake))
		die("pipe");
	int nproc = groups * NUM_FDS * 2;
	for (int i = 0; i < nproc; i++) {
		pid_t pid = fork();
		if (pid < 0)
			die("fork");
		if (pid == 0) {
			close(ready[0]);
			close(wake[1]);
			wait_start(ready[1], wake[0]);
			int g = i / (NUM_FDS * 2), k = i % (NUM_FDS * 2);
			if (k < NUM_FDS)
				receiver(g, k);
			else
				sender(g);
			_exit(0);
		}
	}
	close(ready[1]);
	close(wake[0]);
	for (int i = 0; i < nproc; i++) {
		char c;
		if (read(ready[0], &c, 1) != 1)
			die("waiting for children");
	}
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	close(wake[1]);
	int failed = 0, status;
	for (int i = 0; i < nproc; i++) {
		if (wait(&status) < 0)
			die("wait");
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			failed++;
	}
	clock_gettime(CLOCK_MONOTONIC, &b);
	for (int g = 0; g < groups; g++)
		for (int r = 0; r < NUM_FDS; r++) {
			fifo_path(path, sizeof path, g, r);
			unlink(path);
		}
	if (failed) {
		fprintf(stderr, "%d of %d processes failed\n", failed, nproc);
		return 1;
	}
	printf("%.6f\n", (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
	return 0;
}
