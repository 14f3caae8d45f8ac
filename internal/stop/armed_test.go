package stop

import (
	"os"
	"testing"

	"freeze/internal/match"
	"freeze/internal/testenv"
)

// An armed guard has read the system's program directories (the judge's)
// before its first request, which is the incident's: that request's
// start-up was 4.8-6.1 ms against 1.1-1.6 for the ones after it. Checked
// in a process of its own, which has read nothing before Arm.
func TestArmReadsTheSystemsProgramsBeforeTheFirstRequest(t *testing.T) {
	if os.Getenv("FREEZE_TEST_ARM_CHILD") == "1" {
		if match.SystemLoaded() {
			t.Fatal("the system's programs were read before Arm: this check cannot tell")
		}
		r := Arm(func(string) {})
		defer r.Close()
		if !match.SystemLoaded() {
			t.Fatal("Arm returned and the system's programs are not read: the first request reads them")
		}
		return
	}
	// In a group of its own, killed as a group if Arm hangs.
	if out, err := testenv.Child(t, "FREEZE_TEST_ARM_CHILD=1", nil); err != nil {
		t.Fatalf("the armed process: %v\n%s", err, out)
	}
}
