package graveler

import (
	"fmt"
	"regexp"
	"strings"
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
)

var (
	repositoryIDRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{2,62}$`)
	branchIDRe     = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
	hexRe          = regexp.MustCompile(`^[0-9a-f]+$`)
	reservedNames  = map[string]bool{"HEAD": true, "head": true}
)

// ValidateRepositoryID: 3..63 of [a-z0-9-], starting with a letter or digit.
func ValidateRepositoryID(id RepositoryID) error {
	if !repositoryIDRe.MatchString(string(id)) {
		return fmt.Errorf("%w: %q must be 3 to 63 characters of a-z, 0-9 and '-', starting with a letter or digit", ErrInvalidRepositoryID, id)
	}
	return nil
}

func validateRefName(base error, s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: empty", base)
	case len(s) > max:
		return fmt.Errorf("%w: %q is %d bytes, limit %d", base, s, len(s), max)
	case !branchIDRe.MatchString(s):
		return fmt.Errorf("%w: %q must be of A-Z, a-z, 0-9, '_', '.', '-' and not start with '.' or '-'", base, s)
	case strings.HasSuffix(s, ".lock") || strings.Contains(s, ".."):
		return fmt.Errorf("%w: %q may not end with .lock or contain ..", base, s)
	case reservedNames[s]:
		return fmt.Errorf("%w: %q is reserved", base, s)
	case len(s) == CommitIDLen && hexRe.MatchString(s):
		return fmt.Errorf("%w: %q looks like a commit id", base, s)
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
	if len(id) != CommitIDLen || !hexRe.MatchString(string(id)) {
		return fmt.Errorf("%w: %q must be %d lower-case hex digits", ErrInvalidCommitID, id, CommitIDLen)
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

// ValidateStorageNamespace: a URL with scheme file://, mem:// or s3://.
func ValidateStorageNamespace(ns StorageNamespace) error {
	s := string(ns)
	for _, p := range []string{"file://", "mem://", "s3://"} {
		if strings.HasPrefix(s, p) && len(s) > len(p) {
			return nil
		}
	}
	return fmt.Errorf("%w: %q must be file://..., s3://... or mem://...", ErrInvalidStorageNamespace, ns)
}
