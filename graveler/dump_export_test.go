package graveler

import "testing"

// SetDumpWindow makes DumpRefs hold at most n commits for the rest of t.
func SetDumpWindow(t testing.TB, n int) {
	old := dumpWindow
	dumpWindow = n
	t.Cleanup(func() { dumpWindow = old })
}
