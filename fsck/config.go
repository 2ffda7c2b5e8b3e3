package fsck

import (
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"graveler/graveler"
	"graveler/graveler/ref"
)

// Defaults for Config's zero values.
const (
	DefaultParallel = 16
	// DefaultEtcdQuotaBytes is etcd's own default --quota-backend-bytes.
	DefaultEtcdQuotaBytes int64 = 2 << 30
	// DBSizeWarnFraction of the quota is where a member's database size
	// becomes a finding: past it, little room is left before etcd raises
	// NOSPACE and refuses every write.
	DBSizeWarnFraction = 0.8
	// DefaultMaxTombstones is the number of staged tombstones on one
	// branch past which it is a finding: every read of the branch merges
	// them until the next commit.
	DefaultMaxTombstones int64 = 100_000
	// DefaultDeletingTimeout: a delete takes three kv writes and the
	// cleaner retires what one leaves half-done on its next pass, so a
	// record deleting for longer means neither finished.
	DefaultDeletingTimeout = time.Hour
	// DefaultOrphanGrace is the cleaner's default sweep grace
	// (cleaner.DefaultSweepGrace): younger partitions may belong to a
	// commit between releasing its tokens and queueing them.
	DefaultOrphanGrace    = time.Hour
	DefaultConnectTimeout = 5 * time.Second
	DefaultRequestTimeout = 30 * time.Second
	DefaultPageSize       = 1000
)

// ErrIncomplete: the run could not check everything; its report says what
// it did check.
var ErrIncomplete = errors.New("fsck: check incomplete")

// ErrUnreachable: etcd did not answer within Config.ConnectTimeout.
var ErrUnreachable = fmt.Errorf("%w: etcd unreachable", ErrIncomplete)

// Config tunes a Checker. Zero values take the defaults.
type Config struct {
	// Full reads and verifies every metarange and range; without it
	// ranges are only checked to exist.
	Full bool
	// Repair queues orphaned staging partitions for the cleaner.
	Repair bool
	// Parallel goroutines read metaranges and as many check ranges
	// (default DefaultParallel): with Full, up to 2*Parallel objects are
	// in memory at once.
	Parallel int
	// EtcdQuotaBytes is etcd's --quota-backend-bytes (default
	// DefaultEtcdQuotaBytes); a member's database past
	// DBSizeWarnFraction of it is a finding.
	EtcdQuotaBytes int64
	// SkipEtcdHash leaves out the members' hash comparison, which makes
	// every member hash its whole key space.
	SkipEtcdHash bool
	// MaxSealedTokens: a branch with more sealed tokens is a finding
	// (default graveler.DefaultMaxSealedTokens; use gravelerd's
	// --max-sealed-tokens).
	MaxSealedTokens int
	// MaxTombstones: a branch with more staged tombstones is a finding
	// (default DefaultMaxTombstones).
	MaxTombstones int64
	// RepositoryCreationTimeout: an initial record older than this is a
	// crashed create (default ref.DefaultRepositoryCreationTimeout, the
	// timeout gravelerd uses).
	RepositoryCreationTimeout time.Duration
	// DeletingTimeout: a deleting record older than this is a stuck
	// delete (default DefaultDeletingTimeout).
	DeletingTimeout time.Duration
	// OrphanGrace: unreferenced staging partitions younger than this are
	// not reported (default DefaultOrphanGrace; negative: none).
	OrphanGrace time.Duration
	// ConnectTimeout bounds the wait for etcd's first answer (default
	// DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// RequestTimeout bounds each etcd request, the opening of a scan's
	// stream, and each chunk of a scan (default DefaultRequestTimeout).
	RequestTimeout time.Duration
	// PageSize is the page of a paged scan, used when etcd has no
	// RangeStream (default DefaultPageSize).
	PageSize int
	// Now returns the current time (default time.Now).
	Now func() time.Time
	// Logger (default zap.NewNop()).
	Logger *zap.Logger
}

func (c Config) withDefaults() Config {
	if c.Parallel <= 0 {
		c.Parallel = DefaultParallel
	}
	if c.EtcdQuotaBytes <= 0 {
		c.EtcdQuotaBytes = DefaultEtcdQuotaBytes
	}
	if c.MaxSealedTokens <= 0 {
		c.MaxSealedTokens = graveler.DefaultMaxSealedTokens
	}
	if c.MaxTombstones <= 0 {
		c.MaxTombstones = DefaultMaxTombstones
	}
	if c.RepositoryCreationTimeout <= 0 {
		c.RepositoryCreationTimeout = ref.DefaultRepositoryCreationTimeout
	}
	if c.DeletingTimeout <= 0 {
		c.DeletingTimeout = DefaultDeletingTimeout
	}
	if c.OrphanGrace == 0 {
		c.OrphanGrace = DefaultOrphanGrace
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = DefaultConnectTimeout
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.PageSize <= 0 {
		c.PageSize = DefaultPageSize
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}
