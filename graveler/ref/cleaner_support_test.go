package ref_test

import (
	"testing"

	"graveler/graveler"
)

func TestRetireRepository(t *testing.T) {
	store := memoryStore(t)
	e := newEnv(t, store, nil)

	// Active: left alone.
	live := e.createRepo("live")
	if ok, err := e.m.RetireRepository(e.ctx, "live", live.UniqueID); ok || err != nil {
		t.Fatalf("RetireRepository(active) = %v, %v", ok, err)
	}
	if rec, ok := e.rawRepository("live"); !ok || rec.State != graveler.RepositoryStateActive {
		t.Fatalf("active record after RetireRepository = %+v, %v", rec, ok)
	}
	// Missing: nothing to do.
	if ok, err := e.m.RetireRepository(e.ctx, "missing", "x"); ok || err != nil {
		t.Fatalf("RetireRepository(missing) = %v, %v", ok, err)
	}

	// A create that crashed after its first write leaves an initial record.
	fs := &faultStore{Store: store}
	fs.arm(faultCrash, 3)
	if _, err := e.managerOn(fs).CreateRepository(e.ctx, "stuck", repoParams(), initialCommit()); err == nil {
		t.Fatal("crashed creation succeeded")
	}
	rec, ok := e.rawRepository("stuck")
	if !ok || rec.State != graveler.RepositoryStateInitial {
		t.Fatalf("record after crash = %+v, %v", rec, ok)
	}
	if e.m.Retirable(rec) {
		t.Fatal("young initial record is retirable")
	}
	// Young: a creation may still be running.
	if ok, err := e.m.RetireRepository(e.ctx, "stuck", rec.UniqueID); ok || err != nil {
		t.Fatalf("RetireRepository(young initial) = %v, %v", ok, err)
	}
	e.clock.Advance(e.cfg.RepositoryCreationTimeout)
	if !e.m.Retirable(rec) {
		t.Fatal("expired initial record is not retirable")
	}
	// Another incarnation's id: left alone.
	if ok, err := e.m.RetireRepository(e.ctx, "stuck", "other"); ok || err != nil {
		t.Fatalf("RetireRepository(other incarnation) = %v, %v", ok, err)
	}
	if ok, err := e.m.RetireRepository(e.ctx, "stuck", rec.UniqueID); !ok || err != nil {
		t.Fatalf("RetireRepository(expired initial) = %v, %v", ok, err)
	}
	if _, ok := e.rawRepository("stuck"); ok {
		t.Fatal("expired initial record not removed")
	}
	if !e.queued("stuck", string(rec.UniqueID)) {
		t.Fatal("expired initial record not queued")
	}
	// Idempotent.
	if ok, err := e.m.RetireRepository(e.ctx, "stuck", rec.UniqueID); ok || err != nil {
		t.Fatalf("second RetireRepository = %v, %v", ok, err)
	}
}
