package ref

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"

	"go.uber.org/zap"

	"graveler/graveler"
	"graveler/keys"
	"graveler/kv"
)

// Manager implements graveler.RefManager on a kv.Store.
type Manager struct {
	store    kv.Store
	cfg      Config
	log      *zap.Logger
	branches *readBatcher[*graveler.Branch]
	repos    *readBatcher[repoRead]
	commits  *commitCache
}

// repoRead is one read of a repository record, shared by amortized readers.
type repoRead struct {
	r    *graveler.Repository
	pred kv.Predicate
}

var _ graveler.RefManager = (*Manager)(nil)

// New returns a Manager over store. It starts no goroutines; the store
// stays owned by the caller, who closes it after the last call.
func New(store kv.Store, cfg Config) *Manager {
	cfg = cfg.withDefaults()
	return &Manager{
		store:    store,
		cfg:      cfg,
		log:      cfg.Logger,
		branches: newReadBatcher[*graveler.Branch](cfg.BranchReadWindow),
		repos:    newReadBatcher[repoRead](cfg.BranchReadWindow),
		commits:  newCommitCache(cfg.CommitCacheSize),
	}
}

// effectIf runs write, as the operation's decisive write (kv.Effect)
// when decisive is set.
func effectIf(ctx context.Context, decisive bool, write func(context.Context) error) error {
	if decisive {
		return kv.Effect(ctx, write)
	}
	return write(ctx)
}

// cleanupTimeout bounds best-effort cleanup after a failed creation, which
// runs even when the caller's context is already done.
const cleanupTimeout = 10 * time.Second

// NewStagingToken returns a fresh staging token for a branch of repo:
// "<repo>.<unique id>", a valid partition name part. The repository name
// makes the token recognisable to an operator; uniqueness comes from the id.
func (m *Manager) NewStagingToken(repo graveler.RepositoryID) graveler.StagingToken {
	return graveler.StagingToken(string(repo) + "." + m.cfg.NewID())
}

func (m *Manager) now() time.Time { return m.cfg.Now() }

func (m *Manager) deletedMarker() []byte {
	return []byte(m.now().UTC().Format(time.RFC3339Nano))
}

// repoPartition returns the partition of an active repository record,
// checking the record is usable.
func repoPartition(repo *graveler.RepositoryRecord) ([]byte, error) {
	if repo == nil || repo.Repository == nil {
		return nil, fmt.Errorf("%w: missing repository", graveler.ErrInvalidArgument)
	}
	if err := graveler.ValidateRepositoryID(repo.RepositoryID); err != nil {
		return nil, err
	}
	if err := keys.ValidateUniqueID(string(repo.UniqueID)); err != nil {
		return nil, fmt.Errorf("%w: repository %s: %w", graveler.ErrInvalidArgument, repo.RepositoryID, err)
	}
	return keys.RepositoryPartition(string(repo.RepositoryID), string(repo.UniqueID)), nil
}

func validateToken(t graveler.StagingToken) error {
	if err := keys.ValidateName("staging token", string(t)); err != nil {
		return fmt.Errorf("%w: %w", graveler.ErrInvalidArgument, err)
	}
	return nil
}

// after returns the scan start for keys strictly after prefix+name, or the
// prefix itself when name is empty.
func after(prefix, name string) []byte {
	if name == "" {
		return []byte(prefix)
	}
	return []byte(prefix + name + "\x00")
}

// ---- repositories ----

func (m *Manager) getRepositoryRecord(ctx context.Context, id graveler.RepositoryID) (*graveler.Repository, kv.Predicate, error) {
	data, pred, err := m.store.Get(ctx, keys.Graveler(), keys.Repository(string(id)))
	if errors.Is(err, kv.ErrNotFound) {
		return nil, kv.Absent, fmt.Errorf("%w: %s", graveler.ErrRepositoryNotFound, id)
	}
	if err != nil {
		return nil, kv.Absent, storeErr(err, "get repository %s", id)
	}
	r, err := DecodeRepository(data)
	if err != nil {
		return nil, kv.Absent, fmt.Errorf("repository %s: %w", id, err)
	}
	return r, pred, nil
}

