package graveler_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"graveler/graveler"
)

// The validators guard every name and entry that reaches the store from
// the API. The fuzz targets check three properties on arbitrary input:
// they never panic, a rejection always wraps ErrInvalidArgument (so the
// server maps it to INVALID_ARGUMENT), and an accepted input satisfies the
// documented rule, checked here by an independent implementation.

func checkRejection(t *testing.T, what, in string, err error, specific error) {
	t.Helper()
	if !errors.Is(err, graveler.ErrInvalidArgument) {
		t.Fatalf("%s %q: error %v does not wrap ErrInvalidArgument", what, in, err)
	}
	if !errors.Is(err, specific) {
		t.Fatalf("%s %q: error %v does not wrap %v", what, in, err, specific)
	}
}

// The documented patterns, as regular expressions: the validators check
// the same with byte loops, and the fuzz targets hold them to these.
var (
	repositoryIDRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{2,62}$`)
	refNameRe      = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]*$`)
	hexRe          = regexp.MustCompile(`^[0-9a-f]+$`)
)

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return s != ""
}

// refNameOK restates the branch/tag rule without regular expressions.
func refNameOK(s string, max int) bool {
	if s == "" || len(s) > max || s[0] == '.' || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	if strings.HasSuffix(s, ".lock") || strings.Contains(s, "..") || s == "HEAD" || s == "head" {
		return false
	}
	return !(len(s) == graveler.CommitIDLen && isLowerHex(s))
}

func FuzzValidateRepositoryID(f *testing.F) {
	for _, s := range []string{"repo", "my-repo-1", "ab", "-ab", "ABC", "a/b", strings.Repeat("a", 63), strings.Repeat("a", 64), "", "é-repo"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := graveler.ValidateRepositoryID(graveler.RepositoryID(s))
		if ok := repositoryIDRe.MatchString(s); ok != (err == nil) {
			t.Fatalf("repository id %q: validator says %v, the documented pattern says ok=%v", s, err, ok)
		}
		if err != nil {
			checkRejection(t, "repository id", s, err, graveler.ErrInvalidRepositoryID)
			return
		}
		if len(s) < 3 || len(s) > graveler.MaxRepositoryIDLen || s[0] == '-' {
			t.Fatalf("accepted repository id %q of length %d", s, len(s))
		}
		for i := 0; i < len(s); i++ {
			if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				t.Fatalf("accepted repository id %q with byte %#x", s, c)
			}
		}
		// A repository id is part of a partition name and a resource name:
		// it must not carry a separator.
		if strings.ContainsAny(s, "/ \x00") {
			t.Fatalf("accepted repository id %q with a separator", s)
		}
	})
}

func FuzzValidateBranchID(f *testing.F) {
	for _, s := range []string{"main", "feature.x", "a..b", "x.lock", "HEAD", ".hidden", "-x", "a~1", "a^", "a@", "a/b",
		strings.Repeat("0", 64), strings.Repeat("g", 64), strings.Repeat("b", 257), ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := graveler.ValidateBranchID(graveler.BranchID(s))
		if err != nil {
			checkRejection(t, "branch id", s, err, graveler.ErrInvalidBranchID)
		}
		if ok := refNameOK(s, graveler.MaxBranchIDLen); ok != (err == nil) {
			t.Fatalf("branch id %q: validator says %v, rule says ok=%v", s, err, ok)
		}
		if ok := refNameRe.MatchString(s) && len(s) <= graveler.MaxBranchIDLen && !strings.HasSuffix(s, ".lock") &&
			!strings.Contains(s, "..") && s != "HEAD" && s != "head" && !(len(s) == graveler.CommitIDLen && hexRe.MatchString(s)); ok != (err == nil) {
			t.Fatalf("branch id %q: validator says %v, the documented pattern says ok=%v", s, err, ok)
		}
		// Accepted names never contain the reference syntax, so "name~1"
		// always parses as a modifier on name.
		if err == nil && strings.ContainsAny(s, "~^@$/:") {
			t.Fatalf("accepted branch id %q with reference syntax", s)
		}
	})
}

func FuzzValidateTagID(f *testing.F) {
	for _, s := range []string{"v1.0", "release-2024", "v1..0", "x.lock", "head", strings.Repeat("a", 256), ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := graveler.ValidateTagID(graveler.TagID(s))
		if err != nil {
			checkRejection(t, "tag id", s, err, graveler.ErrInvalidTagID)
		}
		if ok := refNameOK(s, graveler.MaxTagIDLen); ok != (err == nil) {
			t.Fatalf("tag id %q: validator says %v, rule says ok=%v", s, err, ok)
		}
	})
}

