/*
 * freeze's first stage: what the package installs as /usr/bin/freeze.
 *
 * Under a chain spinning at its cap, every millisecond of CPU freeze
 * needs before it is lifted to SCHED_RR costs seconds of wall time
 * (#34). The lift of package early runs as a C constructor, before Go's
 * runtime, but only after the kernel has mapped a 12 MB binary and
 * glibc's static start-up has run over it. This stage is a small static
 * program: the same constructor (lift.c, included, so the rules are the
 * same: which subcommands lift, the RLIMIT_RTTIME bound) runs in it,
 * then it execs the real freeze, which starts lifted. The CPU the stage
 * used before the lift, and when, go to the real binary in
 * FREEZE_EARLY_LIFT, so the record's "lifted at start after" counts
 * everything before the lift, the stage included.
 */
#include "../../internal/priority/early/lift.c"

#include <errno.h>
#include <stdio.h>

#ifndef FREEZE_REAL
#define FREEZE_REAL "/usr/lib/freeze/freeze"
#endif

int main(int argc, char **argv) {
	(void)argc;
	if (freeze_early_lifted) {
		char buf[64];
		snprintf(buf, sizeof buf, "%ld %lld", freeze_early_cpu_us, freeze_early_at_ns);
		setenv("FREEZE_EARLY_LIFT", buf, 1);
	}
	execv(FREEZE_REAL, argv);
	fprintf(stderr, "freeze: error: cannot run %s: %s\nfreeze: hint: reinstall the freeze package\n", FREEZE_REAL, strerror(errno));
	return 1;
}
