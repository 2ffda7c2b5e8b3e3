package graveler

import "testing"

// SetDumpWindow makes DumpRefs hold at most n commits for the rest of t.
func SetDumpWindow(t testing.TB, n int) {
	old := dumpWindow
	dumpWindow = n
	t.Cleanup(func() { dumpWindow = old })
}

// SetRestoreRecentIDs makes RestoreRefs remember at least n and at most
// 2n restored commit ids for the rest of t.
func SetRestoreRecentIDs(t testing.TB, n int) {
	old := restoreRecentIDs
	restoreRecentIDs = n
	t.Cleanup(func() { restoreRecentIDs = old })
}
