package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	pb "graveler/api/graveler/v1"
	"graveler/buildinfo"
	"graveler/client"
)

func lastSegment(name string) string { return name[strings.LastIndexByte(name, '/')+1:] }

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func fmtTime(t interface{ AsTime() time.Time }) string {
	return t.AsTime().Local().Format(time.RFC3339)
}

// revIn and revParen add the revision of a mutation to human output; a
// server that does not report it (0) adds nothing.
func revIn(rev int64) string {
	if rev == 0 {
		return ""
	}
	return fmt.Sprintf(", revision %d", rev)
}

func revParen(rev int64) string {
	if rev == 0 {
		return ""
	}
	return fmt.Sprintf(" (revision %d)", rev)
}

// --- repositories

func (a *app) repoCmd() *cobra.Command {
	c := &cobra.Command{Use: "repo", Short: "Create, show, list and delete repositories"}
	var ns, def string
	var bare bool
	create := &cobra.Command{
		Use: "create REPO", Short: "Create a repository", Args: nargs(1, "REPO"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			r, err := cl.CreateRepository(ctx, &pb.CreateRepositoryRequest{
				RepositoryId: args[0], Bare: bare,
				Repository: &pb.Repository{StorageNamespace: ns, DefaultBranch: def},
			})
			if err != nil {
				return err
			}
			return a.emit(r, func(w io.Writer) {
				fmt.Fprintf(w, "created repository %s (default branch %s, storage %s%s)\n",
					args[0], r.GetRepository().GetDefaultBranch(), r.GetRepository().GetStorageNamespace(), revIn(r.GetRevision()))
			})
		}),
	}
	create.Flags().StringVar(&ns, "storage-namespace", "", "where committed data goes (default: <the server's --storage-namespace-root>/REPO-<unique suffix>, a new one at each create)")
	create.Flags().StringVar(&def, "default-branch", "", "default branch (default main)")
	create.Flags().BoolVar(&bare, "bare", false, "no initial commit or branch (to restore a dump into)")
	get := &cobra.Command{
		Use: "get REPO", Short: "Show a repository", Args: nargs(1, "REPO"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			r, err := cl.GetRepository(ctx, &pb.GetRepositoryRequest{Name: client.Repository(args[0])})
			if err != nil {
				return err
			}
			return a.emit(r.GetRepository(), func(w io.Writer) { a.repoTable(w, r.GetRepository()) })
		}),
	}
	var pageSize int32
	list := &cobra.Command{
		Use: "list", Short: "List repositories", Args: nargs(0, ""),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			var all []*pb.Repository
			token := ""
			for {
				r, err := cl.ListRepositories(ctx, &pb.ListRepositoriesRequest{PageSize: pageSize, PageToken: token})
				if err != nil {
					return err
				}
				all = append(all, r.GetRepositories()...)
				if token = r.GetNextPageToken(); token == "" {
					break
				}
			}
			if a.output == "json" {
				for _, r := range all {
					if err := a.emit(r, nil); err != nil {
						return err
					}
				}
				return nil
			}
			a.repoTable(a.streams.Out, all...)
			return nil
		}),
	}
	list.Flags().Int32Var(&pageSize, "page-size", 0, "results per request (0: server default)")
	del := &cobra.Command{
		Use: "delete REPO", Short: "Delete a repository", Args: nargs(1, "REPO"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			r, err := cl.DeleteRepository(ctx, &pb.DeleteRepositoryRequest{Name: client.Repository(args[0])})
			if err != nil {
				return err
			}
			return a.emit(r, func(w io.Writer) { fmt.Fprintf(w, "deleted repository %s%s\n", args[0], revParen(r.GetRevision())) })
		}),
	}
	c.AddCommand(create, get, list, del)
	return group(c)
}

func (a *app) repoTable(w io.Writer, repos ...*pb.Repository) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPOSITORY\tDEFAULT BRANCH\tSTORAGE NAMESPACE\tCREATED")
	for _, r := range repos {
		created := ""
		if r.GetCreateTime() != nil {
			created = fmtTime(r.GetCreateTime())
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", lastSegment(r.GetName()), r.GetDefaultBranch(), r.GetStorageNamespace(), created)
	}
	tw.Flush()
}

// --- branches

func (a *app) branchTable(w io.Writer, bs ...*pb.Branch) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BRANCH\tCOMMIT")
	for _, b := range bs {
		fmt.Fprintf(tw, "%s\t%s\n", lastSegment(b.GetName()), b.GetCommitId())
	}
	tw.Flush()
}

