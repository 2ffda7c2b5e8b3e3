package fsck

import (
	"strings"
	"testing"
)

func TestFsckCompareHashes(t *testing.T) {
	m := func(name string, compact int64, hash uint32, errText string) Member {
		return Member{ID: name, Name: name, CompactRevision: compact, Hash: hash, Error: errText}
	}
	for _, tc := range []struct {
		name     string
		members  []Member
		compared int
		mismatch []string // substrings of the description; none: agreement
	}{
		{"one member", []Member{m("a", 5, 1, "")}, 0, nil},
		{"agree", []Member{m("a", 5, 7, ""), m("b", 5, 7, ""), m("c", 5, 7, "")}, 3, nil},
		{"one differs", []Member{m("a", 5, 7, ""), m("b", 5, 7, ""), m("c", 5, 8, "")}, 3, []string{"a (a)=00000007", "c (c)=00000008"}},
		// Hashes over different histories are not comparable.
		{"other compaction", []Member{m("a", 5, 7, ""), m("b", 6, 8, "")}, 0, nil},
		{"unreachable left out", []Member{m("a", 5, 7, ""), m("b", 5, 9, "timeout"), m("c", 5, 7, "")}, 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			compared, mismatch := compareHashes(tc.members)
			if compared != tc.compared {
				t.Errorf("compared %d, want %d", compared, tc.compared)
			}
			if (mismatch == "") != (tc.mismatch == nil) {
				t.Fatalf("mismatch %q, want one containing %v", mismatch, tc.mismatch)
			}
			for _, s := range tc.mismatch {
				if !strings.Contains(mismatch, s) {
					t.Errorf("mismatch %q lacks %q", mismatch, s)
				}
			}
		})
	}
}
