package ref

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"slices"
	"time"

	"graveler/graveler"
)

// CommitDatePrecision is the precision of a commit's creation date. AddCommit
// truncates dates to it before hashing and storing, so that the stored record
// is exactly the content that was hashed and a dump/restore round trip keeps
// the id.
const CommitDatePrecision = time.Microsecond

// commitIDDomain starts every commit hash, so no other hashed content of
// the system can collide with a commit id by construction.
const commitIDDomain = "graveler commit v1"

// ComputeCommitID returns the id of a commit: the lower-case hex SHA-256 of
// its canonical encoding, which is, in order:
//
//	string  "graveler commit v1"
//	int64   Version
//	string  Committer
//	string  Message
//	string  MetaRangeID
//	int64   CreationDate in Unix microseconds (UTC; truncated to CommitDatePrecision)
//	int64   number of parents, then each parent id as a string, in order
//	int64   number of metadata pairs, then key and value strings, sorted by key
//	int64   Generation
//
// where int64 is 8 bytes big-endian and a string is its length as an int64
// followed by its bytes. Lengths make the encoding unambiguous (no two
// different commits encode the same), and parent order is kept because it is
// meaningful (the first parent is the branch's own history).
func ComputeCommitID(c *graveler.Commit) graveler.CommitID {
	h := sha256.New()
	writeString(h, commitIDDomain)
	writeInt(h, int64(c.Version))
	writeString(h, c.Committer)
	writeString(h, c.Message)
	writeString(h, string(c.MetaRangeID))
	writeInt(h, c.CreationDate.Truncate(CommitDatePrecision).UnixMicro())
	writeInt(h, int64(len(c.Parents)))
	for _, p := range c.Parents {
		writeString(h, string(p))
	}
	mk := make([]string, 0, len(c.Metadata))
	for k := range c.Metadata {
		mk = append(mk, k)
	}
	slices.Sort(mk)
	writeInt(h, int64(len(mk)))
	for _, k := range mk {
		writeString(h, k)
		writeString(h, c.Metadata[k])
	}
	writeInt(h, int64(c.Generation))
	return graveler.CommitID(hex.EncodeToString(h.Sum(nil)))
}

func writeInt(h hash.Hash, v int64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(v))
	h.Write(b[:])
}

func writeString(h hash.Hash, s string) {
	writeInt(h, int64(len(s)))
	h.Write([]byte(s))
}
