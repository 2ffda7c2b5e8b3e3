package graveler

import (
	"fmt"
	"net/url"
	"path"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// Name rules. Repository ids become part of a kv partition, so they are the
// strictest. Branch and tag ids may not contain the characters of the
// reference syntax (~ ^ @ $ /) and may not look like a full commit id.
const (
	MaxRepositoryIDLen = 63
	MaxBranchIDLen     = 256
	MaxTagIDLen        = 256
	MaxKeyLen          = 1024
	MaxIdentityLen     = 256
	MaxValueDataLen    = 512 << 10
	CommitIDLen        = 64
	MinCommitPrefixLen = 4
	// MaxRefLen bounds a reference expression: the longest branch or tag
	// name with room for a chain of modifiers ("~2^2@..."). A longer one
	// names nothing.
	MaxRefLen = MaxBranchIDLen + 256
	// MaxCommitMessageLen leaves a commit record (the message, parents,
	// metarange and metadata) 64 KiB under kv.DefaultLimits' 1 MiB value.
	MaxCommitMessageLen = 960 << 10
	// MaxCommitUserBytes bounds the parts of a commit record a client
	// writes (message, committer, metadata) as the record stores them
	// (CommitUserBytes). The rest of the record (parents, metarange, date,
	// generation, versions) takes under 300 bytes, so a commit within it
	// fits kv.DefaultLimits' 1 MiB value, and one over it, less than 1 KiB
	// short of not fitting, is refused before anything is written instead
	// of failing at the store after a commit's work.
	MaxCommitUserBytes = 1<<20 - 1<<10
)

var reservedNames = map[string]bool{"HEAD": true, "head": true}

// The checks below are byte loops rather than regular expressions: every
// request validates a repository id and most a branch or commit id, and a
// regular expression match cost about a quarter of a read's own CPU.

// repositoryIDOK is ^[a-z0-9][a-z0-9-]{2,62}$.
func repositoryIDOK(s string) bool {
	if len(s) < 3 || len(s) > MaxRepositoryIDLen || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// refNameChars is ^[A-Za-z0-9_][A-Za-z0-9_.-]*$.
func refNameChars(s string) bool {
	if s == "" || s[0] == '.' || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// lowerHex is ^[0-9a-f]+$.
func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return s != ""
}

// ValidateRepositoryID: 3..63 of [a-z0-9-], starting with a letter or digit.
func ValidateRepositoryID(id RepositoryID) error {
	if !repositoryIDOK(string(id)) {
		return fmt.Errorf("%w: %s must be 3 to 63 characters of a-z, 0-9 and '-', starting with a letter or digit", ErrInvalidRepositoryID, Echo(id))
	}
	return nil
}

func validateRefName(base error, s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty", base)
	case len(s) > max:
		return fmt.Errorf("%w: %s is %d bytes, limit %d", base, Echo(s), len(s), max)
	case !refNameChars(s):
		return fmt.Errorf("%w: %s must be of A-Z, a-z, 0-9, '_', '.', '-' and not start with '.' or '-'", base, Echo(s))
	case strings.HasSuffix(s, ".lock") || strings.Contains(s, ".."):
		return fmt.Errorf("%w: %s may not end with .lock or contain ..", base, Echo(s))
	case reservedNames[s]:
		return fmt.Errorf("%w: %s is reserved", base, Echo(s))
	case len(s) == CommitIDLen && lowerHex(s):
		return fmt.Errorf("%w: %s looks like a commit id", base, Echo(s))
	}
	return nil
}

// ValidateBranchID: 1..256 of [A-Za-z0-9_.-], not starting with '.' or
// '-', not ending with ".lock", no "..", not "HEAD", not a full commit id.
func ValidateBranchID(id BranchID) error {
	return validateRefName(ErrInvalidBranchID, string(id), MaxBranchIDLen)
}

// ValidateTagID: the same rules as branch ids.
func ValidateTagID(id TagID) error {
	return validateRefName(ErrInvalidTagID, string(id), MaxTagIDLen)
}

// ValidateCommitID: a full commit id, 64 lower-case hex digits.
func ValidateCommitID(id CommitID) error {
	if len(id) != CommitIDLen || !lowerHex(string(id)) {
		return fmt.Errorf("%w: %s must be %d lower-case hex digits", ErrInvalidCommitID, Echo(id), CommitIDLen)
	}
	return nil
}

// ValidateMetaRangeID: empty (the empty tree) or a lower-case hex SHA-256,
// the only ids the committed store can read: a commit holding another
// would fail every later read of its tree as if the reader had erred.
func ValidateMetaRangeID(id MetaRangeID) error {
	if id != "" && (len(id) != 64 || !lowerHex(string(id))) {
		return fmt.Errorf("%w: meta_range_id %s must be empty or 64 lower-case hex digits", ErrInvalidArgument, Echo(id))
	}
	return nil
}

// ValidateKey: 1..MaxKeyLen bytes, any bytes.
func ValidateKey(k Key) error {
	if len(k) == 0 {
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	}
	if len(k) > MaxKeyLen {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidKey, len(k), MaxKeyLen)
	}
	return nil
}

