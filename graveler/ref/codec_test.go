package ref

import (
	"bytes"
	"encoding/hex"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"graveler/graveler"
	"graveler/kv"
)

// Records as format version 1 stored them before write_id existed. They
// must decode unchanged: a write id is optional and means nothing to a
// reader, which is why adding it kept the format version.
const (
	goldenRepositoryV1 = "0801120e73333a2f2f6275636b65742f6e731a046d61696e220608a5ebdcca062802321a30316a6630303030303030303030303030303030303030303030"
	goldenBranchV1     = "0801120263311a077265706f2e743222077265706f2e7431"
	goldenTagV1        = "080112026331"
)

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeRecordsWithoutWriteID(t *testing.T) {
	r, err := DecodeRepository(unhex(t, goldenRepositoryV1))
	if err != nil {
		t.Fatal(err)
	}
	want := graveler.Repository{StorageNamespace: "s3://bucket/ns", DefaultBranchID: "main",
		CreationDate: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), State: graveler.RepositoryStateActive, UniqueID: "01jf0000000000000000000000"}
	if !r.CreationDate.Equal(want.CreationDate) {
		t.Fatalf("creation date %v", r.CreationDate)
	}
	r.CreationDate = want.CreationDate
	if *r != want {
		t.Fatalf("repository %+v, want %+v", *r, want)
	}
	b, err := DecodeBranch(unhex(t, goldenBranchV1))
	if err != nil || b.CommitID != "c1" || b.StagingToken != "repo.t2" || !slices.Equal(b.SealedTokens, []graveler.StagingToken{"repo.t1"}) {
		t.Fatalf("branch %+v, %v", b, err)
	}
	c, err := decodeTag(unhex(t, goldenTagV1))
	if err != nil || c != "c1" {
		t.Fatalf("tag %q, %v", c, err)
	}
}

// TestEncodeWriteIDPerWrite: two encodings of the same record differ (each
// write carries its own write id, which the etcd store's settling of an
// ambiguous compare-and-swap relies on) and decode to the same record.
func TestEncodeWriteIDPerWrite(t *testing.T) {
	repo := &graveler.Repository{StorageNamespace: "mem://ns", DefaultBranchID: "main", State: graveler.RepositoryStateDeleting, UniqueID: "u1"}
	branch := &graveler.Branch{CommitID: "c1", StagingToken: "repo.t1"}
	encodings := []struct {
		name   string
		encode func() ([]byte, error)
		decode func([]byte) (any, error)
	}{
		{"repository", func() ([]byte, error) { return encodeRepository(repo) },
			func(b []byte) (any, error) { r, err := DecodeRepository(b); return *r, err }},
		{"branch", func() ([]byte, error) { return encodeBranch(branch) },
			func(b []byte) (any, error) {
				r, err := DecodeBranch(b)
				return r.CommitID + "/" + graveler.CommitID(r.StagingToken), err
			}},
		{"tag", func() ([]byte, error) { return encodeTag("c1") },
			func(b []byte) (any, error) { return decodeTag(b) }},
	}
	for _, e := range encodings {
		a, err := e.encode()
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.encode()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(a, b) {
			t.Errorf("%s: two writes store the same bytes", e.name)
		}
		da, errA := e.decode(a)
		db, errB := e.decode(b)
		if errA != nil || errB != nil || da != db {
			t.Errorf("%s: decoded %v (%v) and %v (%v)", e.name, da, errA, db, errB)
		}
	}
}

// TestBranchOverrideTokens: a branch's override tokens survive encoding,
// and a branch naming one that is not among its sealed tokens is refused.
func TestBranchOverrideTokens(t *testing.T) {
	b := &graveler.Branch{CommitID: graveler.CommitID(bytes.Repeat([]byte("a"), 64)), StagingToken: "repo.t3", SealedTokens: []graveler.StagingToken{"repo.t2", "repo.t1"}, OverrideTokens: []graveler.StagingToken{"repo.t2"}}
	if err := validateBranch(b); err != nil {
		t.Fatal(err)
	}
	data, err := encodeBranch(b)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeBranch(data)
	if err != nil || !slices.Equal(got.OverrideTokens, b.OverrideTokens) || !slices.Equal(got.SealedTokens, b.SealedTokens) {
		t.Fatalf("decoded %+v, %v; want %+v", got, err, b)
	}
	b.OverrideTokens = []graveler.StagingToken{"repo.t3"}
	if err := validateBranch(b); !errors.Is(err, graveler.ErrInvalidArgument) {
		t.Fatalf("an override token that is the staging token: %v, want ErrInvalidArgument", err)
	}
}

// TestCommitUserBytesIsWhatTheRecordStores: graveler.CommitUserBytes, by
// which commits are refused before any work, counts exactly what the
// record encodes for message, committer and metadata; and a record at
// MaxCommitUserBytes with every other field at its largest still fits
// the store's value limit, so the check refuses no record the store
// would hold by more than that margin.
func TestCommitUserBytesIsWhatTheRecordStores(t *testing.T) {
	for _, c := range []graveler.Commit{
		{},
		{Message: "m"},
		{Committer: strings.Repeat("c", 200), Message: strings.Repeat("m", 20000)},
		{Metadata: graveler.Metadata{"": "", "k": strings.Repeat("v", 300), strings.Repeat("k", 70000): "v"}},
	} {
		data, err := encodeCommit(&c)
		if err != nil {
			t.Fatal(err)
		}
		rest, err := encodeCommit(&graveler.Commit{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := graveler.CommitUserBytes(c.Message, c.Committer, c.Metadata), len(data)-len(rest); got != want {
			t.Errorf("CommitUserBytes = %d, the record stores %d (message %d, committer %d, %d metadata entries)", got, want, len(c.Message), len(c.Committer), len(c.Metadata))
		}
	}
	msg := strings.Repeat("m", graveler.MaxCommitMessageLen)
	md := graveler.Metadata{"k": ""}
	md["k"] = strings.Repeat("v", graveler.MaxCommitUserBytes-graveler.CommitUserBytes(msg, "", md)-4)
	for graveler.CommitUserBytes(msg, "", md) < graveler.MaxCommitUserBytes {
		md["k"] += "v"
	}
	if n := graveler.CommitUserBytes(msg, "", md); n != graveler.MaxCommitUserBytes {
		t.Fatalf("could not size the record to the limit: %d", n)
	}
	worst := graveler.Commit{
		Version: math.MaxInt32, Message: msg, Metadata: md, Generation: math.MaxInt64,
		MetaRangeID:  graveler.MetaRangeID(strings.Repeat("f", 64)),
		CreationDate: time.Date(9999, 12, 31, 23, 59, 59, 999_000_000, time.UTC),
		Parents:      []graveler.CommitID{graveler.CommitID(strings.Repeat("a", 64)), graveler.CommitID(strings.Repeat("b", 64))},
	}
	if err := graveler.ValidateCommitContent(worst.Message, worst.Committer, worst.Metadata); err != nil {
		t.Fatalf("a record at the limit: %v", err)
	}
	data, err := encodeCommit(&worst)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > kv.DefaultLimits.MaxValueSize {
		t.Errorf("a record at the limit encodes to %d bytes, over the store's %d", len(data), kv.DefaultLimits.MaxValueSize)
	}
}
