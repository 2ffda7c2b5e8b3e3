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

// NamespaceClaim is a storage namespace held by one repository incarnation,
// stored under keys.NamespaceClaim of its normalized spelling.
type NamespaceClaim struct {
	// Normalized is graveler.NormalizeStorageNamespace of the namespace:
	// the claim's key.
	Normalized graveler.StorageNamespace
	// Namespace is the namespace as the holder's repository record spells
	// it: the location to open.
	Namespace  graveler.StorageNamespace
	Repository graveler.RepositoryID
	UniqueID   graveler.UniqueID
	Claimed    time.Time
	// Reclaiming: the cleaner is emptying the namespace of this deleted
	// incarnation; only ReleaseNamespace removes the claim from then on.
	Reclaiming bool
}

func (c *NamespaceClaim) names(id graveler.RepositoryID, uid graveler.UniqueID) bool {
	return c.Repository == id && c.UniqueID == uid
}

// Holder states of a claim that still counts, as NamespaceInUseError says.
const (
	holderActive   = "active"
	holderCreating = "being created"
	holderDeleting = "being deleted"
	holderDeleted  = "deleted, until the cleaner reclaims it"
)

func claimKey(ns graveler.StorageNamespace) (graveler.StorageNamespace, []byte, error) {
	norm, err := graveler.NormalizeStorageNamespace(ns)
	if err != nil {
		return "", nil, err
	}
	return norm, keys.NamespaceClaim(string(norm)), nil
}

func (m *Manager) getClaim(ctx context.Context, key []byte) (*NamespaceClaim, kv.Predicate, error) {
	data, pred, err := m.store.Get(ctx, keys.Graveler(), key)
	if err != nil {
		if errors.Is(err, kv.ErrNotFound) {
			return nil, kv.Absent, err
		}
		return nil, kv.Absent, storeErr(err, "get namespace claim %q", key)
	}
	c, err := DecodeNamespaceClaim(key, data)
	if err != nil {
		return nil, kv.Absent, err
	}
	return c, pred, nil
}

// nested reports whether namespaces of ns's scheme nest: file:// and s3://
// are trees, and a repository on one directory or prefix must not have
// another's objects below it (collecting or emptying one would remove
// the other's). Every mem:// name is a separate store.
func nested(norm graveler.StorageNamespace) bool {
	return strings.HasPrefix(string(norm), "file://") || strings.HasPrefix(string(norm), "s3://")
}

// ancestors lists the namespaces that contain norm (a normalized file://
// or s3:// namespace), outermost first: s3://b/x/y has s3://b and s3://b/x.
func ancestors(norm graveler.StorageNamespace) []graveler.StorageNamespace {
	s := string(norm)
	scheme, rest, _ := strings.Cut(s, "://")
	first := strings.IndexByte(rest, '/')
	if scheme == "file" {
		// file:///a/b: the root is no namespace, so /a is the first.
		first = strings.IndexByte(rest[1:], '/') + 1
	}
	var out []graveler.StorageNamespace
	for i := first; i > 0 && i < len(rest); {
		out = append(out, graveler.StorageNamespace(scheme+"://"+rest[:i]))
		j := strings.IndexByte(rest[i+1:], '/')
		if j < 0 {
			break
		}
		i += j + 1
	}
	return out
}

// holder says whether the incarnation c names still holds its namespace,
// and how (a holder* state); "" means the claim is stale: no record of
// that incarnation and no cleaner work item for it. An initial record past
// the creation timeout is retired on the way (which releases the claim of
// an incarnation that never became active), and again is then true: read
// the claim again.
func (m *Manager) holder(ctx context.Context, c *NamespaceClaim) (state string, again bool, err error) {
	r, pred, err := m.getRepositoryRecord(ctx, c.Repository)
	switch {
	case errors.Is(err, graveler.ErrRepositoryNotFound):
	case err != nil:
		return "", false, err
	case r.UniqueID == c.UniqueID:
		switch {
		case r.State == graveler.RepositoryStateActive:
			return holderActive, false, nil
		case r.State == graveler.RepositoryStateDeleting:
			return holderDeleting, false, nil
		case !m.expired(r):
			return holderCreating, false, nil
		}
		if err := m.retire(ctx, c.Repository, r, pred); err != nil && !errors.Is(err, errStillCounts) {
			return "", false, fmt.Errorf("retire expired creation %s of repository %s: %w", c.UniqueID, c.Repository, err)
		}
		return "", true, nil
	}
	// The incarnation's record is gone. Its claim still counts while its
	// work item is queued: the cleaner empties the namespace of a deleted
	// repository, then releases it. Once no record and no work item name
	// it, nothing can revive the incarnation (unique ids are never reused
	// and a record is written before its claim), so the claim is stale.
	_, _, err = m.store.Get(ctx, keys.Deleted(), keys.DeletedRepository(string(c.Repository), string(c.UniqueID)))
	switch {
	case err == nil:
		return holderDeleted, false, nil
	case errors.Is(err, kv.ErrNotFound):
		return "", false, nil
	}
	return "", false, storeErr(err, "get work item of repository %s incarnation %s", c.Repository, c.UniqueID)
}

