package ref

import (
	"context"
	"errors"
	"fmt"

	"graveler/graveler"
)

// Retirable reports whether a repository record no longer counts and may be
// retired by anyone who meets it: deleting (a delete that stopped part way),
// or initial past Config.RepositoryCreationTimeout (a create that crashed).
func (m *Manager) Retirable(r *graveler.Repository) bool {
	return r != nil && (r.State == graveler.RepositoryStateDeleting || m.expired(r))
}

// RetireRepository finishes the delete flow for incarnation uid of
// repository id, if the record still names that incarnation and it is
// Retirable: it marks the record deleting, queues the incarnation under
// graveler_deleted/repos and removes the record. It reports whether it
// retired the record; a missing record, another incarnation, or a record
// that still counts (active, or initial within the creation timeout) is
// left alone and reported as false with no error. For the cleaner, which
// sweeps records no caller reads any more.
func (m *Manager) RetireRepository(ctx context.Context, id graveler.RepositoryID, uid graveler.UniqueID) (bool, error) {
	if err := graveler.ValidateRepositoryID(id); err != nil {
		return false, err
	}
	r, pred, err := m.getRepositoryRecord(ctx, id)
	if errors.Is(err, graveler.ErrRepositoryNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if r.UniqueID != uid || !m.Retirable(r) {
		return false, nil
	}
	if err := m.retire(ctx, id, r, pred); err != nil {
		if errors.Is(err, errStillCounts) {
			return false, nil // a create finished late: it is live now
		}
		return false, fmt.Errorf("retire repository %s incarnation %s: %w", id, uid, err)
	}
	if r.State == graveler.RepositoryStateInitial {
		repositoriesExpired.Inc()
	}
	return true, nil
}
