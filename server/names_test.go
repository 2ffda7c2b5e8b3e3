package server

import (
	"strings"
	"testing"

	"graveler/graveler"
)

// TestParseChildAsSplit: parseChild accepts exactly the names that split
// on "/" into repositories/{repository}/{collection}/{id}, both non-empty.
func TestParseChildAsSplit(t *testing.T) {
	names := []string{
		"repositories/repo1/branches/main", "repositories/repo1/branches/", "repositories//branches/main",
		"repositories/repo1/branches/main/", "repositories/repo1/branches/a/b", "repositories/repo1/tags/main",
		"repositories/repo1/branches", "repositories/repo1", "repositories/", "repositories", "",
		"/repositories/repo1/branches/main", "repository/repo1/branches/main", "repositories/repo1//main",
		"repositories/repo1/branches//", "repositories/Bad_Repo/branches/main", "repositories/r/branches/main",
		"repositories/repo1/branchesx/main", "xrepositories/repo1/branches/main",
	}
	for _, name := range names {
		parts := strings.Split(name, "/")
		wantOK := len(parts) == 4 && parts[0] == collRepositories && parts[2] == collBranches && parts[1] != "" && parts[3] != ""
		repo, id, err := parseChild(name, collBranches)
		if !wantOK {
			if err == nil {
				t.Errorf("parseChild(%q) = %q, %q; want an error", name, repo, id)
			}
			continue
		}
		if rerr := graveler.ValidateRepositoryID(graveler.RepositoryID(parts[1])); rerr != nil {
			if err == nil {
				t.Errorf("parseChild(%q): want the repository id's error %v", name, rerr)
			}
			continue
		}
		if err != nil || string(repo) != parts[1] || id != parts[3] {
			t.Errorf("parseChild(%q) = %q, %q, %v; want %q, %q", name, repo, id, err, parts[1], parts[3])
		}
	}
}