// claimNamespace makes incarnation rec of id the holder of its storage
// namespace (CreateRepository's second step): SetIf absent, or at the
// version of a stale claim it takes over. A claim of another incarnation
// that still counts is ErrNamespaceInUse. Then the namespaces containing
// it and nested in it are checked (checkNested). On a store error the
// claim may have landed: abandonCreation releases it.
func (m *Manager) claimNamespace(ctx context.Context, id graveler.RepositoryID, rec *graveler.Repository) error {
	norm, key, err := claimKey(rec.StorageNamespace)
	if err != nil {
		return err
	}
	mine := &NamespaceClaim{Namespace: rec.StorageNamespace, Repository: id, UniqueID: rec.UniqueID, Claimed: m.now().UTC()}
	for attempt := 0; ; attempt++ {
		if attempt > m.cfg.BranchUpdateMaxRetries {
			return fmt.Errorf("claim storage namespace %q: %w", rec.StorageNamespace, graveler.ErrTooManyRetries)
		}
		cur, pred, err := m.getClaim(ctx, key)
		switch {
		case errors.Is(err, kv.ErrNotFound):
			pred = kv.Absent
		case err != nil:
			return err
		case cur.names(id, rec.UniqueID):
			// An earlier attempt whose answer was lost landed.
			return m.claimLanded(ctx, id, rec, norm)
		default:
			state, again, err := m.holder(ctx, cur)
			if err != nil {
				return err
			}
			if again {
				continue
			}
			if state != "" {
				return m.inUse(rec.StorageNamespace, cur, state)
			}
			m.log.Info("ref: taking over a stale storage namespace claim", zap.String("namespace", string(norm)),
				zap.String("stale_repository", string(cur.Repository)), zap.String("stale_unique_id", string(cur.UniqueID)),
				zap.String("repository", string(id)), zap.String("unique_id", string(rec.UniqueID)))
		}
		// Encoded per attempt: every write carries its own write id.
		data, err := encodeNamespaceClaim(mine)
		if err != nil {
			return err
		}
		err = m.store.SetIf(ctx, keys.Graveler(), key, data, pred)
		if err == nil {
			return m.claimLanded(ctx, id, rec, norm)
		}
		if !errors.Is(err, kv.ErrPredicateFailed) {
			return storeErr(err, "claim storage namespace %q for repository %s", rec.StorageNamespace, id)
		}
	}
}

// claimLanded runs once incarnation rec's claim is written. A create that
// stalled past the creation timeout may find its record retired already:
// the retirer released the claims it found, and this one landed after
// that, so it is released here, or the cleaner, reclaiming the
// incarnation, would empty a namespace no repository ever wrote to (one
// holding blobs copied in for a restore). Otherwise the nesting checks
// follow (checkNested).
func (m *Manager) claimLanded(ctx context.Context, id graveler.RepositoryID, rec *graveler.Repository, norm graveler.StorageNamespace) error {
	cur, _, err := m.getRepositoryRecord(ctx, id)
	switch {
	case errors.Is(err, graveler.ErrRepositoryNotFound) || err == nil && (cur.UniqueID != rec.UniqueID || cur.State != graveler.RepositoryStateInitial):
		m.releaseNeverActive(ctx, id, rec)
		return fmt.Errorf("%w: %s was retired while its storage namespace was being claimed", ErrRepositoryCreationRaced, id)
	case err != nil:
		return fmt.Errorf("claim storage namespace %q: %w", rec.StorageNamespace, err)
	}
	return m.checkNested(ctx, id, rec, norm)
}

func (m *Manager) inUse(ns graveler.StorageNamespace, c *NamespaceClaim, state string) error {
	return &graveler.NamespaceInUseError{Namespace: ns, Held: c.Namespace, Repository: c.Repository, UniqueID: c.UniqueID, State: state}
}