// ValidatePrefix: at most MaxKeyLen bytes, any bytes, empty allowed. what
// names the field ("prefix", "delimiter"). No key is longer, so a longer
// one can only be a client's mistake, and one of megabytes would otherwise
// reach etcd inside a range request over etcd's request size limit.
func ValidatePrefix(what string, p Key) error {
	if len(p) > MaxKeyLen {
		return fmt.Errorf("%s: %w: %d bytes, limit %d", what, ErrInvalidKey, len(p), MaxKeyLen)
	}
	return nil
}

// ValidateValue: non-empty identity up to MaxIdentityLen, data up to MaxValueDataLen.
func ValidateValue(v *Value) error {
	if v == nil {
		return fmt.Errorf("%w: missing", ErrInvalidValue)
	}
	if len(v.Identity) == 0 {
		return fmt.Errorf("%w: empty identity", ErrInvalidValue)
	}
	if len(v.Identity) > MaxIdentityLen {
		return fmt.Errorf("%w: identity is %d bytes, limit %d", ErrValueTooLarge, len(v.Identity), MaxIdentityLen)
	}
	if len(v.Data) > MaxValueDataLen {
		return fmt.Errorf("%w: data is %d bytes, limit %d", ErrValueTooLarge, len(v.Data), MaxValueDataLen)
	}
	return nil
}

// ValidateRef: up to MaxRefLen bytes; ref.ParseRef checks the syntax.
func ValidateRef(ref Ref) error {
	if len(ref) > MaxRefLen {
		return fmt.Errorf("%w: %d bytes, limit %d", ErrInvalidRef, len(ref), MaxRefLen)
	}
	return nil
}

// ValidateCommitMessage: up to MaxCommitMessageLen bytes.
func ValidateCommitMessage(msg string) error {
	if len(msg) > MaxCommitMessageLen {
		return fmt.Errorf("%w: commit message is %d bytes, limit %d", ErrValueTooLarge, len(msg), MaxCommitMessageLen)
	}
	return nil
}

// CommitUserBytes is the size a commit record gives its message, committer
// and metadata: each non-empty string with its field tag and length, each
// metadata entry with its key's and value's and its own (protobuf, as
// ref's codec encodes them).
func CommitUserBytes(message, committer string, md Metadata) int {
	n := 0
	for _, s := range []string{message, committer} {
		if s != "" {
			n += protowire.SizeTag(1) + protowire.SizeBytes(len(s))
		}
	}
	return n + metadataBytes(md)
}

func metadataBytes(md Metadata) int {
	n := 0
	for k, v := range md {
		e := protowire.SizeTag(1) + protowire.SizeBytes(len(k)) + protowire.SizeTag(2) + protowire.SizeBytes(len(v))
		n += protowire.SizeTag(8) + protowire.SizeBytes(e)
	}
	return n
}

// ValidateCommitContent checks what a client puts in a commit record: the
// message against MaxCommitMessageLen, and message, committer and metadata
// together against MaxCommitUserBytes, naming each part's size so that the
// client knows what to shorten.
func ValidateCommitContent(message, committer string, md Metadata) error {
	if err := ValidateCommitMessage(message); err != nil {
		return err
	}
	if n := CommitUserBytes(message, committer, md); n > MaxCommitUserBytes {
		mdLen := 0
		for k, v := range md {
			mdLen += len(k) + len(v)
		}
		return fmt.Errorf("%w: commit message (%d bytes), committer (%d bytes) and metadata (%d bytes of keys and values, %d entries) take %d bytes in the commit record, limit %d",
			ErrValueTooLarge, len(message), len(committer), mdLen, len(md), n, MaxCommitUserBytes)
	}
	return nil
}

