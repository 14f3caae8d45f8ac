// The lift of package early, as a constructor: the loader runs it before
// the Go runtime starts (see early.go). Only when cgo is enabled.

#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

// Keep in step with early.go.
#define RT_SOFT_LIMIT 2000000 /* µs */
#define RT_HARD_LIMIT 5000000
#define FIXTURE_ARG "__chain"

int freeze_early_lifted;
long freeze_early_cpu_us; // CPU used before the lift, for the record
long long freeze_early_at_ns; // wall clock at the lift (Unix ns), for the record

// glibc passes argc, argv and envp to constructors.
__attribute__((constructor)) static void freeze_early_lift(int argc, char **argv, char **envp) {
	(void)envp;
	if (geteuid() != 0) return;
	// Lifted already by the package's first stage (deploy/package/stage.c),
	// which ran this same constructor: take its figures, which count the
	// CPU before the lift from the process's start. Never passed on.
	const char *pre = getenv("FREEZE_EARLY_LIFT");
	if (pre) {
		long cpu = 0;
		long long at = 0;
		int ok = sscanf(pre, "%ld %lld", &cpu, &at) == 2 && sched_getscheduler(0) == SCHED_RR;
		unsetenv("FREEZE_EARLY_LIFT");
		if (ok) {
			freeze_early_lifted = 1;
			freeze_early_cpu_us = cpu;
			freeze_early_at_ns = at;
			return;
		}
	}
	const char *off = getenv("FREEZE_PRIORITY");
	if (off && strcmp(off, "off") == 0) return;
	// Subcommands that only read or write files run at ordinary
	// priority: freeze timeline of a large file at SCHED_RR took a CPU
	// from the machine for nothing (#24, finding 10). The stop order,
	// the drill, the guard and census (what an operator runs on a machine
	// that is on fire) lift.
	// They also drop a class inherited from a lifted shell (the runbook
	// has the operator lift theirs).
	// freeze run and its child helper too: the command it starts must
	// run at ordinary priority, never at freeze's real-time one.
	static const char *const unlifted[] = {"timeline", "restore", "runbook", "help", "version", "--version", "--help", "-h", "run", "__run-child", 0};
	if (argc > 1 && argv && argv[1]) {
		for (int i = 0; unlifted[i]; i++) {
			if (strcmp(argv[1], unlifted[i]) == 0) {
				struct sched_param z = {.sched_priority = 0};
				if (sched_getscheduler(0) != SCHED_OTHER) sched_setscheduler(0, SCHED_OTHER, &z);
				if (getpriority(PRIO_PROCESS, 0) < 0) setpriority(PRIO_PROCESS, 0, 0);
				return;
			}
		}
	}
	if (argc > 1 && argv && argv[1] && strcmp(argv[1], FIXTURE_ARG) == 0) {
		// The drill's chain is this binary. freeze's threads carry no
		// SCHED_RESET_ON_FORK (see below), so should a chain process
		// ever be started without priority.Start it would inherit
		// SCHED_RR: drop it before the chain runs a line of its own.
		struct sched_param z = {.sched_priority = 0};
		if (sched_getscheduler(0) != SCHED_OTHER) sched_setscheduler(0, SCHED_OTHER, &z);
		if (getpriority(PRIO_PROCESS, 0) < 0) setpriority(PRIO_PROCESS, 0, 0);
		return;
	}
	struct rlimit lim = {RT_SOFT_LIMIT, RT_HARD_LIMIT};
	if (setrlimit(RLIMIT_RTTIME, &lim) != 0) return; // the bound first
	// Without SCHED_RESET_ON_FORK, ever: every thread the Go runtime
	// starts is cloned from a lifted thread and inherits the class, so
	// no thread of freeze waits at ordinary priority behind the chain
	// (a goroutine the run needs can land on any thread). Children are
	// kept from inheriting it where they are started: priority.Start
	// sets SCHED_RESET_ON_FORK on the forking thread for that fork only.
	struct sched_param p = {.sched_priority = 1};
	if (sched_setscheduler(0, SCHED_RR, &p) != 0) return;
	setpriority(PRIO_PROCESS, 0, -20);
	freeze_early_lifted = 1;
	struct timespec now;
	if (clock_gettime(CLOCK_REALTIME, &now) == 0)
		freeze_early_at_ns = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		freeze_early_cpu_us = ru.ru_utime.tv_sec * 1000000L + ru.ru_utime.tv_usec + ru.ru_stime.tv_sec * 1000000L + ru.ru_stime.tv_usec;
}
