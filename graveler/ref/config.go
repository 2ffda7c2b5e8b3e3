package ref

import (
	"encoding/hex"
	"strings"
	"time"

	"github.com/google/uuid"
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
	// NewID returns a new unique id made of [a-z0-9] (default: the package
	// function NewID). It names repository incarnations and staging tokens.
	NewID func() string
	// Logger (default zap.NewNop()).
	Logger *zap.Logger
}

// NewID returns a new unique id: a UUIDv7 (RFC 9562) written as 32
// lower-case hex digits. Its first 48 bits are the creation time in
// milliseconds, and ids made by one process increase, so they sort in
// creation order as the ULIDs of earlier versions did. The UUID's usual
// '-' separators are left out: a unique id ends a repository partition
// name <repo>-<unique id>, which is split at its last '-'.
func NewID() string {
	u := uuid.Must(uuid.NewV7()) // fails only if crypto/rand does
	return hex.EncodeToString(u[:])
}

// IDTime returns the creation time an id carries: that of a UUIDv7 (the
// form NewID makes, with or without '-'), or of a ULID, the ids earlier
// versions made, which records written then still hold. ok is false for
// any other id (one a Config.NewID of the caller's made, say).
func IDTime(id string) (t time.Time, ok bool) {
	if u, err := uuid.Parse(id); err == nil && len(id) <= 36 {
		if u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			return time.Time{}, false
		}
		var ms int64
		for _, b := range u[:6] {
			ms = ms<<8 | int64(b)
		}
		return time.UnixMilli(ms), true
	}
	return ulidTime(id)
}

// crockford is the ULID alphabet (Crockford's base32).
const crockford = "0123456789abcdefghjkmnpqrstvwxyz"

// ulidTime decodes the 48-bit millisecond timestamp of a ULID: 26 base32
// digits (either case), the first 10 of which are the time.
func ulidTime(id string) (time.Time, bool) {
	if len(id) != 26 || id[0] > '7' {
		return time.Time{}, false
	}
	var ms int64
	for i := range len(id) {
		d := strings.IndexByte(crockford, lower(id[i]))
		if d < 0 {
			return time.Time{}, false
		}
		if i < 10 {
			ms = ms<<5 | int64(d)
		}
	}
	return time.UnixMilli(ms), true
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

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
		c.NewID = NewID
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}
