package cli

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"

	"graveler/client"
	"graveler/internal/hostport"
)

// Streams are the command's standard streams.
type Streams struct {
	In  io.Reader
	Out io.Writer
	Err io.Writer
}

// Exit codes (see the package doc).
const (
	ExitOK                 = 0
	ExitError              = 1
	ExitUsage              = 2
	ExitNotFound           = 3
	ExitAlreadyExists      = 4
	ExitAborted            = 5
	ExitFailedPrecondition = 6
	ExitUnavailable        = 7
	ExitUnauthenticated    = 8
	ExitInvalidArgument    = 9
)

// errUsage marks command-line mistakes.
var errUsage = errors.New("usage")

func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// errInvalidInput marks an input file (a dump, a put-bulk file) that the
// command cannot decode: the command line was right, the data is not.
var errInvalidInput = errors.New("invalid input")

func invalidInputf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errInvalidInput}, args...)...)
}

// scanErr is the error of a line scanner of file name that stopped after
// line: a line over the scanner's buffer is invalid input naming the line;
// a read error passes through.
func scanErr(err error, name string, line int) error {
	if errors.Is(err, bufio.ErrTooLong) {
		return invalidInputf("%s:%d: line longer than %d bytes", name, line+1, maxInputLine)
	}
	return err
}

// maxInputLine is the longest line of a dump or put-bulk file.
const maxInputLine = 4 << 20

// ExitCode classifies err.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, errUsage):
		return ExitUsage
	case errors.Is(err, errInvalidInput), errors.Is(err, client.ErrInvalidArgument), errors.Is(err, client.ErrMessageTooLarge):
		// Before ErrResourceExhausted: a request over a size limit fails
		// the same way every time.
		return ExitInvalidArgument
	case errors.Is(err, client.ErrNotFound):
		return ExitNotFound
	case errors.Is(err, client.ErrAlreadyExists):
		return ExitAlreadyExists
	case errors.Is(err, client.ErrAborted):
		return ExitAborted
	case errors.Is(err, client.ErrFailedPrecondition):
		return ExitFailedPrecondition
	case errors.Is(err, client.ErrUnavailable), errors.Is(err, client.ErrDeadlineExceeded),
		errors.Is(err, client.ErrResourceExhausted):
		return ExitUnavailable
	case errors.Is(err, client.ErrUnauthenticated), errors.Is(err, client.ErrPermissionDenied):
		return ExitUnauthenticated
	}
	return ExitError
}

// app is the state shared by the commands of one invocation.
type app struct {
	streams        Streams
	server         string
	token          string
	useTLS         bool
	tlsCA          string
	tlsCert        string
	tlsKey         string
	insecure       bool
	timeout        time.Duration
	connectTimeout time.Duration
	maxRequest     int
	output         string
	progress       bool
	cl             *client.Client
	// checkConnection refuses connection settings that are wrong (usage).
	checkConnection func() error
}

func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}

// envValue is the value of the environment variable name read with parse,
// else def when it is not set. A value parse refuses is recorded in errs
// under flag, the matching flag, as a usage error naming the variable, the
// value and what is allowed (want), and def is returned.
func envValue[T any](errs map[string]error, flag, name string, def T, parse func(string) (T, error), want string) T {
	v, ok := os.LookupEnv(name)
	if !ok {
		return def
	}
	x, err := parse(v)
	if err != nil {
		errs[flag] = usagef("invalid value %q for %s (--%s): %v; want %s", v, name, flag, err, want)
		return def
	}
	return x
}

// flagSource names where the value of flag name came from: --name when
// it is given, else its GRAVELER_* variable.
func flagSource(f *pflag.FlagSet, name string) string {
	if f.Changed(name) {
		return "--" + name
	}
	env := "GRAVELER_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	if v, ok := os.LookupEnv(env); ok {
		return fmt.Sprintf("%s=%q (--%s)", env, v, name)
	}
	return "--" + name
}

