/*
 * A trivial static program, the benchmark's yardstick for freeze's
 * start-up (#34): its constructor runs where freeze's first stage lifts
 * itself, and writes what the process had used by then (CPU, as lift.c
 * measures it) and when (Unix ns) to the file $TRIVIAL_OUT. Built with
 * the first stage's flags (cc -O2 -s -static).
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

__attribute__((constructor)) static void trivial(void) {
	struct rusage ru;
	struct timespec now;
	if (getrusage(RUSAGE_SELF, &ru) != 0 || clock_gettime(CLOCK_REALTIME, &now) != 0)
		return;
	long cpu = ru.ru_utime.tv_sec * 1000000L + ru.ru_utime.tv_usec + ru.ru_stime.tv_sec * 1000000L + ru.ru_stime.tv_usec;
	const char *out = getenv("TRIVIAL_OUT");
	FILE *f = out ? fopen(out, "w") : NULL;
	if (!f)
		return;
	fprintf(f, "%ld %lld\n", cpu, (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
	fclose(f);
}

int main(void) { return 0; }