// ValidateStorageNamespace: a URL with scheme file://, mem:// or s3://.
// A new repository's namespace must also pass NormalizeStorageNamespace.
func ValidateStorageNamespace(ns StorageNamespace) error {
	s := string(ns)
	for _, p := range []string{"file://", "mem://", "s3://"} {
		if strings.HasPrefix(s, p) && len(s) > len(p) {
			return nil
		}
	}
	return fmt.Errorf("%w: %s must be file://..., s3://... or mem://...", ErrInvalidStorageNamespace, Echo(ns))
}

// MaxStorageNamespaceLen bounds a new repository's storage namespace.
const MaxStorageNamespaceLen = 1024

// NormalizeStorageNamespace returns the one spelling of the location ns
// names, so that two spellings of one location compare equal:
//
//   - the path is percent-decoded, its "." and ".." segments resolved and
//     repeated and trailing '/' removed (file:// and mem://);
//   - file://localhost/dir is file:///dir;
//   - the host (the S3 bucket, the mem:// name) is lower-cased, as hosts
//     are case-insensitive; paths and S3 prefixes keep their case.
//
// It refuses, with ErrInvalidStorageNamespace, what the blob store could
// not open: a scheme other than file, s3 and mem; a user, port, query or
// fragment; file:// with a host, a relative path or the root; s3:// with
// no bucket, or a prefix segment that is empty, "." or "..", or not of
// [A-Za-z0-9._-]; mem:// with no name; anything longer than
// MaxStorageNamespaceLen. Symbolic links and mounts are not resolved: two
// file:// paths that reach one directory through them do not compare
// equal.
func NormalizeStorageNamespace(ns StorageNamespace) (StorageNamespace, error) {
	if err := ValidateStorageNamespace(ns); err != nil {
		return "", err
	}
	bad := func(why string) error { return fmt.Errorf("%w: %s: %s", ErrInvalidStorageNamespace, Echo(ns), why) }
	if len(ns) > MaxStorageNamespaceLen {
		return "", bad(fmt.Sprintf("%d bytes, limit %d", len(ns), MaxStorageNamespaceLen))
	}
	u, err := url.Parse(string(ns))
	if err != nil {
		return "", bad(err.Error())
	}
	switch {
	case u.User != nil:
		return "", bad("names a user")
	case u.Port() != "":
		return "", bad("names a port")
	case u.RawQuery != "" || u.ForceQuery:
		return "", bad("has a query")
	case u.Fragment != "" || strings.Contains(string(ns), "#"):
		return "", bad("has a fragment")
	}
	host := strings.ToLower(u.Hostname())
	switch u.Scheme {
	case "file":
		if host != "" && host != "localhost" {
			return "", bad("names a host; use file:///absolute/dir")
		}
		if !strings.HasPrefix(u.Path, "/") {
			return "", bad("needs an absolute directory")
		}
		dir := path.Clean(u.Path)
		if dir == "/" {
			return "", bad("is the root directory")
		}
		return StorageNamespace("file://" + dir), nil
	case "s3":
		if host == "" {
			return "", bad("has no bucket")
		}
		prefix := strings.Trim(u.Path, "/")
		if prefix == "" {
			return StorageNamespace("s3://" + host), nil
		}
		for _, seg := range strings.Split(prefix, "/") {
			if seg == "" || seg == "." || seg == ".." || strings.IndexFunc(seg, notNameRune) >= 0 {
				return "", bad(fmt.Sprintf("prefix segment %s must be made of [A-Za-z0-9._-]", Echo(seg)))
			}
		}
		return StorageNamespace("s3://" + host + "/" + prefix), nil
	case "mem":
		p := ""
		if u.Path != "" {
			p = strings.TrimSuffix(path.Clean("/"+u.Path), "/")
		}
		if host == "" && p == "" {
			return "", bad("has no name")
		}
		return StorageNamespace("mem://" + host + p), nil
	}
	return "", bad("unsupported scheme")
}

func notNameRune(r rune) bool {
	return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
}