func (m *Manager) expired(r *graveler.Repository) bool {
	return r.State == graveler.RepositoryStateInitial && m.now().Sub(r.CreationDate) >= m.cfg.RepositoryCreationTimeout
}

func validateRepository(id graveler.RepositoryID, repo graveler.Repository) error {
	if err := graveler.ValidateRepositoryID(id); err != nil {
		return err
	}
	if _, err := graveler.NormalizeStorageNamespace(repo.StorageNamespace); err != nil {
		return err
	}
	return graveler.ValidateBranchID(repo.DefaultBranchID)
}

// newIncarnation fills the record of a new repository incarnation. The
// creation date is always now: it drives the expiry of the initial state.
func (m *Manager) newIncarnation(repo graveler.Repository, state graveler.RepositoryState) (*graveler.Repository, error) {
	r := &graveler.Repository{
		StorageNamespace: repo.StorageNamespace,
		DefaultBranchID:  repo.DefaultBranchID,
		CreationDate:     m.now().UTC(),
		State:            state,
		UniqueID:         graveler.UniqueID(m.cfg.NewID()),
	}
	if err := keys.ValidateUniqueID(string(r.UniqueID)); err != nil {
		return nil, fmt.Errorf("ref: generated unique id: %w", err)
	}
	return r, nil
}

// claimName writes rec (initial) as the record of id: if absent, or
// replacing a record that no longer counts (deleting, or initial past the
// timeout), whose incarnation is queued for the cleaner first so nothing
// leaks. On error, maybeWritten reports whether rec may nevertheless have
// landed (a write with an unknown outcome).
func (m *Manager) claimName(ctx context.Context, id graveler.RepositoryID, rec *graveler.Repository) (maybeWritten bool, err error) {
	for attempt := 0; ; attempt++ {
		// Encoded per attempt: every write carries its own write id.
		data, err := encodeRepository(rec)
		if err != nil {
			return false, err
		}
		old, pred, err := m.getRepositoryRecord(ctx, id)
		switch {
		case errors.Is(err, graveler.ErrRepositoryNotFound):
			old, pred = nil, kv.Absent
		case err != nil:
			return false, err
		case old.State == graveler.RepositoryStateActive,
			old.State == graveler.RepositoryStateInitial && !m.expired(old):
			return false, fmt.Errorf("%w: %s", graveler.ErrRepositoryExists, id)
		default:
			if err := m.store.Set(ctx, keys.Deleted(), keys.DeletedRepository(string(id), string(old.UniqueID)), m.deletedMarker()); err != nil {
				return false, storeErr(err, "queue previous incarnation %s of repository %s", old.UniqueID, id)
			}
		}
		// Not the create's decisive write: activation is.
		err = m.store.SetIf(ctx, keys.Graveler(), keys.Repository(string(id)), data, pred)
		if err == nil {
			if old != nil && old.State == graveler.RepositoryStateInitial {
				// Replaced while initial, so never active: its
				// namespace is free at once.
				m.releaseNeverActive(ctx, id, old)
			}
			return false, nil
		}
		if !errors.Is(err, kv.ErrPredicateFailed) {
			return true, storeErr(err, "create repository %s", id)
		}
		if attempt >= m.cfg.BranchUpdateMaxRetries {
			return false, fmt.Errorf("create repository %s: %w", id, graveler.ErrTooManyRetries)
		}
	}
}