func (a *app) branchCmd() *cobra.Command {
	c := &cobra.Command{Use: "branch", Short: "Create, show, list and delete branches"}
	var source string
	create := &cobra.Command{
		Use: "create REPO BRANCH", Short: "Create a branch", Args: nargs(2, "REPO BRANCH"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			src := source
			if src == "" {
				r, err := cl.GetRepository(ctx, &pb.GetRepositoryRequest{Name: client.Repository(args[0])})
				if err != nil {
					return err
				}
				src = r.GetRepository().GetDefaultBranch()
			}
			r, err := cl.CreateBranch(ctx, &pb.CreateBranchRequest{Parent: client.Repository(args[0]), BranchId: args[1], SourceRef: src})
			if err != nil {
				return err
			}
			return a.emit(r, func(w io.Writer) {
				fmt.Fprintf(w, "created branch %s at %s (from %s%s)\n", args[1], r.GetBranch().GetCommitId(), src, revIn(r.GetRevision()))
			})
		}),
	}
	create.Flags().StringVarP(&source, "source", "s", "", "reference to branch from (default: the default branch)")
	get := &cobra.Command{
		Use: "get REPO BRANCH", Short: "Show a branch", Args: nargs(2, "REPO BRANCH"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			r, err := cl.GetBranch(ctx, &pb.GetBranchRequest{Name: client.Branch(args[0], args[1])})
			if err != nil {
				return err
			}
			return a.emit(r.GetBranch(), func(w io.Writer) { a.branchTable(w, r.GetBranch()) })
		}),
	}
	var pageSize int32
	list := &cobra.Command{
		Use: "list REPO", Short: "List branches", Args: nargs(1, "REPO"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			var all []*pb.Branch
			token := ""
			for {
				r, err := cl.ListBranches(ctx, &pb.ListBranchesRequest{Parent: client.Repository(args[0]), PageSize: pageSize, PageToken: token})
				if err != nil {
					return err
				}
				all = append(all, r.GetBranches()...)
				if token = r.GetNextPageToken(); token == "" {
					break
				}
			}
			if a.output == "json" {
				for _, b := range all {
					if err := a.emit(b, nil); err != nil {
						return err
					}
				}
				return nil
			}
			a.branchTable(a.streams.Out, all...)
			return nil
		}),
	}
	list.Flags().Int32Var(&pageSize, "page-size", 0, "results per request (0: server default)")
	del := &cobra.Command{
		Use: "delete REPO BRANCH", Short: "Delete a branch", Args: nargs(2, "REPO BRANCH"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			r, err := cl.DeleteBranch(ctx, &pb.DeleteBranchRequest{Name: client.Branch(args[0], args[1])})
			if err != nil {
				return err
			}
			return a.emit(r, func(w io.Writer) { fmt.Fprintf(w, "deleted branch %s%s\n", args[1], revParen(r.GetRevision())) })
		}),
	}
	c.AddCommand(create, get, list, del)
	return group(c)
}

func (a *app) resetHardCmd() *cobra.Command {
	var etag string
	var force bool
	c := &cobra.Command{
		Use: "reset-hard REPO BRANCH REF", Short: "Move a branch to a reference (optionally only if its head is --etag)",
		Args: nargs(3, "REPO BRANCH REF"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			r, err := cl.ResetHard(ctx, &pb.ResetHardRequest{Name: client.Branch(args[0], args[1]), Ref: args[2], Etag: etag, Force: force})
			if err != nil {
				return err
			}
			return a.emit(r, func(w io.Writer) {
				fmt.Fprintf(w, "branch %s now at %s%s\n", args[1], r.GetBranch().GetCommitId(), revParen(r.GetRevision()))
			})
		}),
	}
	c.Flags().StringVar(&etag, "etag", "", "move only if the branch's head commit is this one")
	c.Flags().BoolVar(&force, "force", false, "discard staged changes")
	return c
}

func (a *app) resetCmd() *cobra.Command {
	var key, prefix string
	c := &cobra.Command{
		Use: "reset REPO BRANCH", Short: "Discard staged changes: all, one --key, or a --prefix",
		Args: nargs(2, "REPO BRANCH"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			req := &pb.ResetRequest{Branch: client.Branch(args[0], args[1]), Scope: pb.ResetScope_RESET_SCOPE_ALL}
			switch {
			case key != "" && prefix != "":
				return usagef("--key and --prefix exclude each other")
			case key != "":
				req.Scope, req.Key = pb.ResetScope_RESET_SCOPE_KEY, []byte(key)
			case prefix != "":
				req.Scope, req.Key = pb.ResetScope_RESET_SCOPE_PREFIX, []byte(prefix)
			}
			r, err := cl.Reset(ctx, req)
			if err != nil {
				return err
			}
			return a.emit(r, func(w io.Writer) { fmt.Fprintf(w, "reset %s%s\n", args[1], revParen(r.GetRevision())) })
		}),
	}
	c.Flags().StringVar(&key, "key", "", "discard only this key's staged change")
	c.Flags().StringVar(&prefix, "prefix", "", "discard the staged changes under this prefix")
	return c
}

// --- tags

