package keys_test

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"graveler/etcdkv"
	"graveler/keys"
)

var update = flag.Bool("update", false, "rewrite the generated blocks of docs/key-layout.md")

const layoutDoc = "../docs/key-layout.md"

// generated maps each generated block of the document to its content.
func generated() map[string]string {
	return map[string]string{
		"tree":  "```\n" + keys.LayoutTree("$ROOT", etcdPartition) + "```\n",
		"table": keys.LayoutTable(),
	}
}

// etcdPartition is how the etcd store names a partition's namespace.
func etcdPartition(partition string) string { return etcdkv.PartitionElement([]byte(partition)) }

var blockRE = regexp.MustCompile(`(?s)(<!-- BEGIN GENERATED (\w+)[^>]*-->\n)(.*?)(<!-- END GENERATED \w+ -->)`)

// render replaces every generated block of doc, and reports the blocks it
// found, so that a document that lost a marker fails too.
func render(doc []byte) ([]byte, map[string]bool) {
	blocks := generated()
	seen := map[string]bool{}
	out := blockRE.ReplaceAllFunc(doc, func(m []byte) []byte {
		sub := blockRE.FindSubmatch(m)
		name := string(sub[2])
		content, ok := blocks[name]
		if !ok {
			return m
		}
		seen[name] = true
		return append(append(append([]byte{}, sub[1]...), content...), sub[4]...)
	})
	return out, seen
}

