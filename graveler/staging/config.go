package staging

// Defaults for Config's zero values.
const (
	// DefaultWriteParallelism: etcd pipelines concurrent requests on one
	// connection, so a few dozen writes in flight keep it busy without
	// queueing a whole batch at once.
	DefaultWriteParallelism = 16
	// DefaultListFirstPageSize is small so that reading the first few
	// entries of a huge token (a paged API listing, a SeekGE followed by a
	// few Next calls in a merge) costs one small read.
	DefaultListFirstPageSize = 64
	// DefaultScanPageSize caps List's growing pages and DropByPrefix's chunks.
	DefaultScanPageSize = 1000
	// DefaultListPageBytes ends a List page early when its keys and values
	// reach this size, bounding an iterator's memory for large values.
	DefaultListPageBytes = 4 << 20
)

// Config tunes a Manager. The zero value takes the defaults.
type Config struct {
	// WriteParallelism bounds the kv writes one SetBatch or DropByPrefix
	// has in flight (default DefaultWriteParallelism).
	WriteParallelism int
	// ListFirstPageSize is the number of entries List reads first, and
	// again after each SeekGE that re-scans; later pages double up to
	// ScanPageSize (default DefaultListFirstPageSize).
	ListFirstPageSize int
	// ScanPageSize is the largest page List reads and the chunk of keys
	// DropByPrefix reads before deleting them (default DefaultScanPageSize).
	ScanPageSize int
	// ListPageBytes ends a List page once its keys and values reach this
	// many bytes (default DefaultListPageBytes).
	ListPageBytes int
}

func (c Config) withDefaults() Config {
	if c.WriteParallelism <= 0 {
		c.WriteParallelism = DefaultWriteParallelism
	}
	if c.ScanPageSize <= 0 {
		c.ScanPageSize = DefaultScanPageSize
	}
	if c.ListFirstPageSize <= 0 {
		c.ListFirstPageSize = DefaultListFirstPageSize
	}
	c.ListFirstPageSize = min(c.ListFirstPageSize, c.ScanPageSize)
	if c.ListPageBytes <= 0 {
		c.ListPageBytes = DefaultListPageBytes
	}
	return c
}