func (a *app) tagCmd() *cobra.Command {
	c := &cobra.Command{Use: "tag", Short: "Create, show, list and delete tags"}
	create := &cobra.Command{
		Use: "create REPO TAG REF", Short: "Tag a reference", Args: nargs(3, "REPO TAG REF"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			r, err := cl.CreateTag(ctx, &pb.CreateTagRequest{Parent: client.Repository(args[0]), TagId: args[1], Ref: args[2]})
			if err != nil {
				return err
			}
			return a.emit(r, func(w io.Writer) {
				fmt.Fprintf(w, "tag %s -> %s%s\n", args[1], r.GetTag().GetCommitId(), revParen(r.GetRevision()))
			})
		}),
	}
	get := &cobra.Command{
		Use: "get REPO TAG", Short: "Show a tag", Args: nargs(2, "REPO TAG"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			r, err := cl.GetTag(ctx, &pb.GetTagRequest{Name: client.Tag(args[0], args[1])})
			if err != nil {
				return err
			}
			return a.emit(r.GetTag(), func(w io.Writer) { fmt.Fprintf(w, "%s\t%s\n", args[1], r.GetTag().GetCommitId()) })
		}),
	}
	list := &cobra.Command{
		Use: "list REPO", Short: "List tags", Args: nargs(1, "REPO"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			token := ""
			for {
				r, err := cl.ListTags(ctx, &pb.ListTagsRequest{Parent: client.Repository(args[0]), PageToken: token})
				if err != nil {
					return err
				}
				for _, t := range r.GetTags() {
					if err := a.emit(t, func(w io.Writer) { fmt.Fprintf(w, "%s\t%s\n", lastSegment(t.GetName()), t.GetCommitId()) }); err != nil {
						return err
					}
				}
				if token = r.GetNextPageToken(); token == "" {
					return nil
				}
			}
		}),
	}
	del := &cobra.Command{
		Use: "delete REPO TAG", Short: "Delete a tag", Args: nargs(2, "REPO TAG"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			r, err := cl.DeleteTag(ctx, &pb.DeleteTagRequest{Name: client.Tag(args[0], args[1])})
			if err != nil {
				return err
			}
			return a.emit(r, func(w io.Writer) { fmt.Fprintf(w, "deleted tag %s%s\n", args[1], revParen(r.GetRevision())) })
		}),
	}
	c.AddCommand(create, get, list, del)
	return group(c)
}

// --- commits

func (a *app) printCommit(w io.Writer, c *pb.Commit) {
	fmt.Fprintf(w, "commit %s\n", c.GetId())
	if len(c.GetParents()) > 1 {
		ps := make([]string, len(c.GetParents()))
		for i, p := range c.GetParents() {
			ps[i] = short(p)
		}
		fmt.Fprintf(w, "Merge: %s\n", strings.Join(ps, " "))
	}
	fmt.Fprintf(w, "Committer: %s\n", c.GetCommitter())
	if c.GetCreateTime() != nil {
		fmt.Fprintf(w, "Date: %s\n", fmtTime(c.GetCreateTime()))
	}
	for k, v := range c.GetMetadata() {
		fmt.Fprintf(w, "Meta: %s=%s\n", k, v)
	}
	fmt.Fprintf(w, "\n    %s\n\n", strings.ReplaceAll(c.GetMessage(), "\n", "\n    "))
}

func (a *app) emitCommit(c *pb.Commit) error {
	return a.emit(c, func(w io.Writer) { a.printCommit(w, c) })
}

// commitResponse is the response of a call that moves a branch by a commit.
type commitResponse interface {
	proto.Message
	GetCommit() *pb.Commit
	GetRevision() int64
}

// emitCommitted prints what a commit, merge, revert or cherry-pick did: the
// new commit and where the branch is now.
func (a *app) emitCommitted(branch string, r commitResponse) error {
	return a.emit(r, func(w io.Writer) {
		a.printCommit(w, r.GetCommit())
		fmt.Fprintf(w, "branch %s now at %s%s\n", branch, short(r.GetCommit().GetId()), revParen(r.GetRevision()))
	})
}

func (a *app) commitCmd() *cobra.Command {
	var cf commitFlags
	c := &cobra.Command{
		Use: "commit REPO BRANCH", Short: "Commit a branch's staged changes (-m MESSAGE is required)", Args: nargs(2, "REPO BRANCH"),
		PreRunE: func(c *cobra.Command, args []string) error {
			// As git: a commit without a message is a mistake.
			if strings.TrimSpace(cf.message) == "" {
				return usagef("commit needs a message: -m MESSAGE")
			}
			return nil
		},
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			opts, err := a.commitOptions(&cf)
			if err != nil {
				return err
			}
			r, err := cl.Commit(ctx, &pb.CommitRequest{Branch: client.Branch(args[0], args[1]), Options: opts})
			if err != nil {
				return err
			}
			return a.emitCommitted(args[1], r)
		}),
	}
	cf.add(c.Flags(), "")
	return c
}

func (a *app) showCmd() *cobra.Command {
	return &cobra.Command{
		Use: "show REPO REF", Short: "Show the commit a reference resolves to", Args: nargs(2, "REPO REF"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			r, err := cl.GetCommit(ctx, &pb.GetCommitRequest{Name: client.Commit(args[0], args[1])})
			if err != nil {
				return err
			}
			return a.emitCommit(r.GetCommit())
		}),
	}
}