// TestLayoutDoc fails when docs/key-layout.md and keys/ disagree. Run
// `go test ./keys -run TestLayoutDoc -update` (or `go generate ./keys`)
// to regenerate the document after changing a key.
func TestLayoutDoc(t *testing.T) {
	doc, err := os.ReadFile(layoutDoc)
	if err != nil {
		t.Fatal(err)
	}
	out, seen := render(doc)
	for name := range generated() {
		if !seen[name] {
			t.Errorf("%s has no generated block %q (<!-- BEGIN GENERATED %s --> ... <!-- END GENERATED %s -->)", layoutDoc, name, name, name)
		}
	}
	if bytes.Equal(out, doc) {
		return
	}
	if *update {
		if err := os.WriteFile(layoutDoc, out, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s is out of date with keys/: run `go test ./keys -run TestLayoutDoc -update`\n--- want\n%s", layoutDoc, out)
}

// TestLayoutMatchesBuilders checks that each template is what its builder
// makes of concrete names, and that the parsers read those names back, so
// the layout cannot describe a format the code does not produce.
func TestLayoutMatchesBuilders(t *testing.T) {
	sample := strings.NewReplacer(
		keys.PlaceholderRepo, "sales",
		keys.PlaceholderUniqueID, "d4f1c2",
		keys.PlaceholderStagingToken, "tok_01",
		keys.PlaceholderBranch, "main",
		keys.PlaceholderCommitID, "c0ffee",
		keys.PlaceholderTag, "v1.0",
		keys.PlaceholderEntryKey, "tables/a/part-0",
		keys.PlaceholderNamespace, "s3://bucket/sales",
	)
	builders := map[string]func() (partition, key []byte){
		"keys.Repository": func() ([]byte, []byte) { return keys.Graveler(), keys.Repository("sales") },
		"keys.NamespaceClaim": func() ([]byte, []byte) {
			return keys.Graveler(), keys.NamespaceClaim("s3://bucket/sales")
		},
		"keys.GCSweep": func() ([]byte, []byte) {
			return keys.Graveler(), keys.GCSweep("s3://bucket/sales")
		},
		"keys.DeletedRepository": func() ([]byte, []byte) {
			return keys.Deleted(), keys.DeletedRepository("sales", "d4f1c2")
		},
		"keys.DeletedToken": func() ([]byte, []byte) { return keys.Deleted(), keys.DeletedToken("tok_01") },
		"keys.Branch": func() ([]byte, []byte) {
			return keys.RepositoryPartition("sales", "d4f1c2"), keys.Branch("main")
		},
		"keys.Commit": func() ([]byte, []byte) {
			return keys.RepositoryPartition("sales", "d4f1c2"), keys.Commit("c0ffee")
		},
		"keys.Tag": func() ([]byte, []byte) {
			return keys.RepositoryPartition("sales", "d4f1c2"), keys.Tag("v1.0")
		},
		"keys.Entry": func() ([]byte, []byte) {
			return keys.StagingPartition("tok_01"), keys.Entry([]byte("tables/a/part-0"))
		},
		"keys.StagingRanges": func() ([]byte, []byte) {
			return keys.StagingPartition("tok_01"), keys.StagingRanges()
		},
		"keys.StagingSealed": func() ([]byte, []byte) {
			return keys.StagingPartition("tok_01"), keys.StagingSealed()
		},
	}
	seen := map[string]bool{}
	for _, k := range keys.Layout() {
		build, ok := builders[k.KeyBuilder]
		if !ok {
			t.Errorf("layout names builder %s, which this test does not know", k.KeyBuilder)
			continue
		}
		seen[k.KeyBuilder] = true
		p, key := build()
		if got := sample.Replace(k.Partition); got != string(p) {
			t.Errorf("%s: partition template %q gives %q, builder gives %q", k.KeyBuilder, k.Partition, got, p)
		}
		if got := sample.Replace(k.Key); got != string(key) {
			t.Errorf("%s: key template %q gives %q, builder gives %q", k.KeyBuilder, k.Key, got, key)
		}
		if k.PartitionBuilder == "" || k.PartitionDoc == "" {
			t.Errorf("%s: partition builder or doc missing: %+v", k.KeyBuilder, k)
		}
	}
	for name := range builders {
		if !seen[name] {
			t.Errorf("builder %s is missing from the layout", name)
		}
	}

	// The parsers read the sample names back.
	if r, u, err := keys.ParseRepositoryPartition(keys.RepositoryPartition("sales", "d4f1c2")); err != nil || r != "sales" || u != "d4f1c2" {
		t.Errorf("ParseRepositoryPartition = %q, %q, %v", r, u, err)
	}
	if tok, err := keys.ParseStagingPartition(keys.StagingPartition("tok_01")); err != nil || tok != "tok_01" {
		t.Errorf("ParseStagingPartition = %q, %v", tok, err)
	}
	if r, u, err := keys.ParseDeletedRepository(keys.DeletedRepository("sales", "d4f1c2")); err != nil || r != "sales" || u != "d4f1c2" {
		t.Errorf("ParseDeletedRepository = %q, %q, %v", r, u, err)
	}
	if e, err := keys.ParseEntry(keys.Entry([]byte("tables/a/part-0"))); err != nil || string(e) != "tables/a/part-0" {
		t.Errorf("ParseEntry = %q, %v", e, err)
	}
	if ns, err := keys.ParseNamespaceClaim(keys.NamespaceClaim("s3://bucket/sales")); err != nil || ns != "s3://bucket/sales" {
		t.Errorf("ParseNamespaceClaim = %q, %v", ns, err)
	}
	if _, err := keys.ParseNamespaceClaim(keys.Repository("sales")); err == nil {
		t.Error("ParseNamespaceClaim accepted a repository key")
	}
}

// TestLayoutCoversConstants parses keys/ and checks that every partition
// name and key prefix constant appears in the layout: a new kind of key
// cannot be added without documenting it.
func TestLayoutCoversConstants(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var parsed []*ast.File
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		parsed = append(parsed, af)
	}
	// Type-check without imports resolution beyond what constants need.
	conf := types.Config{Importer: nil, Error: func(error) {}}
	info := &types.Info{Defs: map[*ast.Ident]types.Object{}}
	_, _ = conf.Check("keys", fset, parsed, info)

	var text strings.Builder
	for _, k := range keys.Layout() {
		text.WriteString(k.Partition + "\n" + k.Key + "\n")
	}
	layout := text.String()
	checked := 0
	for id, obj := range info.Defs {
		c, ok := obj.(*types.Const)
		if !ok || c.Parent() != c.Pkg().Scope() || c.Val().Kind() != constant.String {
			continue
		}
		name := id.Name
		if !strings.HasPrefix(strings.ToLower(name), "partition") && !strings.HasSuffix(strings.ToLower(name), "prefix") {
			continue
		}
		v := constant.StringVal(c.Val())
		checked++
		// A partition name or key prefix must begin a line or follow a '/'.
		if !strings.Contains("\n"+layout, "\n"+v) && !strings.Contains(layout, "/"+v) {
			t.Errorf("constant %s = %q does not appear in keys.Layout()", name, v)
		}
	}
	if checked < 9 {
		t.Errorf("checked %d constants; expected at least the 9 partition and prefix constants", checked)
	}
}

func ExampleLayoutTree() {
	fmt.Print(keys.LayoutTree("$ROOT", etcdPartition))
	// Output:
	// $ROOT
	//   graveler/                 # partition: every repository record and storage namespace claim
	//     repos/
	//       <repo> -> Repository{storage_namespace, default_branch, created, state: initial|active|deleting, unique_id}
	//     namespaces/
	//       <normalized storage namespace> -> NamespaceClaim{storage_namespace, repository, unique_id, claimed, reclaiming}
	//     gcsweeps/
	//       <normalized storage namespace> -> GCSweep{run, state: running|done, started, until} (JSON)
	//   graveler_deleted/         # partition: work list of the cleaner
	//     repos/
	//       <repo>/
	//         <unique_id>
	//     tokens/
	//       <staging_token>
	//   repo:<repo>-<unique_id>/  # partition: one incarnation of a repository: its refs
	//     branches/
	//       <branch> -> Branch{commit_id, staging_token, sealed_tokens[]}
	//     commits/
	//       <commit_id> -> Commit{version, committer, message, metarange_id, created, parents[], metadata, generation}
	//     tags/
	//       <tag> -> Tag{commit_id}
	//   staging:<staging_token>/  # partition: one staging token's entries
	//     key/
	//       <entry key> -> Value{identity, data} | tombstone
	//     ranges -> RangeTombstones{[]{prefix, revision, reset_range}}
	//     sealed -> empty: the token is retired, no staged write applies any more
}
