//go:build chaos

package chaos

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"graveler/etcdkv"
	"graveler/graveler/ref"
	"graveler/keys"
)

// orphans lists, straight from etcd, the repository partitions that no
// live repository record names and the staging partitions that no branch
// of a live repository references. s is a store on gravelerd's root; it
// only reads raw keys and maps them back to partitions.
func orphans(ctx context.Context, s *etcdkv.Store) (repoParts, stagingParts []string, err error) {
	root := s.Prefix() + "/"
	resp, err := s.Client().Get(ctx, root, clientv3.WithPrefix())
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", root, err)
	}
	live := map[string]bool{}        // repository partitions of live repositories
	seenRepo := map[string]bool{}    // repository partitions present
	seenStaging := map[string]bool{} // staging tokens present
	branchRecords := map[string][][]byte{}
	for _, kv := range resp.Kvs {
		part, key, ok := s.ParseRawKey(kv.Key)
		if !ok {
			continue
		}
		if string(part) == keys.PartitionGraveler {
			name, err := keys.ParseRepository(key)
			if err != nil {
				continue
			}
			r, err := ref.DecodeRepository(kv.Value)
			if err != nil {
				return nil, nil, fmt.Errorf("repository record %s: %w", name, err)
			}
			live[string(keys.RepositoryPartition(name, string(r.UniqueID)))] = true
			continue
		}
		if _, _, err := keys.ParseRepositoryPartition(part); err == nil {
			seenRepo[string(part)] = true
			if len(key) > len(keys.BranchesPrefix) && string(key[:len(keys.BranchesPrefix)]) == keys.BranchesPrefix {
				branchRecords[string(part)] = append(branchRecords[string(part)], kv.Value)
			}
			continue
		}
		if tok, err := keys.ParseStagingPartition(part); err == nil {
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