func (a *app) logCmd() *cobra.Command {
	var firstParent bool
	var limit int
	c := &cobra.Command{
		Use: "log REPO REF", Short: "Show history, newest first", Args: nargs(2, "REPO REF"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			s, err := cl.StreamLog(ctx, &pb.StreamLogRequest{Repository: client.Repository(args[0]), Ref: args[1], FirstParent: firstParent})
			if err != nil {
				return err
			}
			n := 0
			for {
				m, err := s.Recv()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				for _, c := range m.GetCommits() {
					if limit > 0 && n == limit {
						return nil
					}
					n++
					if err := a.emitCommit(c); err != nil {
						return err
					}
				}
			}
		}),
	}
	c.Flags().BoolVar(&firstParent, "first-parent", false, "follow only first parents")
	c.Flags().IntVarP(&limit, "limit", "n", 0, "show at most this many commits (0: all)")
	return c
}

func (a *app) commitsCmd() *cobra.Command {
	var pageSize int32
	c := &cobra.Command{
		Use: "commits REPO", Short: "List every commit of a repository, by id", Args: nargs(1, "REPO"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			token := ""
			for {
				r, err := cl.ListCommits(ctx, &pb.ListCommitsRequest{Parent: client.Repository(args[0]), PageSize: pageSize, PageToken: token})
				if err != nil {
					return err
				}
				for _, c := range r.GetCommits() {
					if err := a.emit(c, func(w io.Writer) { fmt.Fprintf(w, "%s %s\n", short(c.GetId()), firstLine(c.GetMessage())) }); err != nil {
						return err
					}
				}
				if token = r.GetNextPageToken(); token == "" {
					return nil
				}
			}
		}),
	}
	c.Flags().Int32Var(&pageSize, "page-size", 0, "commits per request (0: server default)")
	return c
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// --- entries

func (a *app) getCmd() *cobra.Command {
	return &cobra.Command{
		Use: "get REPO REF KEY", Short: "Print an entry's data, byte for byte (-o json: the whole entry)", Args: nargs(3, "REPO REF KEY"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			r, err := cl.GetEntry(ctx, &pb.GetEntryRequest{Repository: client.Repository(args[0]), Ref: args[1], Key: []byte(args[2])})
			if err != nil {
				return err
			}
			if a.output == "json" {
				return a.emit(r.GetEntry(), nil)
			}
			// The data exactly, as git cat-file: no newline is added.
			_, err = a.streams.Out.Write(r.GetEntry().GetValue().GetData())
			return err
		}),
	}
}

// identityOf is the default identity of data: its SHA-256.
func identityOf(data []byte) []byte {
	h := sha256.Sum256(data)
	return []byte(hex.EncodeToString(h[:]))
}

// entryObject is the -o json output of put and rm: the branch and the key
// (and identity), bytes fields in marshalJSON's style.
func entryObject(branch string, key, identity []byte, size int) map[string]any {
	obj := map[string]any{"branch": branch}
	bytesField(obj, "key", key)
	if identity != nil {
		bytesField(obj, "identity", identity)
		obj["size"] = size
	}
	return obj
}

func (a *app) putCmd() *cobra.Command {
	var data, file, identity string
	var ifAbsent bool
	var c *cobra.Command
	c = &cobra.Command{
		Use:   "put REPO BRANCH KEY",
		Short: "Stage an entry (data from --data, --file, or stdin)",
		Long: `Stage an entry. Its data comes from --data (--data '' is an empty value),
--file, or else stdin. Limits: key 1 KiB, identity 256 bytes, data 512 KiB.`,
		Args: nargs(3, "REPO BRANCH KEY"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			var b []byte
			var err error
			// Changed, not data != "": --data '' stages an empty value
			// instead of waiting for stdin.
			hasData := c.Flags().Changed("data")
			switch {
			case hasData && file != "":
				return usagef("--data and --file exclude each other")
			case hasData:
				b = []byte(data)
			case file != "":
				if b, err = os.ReadFile(file); err != nil {
					return err
				}
			default:
				if b, err = io.ReadAll(a.streams.In); err != nil {
					return err
				}
			}
			id := []byte(identity)
			if identity == "" {
				id = identityOf(b)
			}
			branch := client.Branch(args[0], args[1])
			_, err = cl.PutEntry(ctx, &pb.PutEntryRequest{Branch: branch, IfAbsent: ifAbsent,
				Entry: &pb.Entry{Key: []byte(args[2]), Value: &pb.Value{Identity: id, Data: b}}})
			if err != nil {
				return err
			}
			return a.emitObject(entryObject(branch, []byte(args[2]), id, len(b)), func(w io.Writer) {
				fmt.Fprintf(w, "staged %s on %s (%d bytes)\n", displayKey([]byte(args[2])), args[1], len(b))
			})
		}),
	}
	c.Flags().StringVarP(&data, "data", "d", "", "entry data ('' for an empty value)")
	c.Flags().StringVarP(&file, "file", "f", "", "read entry data from this file")
	c.Flags().StringVar(&identity, "identity", "", "entry identity (default: SHA-256 of the data)")
	c.Flags().BoolVar(&ifAbsent, "if-absent", false, "fail if the key already exists on the branch")
	return c
}

// bulkLine is one line of a bulk put file. The *_base64 fields carry bytes
// that are not UTF-8 text (as -o json prints them) and win over the plain
// ones.
type bulkLine struct {
	Key            string  `json:"key"`
	KeyBase64      *[]byte `json:"key_base64"`
	Data           string  `json:"data"`
	DataBase64     *[]byte `json:"data_base64"`
	Identity       string  `json:"identity"`
	IdentityBase64 *[]byte `json:"identity_base64"`
}

