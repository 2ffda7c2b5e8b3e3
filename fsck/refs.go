package fsck

import (
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"graveler/graveler"
	"graveler/graveler/ref"
	"graveler/keys"
)

// repoRecord is one repository record.
type repoRecord struct {
	name string
	rec  *graveler.Repository // nil: it does not decode
	part string               // its partition (with rec)
}

// branchRecord is one branch record of a repository partition.
type branchRecord struct {
	name string
	b    *graveler.Branch // nil: it does not decode
}

// tokenRef says who references a staging token.
type tokenRef struct {
	repo, branch string
	sealed       bool
	// queued: the branch belongs to a deleted (or deleting) repository,
	// whose tokens the cleaner drops with it.
	queued bool
}

// snapshot is what references what at one revision: repository records,
// the cleaner's work list, and the branches of every partition a record
// or a work item names.
type snapshot struct {
	rev          int64
	repos        []repoRecord
	queuedRepos  map[string]time.Time // by partition: when queued (zero: unknown)
	queuedTokens map[string]bool
	branches     map[string][]branchRecord // by partition
	tokens       map[string]tokenRef
	// unsureRepos: names whose repository record or one of whose branches
	// does not decode, so their tokens may be referenced unseen.
	unsureRepos map[string]bool
}

// live reports whether repo's refs are checked: active, or still being
// created (its initial commit and default branch may already be there).
func (s *snapshot) live(repo repoRecord) bool {
	return repo.rec != nil && repo.rec.State != graveler.RepositoryStateDeleting
}

// unsure reports whether tok may be referenced by a record that does not
// decode: a token "<repo>.<id>" of such a repository, or, when any record
// does not decode, a token of another shape (ref.Manager.NewStagingToken
// makes the first kind; a custom one may not).
func (s *snapshot) unsure(tok string) bool {
	if len(s.unsureRepos) == 0 {
		return false
	}
	i := strings.LastIndexByte(tok, '.')
	if i <= 0 {
		return true
	}
	return s.unsureRepos[tok[:i]]
}

