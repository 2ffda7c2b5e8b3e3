package staging

import "graveler/graveler"

// PageLenForTest returns how many entries the current page of a List
// iterator holds.
func PageLenForTest(it graveler.ValueIterator) int { return len(it.(*iterator).page) }

// QueuedForTest returns how many fenced writers wait behind a request in
// flight (writers of the same key count once each).
func QueuedForTest(m *Manager) int {
	m.fenced.mu.Lock()
	defer m.fenced.mu.Unlock()
	n := 0
	for _, g := range m.fenced.groups {
		for _, b := range g.queue {
			n += b.n
		}
	}
	return n
}
