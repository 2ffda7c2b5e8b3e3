package ref_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"graveler/graveler/ref"
	"graveler/keys"
)

// TestNewID: ids are UUIDv7s that fit every key they end (a unique id
// ends a partition split at its last '-'), sort in creation order and
// carry their creation time.
func TestNewID(t *testing.T) {
	before := time.Now().Truncate(time.Millisecond)
	ids := make([]string, 1000)
	for i := range ids {
		ids[i] = ref.NewID()
	}
	after := time.Now()
	for _, id := range ids {
		if len(id) != 32 || strings.Trim(id, "0123456789abcdef") != "" {
			t.Fatalf("id %q is not 32 lower-case hex digits", id)
		}
		if u, err := uuid.Parse(id); err != nil || u.Version() != 7 || u.Variant() != uuid.RFC4122 {
			t.Fatalf("id %q is not a UUIDv7: %v", id, err)
		}
		if err := keys.ValidateUniqueID(id); err != nil {
			t.Fatalf("id %q is not a valid unique id: %v", id, err)
		}
		if err := keys.ValidateName("staging token", "my-repo."+id); err != nil {
			t.Fatalf("staging token of id %q: %v", id, err)
		}
		repo, uid, err := keys.ParseRepositoryPartition(keys.RepositoryPartition("my-repo", id))
		if err != nil || repo != "my-repo" || uid != id {
			t.Fatalf("partition of my-repo and %q parses as %q, %q, %v", id, repo, uid, err)
		}
		born, ok := ref.IDTime(id)
		if !ok || born.Before(before) || born.After(after) {
			t.Fatalf("IDTime(%q) = %v, %v; want a time in [%v, %v]", id, born, ok, before, after)
		}
	}
	if !slices.IsSorted(ids) || len(slices.Compact(slices.Clone(ids))) != len(ids) {
		t.Errorf("ids made one after another are not strictly increasing: %v", ids)
	}
}

// TestIDTime reads the time of UUIDv7s in both spellings and of the ULIDs
// that records written by earlier versions hold, and nothing from other
// names.
func TestIDTime(t *testing.T) {
	for _, tc := range []struct {
		id string
		ms int64
	}{
		// RFC 9562's example UUIDv7.
		{"017f22e2-79b0-7cc3-98c4-dc0c0c07398f", 1645557742000},
		{"017f22e279b07cc398c4dc0c0c07398f", 1645557742000},
		// The ULID specification's example, and lower-case as stored.
		{"01ARZ3NDEKTSV4RRFFQ69G5FAV", 1469922850259},
		{"01arz3ndektsv4rrffq69g5fav", 1469922850259},
		{"7zzzzzzzzzzzzzzzzzzzzzzzzz", 1<<48 - 1},
	} {
		born, ok := ref.IDTime(tc.id)
		if !ok || born.UnixMilli() != tc.ms {
			t.Errorf("IDTime(%q) = %v (%d ms), %v; want %d ms", tc.id, born, born.UnixMilli(), ok, tc.ms)
		}
	}
	for _, id := range []string{
		"", "plainid", "not-a-ulid",
		"f47ac10b58cc4372a5670e02b2c3d479",       // UUIDv4
		"017f22e279b07cc318c4dc0c0c07398f",       // version 7, wrong variant
		"{017f22e2-79b0-7cc3-98c4-dc0c0c07398f}", // not a name character
		"01ARZ3NDEKTSV4RRFFQ69G5FAU",             // U is not base32 here
		"81ARZ3NDEKTSV4RRFFQ69G5FAV",             // timestamp beyond 48 bits
		"01ARZ3NDEKTSV4RRFFQ69G5FA",              // 25 digits
		"urn:uuid:017f22e2-79b0-7cc3-98c4-dc0c0c07398f",
	} {
		if born, ok := ref.IDTime(id); ok {
			t.Errorf("IDTime(%q) = %v, true; want no time", id, born)
		}
	}
}
