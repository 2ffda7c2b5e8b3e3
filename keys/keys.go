package keys

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is returned for a name that cannot be part of a key.
var ErrInvalid = errors.New("keys: invalid")

// Partition names.
const (
	// PartitionGraveler holds every repository record and every storage
	// namespace claim.
	PartitionGraveler = "graveler"
	// PartitionDeleted holds the cleaner's work list.
	PartitionDeleted = "graveler_deleted"

	repoPartitionPrefix    = "repo/"
	stagingPartitionPrefix = "staging/"
)

// Key prefixes inside partitions.
const (
	ReposPrefix    = "repos/"
	TokensPrefix   = "tokens/"
	BranchesPrefix = "branches/"
	CommitsPrefix  = "commits/"
	TagsPrefix     = "tags/"
	EntryPrefix    = "key/"

	// NamespacesPrefix begins the storage namespace claims in the
	// graveler partition.
	NamespacesPrefix = "namespaces/"
	// GCSweepsPrefix begins the garbage collector's sweep records in the
	// graveler partition, one per storage namespace it has deleted from.
	GCSweepsPrefix = "gcsweeps/"
)

// MaxNameLen bounds every name that is part of a partition or record key.
const MaxNameLen = 256

func safeChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}

// ValidateName checks that s can be one part of a key: 1..MaxNameLen bytes
// of [A-Za-z0-9._-]. what names the part in the error.
func ValidateName(what, s string) error {
	if s == "" {
		return fmt.Errorf("%w %s: empty", ErrInvalid, what)
	}
	if len(s) > MaxNameLen {
		return fmt.Errorf("%w %s: %d bytes, limit %d", ErrInvalid, what, len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		if !safeChar(s[i]) {
			return fmt.Errorf("%w %s %q: byte %#x at %d is not one of [A-Za-z0-9._-]", ErrInvalid, what, s, s[i], i)
		}
	}
	if s == "." || s == ".." {
		return fmt.Errorf("%w %s %q", ErrInvalid, what, s)
	}
	return nil
}

// Graveler returns the partition of all repository records.
func Graveler() []byte { return []byte(PartitionGraveler) }

// Deleted returns the partition of the cleaner's work list.
func Deleted() []byte { return []byte(PartitionDeleted) }

// Repository is the key of a repository record in the graveler partition.
func Repository(repo string) []byte { return []byte(ReposPrefix + repo) }

// ParseRepository returns the repository name of a key made by Repository.
func ParseRepository(key []byte) (string, error) {
	s, ok := strings.CutPrefix(string(key), ReposPrefix)
	if !ok || ValidateName("repository", s) != nil {
		return "", fmt.Errorf("%w repository key %q", ErrInvalid, key)
	}
	return s, nil
}

// NamespaceClaim is the key, in the graveler partition, of the claim on a
// storage namespace: ns is its normalized spelling
// (graveler.NormalizeStorageNamespace). The namespace is the raw tail of
// the key, '/' and all, so the claims of the namespaces nested in ns are
// exactly the keys that begin with NamespaceClaim(ns) + "/".
func NamespaceClaim(ns string) []byte { return []byte(NamespacesPrefix + ns) }

// ParseNamespaceClaim returns the normalized namespace of a key made by
// NamespaceClaim.
func ParseNamespaceClaim(key []byte) (string, error) {
	s, ok := strings.CutPrefix(string(key), NamespacesPrefix)
	if !ok || s == "" {
		return "", fmt.Errorf("%w namespace claim key %q", ErrInvalid, key)
	}
	return s, nil
}

// GCSweep is the key, in the graveler partition, of the record of the
// garbage collector's deletions in a storage namespace (ns normalized as
// for NamespaceClaim, and likewise the raw tail of the key). Commits read
// it before and after writing objects to learn whether a sweep ran
// meanwhile (package gcfence).
func GCSweep(ns string) []byte { return []byte(GCSweepsPrefix + ns) }

// RepositoryPartition is the partition of one incarnation of a repository.
// uniqueID must not contain '-' so that the partition parses unambiguously.
func RepositoryPartition(repo, uniqueID string) []byte {
	return []byte(repoPartitionPrefix + repo + "-" + uniqueID)
}

// RepositoryPartitionPrefix is the common prefix of every repository
// partition, for an orphan sweep that lists them.
func RepositoryPartitionPrefix() []byte { return []byte(repoPartitionPrefix) }

// ParseRepositoryPartition splits a partition made by RepositoryPartition.
func ParseRepositoryPartition(partition []byte) (repo, uniqueID string, err error) {
	s, ok := strings.CutPrefix(string(partition), repoPartitionPrefix)
	i := strings.LastIndexByte(s, '-')
	if !ok || i <= 0 || i == len(s)-1 {
		return "", "", fmt.Errorf("%w repository partition %q", ErrInvalid, partition)
	}
	return s[:i], s[i+1:], nil
}

// ValidateUniqueID checks a repository unique id: a name without '-'.
func ValidateUniqueID(id string) error {
	if err := ValidateName("unique id", id); err != nil {
		return err
	}
	if strings.IndexByte(id, '-') >= 0 {
		return fmt.Errorf("%w unique id %q: contains '-'", ErrInvalid, id)
	}
	return nil
}

// StagingPartition is the partition of one staging token's entries.
func StagingPartition(token string) []byte { return []byte(stagingPartitionPrefix + token) }

// StagingPartitionPrefix is the common prefix of every staging partition.
func StagingPartitionPrefix() []byte { return []byte(stagingPartitionPrefix) }

// ParseStagingPartition returns the token of a partition made by StagingPartition.
func ParseStagingPartition(partition []byte) (string, error) {
	s, ok := strings.CutPrefix(string(partition), stagingPartitionPrefix)
	if !ok || ValidateName("staging token", s) != nil {
		return "", fmt.Errorf("%w staging partition %q", ErrInvalid, partition)
	}
	return s, nil
}

// DeletedRepository is the cleaner's work item for a deleted repository.
func DeletedRepository(repo, uniqueID string) []byte {
	return []byte(ReposPrefix + repo + "/" + uniqueID)
}

// ParseDeletedRepository splits a key made by DeletedRepository.
func ParseDeletedRepository(key []byte) (repo, uniqueID string, err error) {
	s, ok := strings.CutPrefix(string(key), ReposPrefix)
	repo, uniqueID, ok2 := strings.Cut(s, "/")
	if !ok || !ok2 || ValidateName("repository", repo) != nil || ValidateUniqueID(uniqueID) != nil {
		return "", "", fmt.Errorf("%w deleted repository key %q", ErrInvalid, key)
	}
	return repo, uniqueID, nil
}

// DeletedToken is the cleaner's work item for a staging token.
func DeletedToken(token string) []byte { return []byte(TokensPrefix + token) }

// ParseDeletedToken returns the token of a key made by DeletedToken.
func ParseDeletedToken(key []byte) (string, error) {
	s, ok := strings.CutPrefix(string(key), TokensPrefix)
	if !ok || ValidateName("staging token", s) != nil {
		return "", fmt.Errorf("%w deleted token key %q", ErrInvalid, key)
	}
	return s, nil
}

// Branch is the key of a branch record in a repository partition.
func Branch(branch string) []byte { return []byte(BranchesPrefix + branch) }

// Commit is the key of a commit record in a repository partition.
func Commit(commitID string) []byte { return []byte(CommitsPrefix + commitID) }

// Tag is the key of a tag record in a repository partition.
func Tag(tag string) []byte { return []byte(TagsPrefix + tag) }

// ParseRecord returns the name after prefix (BranchesPrefix, CommitsPrefix,
// TagsPrefix) of a record key.
func ParseRecord(prefix string, key []byte) (string, error) {
	s, ok := strings.CutPrefix(string(key), prefix)
	if !ok || s == "" {
		return "", fmt.Errorf("%w record key %q (want prefix %q)", ErrInvalid, key, prefix)
	}
	return s, nil
}

// Entry is the key of a staged entry: its raw bytes after EntryPrefix, so
// the store's byte order is the entries' order.
func Entry(key []byte) []byte {
	out := make([]byte, 0, len(EntryPrefix)+len(key))
	return append(append(out, EntryPrefix...), key...)
}

// StagingRanges is the key, in a staging partition, of the record that
// holds the token's range tombstones (one record, so a read of an entry
// can fetch them with it). It sorts after every entry key.
func StagingRanges() []byte { return []byte(StagingRangesKey) }

// StagingRangesKey is StagingRanges as a string.
const StagingRangesKey = "ranges"

// StagingSealed is the key, in a staging partition, of the marker that
// the branch update retiring the token (a commit sealing it, a reset
// replacing it) writes in the same transaction as the branch record.
// Every staged write applies only while it is missing, so a token no
// branch writes to any more is never written again, and a commit reads a
// token that cannot change under it. It sorts after every entry key.
func StagingSealed() []byte { return []byte(StagingSealedKey) }

// StagingSealedKey is StagingSealed as a string.
const StagingSealedKey = "sealed"

// ParseEntry returns the entry key of a staged entry's kv key.
func ParseEntry(key []byte) ([]byte, error) {
	if !bytes.HasPrefix(key, []byte(EntryPrefix)) || len(key) == len(EntryPrefix) {
		return nil, fmt.Errorf("%w entry key %q", ErrInvalid, key)
	}
	return key[len(EntryPrefix):], nil
}
