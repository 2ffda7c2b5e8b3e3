package client

// Resource names of the graveler.v1 API (AIP-122).

// Repository returns "repositories/{repo}".
func Repository(repo string) string { return "repositories/" + repo }

// Branch returns "repositories/{repo}/branches/{branch}".
func Branch(repo, branch string) string { return Repository(repo) + "/branches/" + branch }

// Tag returns "repositories/{repo}/tags/{tag}".
func Tag(repo, tag string) string { return Repository(repo) + "/tags/" + tag }

// Commit returns "repositories/{repo}/commits/{ref}"; ref may be any
// reference expression.
func Commit(repo, ref string) string { return Repository(repo) + "/commits/" + ref }
