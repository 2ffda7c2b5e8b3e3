package fsck

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// WriteText writes the report for a person: what was checked, then every
// finding with what to do, every repair, and a last line with the outcome.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	mode := "existence of committed objects"
	if r.Full {
		mode = "full verification of committed objects (--full)"
	}
	fmt.Fprintf(&b, "fsck at etcd revision %d, %s, in %.1fs\n", r.Revision, mode, r.DurationSeconds)
	st := r.Stats
	var states []string
	for _, k := range slices.Sorted(maps.Keys(st.Repositories)) {
		states = append(states, fmt.Sprintf("%d %s", st.Repositories[k], k))
	}
	if len(states) == 0 {
		states = []string{"none"}
	}
	fmt.Fprintf(&b, "  repositories: %s\n", strings.Join(states, ", "))
	fmt.Fprintf(&b, "  refs:         %d branches, %d tags, %d commits (%d unreachable, not checked further)\n",
		st.Branches, st.Tags, st.Commits, st.UnreachableCommits)
	fmt.Fprintf(&b, "  blob store:   %d metaranges, %d ranges", st.MetaRanges, st.Ranges)
	if r.Full {
		fmt.Fprintf(&b, " (%s read)", bytesText(st.RangeBytes))
	}
	b.WriteString("\n")
	fmt.Fprintf(&b, "  staging:      %d live tokens with %d entries, %d of them tombstones\n", st.StagingTokens, st.StagedEntries, st.Tombstones)
	fmt.Fprintf(&b, "  partitions:   %d staging partitions: %d orphaned, %d queued for the cleaner, %d unreferenced within the grace, %d unsure\n",
		st.StagingPartitions, st.OrphanedPartitions, st.QueuedPartitions, st.YoungPartitions, st.UnsurePartitions)
	fmt.Fprintf(&b, "  work list:    %d repositories and %d tokens queued for the cleaner\n", st.QueuedRepositories, st.QueuedTokens)
	e := r.Etcd
	fmt.Fprintf(&b, "  etcd:         %d members, %d alarms, %d hashes compared\n", len(e.Members), len(e.Alarms), e.HashesCompared)
	for _, m := range e.Members {
		if m.Error != "" {
			fmt.Fprintf(&b, "    %s: %s\n", memberName(m), m.Error)
			continue
		}
		pct := 0.0
		if e.QuotaBytes > 0 {
			pct = 100 * float64(m.DBSize) / float64(e.QuotaBytes)
		}
		fmt.Fprintf(&b, "    %s: database %s (%s in use), %.0f%% of the %s quota\n",
			memberName(m), bytesText(m.DBSize), bytesText(m.DBSizeInUse), pct, bytesText(e.QuotaBytes))
	}
	if len(r.Findings) > 0 {
		fmt.Fprintf(&b, "\nFINDINGS (%d)\n", len(r.Findings))
		for _, f := range r.Findings {
			where := f.Resource
			if f.Repository != "" {
				where = "repository " + f.Repository + ": " + where
			}
			fmt.Fprintf(&b, "  %-7s %s  %s\n          %s\n          what to do: %s\n", strings.ToUpper(string(f.Severity)), f.Kind, where, f.Detail, f.Action)
		}
	}
	if len(r.Repairs) > 0 {
		fmt.Fprintf(&b, "\nREPAIRS (%d)\n", len(r.Repairs))
		for _, x := range r.Repairs {
			fmt.Fprintf(&b, "  %-7s %s: %s\n", x.Action, x.Resource, x.Detail)
		}
	}
	if len(r.Problems) > 0 {
		fmt.Fprintf(&b, "\nNOT CHECKED (%d)\n", len(r.Problems))
		for _, p := range r.Problems {
			fmt.Fprintf(&b, "  %s\n", p)
		}
	}
	b.WriteString("\n")
	switch {
	case r.Incomplete:
		fmt.Fprintf(&b, "INCOMPLETE: some checks could not be made; %d problems found in what was checked\n", len(r.Findings))
	case r.Healthy:
		b.WriteString("HEALTHY: no problems found\n")
	default:
		fmt.Fprintf(&b, "PROBLEMS FOUND: %d (%d errors, %d warnings)\n", len(r.Findings), r.severities(SeverityError), r.severities(SeverityWarning))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Report) severities(s Severity) int {
	n := 0
	for _, f := range r.Findings {
		if f.Severity == s {
			n++
		}
	}
	return n
}

func bytesText(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
