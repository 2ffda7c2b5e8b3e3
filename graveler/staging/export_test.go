package staging

import "graveler/graveler"

// PageLenForTest returns how many entries the current page of a List
// iterator holds.
func PageLenForTest(it graveler.ValueIterator) int { return len(it.(*iterator).page) }