// checkNested refuses a file:// or s3:// namespace that contains, or lies
// in, one another repository holds. It runs after this create's own claim
// is written, and a create of the other namespace does the same, so of
// two such creates racing at least one sees the other (both may, and
// both fail: a retry then wins). A stale claim found on the way is
// removed. On ErrNamespaceInUse the caller abandons the creation, which
// releases its claim.
func (m *Manager) checkNested(ctx context.Context, id graveler.RepositoryID, rec *graveler.Repository, norm graveler.StorageNamespace) error {
	if !nested(norm) {
		return nil
	}
	for _, a := range ancestors(norm) {
		if err := m.checkOther(ctx, rec.StorageNamespace, keys.NamespaceClaim(string(a))); err != nil {
			return err
		}
	}
	below := string(keys.NamespaceClaim(string(norm) + "/"))
	for e, err := range m.store.Scan(ctx, keys.Graveler(), kv.ScanOptions{Start: []byte(below)}) {
		if err != nil {
			return storeErr(err, "scan namespace claims below %q", norm)
		}
		if !strings.HasPrefix(string(e.Key), below) {
			break
		}
		if err := m.checkOther(ctx, rec.StorageNamespace, e.Key); err != nil {
			return err
		}
	}
	return nil
}

// checkOther returns ErrNamespaceInUse when the claim under key counts,
// and removes it (at the version read) when it is stale.
func (m *Manager) checkOther(ctx context.Context, ns graveler.StorageNamespace, key []byte) error {
	for attempt := 0; ; attempt++ {
		if attempt > m.cfg.BranchUpdateMaxRetries {
			return fmt.Errorf("check storage namespace claim %q: %w", key, graveler.ErrTooManyRetries)
		}
		c, pred, err := m.getClaim(ctx, key)
		if errors.Is(err, kv.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		state, again, err := m.holder(ctx, c)
		if err != nil {
			return err
		}
		if again {
			continue
		}
		if state != "" {
			return m.inUse(ns, c, state)
		}
		err = m.store.DeleteIf(ctx, keys.Graveler(), key, pred)
		if err == nil {
			m.log.Info("ref: removed a stale storage namespace claim", zap.ByteString("key", key),
				zap.String("stale_repository", string(c.Repository)), zap.String("stale_unique_id", string(c.UniqueID)))
			return nil
		}
		if !errors.Is(err, kv.ErrPredicateFailed) {
			return storeErr(err, "remove stale namespace claim %q", key)
		}
	}
}

// releaseClaim removes the claim of ns if it still names incarnation uid
// of id, at the version read, so a claim taken over meanwhile is never
// removed. A claim marked reclaiming is removed only with force (by the
// cleaner, once the namespace is emptied). A namespace that does not
// normalize was never claimed.
func (m *Manager) releaseClaim(ctx context.Context, ns graveler.StorageNamespace, id graveler.RepositoryID, uid graveler.UniqueID, force bool) error {
	_, key, err := claimKey(ns)
	if err != nil {
		return nil
	}
	for attempt := 0; ; attempt++ {
		if attempt > m.cfg.BranchUpdateMaxRetries {
			return fmt.Errorf("release storage namespace %q: %w", ns, graveler.ErrTooManyRetries)
		}
		c, pred, err := m.getClaim(ctx, key)
		if errors.Is(err, kv.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if !c.names(id, uid) || c.Reclaiming && !force {
			return nil
		}
		err = m.store.DeleteIf(ctx, keys.Graveler(), key, pred)
		if err == nil || !errors.Is(err, kv.ErrPredicateFailed) {
			if err != nil {
				return storeErr(err, "release storage namespace %q of repository %s", ns, id)
			}
			return nil
		}
	}
}

// releaseNeverActive releases the claim of an incarnation that can never
// become active (its initial record was just replaced or marked
// deleting): no repository ever wrote to the namespace, so nothing waits
// for the cleaner there. Best effort: a claim left behind is released by
// the cleaner once it reclaims the incarnation.
func (m *Manager) releaseNeverActive(ctx context.Context, id graveler.RepositoryID, r *graveler.Repository) {
	if err := m.releaseClaim(ctx, r.StorageNamespace, id, r.UniqueID, false); err != nil {
		m.log.Warn("ref: releasing the storage namespace of an abandoned creation; the cleaner will",
			zap.String("repository", string(id)), zap.String("unique_id", string(r.UniqueID)),
			zap.String("namespace", string(r.StorageNamespace)), zap.Error(err))
	}
}

// NamespaceClaims walks every storage namespace claim, by normalized
// namespace. For the cleaner, which releases the claims of the
// incarnations it reclaims.
func (m *Manager) NamespaceClaims(ctx context.Context) iter.Seq2[*NamespaceClaim, error] {
	return func(yield func(*NamespaceClaim, error) bool) {
		for e, err := range m.store.Scan(ctx, keys.Graveler(), kv.ScanOptions{Start: []byte(keys.NamespacesPrefix)}) {
			if err != nil {
				yield(nil, storeErr(err, "list namespace claims"))
				return
			}
			if !strings.HasPrefix(string(e.Key), keys.NamespacesPrefix) {
				return
			}
			c, err := DecodeNamespaceClaim(e.Key, e.Value)
			if !yield(c, err) {
				return
			}
		}
	}
}

// ReclaimNamespace marks the claim of ns reclaiming if it names incarnation
// uid of id, and reports whether it does (marked now or before). From
// then on nothing but ReleaseNamespace removes the claim, and no create
// takes it over while the incarnation's work item is queued: the cleaner
// may empty the namespace. False means no claim of ns names the
// incarnation: the namespace is not its to empty.
func (m *Manager) ReclaimNamespace(ctx context.Context, ns graveler.StorageNamespace, id graveler.RepositoryID, uid graveler.UniqueID) (bool, error) {
	_, key, err := claimKey(ns)
	if err != nil {
		return false, nil
	}
	for attempt := 0; ; attempt++ {
		if attempt > m.cfg.BranchUpdateMaxRetries {
			return false, fmt.Errorf("mark storage namespace %q reclaiming: %w", ns, graveler.ErrTooManyRetries)
		}
		c, pred, err := m.getClaim(ctx, key)
		if errors.Is(err, kv.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if !c.names(id, uid) {
			return false, nil
		}
		if c.Reclaiming {
			return true, nil
		}
		c.Reclaiming = true
		data, err := encodeNamespaceClaim(c)
		if err != nil {
			return false, err
		}
		err = m.store.SetIf(ctx, keys.Graveler(), key, data, pred)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, kv.ErrPredicateFailed) {
			return false, storeErr(err, "mark storage namespace %q reclaiming", ns)
		}
	}
}

// ReleaseNamespace removes the claim of ns if it still names incarnation
// uid of id (reclaiming or not), at the version read. For the cleaner,
// once a deleted incarnation's partitions are dropped and its namespace
// emptied; a claim already gone or naming another incarnation is left
// alone, with no error.
func (m *Manager) ReleaseNamespace(ctx context.Context, ns graveler.StorageNamespace, id graveler.RepositoryID, uid graveler.UniqueID) error {
	return m.releaseClaim(ctx, ns, id, uid, true)
}

// BackfillNamespaceClaim gives active incarnation uid of id the claim on
// its storage namespace when it holds none: a repository created before
// namespaces were claimed. It reports whether it wrote one. A claim of
// another incarnation that still counts is left alone and returned as
// *graveler.NamespaceInUseError (two repositories created on one
// namespace before claims existed: an operator must move one); a stale
// one is taken over. The record is read again after the write: if the
// incarnation was deleted meanwhile (and its reclaim may have found no
// claim to honour), the claim is released again. For the cleaner; the
// nesting checks of a create are not applied to existing repositories.
func (m *Manager) BackfillNamespaceClaim(ctx context.Context, id graveler.RepositoryID, uid graveler.UniqueID) (bool, error) {
	active := func() (*graveler.Repository, bool, error) {
		r, _, err := m.getRepositoryRecord(ctx, id)
		if errors.Is(err, graveler.ErrRepositoryNotFound) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		return r, r.UniqueID == uid && r.State == graveler.RepositoryStateActive, nil
	}
	rec, ok, err := active()
	if err != nil || !ok {
		return false, err
	}
	_, key, err := claimKey(rec.StorageNamespace)
	if err != nil {
		return false, nil // a namespace that does not normalize is never claimed
	}
	mine := &NamespaceClaim{Namespace: rec.StorageNamespace, Repository: id, UniqueID: uid, Claimed: m.now().UTC()}
	for attempt := 0; ; attempt++ {
		if attempt > m.cfg.BranchUpdateMaxRetries {
			return false, fmt.Errorf("backfill claim of storage namespace %q: %w", rec.StorageNamespace, graveler.ErrTooManyRetries)
		}
		cur, pred, err := m.getClaim(ctx, key)
		switch {
		case errors.Is(err, kv.ErrNotFound):
			pred = kv.Absent
		case err != nil:
			return false, err
		case cur.names(id, uid):
			return false, nil
		default:
			state, again, err := m.holder(ctx, cur)
			if err != nil {
				return false, err
			}
			if again {
				continue
			}
			if state != "" {
				return false, m.inUse(rec.StorageNamespace, cur, state)
			}
		}
		data, err := encodeNamespaceClaim(mine)
		if err != nil {
			return false, err
		}
		err = m.store.SetIf(ctx, keys.Graveler(), key, data, pred)
		if errors.Is(err, kv.ErrPredicateFailed) {
			continue
		}
		if err != nil {
			return false, storeErr(err, "backfill claim of storage namespace %q for repository %s", rec.StorageNamespace, id)
		}
		break
	}
	if _, ok, err := active(); err != nil || !ok {
		// Deleted between the first read and the claim: the claim must
		// not outlive it. Not forced: one its reclaim already marked is
		// the cleaner's to release.
		if rerr := m.releaseClaim(ctx, rec.StorageNamespace, id, uid, false); rerr != nil {
			return true, errors.Join(err, rerr)
		}
		return false, err
	}
	return true, nil
}