// CreateRepository creates a repository in the order docs/architecture.md
// gives, each step one kv operation (or one check) that is safe to crash
// after:
//
//  1. SetIf the record as initial (absent, or replacing a dead incarnation);
//  2. claim the storage namespace: SetIf graveler/namespaces/<namespace>
//     absent, or at the version of a stale claim (claimNamespace), then
//     check no namespace containing it or nested in it is held;
//  3. run the namespace check of opts (graveler.WithNamespaceCheck);
//  4. Set the initial commit in the new partition;
//  5. SetIf the default branch (absent) with a fresh staging token;
//  6. Get the record and SetIf it active, if it is still this incarnation.
//
// Until step 6 the repository is invisible; an initial record past
// RepositoryCreationTimeout is queued for the cleaner by whoever meets it,
// and its namespace claim released. On an error it tries to queue the
// incarnation and release its claim at once, so the name and the
// namespace are free again without waiting for the timeout. A namespace
// held by another incarnation that still counts is
// *graveler.NamespaceInUseError.
func (m *Manager) CreateRepository(ctx context.Context, id graveler.RepositoryID, repo graveler.Repository, initialCommit graveler.Commit, opts ...graveler.CreateOption) (*graveler.RepositoryRecord, error) {
	if err := validateRepository(id, repo); err != nil {
		return nil, err
	}
	if len(initialCommit.Parents) > 0 {
		return nil, fmt.Errorf("%w: initial commit of repository %s has parents", graveler.ErrInvalidArgument, id)
	}
	return m.create(ctx, id, repo, opts, func(ctx context.Context, out *graveler.RepositoryRecord) error {
		return m.populate(ctx, out, initialCommit)
	})
}

// create runs the steps every create shares (record, namespace claim,
// namespace check), then finish, which ends with the activation, and
// abandons the incarnation if any step fails.
func (m *Manager) create(ctx context.Context, id graveler.RepositoryID, repo graveler.Repository, opts []graveler.CreateOption,
	finish func(context.Context, *graveler.RepositoryRecord) error) (*graveler.RepositoryRecord, error) {
	var o graveler.CreateOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	rec, err := m.newIncarnation(repo, graveler.RepositoryStateInitial)
	if err != nil {
		return nil, err
	}
	if maybe, err := m.claimName(ctx, id, rec); err != nil {
		if maybe {
			m.abandonCreation(ctx, id, rec.UniqueID)
		}
		return nil, err
	}
	out := &graveler.RepositoryRecord{RepositoryID: id, Repository: rec}
	err = m.claimNamespace(ctx, id, rec)
	if err == nil && o.CheckNamespace != nil {
		err = o.CheckNamespace(ctx, &graveler.RepositoryRecord{RepositoryID: id, Repository: rec})
	}
	if err == nil {
		err = finish(ctx, out)
	}
	if err != nil {
		m.abandonCreation(ctx, id, rec.UniqueID)
		return nil, err
	}
	return out, nil
}

func (m *Manager) populate(ctx context.Context, repo *graveler.RepositoryRecord, initialCommit graveler.Commit) error {
	part := keys.RepositoryPartition(string(repo.RepositoryID), string(repo.UniqueID))
	commitID, err := m.addCommit(ctx, part, repo.RepositoryID, initialCommit, "")
	if err != nil {
		return err
	}
	branch := &graveler.Branch{CommitID: commitID, StagingToken: m.NewStagingToken(repo.RepositoryID)}
	if err := m.createBranch(ctx, part, repo.RepositoryID, repo.DefaultBranchID, branch); err != nil {
		return err
	}
	return m.activate(ctx, repo)
}

