package fsck

// SetAfterRevision makes f run right after a run fixes its revision, and
// returns what undoes it.
func SetAfterRevision(f func()) func() {
	old := afterRevision
	afterRevision = f
	return func() { afterRevision = old }
}

// SetBeforeRepair makes f run after the orphans are found and before the
// repair reads the references again, and returns what undoes it.
func SetBeforeRepair(f func()) func() {
	old := beforeRepair
	beforeRepair = f
	return func() { beforeRepair = old }
}
