package server

import (
	"fmt"
	"strings"

	"graveler/graveler"
)

// Resource name collections (AIP-122).
const (
	collRepositories = "repositories"
	collBranches     = "branches"
	collTags         = "tags"
	collCommits      = "commits"
)

// RepositoryName returns "repositories/{repo}".
func RepositoryName(repo graveler.RepositoryID) string {
	return collRepositories + "/" + string(repo)
}

// BranchName returns "repositories/{repo}/branches/{branch}".
func BranchName(repo graveler.RepositoryID, branch graveler.BranchID) string {
	return RepositoryName(repo) + "/" + collBranches + "/" + string(branch)
}

// TagName returns "repositories/{repo}/tags/{tag}".
func TagName(repo graveler.RepositoryID, tag graveler.TagID) string {
	return RepositoryName(repo) + "/" + collTags + "/" + string(tag)
}

// CommitName returns "repositories/{repo}/commits/{commit}".
func CommitName(repo graveler.RepositoryID, commit graveler.CommitID) string {
	return RepositoryName(repo) + "/" + collCommits + "/" + string(commit)
}

func parseRepository(name string) (graveler.RepositoryID, error) {
	id, ok := strings.CutPrefix(name, collRepositories+"/")
	if !ok || id == "" || strings.Contains(id, "/") {
		return "", fmt.Errorf("%w: %s is not repositories/{repository}", ErrInvalidName, graveler.Echo(name))
	}
	repo := graveler.RepositoryID(id)
	if err := graveler.ValidateRepositoryID(repo); err != nil {
		return "", err
	}
	return repo, nil
}

// parseChild splits "repositories/{repo}/{collection}/{id}".
func parseChild(name, collection string) (graveler.RepositoryID, string, error) {
	// Cut rather than Split: this runs on every write, and Split allocates.
	rest, ok := strings.CutPrefix(name, collRepositories+"/")
	r, rest, ok2 := strings.Cut(rest, "/")
	c, id, ok3 := strings.Cut(rest, "/")
	if !ok || !ok2 || !ok3 || c != collection || r == "" || id == "" || strings.Contains(id, "/") {
		return "", "", fmt.Errorf("%w: %s is not repositories/{repository}/%s/{id}", ErrInvalidName, graveler.Echo(name), collection)
	}
	repo := graveler.RepositoryID(r)
	if err := graveler.ValidateRepositoryID(repo); err != nil {
		return "", "", err
	}
	return repo, id, nil
}

func parseBranch(name string) (graveler.RepositoryID, graveler.BranchID, error) {
	repo, id, err := parseChild(name, collBranches)
	if err != nil {
		return "", "", err
	}
	b := graveler.BranchID(id)
	if err := graveler.ValidateBranchID(b); err != nil {
		return "", "", err
	}
	return repo, b, nil
}

func parseTag(name string) (graveler.RepositoryID, graveler.TagID, error) {
	repo, id, err := parseChild(name, collTags)
	if err != nil {
		return "", "", err
	}
	t := graveler.TagID(id)
	if err := graveler.ValidateTagID(t); err != nil {
		return "", "", err
	}
	return repo, t, nil
}

func parseCommit(name string) (graveler.RepositoryID, graveler.Ref, error) {
	repo, id, err := parseChild(name, collCommits)
	if err != nil {
		return "", "", err
	}
	if err := graveler.ValidateRef(graveler.Ref(id)); err != nil {
		return "", "", err
	}
	return repo, graveler.Ref(id), nil
}

// requireRef checks a ref expression at the API boundary: present, and no
// longer than graveler.MaxRefLen, so that nothing downstream carries (or
// repeats in an error) megabytes of it.
func requireRef(field, ref string) (graveler.Ref, error) {
	if ref == "" {
		return "", fmt.Errorf("%w: %s", ErrMissingField, field)
	}
	if err := graveler.ValidateRef(graveler.Ref(ref)); err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return graveler.Ref(ref), nil
}