func (l *bulkLine) entry() *pb.Entry {
	pick := func(s string, b *[]byte) []byte {
		if b != nil {
			return *b
		}
		return []byte(s)
	}
	data := pick(l.Data, l.DataBase64)
	id := pick(l.Identity, l.IdentityBase64)
	if len(id) == 0 {
		id = identityOf(data)
	}
	return &pb.Entry{Key: pick(l.Key, l.KeyBase64), Value: &pb.Value{Identity: id, Data: data}}
}

// bulkResult is the -o json output of put-bulk, also when it stops early.
type bulkResult struct {
	Branch string `json:"branch"`
	// Entries were acknowledged by the server: staged.
	Entries int `json:"entries"`
	// Line is the input line of the last acknowledged entry; a run that
	// stopped can resume after it.
	Line     int  `json:"line"`
	Complete bool `json:"complete"`
}

func (a *app) putBulkCmd() *cobra.Command {
	var batch int
	c := &cobra.Command{
		Use:   "put-bulk REPO BRANCH FILE",
		Short: `Stage entries from a JSON lines file ({"key": "...", "data": "...", "identity": "..."}; "-" is stdin)`,
		Long: `Stage entries from a JSON lines file ("-" is stdin), one entry a line:

  {"key": "...", "data": "...", "identity": "..."}

identity is optional (default: SHA-256 of the data); key_base64, data_base64
and identity_base64 give bytes that are not UTF-8 text. Entries are sent in
batches of at most --batch entries and --max-request-size bytes.

If it stops early (an error, the server gone, Ctrl-C), it says how many
entries the server acknowledged and the input line of the last of them
(stderr; with -o json also the result object on stdout): staging is
idempotent, so run it again from the next line.`,
		Args: nargs(3, "REPO BRANCH FILE"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			if batch <= 0 || batch > 1000 {
				return usagef("--batch must be 1..1000")
			}
			var in io.Reader = a.streams.In
			var total int64 = -1
			if args[2] != "-" {
				f, err := os.Open(args[2])
				if err != nil {
					return err
				}
				defer f.Close()
				if st, err := f.Stat(); err == nil {
					total = st.Size()
				}
				in = f
			}
			branch := client.Branch(args[0], args[1])
			res := bulkResult{Branch: branch}
			// Room for the request's other fields.
			budget := a.maxRequest - len(branch) - 16
			cr := &countingReader{r: in}
			p := a.newProgress("put", "bytes", total)
			sc := bufio.NewScanner(cr)
			sc.Buffer(make([]byte, 0, 1<<20), maxInputLine)
			var entries []*pb.Entry
			size, line, batchLine := 0, 0, 0
			flush := func() error {
				if len(entries) == 0 {
					return nil
				}
				if _, err := cl.BatchPutEntries(ctx, &pb.BatchPutEntriesRequest{Branch: branch, Entries: entries}); err != nil {
					return err
				}
				res.Entries += len(entries)
				res.Line = batchLine
				entries, size = entries[:0], 0
				p.set(cr.n)
				return nil
			}
			err := func() error {
				for sc.Scan() {
					line++
					if len(bytes.TrimSpace(sc.Bytes())) == 0 {
						continue
					}
					var l bulkLine
					if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
						return invalidInputf("%s:%d: not an entry line: %v", args[2], line, err)
					}
					e := l.entry()
					// An entry's share of the request: its bytes, field tag and length.
					n := proto.Size(e) + 6
					if len(entries) > 0 && budget > 0 && size+n > budget {
						if err := flush(); err != nil {
							return err
						}
					}
					entries, size, batchLine = append(entries, e), size+n, line
					if len(entries) == batch {
						if err := flush(); err != nil {
							return err
						}
					}
				}
				if err := sc.Err(); err != nil {
					return scanErr(err, args[2], line)
				}
				return flush()
			}()
			p.done()
			if err != nil {
				if res.Entries > 0 || !errors.Is(err, errUsage) && !errors.Is(err, errInvalidInput) {
					fmt.Fprintf(a.streams.Err, "gravelerctl: put-bulk stopped after %d acknowledged entries (through line %d of %s); run it again from line %d\n",
						res.Entries, res.Line, args[2], res.Line+1)
				}
				if a.output == "json" {
					_ = a.emitObject(res, nil)
				}
				return err
			}
			res.Complete = true
			return a.emitObject(res, func(w io.Writer) { fmt.Fprintf(w, "staged %d entries on %s\n", res.Entries, args[1]) })
		}),
	}
	c.Flags().IntVar(&batch, "batch", 500, "entries per request (1..1000)")
	return c
}

func (a *app) rmCmd() *cobra.Command {
	return &cobra.Command{
		Use: "rm REPO BRANCH KEY", Short: "Stage the deletion of an entry", Args: nargs(3, "REPO BRANCH KEY"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			branch := client.Branch(args[0], args[1])
			if _, err := cl.DeleteEntry(ctx, &pb.DeleteEntryRequest{Branch: branch, Key: []byte(args[2])}); err != nil {
				return err
			}
			return a.emitObject(entryObject(branch, []byte(args[2]), nil, 0), func(w io.Writer) {
				fmt.Fprintf(w, "staged deletion of %s on %s\n", displayKey([]byte(args[2])), args[1])
			})
		}),
	}
}

