package etcdkv

// ForcePagedScanForTest makes s scan in pages, as against a server without
// RangeStream.
func (s *Store) ForcePagedScanForTest() { s.noStream.Store(true) }

// SetAfterPagedRangeForTest runs f with the count etcd made for each page
// of a paged scan, until the returned function restores the default.
func SetAfterPagedRangeForTest(f func(counted int64)) (restore func()) {
	afterPagedRange = f
	return func() { afterPagedRange = nil }
}