// checkServer refuses a --server that is no address, which would fail
// every dial as if the server were down: host:port with a port from 1 to
// 65535, unix:PATH, or dns:[//AUTHORITY]/host:port.
func checkServer(server string) error {
	const want = "want host:port (no scheme) with a port from 1 to 65535, unix:PATH or dns:///host:port"
	target := server
	if path, ok := strings.CutPrefix(server, "unix:"); ok {
		if strings.Trim(path, "/") == "" {
			return fmt.Errorf("%q has no socket path; %s", server, want)
		}
		return nil
	}
	if rest, ok := strings.CutPrefix(server, "dns:"); ok {
		target = rest
		if authority, ok := strings.CutPrefix(rest, "//"); ok {
			_, endpoint, found := strings.Cut(authority, "/")
			if !found {
				return fmt.Errorf("%q: %s", server, want)
			}
			target = endpoint
		}
	}
	host, _, err := hostport.Split(target, 1)
	if err != nil {
		return fmt.Errorf("%q: %v; %s", server, err, want)
	}
	if host == "" {
		return fmt.Errorf("%q: %s", server, want)
	}
	return nil
}

// Main runs gravelerctl with args and returns the exit code.
func Main(ctx context.Context, args []string, s Streams) int {
	a := &app{streams: s}
	root := a.root()
	root.SetArgs(args)
	root.SetIn(s.In)
	root.SetOut(s.Out)
	root.SetErr(s.Err)
	err := root.ExecuteContext(ctx)
	if a.cl != nil {
		_ = a.cl.Close()
	}
	if err != nil {
		fmt.Fprintln(s.Err, "gravelerctl:", describe(err, a.maxRequest))
	}
	return ExitCode(err)
}

// describe adds the ErrorInfo metadata a person needs (e.g. the
// conflicting keys of a merge) to an error. maxRequest is the client's
// request size limit (--max-request-size).
func describe(err error, maxRequest int) string {
	e, ok := errors.AsType[*client.Error](err)
	if !ok {
		if errors.Is(err, client.ErrNotReady) && errors.Is(err, context.DeadlineExceeded) {
			return err.Error() + "\n  the server did not answer within --connect-timeout"
		}
		return err.Error()
	}
	msg := e.Error()
	keys := e.Metadata["conflictingKeys"]
	if b64 := e.Metadata["conflictingKeysBase64"]; keys == "" && b64 != "" {
		keys = base64Keys(b64)
	}
	if keys != "" {
		msg += "\n  conflicting keys: " + keys + " (" + e.Metadata["conflictCount"] + " in all)"
	}
	if e.Reason == "" && errors.Is(err, client.ErrMessageTooLarge) {
		if responseTooLarge(e.Message, maxRequest) {
			msg += "\n  the response is over the server's message size limit: ask for less per request (e.g. a smaller --page-size)"
		} else {
			msg += "\n  the request is over the server's message size limit: send less per request (e.g. a smaller put-bulk --batch)"
		}
	}
	if id := e.Metadata["requestId"]; id != "" {
		msg += "\n  request id: " + id
	}
	return msg
}

// base64Keys shows the conflictingKeysBase64 metadata (a JSON array of
// base64 keys, for keys that are not UTF-8) as keys are shown elsewhere.
func base64Keys(b64 string) string {
	var list []string
	if json.Unmarshal([]byte(b64), &list) != nil {
		return b64
	}
	shown := make([]string, len(list))
	for i, s := range list {
		k, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return b64
		}
		shown[i] = displayKey(k)
	}
	return "[" + strings.Join(shown, ", ") + "]"
}

// responseTooLarge tells from gRPC's wording a response the server could
// not send from a request over a limit: gRPC says "trying to send" on the
// side that sends, which is the client only under its own request limit.
func responseTooLarge(msg string, maxRequest int) bool {
	return strings.Contains(msg, "trying to send message larger than max") &&
		!strings.HasSuffix(msg, fmt.Sprintf(" vs. %d)", maxRequest))
}