func (a *app) deletePrefixCmd() *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:   "delete-prefix REPO BRANCH PREFIX",
		Short: "Stage the deletion of every entry under a prefix (one record, whatever the number of entries)",
		Long: "Stage the deletion of every entry under PREFIX on BRANCH as one range tombstone: reads, listings,\n" +
			"diffs and the next commit see those entries deleted, except entries written afterwards.\n" +
			"An empty PREFIX deletes every entry of the branch and needs --all.",
		Args: nargs(3, "REPO BRANCH PREFIX"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			branch := client.Branch(args[0], args[1])
			if args[2] == "" && !all {
				return usagef("an empty prefix deletes every entry of %s: pass --all to mean it", args[1])
			}
			if _, err := cl.DeletePrefix(ctx, &pb.DeletePrefixRequest{Branch: branch, Prefix: []byte(args[2])}); err != nil {
				return err
			}
			return a.emitObject(map[string]any{"branch": branch, "prefix": args[2]}, func(w io.Writer) {
				fmt.Fprintf(w, "staged deletion of every entry under %s on %s\n", displayKey([]byte(args[2])), args[1])
			})
		}),
	}
	c.Flags().BoolVar(&all, "all", false, "allow the empty prefix (every entry of the branch)")
	return c
}

func (a *app) lsCmd() *cobra.Command {
	var prefix, delimiter string
	var pageSize int32
	var limit int
	c := &cobra.Command{
		Use: "ls REPO REF", Short: "List entries at a reference", Args: nargs(2, "REPO REF"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			token := ""
			n := 0
			tw := tabwriter.NewWriter(a.streams.Out, 0, 4, 2, ' ', 0)
			defer tw.Flush()
			for {
				r, err := cl.ListEntries(ctx, &pb.ListEntriesRequest{Repository: client.Repository(args[0]), Ref: args[1],
					Prefix: []byte(prefix), Delimiter: []byte(delimiter), PageSize: pageSize, PageToken: token})
				if err != nil {
					return err
				}
				for _, e := range r.GetEntries() {
					if limit > 0 && n == limit {
						return nil
					}
					n++
					if err := a.emit(e, func(io.Writer) {
						if e.GetCommonPrefix() {
							fmt.Fprintf(tw, "%s\t(prefix)\t\n", displayKey(e.GetKey()))
							return
						}
						fmt.Fprintf(tw, "%s\t%s\t%d\n", displayKey(e.GetKey()), displayKey([]byte(short(string(e.GetValue().GetIdentity())))), len(e.GetValue().GetData()))
					}); err != nil {
						return err
					}
				}
				if token = r.GetNextPageToken(); token == "" {
					return nil
				}
			}
		}),
	}
	c.Flags().StringVarP(&prefix, "prefix", "p", "", "list keys under this prefix")
	c.Flags().StringVar(&delimiter, "delimiter", "", `group keys into "directories" at this delimiter (e.g. /)`)
	c.Flags().Int32Var(&pageSize, "page-size", 0, "entries per request (0: server default)")
	c.Flags().IntVarP(&limit, "limit", "n", 0, "list at most this many (0: all)")
	return c
}

// --- diff and merge

var diffMarks = map[pb.DiffType]string{
	pb.DiffType_DIFF_TYPE_ADDED: "+", pb.DiffType_DIFF_TYPE_REMOVED: "-",
	pb.DiffType_DIFF_TYPE_CHANGED: "~", pb.DiffType_DIFF_TYPE_CONFLICT: "!",
}

func (a *app) emitDiffs(ds []*pb.Difference) error {
	for _, d := range ds {
		if err := a.emit(d, func(w io.Writer) { fmt.Fprintf(w, "%s %s\n", diffMarks[d.GetType()], displayKey(d.GetKey())) }); err != nil {
			return err
		}
	}
	return nil
}

func (a *app) diffCmd() *cobra.Command {
	return &cobra.Command{
		Use: "diff REPO LEFT_REF RIGHT_REF", Short: "Show the differences between two references (+ added, - removed, ~ changed)",
		Args: nargs(3, "REPO LEFT_REF RIGHT_REF"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			s, err := cl.StreamDiff(ctx, &pb.StreamDiffRequest{Repository: client.Repository(args[0]), LeftRef: args[1], RightRef: args[2]})
			if err != nil {
				return err
			}
			for {
				m, err := s.Recv()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				if err := a.emitDiffs(m.GetDifferences()); err != nil {
					return err
				}
			}
		}),
	}
}

func (a *app) statusCmd() *cobra.Command {
	return &cobra.Command{
		Use: "status REPO BRANCH", Short: "Show a branch's uncommitted changes", Args: nargs(2, "REPO BRANCH"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			s, err := cl.StreamDiffUncommitted(ctx, &pb.StreamDiffUncommittedRequest{Branch: client.Branch(args[0], args[1])})
			if err != nil {
				return err
			}
			for {
				m, err := s.Recv()
				if errors.Is(err, io.EOF) {
					return nil
				}
				if err != nil {
					return err
				}
				if err := a.emitDiffs(m.GetDifferences()); err != nil {
					return err
				}
			}
		}),
	}
}

