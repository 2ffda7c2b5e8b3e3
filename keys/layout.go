package keys

//go:generate go test . -run TestLayoutDoc -update

import (
	"fmt"
	"reflect"
	"runtime"
	"slices"
	"strings"
)

// Placeholders stand for the variable parts of a key in Layout. They are
// passed through the real builders, so the layout shows exactly what the
// builders produce.
const (
	PlaceholderRepo         = "<repo>"
	PlaceholderUniqueID     = "<unique_id>"
	PlaceholderStagingToken = "<staging_token>"
	PlaceholderBranch       = "<branch>"
	PlaceholderCommitID     = "<commit_id>"
	PlaceholderTag          = "<tag>"
	PlaceholderEntryKey     = "<entry key>"
	PlaceholderNamespace    = "<normalized storage namespace>"
)

// LayoutKey is one kind of key the system writes: the partition and key
// as the builders make them (with placeholders for the variable parts),
// and what the key holds.
type LayoutKey struct {
	// Partition is the partition name, e.g. "repo/<repo>-<unique_id>".
	Partition string
	// PartitionBuilder is the function that builds Partition, e.g.
	// "keys.RepositoryPartition".
	PartitionBuilder string
	// PartitionDoc says what the partition is for.
	PartitionDoc string
	// Key is the key inside the partition, e.g. "branches/<branch>".
	Key string
	// KeyBuilder is the function that builds Key.
	KeyBuilder string
	// Value describes what is stored under the key; empty when only the
	// key's presence matters.
	Value string
	// RawTail is true when the last element of Key is raw bytes that may
	// themselves contain '/' (entry keys), so it is not split in the tree.
	RawTail bool
}

// funcName is the package-qualified name of a builder, so that renaming a
// builder changes the generated layout document.
func funcName(f any) string {
	name := runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name()
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		name = name[i+1:]
	}
	return name
}

// Layout lists every kind of key, in the order the tree shows them. Every
// partition and key is produced by the builder it names.
func Layout() []LayoutKey {
	const (
		gravelerDoc = "every repository record and storage namespace claim"
		deletedDoc  = "work list of the cleaner"
		repoDoc     = "one incarnation of a repository: its refs"
		stagingDoc  = "one staging token's entries"
	)
	repoPart := string(RepositoryPartition(PlaceholderRepo, PlaceholderUniqueID))
	stagingPart := string(StagingPartition(PlaceholderStagingToken))
	return []LayoutKey{
		{
			Partition: string(Graveler()), PartitionBuilder: funcName(Graveler), PartitionDoc: gravelerDoc,
			Key: string(Repository(PlaceholderRepo)), KeyBuilder: funcName(Repository),
			Value: "Repository{storage_namespace, default_branch, created, state: initial|active|deleting, unique_id}",
		},
		{
			Partition: string(Graveler()), PartitionBuilder: funcName(Graveler), PartitionDoc: gravelerDoc,
			Key: string(NamespaceClaim(PlaceholderNamespace)), KeyBuilder: funcName(NamespaceClaim),
			Value:   "NamespaceClaim{storage_namespace, repository, unique_id, claimed, reclaiming}",
			RawTail: true,
		},
		{
			Partition: string(Graveler()), PartitionBuilder: funcName(Graveler), PartitionDoc: gravelerDoc,
			Key: string(GCSweep(PlaceholderNamespace)), KeyBuilder: funcName(GCSweep),
			Value:   "GCSweep{run, state: running|done, started, until} (JSON)",
			RawTail: true,
		},
		{
			Partition: string(Deleted()), PartitionBuilder: funcName(Deleted), PartitionDoc: deletedDoc,
			Key: string(DeletedRepository(PlaceholderRepo, PlaceholderUniqueID)), KeyBuilder: funcName(DeletedRepository),
			Value: "",
		},
		{
			Partition: string(Deleted()), PartitionBuilder: funcName(Deleted), PartitionDoc: deletedDoc,
			Key: string(DeletedToken(PlaceholderStagingToken)), KeyBuilder: funcName(DeletedToken),
			Value: "",
		},
		{
			Partition: repoPart, PartitionBuilder: funcName(RepositoryPartition), PartitionDoc: repoDoc,
			Key: string(Branch(PlaceholderBranch)), KeyBuilder: funcName(Branch),
			Value: "Branch{commit_id, staging_token, sealed_tokens[]}",
		},
		{
			Partition: repoPart, PartitionBuilder: funcName(RepositoryPartition), PartitionDoc: repoDoc,
			Key: string(Commit(PlaceholderCommitID)), KeyBuilder: funcName(Commit),
			Value: "Commit{version, committer, message, metarange_id, created, parents[], metadata, generation}",
		},
		{
			Partition: repoPart, PartitionBuilder: funcName(RepositoryPartition), PartitionDoc: repoDoc,
			Key: string(Tag(PlaceholderTag)), KeyBuilder: funcName(Tag),
			Value: "Tag{commit_id}",
		},
		{
			Partition: stagingPart, PartitionBuilder: funcName(StagingPartition), PartitionDoc: stagingDoc,
			Key: string(Entry([]byte(PlaceholderEntryKey))), KeyBuilder: funcName(Entry),
			Value:   "Value{identity, data} | tombstone",
			RawTail: true,
		},
		{
			Partition: stagingPart, PartitionBuilder: funcName(StagingPartition), PartitionDoc: stagingDoc,
			Key: string(StagingRanges()), KeyBuilder: funcName(StagingRanges),
			Value: "RangeTombstones{[]{prefix, revision, reset_range}}",
		},
		{
			Partition: stagingPart, PartitionBuilder: funcName(StagingPartition), PartitionDoc: stagingDoc,
			Key: string(StagingSealed()), KeyBuilder: funcName(StagingSealed),
			Value: "empty: the token is retired, no staged write applies any more",
		},
	}
}

