package graveler

// QueuedReads exposes queuedReads to the tests of package graveler_test.
func (g *Graveler) QueuedReads(repo *RepositoryRecord, id BranchID) int {
	return g.queuedReads(repo, id)
}