// collect reads the snapshot at rev. With report, records that do not
// decode are findings and the report's counters are set; a re-check
// (report false) only reads.
func (r *run) collect(rev int64, report bool) (*snapshot, error) {
	s := &snapshot{
		rev:          rev,
		queuedRepos:  map[string]time.Time{},
		queuedTokens: map[string]bool{},
		branches:     map[string][]branchRecord{},
		tokens:       map[string]tokenRef{},
		unsureRepos:  map[string]bool{},
	}
	st := r.c.store
	// 1. Repository records, in any state. Only repos/: the partition may
	// hold other kinds of record.
	recPrefix := st.RawPrefix(keys.Graveler()) + keys.ReposPrefix
	err := r.scanPrefix("read repository records", rev, recPrefix, false, func(kv *mvccpb.KeyValue) error {
		name := string(kv.Key[len(recPrefix):])
		rec, err := ref.DecodeRepository(kv.Value)
		if err == nil && keys.ValidateUniqueID(string(rec.UniqueID)) != nil {
			err = fmt.Errorf("unique id %q cannot name a partition", rec.UniqueID)
		}
		if err != nil {
			s.unsureRepos[name] = true
			s.repos = append(s.repos, repoRecord{name: name})
			if report {
				r.find(KindRecordUndecodable, name, "repository record "+string(kv.Key), "%v", err)
				r.rep.Stats.Repositories["undecodable"]++
			}
			return nil
		}
		s.repos = append(s.repos, repoRecord{name: name, rec: rec, part: string(keys.RepositoryPartition(name, string(rec.UniqueID)))})
		if report {
			r.rep.Stats.Repositories[rec.State.String()]++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// 2. The work list.
	delPrefix := st.RawPrefix(keys.Deleted())
	err = r.scanPrefix("read the cleaner's work list", rev, delPrefix, false, func(kv *mvccpb.KeyValue) error {
		k := kv.Key[len(delPrefix):]
		if repo, uid, err := keys.ParseDeletedRepository(k); err == nil {
			at, _ := time.Parse(time.RFC3339Nano, string(kv.Value))
			s.queuedRepos[string(keys.RepositoryPartition(repo, uid))] = at
		} else if tok, err := keys.ParseDeletedToken(k); err == nil {
			s.queuedTokens[tok] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if report {
		r.rep.Stats.QueuedRepositories, r.rep.Stats.QueuedTokens = len(s.queuedRepos), len(s.queuedTokens)
	}
	// 3. Branches of every partition a record or a work item names.
	parts := map[string]bool{}
	for _, repo := range s.repos {
		if repo.rec != nil {
			parts[repo.part] = repo.rec.State == graveler.RepositoryStateDeleting
		}
	}
	for p := range s.queuedRepos {
		parts[p] = true
	}
	for p, queued := range parts {
		name, _, err := keys.ParseRepositoryPartition([]byte(p))
		if err != nil {
			continue
		}
		if err := r.readBranches(s, p, name, queued, report); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// readBranches reads the branches of partition part (of repository name)
// into s, with the tokens they reference.
func (r *run) readBranches(s *snapshot, part, name string, queued, report bool) error {
	prefix := r.c.store.RawPrefix([]byte(part)) + keys.BranchesPrefix
	return r.scanPrefix("read the branches of "+part, s.rev, prefix, false, func(kv *mvccpb.KeyValue) error {
		branch := string(kv.Key[len(prefix):])
		b, err := ref.DecodeBranch(kv.Value)
		if err != nil {
			s.unsureRepos[name] = true
			s.branches[part] = append(s.branches[part], branchRecord{name: branch})
			if report && !queued {
				r.find(KindRecordUndecodable, name, "branch record "+string(kv.Key), "%v", err)
			}
			return nil
		}
		s.branches[part] = append(s.branches[part], branchRecord{name: branch, b: b})
		if b.StagingToken != "" {
			s.tokens[string(b.StagingToken)] = tokenRef{repo: name, branch: branch, queued: queued}
		}
		for _, t := range b.SealedTokens {
			s.tokens[string(t)] = tokenRef{repo: name, branch: branch, sealed: true, queued: queued}
		}
		return nil
	})
}

// checkRecords reports repository records left by a create or a delete
// that did not finish.
func (r *run) checkRecords(s *snapshot) {
	now := r.c.cfg.Now()
	for _, repo := range s.repos {
		rec := repo.rec
		if rec == nil {
			continue
		}
		res := "repository record " + repo.name + " (incarnation " + string(rec.UniqueID) + ")"
		switch rec.State {
		case graveler.RepositoryStateInitial:
			if age := now.Sub(rec.CreationDate); age >= r.c.cfg.RepositoryCreationTimeout {
				r.find(KindRepositoryInitialStale, repo.name, res, "initial since %s (%s ago), past the creation timeout %s",
					rec.CreationDate.UTC().Format(time.RFC3339), age.Round(time.Second), r.c.cfg.RepositoryCreationTimeout)
			}
		case graveler.RepositoryStateDeleting:
			// The record says when the repository was created, not when
			// its delete began; the work item says when it was queued. A
			// delete that stopped before queueing is dated no later than
			// the creation: only its record's age bounds it.
			at, queued := s.queuedRepos[repo.part]
			since, how := at, "queued for the cleaner at"
			if !queued || at.IsZero() {
				since, how = rec.CreationDate, "not queued for the cleaner; created at"
			}
			if age := now.Sub(since); age >= r.c.cfg.DeletingTimeout {
				r.find(KindRepositoryDeletingStale, repo.name, res, "deleting; %s %s (%s ago), past %s",
					how, since.UTC().Format(time.RFC3339), age.Round(time.Second), r.c.cfg.DeletingTimeout)
			}
		}
	}
}