// activate makes the initial record of repo active, if it is still this
// incarnation's: the create's decisive write.
func (m *Manager) activate(ctx context.Context, repo *graveler.RepositoryRecord) error {
	cur, pred, err := m.getRepositoryRecord(ctx, repo.RepositoryID)
	if errors.Is(err, graveler.ErrRepositoryNotFound) {
		// Retired meanwhile (past the creation timeout): a create that
		// raced, not a missing repository.
		return fmt.Errorf("%w: %s was retired", ErrRepositoryCreationRaced, repo.RepositoryID)
	}
	if err != nil {
		return fmt.Errorf("activate: %w", err)
	}
	if cur.UniqueID != repo.UniqueID || cur.State != graveler.RepositoryStateInitial {
		return fmt.Errorf("%w: %s is now %s incarnation %s", ErrRepositoryCreationRaced, repo.RepositoryID, cur.State, cur.UniqueID)
	}
	active := *cur
	active.State = graveler.RepositoryStateActive
	data, err := encodeRepository(&active)
	if err != nil {
		return err
	}
	err = kv.Effect(ctx, func(ctx context.Context) error {
		return m.store.SetIf(ctx, keys.Graveler(), keys.Repository(string(repo.RepositoryID)), data, pred)
	})
	if err != nil {
		// An ambiguous or lost write may still have made this incarnation
		// active; only its unique id can say so.
		if again, againPred, gerr := m.getRepositoryRecord(ctx, repo.RepositoryID); gerr == nil &&
			again.UniqueID == repo.UniqueID && again.State == graveler.RepositoryStateActive {
			// Only this activation writes an active record of this
			// incarnation (a delete writes it deleting): the version read
			// is the activation's write.
			kv.NoteEffect(ctx, againPred.Version())
			repo.Repository = again
			return nil
		}
		if errors.Is(err, kv.ErrPredicateFailed) {
			return fmt.Errorf("%w: %s", ErrRepositoryCreationRaced, repo.RepositoryID)
		}
		return storeErr(err, "activate repository %s", repo.RepositoryID)
	}
	repo.Repository = &active
	return nil
}

// abandonCreation retires incarnation uid of a create that failed, which
// releases its namespace claim while its record is still initial. It is
// best effort: whatever it cannot do, the creation timeout (or, for the
// claim, the cleaner or the stale claim rule) does later.
func (m *Manager) abandonCreation(ctx context.Context, id graveler.RepositoryID, uid graveler.UniqueID) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	cur, pred, err := m.getRepositoryRecord(ctx, id)
	switch {
	case err == nil && cur.UniqueID == uid:
		if cur.State == graveler.RepositoryStateActive {
			return // cannot happen: activate reports success when it sees this
		}
		err = m.retire(ctx, id, cur, pred)
	case err == nil || errors.Is(err, graveler.ErrRepositoryNotFound):
		// The record names another incarnation (or none): ours is
		// unreachable, so queueing it is safe. Its claim, if it landed,
		// stays for the cleaner: a record gone from under us may have
		// been made active and deleted meanwhile, and then the
		// namespace has data to empty first.
		err = m.store.Set(ctx, keys.Deleted(), keys.DeletedRepository(string(id), string(uid)), m.deletedMarker())
	}
	if err != nil {
		m.log.Warn("ref: abandoning a failed repository creation; the creation timeout will retire it",
			zap.String("repository", string(id)), zap.String("unique_id", string(uid)), zap.Error(err))
	}
}

// CreateBareRepository creates a repository with no commit or branch, for
// restoring refs into: CreateRepository's steps without the commit and
// the branch (initial, namespace claimed and checked, active).
func (m *Manager) CreateBareRepository(ctx context.Context, id graveler.RepositoryID, repo graveler.Repository, opts ...graveler.CreateOption) (*graveler.RepositoryRecord, error) {
	if err := validateRepository(id, repo); err != nil {
		return nil, err
	}
	return m.create(ctx, id, repo, opts, m.activate)
}

