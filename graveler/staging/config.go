package staging

import "graveler/kv"

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
	// DefaultFencedBatchSize is how many concurrent fenced writes of one
	// staging token share a kv request: half of etcd's default
	// --max-txn-ops (128), which also bounds it.
	DefaultFencedBatchSize = 64
	// MaxFencedBatchSize is the largest FencedBatchSize: kv.MaxSetAndReadOps
	// less room for the reads each shared request also makes, so that a
	// batch stays within etcd's default --max-txn-ops (128).
	MaxFencedBatchSize = kv.MaxSetAndReadOps - 8
	// DefaultFencedBatchBytes keeps a shared request well inside etcd's
	// default 1.5 MiB request limit.
	DefaultFencedBatchBytes = 512 << 10
	// DefaultMaxRangeTombstones bounds a token's range tombstones: they
	// live in one record that every Get of the token's entries reads, so
	// it stays small (at most about 100 KiB with the longest prefixes).
	DefaultMaxRangeTombstones = 100
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
	// FencedBatchSize bounds the concurrent SetAndRead writes of one token
	// sent in one kv request (default DefaultFencedBatchSize; 1 sends each
	// on its own; at most MaxFencedBatchSize, to which a larger value is
	// lowered).
	FencedBatchSize int
	// FencedBatchBytes bounds the bytes of one such request (default
	// DefaultFencedBatchBytes).
	FencedBatchBytes int
	// MaxRangeTombstones bounds the range tombstones (DeletePrefix) one
	// token holds (default DefaultMaxRangeTombstones).
	MaxRangeTombstones int
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
	if c.FencedBatchSize <= 0 {
		c.FencedBatchSize = DefaultFencedBatchSize
	}
	c.FencedBatchSize = min(c.FencedBatchSize, MaxFencedBatchSize)
	if c.MaxRangeTombstones <= 0 {
		c.MaxRangeTombstones = DefaultMaxRangeTombstones
	}
	if c.FencedBatchBytes <= 0 {
		c.FencedBatchBytes = DefaultFencedBatchBytes
	}
	return c
}
