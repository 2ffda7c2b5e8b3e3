package keys_test

import (
	"bytes"
	"errors"
	"testing"

	"graveler/keys"
)

// Every key the store holds is built by this package and parsed back by
// the cleaner and by listings. The fuzz targets check that the builders
// and parsers are inverse on valid names, and that the parsers accept only
// canonical keys (parse then build gives the input back) and never panic.

func FuzzNameRoundTrip(f *testing.F) {
	for _, s := range []string{"main", "a-b", "x.y_z", ".", "..", "a/b", "", "01jabcdefg"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if err := keys.ValidateName("name", s); err != nil {
			if !errors.Is(err, keys.ErrInvalid) {
				t.Fatalf("ValidateName(%q): %v does not wrap ErrInvalid", s, err)
			}
			// Parsers must reject what the validator rejects.
			if _, err := keys.ParseRepository(keys.Repository(s)); err == nil {
				t.Fatalf("ParseRepository accepted invalid name %q", s)
			}
			if _, err := keys.ParseStagingPartition(keys.StagingPartition(s)); err == nil {
				t.Fatalf("ParseStagingPartition accepted invalid token %q", s)
			}
			return
		}
		if got, err := keys.ParseRepository(keys.Repository(s)); err != nil || got != s {
			t.Fatalf("repository %q: parsed %q, %v", s, got, err)
		}
		if got, err := keys.ParseStagingPartition(keys.StagingPartition(s)); err != nil || got != s {
			t.Fatalf("staging partition %q: parsed %q, %v", s, got, err)
		}
		if got, err := keys.ParseDeletedToken(keys.DeletedToken(s)); err != nil || got != s {
			t.Fatalf("deleted token %q: parsed %q, %v", s, got, err)
		}
		for prefix, build := range map[string]func(string) []byte{keys.BranchesPrefix: keys.Branch, keys.CommitsPrefix: keys.Commit, keys.TagsPrefix: keys.Tag} {
			if got, err := keys.ParseRecord(prefix, build(s)); err != nil || got != s {
				t.Fatalf("record %s%q: parsed %q, %v", prefix, s, got, err)
			}
		}
	})
}

func FuzzRepositoryPartitionRoundTrip(f *testing.F) {
	f.Add("my-repo", "01jd3k")
	f.Add("r", "a-b")
	f.Add("", "x")
	f.Add("a/b", "c")
	f.Fuzz(func(t *testing.T, repo, uid string) {
		valid := keys.ValidateName("repository", repo) == nil && keys.ValidateUniqueID(uid) == nil
		gotRepo, gotUID, err := keys.ParseRepositoryPartition(keys.RepositoryPartition(repo, uid))
		if valid && (err != nil || gotRepo != repo || gotUID != uid) {
			t.Fatalf("partition (%q, %q): parsed (%q, %q), %v", repo, uid, gotRepo, gotUID, err)
		}
		if !bytes.HasPrefix(keys.RepositoryPartition(repo, uid), keys.RepositoryPartitionPrefix()) {
			t.Fatalf("partition of %q lacks the sweep prefix", repo)
		}
		dRepo, dUID, err := keys.ParseDeletedRepository(keys.DeletedRepository(repo, uid))
		if valid != (err == nil) {
			t.Fatalf("deleted repository (%q, %q): valid=%v, parse error %v", repo, uid, valid, err)
		}
		if valid && (dRepo != repo || dUID != uid) {
			t.Fatalf("deleted repository (%q, %q): parsed (%q, %q)", repo, uid, dRepo, dUID)
		}
	})
}

func FuzzEntryRoundTrip(f *testing.F) {
	f.Add([]byte("a/b"))
	f.Add([]byte{})
	f.Add([]byte{0xff, 0})
	f.Fuzz(func(t *testing.T, k []byte) {
		got, err := keys.ParseEntry(keys.Entry(k))
		if len(k) == 0 {
			if err == nil {
				t.Fatalf("ParseEntry accepted the empty entry key")
			}
			return
		}
		if err != nil || !bytes.Equal(got, k) {
			t.Fatalf("entry %q: parsed %q, %v", k, got, err)
		}
	})
}

// FuzzParsers feeds arbitrary bytes to every parser: an accepted key must
// rebuild to exactly the input, so two different keys never parse to the
// same name (the cleaner relies on that to delete the right partition).
func FuzzParsers(f *testing.F) {
	for _, s := range []string{"repos/main", "repo/a-b-c", "repo/-x", "repo/x-", "staging/t1", "tokens/t", "repos/r/u", "repos/r/u-v", "branches/", "key/", "key/\xff"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		fail := func(what string, out []byte) {
			t.Helper()
			if !bytes.Equal(out, in) {
				t.Fatalf("%s accepted %q but rebuilds %q", what, in, out)
			}
		}
		if s, err := keys.ParseRepository(in); err == nil {
			fail("ParseRepository", keys.Repository(s))
		} else if !errors.Is(err, keys.ErrInvalid) {
			t.Fatalf("ParseRepository: %v does not wrap ErrInvalid", err)
		}
		if r, u, err := keys.ParseRepositoryPartition(in); err == nil {
			fail("ParseRepositoryPartition", keys.RepositoryPartition(r, u))
		} else if !errors.Is(err, keys.ErrInvalid) {
			t.Fatalf("ParseRepositoryPartition: %v does not wrap ErrInvalid", err)
		}
		if s, err := keys.ParseStagingPartition(in); err == nil {
			fail("ParseStagingPartition", keys.StagingPartition(s))
		}
		if r, u, err := keys.ParseDeletedRepository(in); err == nil {
			fail("ParseDeletedRepository", keys.DeletedRepository(r, u))
		}
		if s, err := keys.ParseDeletedToken(in); err == nil {
			fail("ParseDeletedToken", keys.DeletedToken(s))
		}
		for _, p := range []string{keys.BranchesPrefix, keys.CommitsPrefix, keys.TagsPrefix} {
			if s, err := keys.ParseRecord(p, in); err == nil {
				fail("ParseRecord "+p, append([]byte(p), s...))
			}
		}
		if k, err := keys.ParseEntry(in); err == nil {
			fail("ParseEntry", keys.Entry(k))
		}
	})
}