// GetRepository returns an active repository (seed 003, step 2). A
// deleting one (a delete in progress, or one that stopped part way) is
// graveler.ErrRepositoryDeleting; an initial one is
// graveler.ErrRepositoryNotFound, and once past the creation timeout it is
// retired on the way (queued for the cleaner, record removed).
func (m *Manager) GetRepository(ctx context.Context, id graveler.RepositoryID) (*graveler.RepositoryRecord, error) {
	if err := graveler.ValidateRepositoryID(id); err != nil {
		return nil, err
	}
	r, pred, err := m.readRepositoryAmortized(ctx, id)
	if err != nil {
		return nil, err
	}
	switch {
	case r.State == graveler.RepositoryStateActive:
		return &graveler.RepositoryRecord{RepositoryID: id, Repository: r}, nil
	case r.State == graveler.RepositoryStateDeleting:
		return nil, fmt.Errorf("%w: %s (incarnation %s)", graveler.ErrRepositoryDeleting, id, r.UniqueID)
	case m.expired(r):
		if err := m.retire(ctx, id, r, pred); err != nil {
			m.log.Warn("ref: retiring an expired repository creation", zap.String("repository", string(id)),
				zap.String("unique_id", string(r.UniqueID)), zap.Error(err))
		} else {
			repositoriesExpired.Inc()
			m.log.Info("ref: retired an expired repository creation", zap.String("repository", string(id)),
				zap.String("unique_id", string(r.UniqueID)), zap.Time("created", r.CreationDate))
		}
	}
	return nil, fmt.Errorf("%w: %s (%s)", graveler.ErrRepositoryNotFound, id, r.State)
}

// readRepositoryAmortized is getRepositoryRecord through the read batcher:
// every request starts by getting its repository, so concurrent requests
// of one repository share the kv read (never one that began before them).
func (m *Manager) readRepositoryAmortized(ctx context.Context, id graveler.RepositoryID) (*graveler.Repository, kv.Predicate, error) {
	if m.cfg.BranchReadWindow < 0 {
		return m.getRepositoryRecord(ctx, id)
	}
	res, joined, err := m.repos.do(ctx, string(id), func(ctx context.Context) (repoRead, error) {
		repositoryReads.Inc()
		r, pred, err := m.getRepositoryRecord(ctx, id)
		return repoRead{r: r, pred: pred}, err
	})
	if joined {
		repositoryReadsSaved.Inc()
	}
	if err != nil {
		return nil, kv.Absent, err
	}
	r := *res.r
	return &r, res.pred, nil
}

// ListRepositories walks active repositories by name, after opts.After.
func (m *Manager) ListRepositories(ctx context.Context, opts graveler.ListOptions) iter.Seq2[*graveler.RepositoryRecord, error] {
	return func(yield func(*graveler.RepositoryRecord, error) bool) {
		for e, err := range m.store.Scan(ctx, keys.Graveler(), kv.ScanOptions{Start: after(keys.ReposPrefix, opts.After)}) {
			if err != nil {
				yield(nil, storeErr(err, "list repositories"))
				return
			}
			if !strings.HasPrefix(string(e.Key), keys.ReposPrefix) {
				return
			}
			name, err := keys.ParseRepository(e.Key)
			if err != nil {
				yield(nil, fmt.Errorf("%w: %w", ErrCorruptRecord, err))
				return
			}
			r, err := DecodeRepository(e.Value)
			if err != nil {
				yield(nil, fmt.Errorf("repository %s: %w", name, err))
				return
			}
			if r.State != graveler.RepositoryStateActive {
				continue
			}
			if !yield(&graveler.RepositoryRecord{RepositoryID: graveler.RepositoryID(name), Repository: r}, nil) {
				return
			}
		}
	}
}

// DeleteRepository marks the repository deleting, queues its incarnation
// for the cleaner and removes its record; the name is reusable at once. It
// also completes a delete that crashed part way (a deleting record). Two
// deletes of one incarnation both succeed; neither ever removes a newer
// incarnation created meanwhile under the name.
func (m *Manager) DeleteRepository(ctx context.Context, id graveler.RepositoryID) error {
	if err := graveler.ValidateRepositoryID(id); err != nil {
		return err
	}
	r, pred, err := m.getRepositoryRecord(ctx, id)
	if err != nil {
		return err
	}
	if r.State == graveler.RepositoryStateInitial && !m.expired(r) {
		return fmt.Errorf("%w: %s (being created)", graveler.ErrRepositoryNotFound, id)
	}
	return m.retire(ctx, id, r, pred)
}

