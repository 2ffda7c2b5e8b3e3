package fsck

import (
	"maps"
	"slices"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"graveler/graveler"
	"graveler/graveler/ref"
	"graveler/keys"
)

// commitNode is what the graph checks need of one commit record.
type commitNode struct {
	parents    []graveler.CommitID
	generation int
	metaRange  graveler.MetaRangeID
	// decoded: the record decodes; an undecodable record still exists,
	// so what points at it does not dangle.
	decoded bool
}

// checkRepository checks one live repository's refs at the snapshot's
// revision and hands the metaranges its branches and tags reach to blobs.
func (r *run) checkRepository(s *snapshot, repo repoRecord, blobs *blobChecks) error {
	name, rev := repo.name, s.rev
	base := r.c.store.RawPrefix([]byte(repo.part))

	commits := map[graveler.CommitID]*commitNode{}
	prefix := base + keys.CommitsPrefix
	err := r.scanPrefix("read the commits of repository "+name, rev, prefix, false, func(kv *mvccpb.KeyValue) error {
		id := graveler.CommitID(kv.Key[len(prefix):])
		res := "commit " + string(id)
		if err := graveler.ValidateCommitID(id); err != nil {
			commits[id] = &commitNode{}
			r.find(KindRecordUndecodable, name, res, "the key does not name a commit: %v", err)
			return nil
		}
		c, err := ref.DecodeCommit(kv.Value)
		if err != nil {
			commits[id] = &commitNode{}
			r.find(KindRecordUndecodable, name, res, "%v", err)
			return nil
		}
		if got := ref.ComputeCommitID(c); got != id {
			r.find(KindCommitIDMismatch, name, res, "the record's content hashes to %s", got)
		}
		commits[id] = &commitNode{parents: c.Parents, generation: c.Generation, metaRange: c.MetaRangeID, decoded: true}
		return nil
	})
	if err != nil {
		return err
	}
	r.checkGraph(name, commits)

	// Branches (read with the snapshot) and tags: what history starts from.
	var heads []graveler.CommitID
	for _, br := range s.branches[repo.part] {
		if br.b == nil {
			continue
		}
		r.stats(func(st *Stats) { st.Branches++ })
		if _, ok := commits[br.b.CommitID]; !ok {
			r.find(KindBranchDangling, name, "branch "+br.name, "its head %s has no commit record", br.b.CommitID)
		} else {
			heads = append(heads, br.b.CommitID)
		}
		if err := r.checkBranchStaging(name, br, rev); err != nil {
			return err
		}
	}
	prefix = base + keys.TagsPrefix
	err = r.scanPrefix("read the tags of repository "+name, rev, prefix, false, func(kv *mvccpb.KeyValue) error {
		tag := string(kv.Key[len(prefix):])
		r.stats(func(st *Stats) { st.Tags++ })
		id, err := ref.DecodeTag(kv.Value)
		switch {
		case err != nil:
			r.find(KindRecordUndecodable, name, "tag "+tag, "%v", err)
		case commits[id] == nil:
			r.find(KindTagDangling, name, "tag "+tag, "it names commit %s, which has no record", id)
		default:
			heads = append(heads, id)
		}
		return nil
	})
	if err != nil {
		return err
	}

	// Committed data of every commit the refs reach.
	reached := map[graveler.CommitID]bool{}
	for len(heads) > 0 {
		id := heads[len(heads)-1]
		heads = heads[:len(heads)-1]
		n := commits[id]
		if reached[id] || n == nil {
			continue
		}
		reached[id] = true
		if n.decoded {
			blobs.metaRange(repo.rec.StorageNamespace, n.metaRange, name, id)
			heads = append(heads, n.parents...)
		}
	}
	r.stats(func(st *Stats) {
		st.Commits += len(commits)
		st.UnreachableCommits += len(commits) - len(reached)
	})
	return nil
}

// checkGraph checks every commit's parents and generation.
func (r *run) checkGraph(repo string, commits map[graveler.CommitID]*commitNode) {
	for _, id := range slices.Sorted(maps.Keys(commits)) {
		n := commits[id]
		if !n.decoded {
			continue
		}
		res := "commit " + string(id)
		complete, top := true, 0
		for _, p := range n.parents {
			pn := commits[p]
			switch {
			case pn == nil:
				complete = false
				r.find(KindCommitParentMissing, repo, res, "its parent %s has no commit record", p)
			case !pn.decoded:
				complete = false
			default:
				top = max(top, pn.generation)
			}
		}
		// ref.Manager.AddCommit gives a root generation 1; a restore keeps
		// what its source wrote, and 0 is what other implementations give.
		switch {
		case len(n.parents) == 0 && n.generation != 0 && n.generation != 1:
			r.find(KindCommitGeneration, repo, res, "a root commit with generation %d, want 1", n.generation)
		case len(n.parents) > 0 && complete && n.generation != top+1:
			r.find(KindCommitGeneration, repo, res, "generation %d, want %d (1 + the largest of its parents')", n.generation, top+1)
		}
	}
}
