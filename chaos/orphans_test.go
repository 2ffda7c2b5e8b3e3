//go:build chaos

package chaos

import (
	"context"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/graveler/ref"
	"graveler/keys"
)

// orphans lists, straight from etcd, the repository partitions that no
// live repository record names and the staging partitions that no branch
// of a live repository references. root is gravelerd's etcd prefix.
func orphans(ctx context.Context, cli *clientv3.Client, root string) (repoParts, stagingParts []string, err error) {
	root = strings.TrimSuffix(root, "/") + "/"
	resp, err := cli.Get(ctx, root, clientv3.WithPrefix())
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", root, err)
	}
	live := map[string]bool{}        // repository partitions of live repositories
	seenRepo := map[string]bool{}    // repository partitions present
	seenStaging := map[string]bool{} // staging tokens present
	branchRecords := map[string][][]byte{}
	reposRecord := keys.PartitionGraveler + "/" + keys.ReposPrefix
	for _, kv := range resp.Kvs {
		k := strings.TrimPrefix(string(kv.Key), root)
		switch {
		case strings.HasPrefix(k, reposRecord):
			name := strings.TrimPrefix(k, reposRecord)
			r, err := ref.DecodeRepository(kv.Value)
			if err != nil {
				return nil, nil, fmt.Errorf("repository record %s: %w", name, err)
			}
			live[string(keys.RepositoryPartition(name, string(r.UniqueID)))] = true
		case strings.HasPrefix(k, "repo/"):
			part, rest, _ := strings.Cut(strings.TrimPrefix(k, "repo/"), "/")
			part = "repo/" + part
			seenRepo[part] = true
			if strings.HasPrefix(rest, keys.BranchesPrefix) {
				branchRecords[part] = append(branchRecords[part], kv.Value)
			}
		case strings.HasPrefix(k, "staging/"):
			tok, _, _ := strings.Cut(strings.TrimPrefix(k, "staging/"), "/")
			seenStaging[tok] = true
		}
	}
	referenced := map[string]bool{}
	for part, recs := range branchRecords {
		if !live[part] {
			continue
		}
		for _, data := range recs {
			b, err := ref.DecodeBranch(data)
			if err != nil {
				return nil, nil, fmt.Errorf("branch record in %s: %w", part, err)
			}
			referenced[string(b.StagingToken)] = true
			for _, t := range b.SealedTokens {
				referenced[string(t)] = true
			}
		}
	}
	for p := range seenRepo {
		if !live[p] {
			repoParts = append(repoParts, p)
		}
	}
	for t := range seenStaging {
		if !referenced[t] {
			stagingParts = append(stagingParts, t)
		}
	}
	return repoParts, stagingParts, nil
}