// retire runs the delete flow on the record r read with pred: SetIf it
// deleting, Set the cleaner's work item, then remove the record with
// DeleteIf at the version of this incarnation's deleting record. The
// record may be replaced at any moment by a create of the same name (which
// takes over a deleting record), so the removal is conditional: a newer
// incarnation, and whatever was written to it, is never removed by an
// older delete. A record already gone, or naming another incarnation,
// means this incarnation is retired: someone finished the job.
func (m *Manager) retire(ctx context.Context, id graveler.RepositoryID, r *graveler.Repository, pred kv.Predicate) error {
	key := keys.Repository(string(id))
	// When r was read deleting, pred is already the version to remove.
	havePred := r.State == graveler.RepositoryStateDeleting
	if !havePred {
		deleting := *r
		deleting.State = graveler.RepositoryStateDeleting
		data, err := encodeRepository(&deleting)
		if err != nil {
			return err
		}
		// Marking an active repository deleting is what takes it away
		// from readers: a delete's decisive write.
		err = effectIf(ctx, r.State == graveler.RepositoryStateActive, func(ctx context.Context) error {
			return m.store.SetIf(ctx, keys.Graveler(), key, data, pred)
		})
		if errors.Is(err, kv.ErrPredicateFailed) {
			// Changed since read. Only a retire marks a record of this
			// incarnation deleting and only a create replaces it, so: gone
			// or replaced means another retirer finished the job; deleting
			// means one is finishing it, and so do we; anything else (a
			// late create made it active) still counts.
			cur, curPred, gerr := m.getRepositoryRecord(ctx, id)
			switch {
			case errors.Is(gerr, graveler.ErrRepositoryNotFound):
				return nil
			case gerr != nil:
				return gerr
			case cur.UniqueID != r.UniqueID:
				return nil
			case cur.State != graveler.RepositoryStateDeleting:
				return fmt.Errorf("delete repository %s: %w: it is %s now: %w", id, errStillCounts, cur.State, err)
			}
			pred, havePred, err = curPred, true, nil
		}
		if err != nil {
			return storeErr(err, "mark repository %s deleting", id)
		}
		if r.State == graveler.RepositoryStateInitial && !havePred {
			// Our mark ended an incarnation that was initial, so never
			// active: its namespace is free at once. A deleting record
			// (ours lost to another retirer) may have been active since.
			m.releaseNeverActive(ctx, id, r)
		}
	}
	if err := m.store.Set(ctx, keys.Deleted(), keys.DeletedRepository(string(id), string(r.UniqueID)), m.deletedMarker()); err != nil {
		return storeErr(err, "queue repository %s incarnation %s", id, r.UniqueID)
	}
	for attempt := 0; ; attempt++ {
		if !havePred {
			// SetIf does not return the version it wrote: read it.
			cur, curPred, err := m.getRepositoryRecord(ctx, id)
			if errors.Is(err, graveler.ErrRepositoryNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			if cur.UniqueID != r.UniqueID {
				return nil // already replaced by a new incarnation: ours is gone
			}
			pred = curPred
		}
		havePred = false
		err := m.store.DeleteIf(ctx, keys.Graveler(), key, pred)
		if err == nil {
			return nil
		}
		if !errors.Is(err, kv.ErrPredicateFailed) {
			return storeErr(err, "remove repository %s record", id)
		}
		// Changed since read: removed by another retirer, or replaced by a
		// create of the name. A deleting record of this incarnation is
		// never rewritten, but re-reading costs nothing to be sure.
		if attempt >= m.cfg.BranchUpdateMaxRetries {
			return fmt.Errorf("remove repository %s record: %w", id, graveler.ErrTooManyRetries)
		}
	}
}
