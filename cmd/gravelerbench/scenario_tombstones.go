package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"graveler/graveler"
	"graveler/graveler/committed"
	"graveler/graveler/ref"
	"graveler/graveler/staging"
)

// tombstones: what staged deletes cost a listing. A head holds
// tombstonesN keys under one prefix, in tombstonesGroups sub-prefixes,
// and a few keys after it. For 0, 50 and 99 % of the prefix deleted,
// individually (one staged tombstone per key) and by prefix (one
// DeletePrefix per sub-prefix), it times the first ListEntries page of
// the prefix and a full listing of it, and prints the stored records each
// read (EntriesPage.RecordsRead). The same pages are read by a service
// with no page budget on the same store, the behaviour before pages were
// bounded, so each TOMBSTONES line carries its same-run baseline.
//
// It runs the Graveler library on the etcd (--embedded or --etcd), as
// commit-scaling does, since records read are not visible over the API.

const (
	tombstonesN        = 100_000
	tombstonesGroups   = 100
	tombstonesPage     = 1000
	tombstonesReps     = 5
	tombstonesSetBatch = 1000
)

func (b *bench) tombstones(ctx context.Context) error {
	if len(b.endpoints) == 0 {
		return errors.New("tombstones needs etcd (--embedded or --etcd): it runs the library to count records read")
	}
	lt, err := openLibraryTarget(ctx, b.endpoints, b.runID, 0)
	if err != nil {
		return err
	}
	defer lt.Close()
	// The same stores without a page budget: the unbounded baseline.
	unbounded := graveler.New(ref.New(lt.store, ref.Config{}), staging.New(lt.store, staging.Config{}),
		committed.NewManager(lt.blobs, committed.Config{}), graveler.Config{ListPageBudget: -1})
	perGroup := tombstonesN / tombstonesGroups
	key := func(i int) []byte { return fmt.Appendf(nil, "t/%03d/%07d", i/perGroup, i) }
	data := b.w.data()
	for _, pct := range []int{0, 50, 99} {
		for _, mode := range []string{"individual", "prefix"} {
			if pct == 0 && mode == "prefix" {
				continue
			}
			repo := b.repo(fmt.Sprintf("tomb-%d-%s", pct, mode))
			// tombstonesN keys under t/, then a few after it.
			if err := lt.build(ctx, repo, tombstonesN+10, func(i int) []byte {
				if i >= tombstonesN {
					return fmt.Appendf(nil, "u/%02d", i-tombstonesN)
				}
				return key(i)
			}, func(i int) []byte { return identity(-1, i) }, data); err != nil {
				return fmt.Errorf("tombstones: build: %w", err)
			}
			deleted := tombstonesN * pct / 100
			start := time.Now()
			switch mode {
			case "individual":
				for from := 0; from < deleted; from += tombstonesSetBatch {
					recs := make([]*graveler.ValueRecord, 0, tombstonesSetBatch)
					for i := from; i < min(from+tombstonesSetBatch, deleted); i++ {
						recs = append(recs, &graveler.ValueRecord{Key: key(i)})
					}
					if err := lt.g.SetBatch(ctx, graveler.RepositoryID(repo), "main", recs); err != nil {
						return fmt.Errorf("tombstones: stage deletes: %w", err)
					}
				}
			case "prefix":
				for grp := range deleted / perGroup {
					if err := lt.g.DeletePrefix(ctx, graveler.RepositoryID(repo), "main", fmt.Appendf(nil, "t/%03d/", grp)); err != nil {
						return fmt.Errorf("tombstones: delete prefix: %w", err)
					}
				}
			}
			fmt.Fprintf(b.out, "tombstones: %d%% of %d keys deleted %s in %s\n", pct, tombstonesN, mode, time.Since(start).Round(time.Millisecond))
			sides := []struct {
				name string
				g    *graveler.Graveler
			}{{"bounded", lt.g}, {"unbounded", unbounded}}
			// Warm both sides (the range cache, the etcd client) untimed,
			// so that neither pays for being first.
			for _, side := range sides {
				if _, _, _, _, err := tombstonesFullListing(ctx, side.g, repo); err != nil {
					return err
				}
			}
			for _, side := range sides {
				first, firstRecs, err := tombstonesFirstPage(ctx, side.g, repo)
				if err != nil {
					return err
				}
				full, pages, fullRecs, rows, err := tombstonesFullListing(ctx, side.g, repo)
				if err != nil {
					return err
				}
				fmt.Fprintf(b.out, "TOMBSTONES deleted=%d%% mode=%s service=%s first_page_ms=%.2f first_page_records=%d full_listing_ms=%.1f pages=%d ms_per_page=%.2f records=%d rows=%d\n",
					pct, mode, side.name, first, firstRecs, full, pages, full/float64(pages), fullRecs, rows)
			}
		}
	}
	return nil
}

// tombstonesFirstPage returns the median time of the first page of t/ and
// the records it read.
func tombstonesFirstPage(ctx context.Context, g *graveler.Graveler, repo string) (float64, int, error) {
	var ms []float64
	recs := 0
	for range tombstonesReps {
		start := time.Now()
		page, err := g.ListEntriesPage(ctx, graveler.RepositoryID(repo), "main", graveler.ListEntriesOptions{Prefix: graveler.Key("t/"), Limit: tombstonesPage})
		if err != nil {
			return 0, 0, fmt.Errorf("tombstones: first page: %w", err)
		}
		ms = append(ms, float64(time.Since(start).Microseconds())/1000)
		recs = page.RecordsRead
	}
	slices.Sort(ms)
	return ms[len(ms)/2], recs, nil
}

// tombstonesFullListing pages through t/ as an API client does.
func tombstonesFullListing(ctx context.Context, g *graveler.Graveler, repo string) (ms float64, pages, recs, rows int, err error) {
	opts := graveler.ListEntriesOptions{Prefix: graveler.Key("t/"), Limit: tombstonesPage}
	start := time.Now()
	for {
		page, err := g.ListEntriesPage(ctx, graveler.RepositoryID(repo), "main", opts)
		if err != nil {
			return 0, 0, 0, 0, fmt.Errorf("tombstones: full listing: %w", err)
		}
		pages++
		recs += page.RecordsRead
		rows += len(page.Rows)
		switch {
		case !page.More:
			return float64(time.Since(start).Microseconds()) / 1000, pages, recs, rows, nil
		case page.ResumeAfter != nil:
			opts.After, opts.Resume = page.ResumeAfter, true
		case len(page.Rows) > 0:
			opts.After, opts.Resume = page.Rows[len(page.Rows)-1].Key, false
		default:
			return 0, 0, 0, 0, errors.New("tombstones: a page with more, no rows and nowhere to resume")
		}
	}
}