var strategies = map[string]pb.MergeStrategy{
	"":            pb.MergeStrategy_MERGE_STRATEGY_UNSPECIFIED,
	"dest-wins":   pb.MergeStrategy_MERGE_STRATEGY_DEST_WINS,
	"source-wins": pb.MergeStrategy_MERGE_STRATEGY_SOURCE_WINS,
}

func (a *app) commitOptions(cf *commitFlags) (*pb.CommitOptions, error) {
	meta, err := parseMeta(cf.meta)
	if err != nil {
		return nil, err
	}
	return &pb.CommitOptions{Message: cf.message, Committer: a.committer(cf), Metadata: meta, AllowEmpty: cf.allowEmpty}, nil
}

func (a *app) mergeCmd() *cobra.Command {
	var cf commitFlags
	var strategy string
	var noFF bool
	c := &cobra.Command{
		Use:   "merge REPO SOURCE_REF DEST_BRANCH",
		Short: "Merge a reference into a branch",
		Long: `Merge a reference into a branch.

By default, a destination with no staged changes whose head is an ancestor
of the source moves to the source's commit (fast-forward), as git does;
--no-ff always makes a merge commit. The output says which happened.`,
		Args: nargs(3, "REPO SOURCE_REF DEST_BRANCH"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			st, ok := strategies[strategy]
			if !ok {
				return usagef("--strategy must be dest-wins or source-wins")
			}
			opts, err := a.commitOptions(&cf)
			if err != nil {
				return err
			}
			if opts.Message == "" {
				opts.Message = fmt.Sprintf("Merge %s into %s", args[1], args[2])
			}
			r, err := cl.Merge(ctx, &pb.MergeRequest{Destination: client.Branch(args[0], args[2]), SourceRef: args[1], Options: opts, Strategy: st, NoFf: noFF})
			if err != nil {
				return err
			}
			if !r.GetFastForward() {
				return a.emitCommitted(args[2], r)
			}
			return a.emit(r, func(w io.Writer) {
				fmt.Fprintf(w, "fast-forward: branch %s now at %s, the commit of %s; no merge commit (--no-ff makes one)%s\n",
					args[2], short(r.GetCommit().GetId()), args[1], revIn(r.GetRevision()))
			})
		}),
	}
	cf.add(c.Flags(), "")
	c.Flags().StringVar(&strategy, "strategy", "", "on conflict: dest-wins or source-wins (default: fail)")
	c.Flags().BoolVar(&noFF, "no-ff", false, "always make a merge commit, also where the destination could fast-forward to the source")
	return c
}

func (a *app) pickCmd(use, short string, do func(ctx context.Context, cl *client.Client, branch, ref string, parent int32, opts *pb.CommitOptions) (commitResponse, error)) *cobra.Command {
	var cf commitFlags
	var parent int32
	c := &cobra.Command{
		Use: use + " REPO BRANCH REF", Short: short, Args: nargs(3, "REPO BRANCH REF"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			opts, err := a.commitOptions(&cf)
			if err != nil {
				return err
			}
			r, err := do(ctx, cl, client.Branch(args[0], args[1]), args[2], parent, opts)
			if err != nil {
				return err
			}
			return a.emitCommitted(args[1], r)
		}),
	}
	cf.add(c.Flags(), "")
	c.Flags().Int32Var(&parent, "parent", 0, "parent number (1-based) of a merge commit")
	return c
}

func (a *app) revertCmd() *cobra.Command {
	return a.pickCmd("revert", "Commit the inverse of a commit onto a branch", func(ctx context.Context, cl *client.Client, branch, ref string, parent int32, opts *pb.CommitOptions) (commitResponse, error) {
		return cl.Revert(ctx, &pb.RevertRequest{Branch: branch, Ref: ref, ParentNumber: parent, Options: opts})
	})
}

func (a *app) cherryPickCmd() *cobra.Command {
	return a.pickCmd("cherry-pick", "Commit a commit's changes onto a branch", func(ctx context.Context, cl *client.Client, branch, ref string, parent int32, opts *pb.CommitOptions) (commitResponse, error) {
		return cl.CherryPick(ctx, &pb.CherryPickRequest{Branch: branch, Ref: ref, ParentNumber: parent, Options: opts})
	})
}

// --- dump and restore

func (a *app) dumpCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use: "dump REPO", Short: "Dump a repository's commits, branches and tags as JSON lines (the -o json style)", Args: nargs(1, "REPO"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			w := a.streams.Out
			if out != "" && out != "-" {
				f, err := os.Create(out)
				if err != nil {
					return err
				}
				defer f.Close()
				w = f
			}
			bw := bufio.NewWriter(w)
			s, err := cl.DumpRefs(ctx, &pb.DumpRefsRequest{Repository: client.Repository(args[0])})
			if err != nil {
				return err
			}
			p := a.newProgress("dump", "records", -1)
			var n int64
			for {
				m, err := s.Recv()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					return err
				}
				for _, r := range m.GetRecords() {
					b, err := marshalJSON(r)
					if err != nil {
						return err
					}
					bw.Write(b)
					n++
				}
				p.set(n)
			}
			p.done()
			if err := bw.Flush(); err != nil {
				return err
			}
			if out != "" && out != "-" {
				fmt.Fprintf(a.streams.Err, "dumped %d records to %s\n", n, out)
			}
			return nil
		}),
	}
	c.Flags().StringVarP(&out, "file", "f", "", "write to this file (default stdout)")
	return c
}