// layoutNode is one level of the rendered tree.
type layoutNode struct {
	name     string // path element, with its trailing '/' for a namespace
	value    string
	comment  string
	children []*layoutNode
}

func (n *layoutNode) child(name string) *layoutNode {
	for _, c := range n.children {
		if c.name == name {
			return c
		}
	}
	c := &layoutNode{name: name}
	n.children = append(n.children, c)
	return c
}

// elements splits s into path elements, each namespace keeping its '/'.
func elements(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s, '/')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// LayoutTree renders Layout as an indented tree in which every name ending
// in '/' is a key namespace and "k -> v" is a key holding v. root is the
// label of the top line (the store's root prefix). Each partition is one
// namespace directly under the root, named by partitionElement (the
// store's encoding of a partition name as one path element, such as
// etcdkv.PartitionElement); a partition's keys are below it.
func LayoutTree(root string, partitionElement func(partition string) string) string {
	top := &layoutNode{name: root}
	for _, k := range Layout() {
		n := top.child(partitionElement(k.Partition) + "/")
		if n.comment == "" {
			n.comment = "partition: " + k.PartitionDoc
		}
		keyParts := elements(k.Key)
		if k.RawTail {
			// The raw tail may hold '/', so it stays one element.
			prefix := keyParts[0]
			keyParts = []string{prefix, strings.TrimPrefix(k.Key, prefix)}
		}
		for _, p := range keyParts {
			n = n.child(p)
		}
		n.value = k.Value
	}
	type line struct{ text, comment string }
	var lines []line
	var walk func(n *layoutNode, depth int)
	walk = func(n *layoutNode, depth int) {
		text := strings.Repeat("  ", depth) + n.name
		if n.value != "" {
			text += " -> " + n.value
		}
		lines = append(lines, line{text, n.comment})
		for _, c := range n.children {
			walk(c, depth+1)
		}
	}
	walk(top, 0)
	width := 0
	for _, l := range lines {
		if l.comment != "" {
			width = max(width, len(l.text))
		}
	}
	var b strings.Builder
	for _, l := range lines {
		if l.comment == "" {
			b.WriteString(l.text + "\n")
			continue
		}
		fmt.Fprintf(&b, "%-*s  # %s\n", width, l.text, l.comment)
	}
	return b.String()
}

// LayoutTable renders Layout as a Markdown table: one row per kind of key,
// naming the builders that make it.
func LayoutTable() string {
	var b strings.Builder
	b.WriteString("| partition | built by | key | built by | value |\n")
	b.WriteString("| --- | --- | --- | --- | --- |\n")
	for _, k := range Layout() {
		value := k.Value
		if value == "" {
			value = "(a marker: the key names the work)"
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | `%s` | `%s` | %s |\n",
			k.Partition, k.PartitionBuilder, k.Key, k.KeyBuilder, strings.ReplaceAll(value, "|", `\|`))
	}
	return b.String()
}

// LayoutPartitions lists the distinct partition formats of Layout, in order.
func LayoutPartitions() []string {
	var out []string
	for _, k := range Layout() {
		if !slices.Contains(out, k.Partition) {
			out = append(out, k.Partition)
		}
	}
	return out
}