func (a *app) root() *cobra.Command {
	root := &cobra.Command{
		Use:           "gravelerctl",
		Short:         "Command-line client of gravelerd",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return usagef("%v", err) })
	// A variable the matching flag would refuse is refused as the flag is
	// (below, unless the flag is given), not read as 0 or false.
	envErrs := map[string]error{}
	timeout := envValue(envErrs, "timeout", "GRAVELER_TIMEOUT", 30*time.Second, time.ParseDuration, "a duration with a unit, e.g. 30s or 2m")
	connectTimeout := envValue(envErrs, "connect-timeout", "GRAVELER_CONNECT_TIMEOUT", 5*time.Second, time.ParseDuration, "a duration with a unit, e.g. 5s")
	maxRequest := envValue(envErrs, "max-request-size", "GRAVELER_MAX_REQUEST_SIZE", client.DefaultMaxRequestSize, strconv.Atoi, "a whole number of bytes, e.g. 4194304")
	insecure := envValue(envErrs, "insecure", "GRAVELER_INSECURE", false, strconv.ParseBool, "true or false")
	f := root.PersistentFlags()
	f.StringVar(&a.server, "server", envOr("GRAVELER_SERVER", "127.0.0.1:7070"), "server address host:port, unix:PATH or dns:///host:port [GRAVELER_SERVER]")
	f.StringVar(&a.token, "token", envOr("GRAVELER_TOKEN", ""), "bearer token [GRAVELER_TOKEN]")
	f.BoolVar(&a.useTLS, "tls", false, "use TLS with the system roots")
	f.StringVar(&a.tlsCA, "tls-ca", envOr("GRAVELER_TLS_CA", ""), "CA certificate file; implies --tls [GRAVELER_TLS_CA]")
	f.StringVar(&a.tlsCert, "tls-cert", envOr("GRAVELER_TLS_CERT", ""), "client certificate file for mTLS; needs --tls-key [GRAVELER_TLS_CERT]")
	f.StringVar(&a.tlsKey, "tls-key", envOr("GRAVELER_TLS_KEY", ""), "client key file for mTLS; needs --tls-cert [GRAVELER_TLS_KEY]")
	f.BoolVar(&a.insecure, "insecure", insecure, "TLS without verifying the server certificate [GRAVELER_INSECURE]")
	f.DurationVar(&a.timeout, "timeout", timeout, "per-call timeout (0: none) [GRAVELER_TIMEOUT]")
	f.DurationVar(&a.connectTimeout, "connect-timeout", connectTimeout, "bound on connecting to a server that does not answer (0: none); a refused connection fails at once [GRAVELER_CONNECT_TIMEOUT]")
	f.IntVar(&a.maxRequest, "max-request-size", maxRequest, "largest request message in bytes the server accepts (gravelerd's default: 4 MiB); larger requests are refused before sending, put-bulk sizes its batches under it (0: unchecked) [GRAVELER_MAX_REQUEST_SIZE]")
	f.StringVarP(&a.output, "output", "o", "human", "output format: human or json")
	f.BoolVar(&a.progress, "progress", isTerminal(a.streams.Err), "show progress on stderr for long operations")
	// The connection settings are checked when connecting (see connect),
	// so that version prints the client's version in any case.
	a.checkConnection = func() error {
		for _, name := range []string{"timeout", "connect-timeout", "max-request-size", "insecure"} {
			if err := envErrs[name]; err != nil && !f.Changed(name) {
				return err
			}
		}
		if err := checkServer(a.server); err != nil {
			return usagef("%s: %v", flagSource(f, "server"), err)
		}
		// A client certificate needs its key and the key its certificate.
		if a.tlsCert != "" && a.tlsKey == "" {
			return usagef("%s needs --tls-key [GRAVELER_TLS_KEY], the client key", flagSource(f, "tls-cert"))
		}
		if a.tlsKey != "" && a.tlsCert == "" {
			return usagef("%s needs --tls-cert [GRAVELER_TLS_CERT], the client certificate", flagSource(f, "tls-key"))
		}
		// Only 0 means no bound; a negative bound is a mistake.
		for _, b := range []struct {
			name     string
			negative bool
		}{{"timeout", a.timeout < 0}, {"connect-timeout", a.connectTimeout < 0}, {"max-request-size", a.maxRequest < 0}} {
			if b.negative {
				return usagef("%s must not be negative (0: no bound)", flagSource(f, b.name))
			}
		}
		return nil
	}
	root.PersistentPreRunE = func(c *cobra.Command, args []string) error {
		if a.output != "human" && a.output != "json" {
			return usagef("--output must be human or json, not %q", a.output)
		}
		return nil
	}
	root.AddCommand(a.repoCmd(), a.branchCmd(), a.tagCmd(), a.commitCmd(), a.showCmd(), a.logCmd(),
		a.commitsCmd(), a.getCmd(), a.putCmd(), a.putBulkCmd(), a.rmCmd(), a.deletePrefixCmd(), a.lsCmd(), a.diffCmd(),
		a.statusCmd(), a.mergeCmd(), a.revertCmd(), a.cherryPickCmd(), a.resetCmd(), a.resetHardCmd(),
		a.dumpCmd(), a.restoreCmd(), a.healthCmd())
	root.AddCommand(a.versionCmd())
	root.AddCommand(a.watchCmd())
	return group(root)
}