func (a *app) restoreCmd() *cobra.Command {
	var create bool
	var ns string
	c := &cobra.Command{
		Use: "restore REPO FILE", Short: `Restore a dump ("-" is stdin) into a bare repository`, Args: nargs(2, "REPO FILE"),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			var in io.Reader = a.streams.In
			var total int64 = -1
			if args[1] != "-" {
				f, err := os.Open(args[1])
				if err != nil {
					return err
				}
				defer f.Close()
				if st, err := f.Stat(); err == nil {
					total = st.Size()
				}
				in = f
			}
			if create {
				if _, err := cl.CreateRepository(ctx, &pb.CreateRepositoryRequest{RepositoryId: args[0], Bare: true,
					Repository: &pb.Repository{StorageNamespace: ns}}); err != nil {
					return err
				}
			}
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			s, err := cl.RestoreRefs(ctx)
			if err != nil {
				return err
			}
			cr := &countingReader{r: in}
			p := a.newProgress("restore", "bytes", total)
			sc := bufio.NewScanner(cr)
			sc.Buffer(make([]byte, 0, 1<<20), maxInputLine)
			msg := &pb.RestoreRefsRequest{Repository: client.Repository(args[0])}
			send := func() error {
				if err := s.Send(msg); err != nil {
					return err
				}
				msg = &pb.RestoreRefsRequest{}
				p.set(cr.n)
				return nil
			}
			line := 0
			for sc.Scan() {
				line++
				if len(strings.TrimSpace(sc.Text())) == 0 {
					continue
				}
				r := &pb.RefsRecord{}
				if err := protojson.Unmarshal(sc.Bytes(), r); err != nil {
					return invalidInputf("%s:%d: not a dump record: %v", args[1], line, err)
				}
				msg.Records = append(msg.Records, r)
				if len(msg.Records) == 100 {
					if err := send(); err != nil {
						break // the server's error comes with CloseAndRecv
					}
				}
			}
			if err := sc.Err(); err != nil {
				return scanErr(err, args[1], line)
			}
			if len(msg.Records) > 0 || msg.Repository != "" {
				_ = send()
			}
			resp, err := s.CloseAndRecv()
			if err != nil {
				return err
			}
			p.done()
			return a.emit(resp, func(w io.Writer) {
				fmt.Fprintf(w, "restored %d records into %s%s\n", resp.GetRecords(), args[0], revParen(resp.GetRevision()))
			})
		}),
	}
	c.Flags().BoolVar(&create, "create", false, "create REPO as a bare repository first")
	c.Flags().StringVar(&ns, "storage-namespace", "", "storage namespace for --create (default: <the server's --storage-namespace-root>/REPO-<unique suffix>, a new one at each create)")
	return c
}

func (a *app) healthCmd() *cobra.Command {
	return &cobra.Command{
		Use: "health", Short: "Check the server's health (exit 7 unless SERVING)", Args: nargs(0, ""),
		RunE: a.run(func(ctx context.Context, cl *client.Client, args []string) error {
			r, err := healthpb.NewHealthClient(cl.Conn()).Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				return err
			}
			if err := a.emit(r, func(w io.Writer) { fmt.Fprintln(w, r.GetStatus()) }); err != nil {
				return err
			}
			if r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("%w: server is %s", client.ErrUnavailable, r.GetStatus())
			}
			return nil
		}),
	}
}

// buildVersion is a build's version in version's output.
type buildVersion struct {
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
}

func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the client's version and the server's (the client's alone, and exit non-zero, without a server)",
		Args:  nargs(0, ""),
		RunE: func(c *cobra.Command, args []string) error {
			out := struct {
				Client buildVersion  `json:"client"`
				Server *buildVersion `json:"server,omitempty"`
			}{Client: buildVersion{buildinfo.Version, buildinfo.GoVersion()}}
			cl, err := a.connect(c.Context())
			if err == nil {
				var r *pb.GetServerVersionResponse
				if r, err = cl.GetServerVersion(c.Context(), &pb.GetServerVersionRequest{}); err == nil {
					out.Server = &buildVersion{r.GetVersion(), r.GetGoVersion()}
				}
			}
			// The client's version is printed also when the server's is
			// not known: it is half of what was asked.
			if perr := a.emitObject(out, func(w io.Writer) {
				fmt.Fprintf(w, "client: %s (%s)\n", out.Client.Version, out.Client.GoVersion)
				if out.Server != nil {
					fmt.Fprintf(w, "server: %s (%s)\n", out.Server.Version, out.Server.GoVersion)
				}
			}); perr != nil {
				return perr
			}
			return err
		},
	}
}
