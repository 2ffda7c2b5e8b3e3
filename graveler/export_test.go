package graveler

// CommitPaceState is the commit pacer's rate now (+Inf: unpaced), the
// reservations of staged entries it made wait and the staged writes it
// saw, for tests of the adaptive pacing through the service.
func (g *Graveler) CommitPaceState() (rate float64, waits, observed int64) {
	g.pace.mu.Lock()
	defer g.pace.mu.Unlock()
	return g.pace.rate, g.pace.waits, g.pace.observed
}