func FuzzValidateCommitID(f *testing.F) {
	for _, s := range []string{strings.Repeat("a", 64), strings.Repeat("A", 64), strings.Repeat("a", 63), "abcd", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := graveler.ValidateCommitID(graveler.CommitID(s))
		if err != nil {
			checkRejection(t, "commit id", s, err, graveler.ErrInvalidCommitID)
		}
		if ok := len(s) == graveler.CommitIDLen && isLowerHex(s) && hexRe.MatchString(s); ok != (err == nil) {
			t.Fatalf("commit id %q: validator says %v, rule says ok=%v", s, err, ok)
		}
		// A valid commit id is never a valid branch name, so a full commit
		// id in a reference can never be shadowed by a branch.
		if err == nil && graveler.ValidateBranchID(graveler.BranchID(s)) == nil {
			t.Fatalf("commit id %q is also a valid branch id", s)
		}
	})
}

func FuzzValidateKey(f *testing.F) {
	f.Add([]byte("a/b/c"))
	f.Add([]byte{0, 0xff})
	f.Add([]byte{})
	f.Add(make([]byte, graveler.MaxKeyLen+1))
	f.Fuzz(func(t *testing.T, k []byte) {
		err := graveler.ValidateKey(graveler.Key(k))
		if err != nil {
			checkRejection(t, "key", string(k), err, graveler.ErrInvalidKey)
		}
		if ok := len(k) >= 1 && len(k) <= graveler.MaxKeyLen; ok != (err == nil) {
			t.Fatalf("key of %d bytes: validator says %v", len(k), err)
		}
		// Keys are arbitrary bytes, and Copy must preserve them exactly.
		if c := graveler.Key(k).Copy(); !c.Equal(k) || (len(k) > 0 && &c[0] == &k[0]) {
			t.Fatalf("Copy of %q is %q or shares memory", k, c)
		}
	})
}

func FuzzValidateValue(f *testing.F) {
	f.Add([]byte("etag"), []byte("data"), false)
	f.Add([]byte{}, []byte("x"), false)
	f.Add(make([]byte, graveler.MaxIdentityLen+1), []byte{}, false)
	f.Add([]byte("id"), []byte{}, true)
	f.Fuzz(func(t *testing.T, identity, data []byte, nilValue bool) {
		var v *graveler.Value
		if !nilValue {
			v = &graveler.Value{Identity: identity, Data: data}
		}
		err := graveler.ValidateValue(v)
		if err != nil {
			if !errors.Is(err, graveler.ErrInvalidArgument) {
				t.Fatalf("value error %v does not wrap ErrInvalidArgument", err)
			}
			if !errors.Is(err, graveler.ErrInvalidValue) && !errors.Is(err, graveler.ErrValueTooLarge) {
				t.Fatalf("value error %v wraps neither ErrInvalidValue nor ErrValueTooLarge", err)
			}
		}
		ok := !nilValue && len(identity) >= 1 && len(identity) <= graveler.MaxIdentityLen && len(data) <= graveler.MaxValueDataLen
		if ok != (err == nil) {
			t.Fatalf("value (nil=%v, identity %d bytes, data %d bytes): validator says %v", nilValue, len(identity), len(data), err)
		}
	})
}

func FuzzValidateStorageNamespace(f *testing.F) {
	for _, s := range []string{"s3://bucket/prefix", "file:///tmp/x", "mem://x", "s3://", "http://x", "", "S3://b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := graveler.ValidateStorageNamespace(graveler.StorageNamespace(s))
		if err != nil {
			checkRejection(t, "storage namespace", s, err, graveler.ErrInvalidStorageNamespace)
			return
		}
		scheme, rest, found := strings.Cut(s, "://")
		if !found || rest == "" || (scheme != "s3" && scheme != "file" && scheme != "mem") {
			t.Fatalf("accepted storage namespace %q", s)
		}
	})
}

// TestEchoBounded: an error repeats at most MaxEcho bytes of a client's
// value, and says how long the whole was.
func TestEchoBounded(t *testing.T) {
	if got := graveler.Echo("a\x01"); got != `"a\x01"` {
		t.Errorf("Echo of a short value: %s", got)
	}
	long := strings.Repeat("\x01", 3<<20)
	got := graveler.Echo([]byte(long))
	if len(got) > 4*graveler.MaxEcho+32 || !strings.HasSuffix(got, "... (3145728 bytes)") {
		t.Errorf("Echo of 3 MiB: %d bytes, ending %q", len(got), got[max(0, len(got)-40):])
	}
	for _, err := range []error{
		graveler.ValidateBranchID(graveler.BranchID(long)),
		graveler.ValidateRepositoryID(graveler.RepositoryID(long)),
		graveler.ValidateCommitID(graveler.CommitID(long)),
		graveler.ValidateStorageNamespace(graveler.StorageNamespace(long)),
		graveler.ValidateRef(graveler.Ref(long)),
	} {
		if err == nil || len(err.Error()) > 2<<10 {
			t.Errorf("error of a 3 MiB value: %d bytes", len(err.Error()))
		}
	}
}
