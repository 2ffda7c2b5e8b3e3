package ref

import (
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"go.uber.org/zap"
)

// Defaults for Config's zero values.
const (
	DefaultRepositoryCreationTimeout = 2 * time.Minute
	DefaultBranchUpdateMaxRetries    = 10
	DefaultBranchUpdateBackoff       = 2 * time.Millisecond
	DefaultBranchUpdateMaxBackoff    = 500 * time.Millisecond
	// DefaultCommitCacheSize bounds the commit records kept in memory.
	// Commits are immutable and content addressed, so a cached record is
	// never stale; resolving a branch for a read then costs no commit read.
	DefaultCommitCacheSize = 4096
)

// Config tunes a Manager. Zero values take the defaults.
type Config struct {
	// RepositoryCreationTimeout is how long a repository may stay in the
	// initial state; older ones are treated as failed creations and queued
	// for deletion (default 2 minutes).
	RepositoryCreationTimeout time.Duration
	// BranchUpdateMaxRetries bounds the retries of BranchUpdate after a lost
	// compare-and-swap (default 10).
	BranchUpdateMaxRetries int
	// BranchUpdateBackoff is the first retry's backoff ceiling; it doubles
	// per retry up to BranchUpdateMaxBackoff, and the actual sleep is drawn
	// uniformly below the ceiling ("full jitter").
	BranchUpdateBackoff    time.Duration
	BranchUpdateMaxBackoff time.Duration
	// BranchReadWindow shapes the amortized reads of GetBranch and
	// GetRepository. Zero (the default) is group mode: a lone reader reads
	// at once, and readers arriving while a read of the same record is in
	// flight share the next one, so a hot branch costs about one kv read
	// per read latency however many requests use it. A positive window
	// instead makes the first reader wait that long for others to join;
	// negative disables amortization.
	BranchReadWindow time.Duration
	// CommitCacheSize bounds the commit records cached in memory (default
	// DefaultCommitCacheSize; negative disables the cache).
	CommitCacheSize int
	// Now returns the current time (default time.Now).
	Now func() time.Time
	// NewID returns a new unique id made of [a-z0-9] (default: a lower-case
	// ULID). It names repository incarnations and staging tokens.
	NewID func() string
	// Logger (default zap.NewNop()).
	Logger *zap.Logger
}

// NewULID returns a lower-case ULID: time-ordered, unique, 26 characters
// of [0-9a-z], with no '-' so that it can end a repository partition name.
func NewULID() string { return strings.ToLower(ulid.Make().String()) }

func (c Config) withDefaults() Config {
	if c.RepositoryCreationTimeout <= 0 {
		c.RepositoryCreationTimeout = DefaultRepositoryCreationTimeout
	}
	if c.BranchUpdateMaxRetries <= 0 {
		c.BranchUpdateMaxRetries = DefaultBranchUpdateMaxRetries
	}
	if c.BranchUpdateBackoff <= 0 {
		c.BranchUpdateBackoff = DefaultBranchUpdateBackoff
	}
	if c.BranchUpdateMaxBackoff <= 0 {
		c.BranchUpdateMaxBackoff = DefaultBranchUpdateMaxBackoff
	}
	if c.CommitCacheSize == 0 {
		c.CommitCacheSize = DefaultCommitCacheSize
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.NewID == nil {
		c.NewID = NewULID
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}