// group makes c, a command that only holds subcommands, refuse a missing
// or unknown subcommand as a usage error. Left to cobra, a group below the
// root prints its help and succeeds, so that a script's "repo craete" looked
// done, and the root's unknown command is a plain error (exit 1).
func group(c *cobra.Command) *cobra.Command {
	c.SuggestionsMinimumDistance = 2 // cobra's own, which it sets only on the paths bypassed here
	c.Args = func(c *cobra.Command, args []string) error {
		if len(args) == 0 {
			return nil
		}
		hint := ""
		if s := c.SuggestionsFor(args[0]); len(s) > 0 {
			hint = "; did you mean " + strings.Join(s, " or ") + "?"
		}
		return usagef("unknown command %q for %q%s (see %s --help)", args[0], c.CommandPath(), hint, c.CommandPath())
	}
	c.RunE = func(c *cobra.Command, _ []string) error {
		var names []string
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				names = append(names, sub.Name())
			}
		}
		return usagef("%s needs a subcommand: %s (see %s --help)", c.CommandPath(), strings.Join(names, ", "), c.CommandPath())
	}
	return c
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// connect dials the server once per invocation.
func (a *app) connect(ctx context.Context) (*client.Client, error) {
	if a.cl != nil {
		return a.cl, nil
	}
	if err := a.checkConnection(); err != nil {
		return nil, err
	}
	opts := []client.Option{client.WithTimeout(a.timeout), client.WithMaxRequestSize(a.maxRequest)}
	if a.token != "" {
		opts = append(opts, client.WithToken(a.token))
	}
	if a.useTLS || a.tlsCA != "" || a.tlsCert != "" || a.insecure {
		if a.insecure {
			opts = append(opts, client.WithTLS(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})) //nolint:gosec // asked for
		} else {
			opts = append(opts, client.WithTLSFiles(a.tlsCA, a.tlsCert, a.tlsKey))
		}
	}
	dctx := ctx
	if a.connectTimeout > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, a.connectTimeout)
		defer cancel()
	}
	cl, err := client.Dial(dctx, a.server, opts...)
	if err != nil {
		return nil, err
	}
	a.cl = cl
	return cl, nil
}

// run wraps a command body that needs a client.
func (a *app) run(f func(ctx context.Context, cl *client.Client, args []string) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, args []string) error {
		cl, err := a.connect(c.Context())
		if err != nil {
			return err
		}
		return f(c.Context(), cl, args)
	}
}

// emit prints one message: as JSON with -o json (see marshalJSON), else
// with human.
func (a *app) emit(m proto.Message, human func(w io.Writer)) error {
	if a.output == "json" {
		b, err := marshalJSON(m)
		if err != nil {
			return err
		}
		_, err = a.streams.Out.Write(b)
		return err
	}
	if human != nil {
		human(a.streams.Out)
	}
	return nil
}

// emitObject is emit for output that is no API message (put, rm,
// put-bulk, version): v is a map or struct in the same field style.
func (a *app) emitObject(v any, human func(w io.Writer)) error {
	if a.output == "json" {
		b, err := encodeJSON(v)
		if err != nil {
			return err
		}
		_, err = a.streams.Out.Write(b)
		return err
	}
	if human != nil {
		human(a.streams.Out)
	}
	return nil
}

func nargs(n int, names string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %d argument(s): %s", c.CommandPath(), n, names)
		}
		return nil
	}
}

func parseMeta(kvs []string) (map[string]string, error) {
	if len(kvs) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, s := range kvs {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, usagef("--meta %q: want key=value", s)
		}
		m[k] = v
	}
	return m, nil
}

// commitFlags are the flags of every command that makes a commit.
type commitFlags struct {
	message    string
	committer  string
	meta       []string
	allowEmpty bool
}

func (cf *commitFlags) add(f *pflag.FlagSet, defMessage string) {
	f.StringVarP(&cf.message, "message", "m", defMessage, "commit message")
	f.StringVar(&cf.committer, "committer", "", "committer (default: the token's name on the server with --token, else the local user)")
	f.StringArrayVar(&cf.meta, "meta", nil, "metadata key=value (repeatable)")
	f.BoolVar(&cf.allowEmpty, "allow-empty", false, "allow a commit with no changes")
}

// committer is the committer a command sends: --committer, else none when
// a token is used (the server takes the token's name), else the local user.
func (a *app) committer(cf *commitFlags) string {
	if cf.committer != "" || a.token != "" {
		return cf.committer
	}
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return ""
}
