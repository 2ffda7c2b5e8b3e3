// Package flagenv gives every flag of the project's daemons a GRAVELER_*
// environment variable (flag --etcd-endpoints: GRAVELER_ETCD_ENDPOINTS),
// so that Kubernetes manifests can configure them with env entries. The
// functions are safe for concurrent use on distinct flag sets; errors name
// the variable and its value. A duration flag's value that does not parse
// is refused saying what a duration looks like, on the command line and in
// its variable alike.
package flagenv

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"
	"time"

	"graveler/etcdkv"
	"graveler/internal/hostport"
)

// Name is the environment variable of a flag.
func Name(flagName string) string {
	return "GRAVELER_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse sets each flag of fs from its variable, except the flags named in
// skip, then parses args. The variables are read first, so a flag given
// on the command line wins, and a bad variable is reported even with
// --help (which the deploy checks run with the manifests' variables).
// A nil getenv reads no variables, for a program that has none. A bad
// flag is returned with a pointer to -h, not printed with every flag's
// help after it, which buried the one line that matters; -h prints the
// help as before.
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string, skip ...string) error {
	restore := explainDurations(fs)
	err := parse(fs, args, getenv, skip)
	// The help is printed with the flags' own values, since the flag
	// package names the type of its own duration values only
	// ("-shutdown-timeout duration").
	restore()
	if errors.Is(err, flag.ErrHelp) {
		if fs.Usage != nil {
			fs.Usage()
		} else {
			defaultUsage(fs)
		}
	}
	return err
}

func parse(fs *flag.FlagSet, args []string, getenv func(string) string, skip []string) error {
	if getenv == nil {
		return parseArgs(fs, args)
	}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		for _, s := range skip {
			if f.Name == s {
				return
			}
		}
		if v := getenv(Name(f.Name)); v != "" {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", Name(f.Name), v, err))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return parseArgs(fs, args)
}

// parseArgs is fs.Parse printing nothing: the caller reports a bad flag
// (the error says where the help is), and Parse prints the help for -h.
func parseArgs(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		err = fmt.Errorf("%w; -h lists the flags", err)
	}
	return err
}

// defaultUsage is the flag package's own help, for a set with no Usage.
func defaultUsage(fs *flag.FlagSet) {
	if fs.Name() == "" {
		fmt.Fprintf(fs.Output(), "Usage:\n")
	} else {
		fmt.Fprintf(fs.Output(), "Usage of %s:\n", fs.Name())
	}
	fs.PrintDefaults()
}

// errNotDuration replaces the flag package's "parse error" for a duration:
// the usual mistakes are a bare number ("5") or a unit Go does not know
// ("1d"), and the message should say what to write instead.
var errNotDuration = errors.New("not a duration (use a unit: 500ms, 5s, 2m)")

// errDurationRange: written as a duration, but past what one holds; the
// advice to add a unit would mislead.
var errDurationRange = errors.New("out of range (a duration is at most 2562047h47m16s)")

// durationForm is time.ParseDuration's syntax, so that a value of that form
// which still fails to parse is known to be out of range.
var durationForm = regexp.MustCompile(`^[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h))+$`)

// durationValue is a duration flag's own value with errNotDuration.
type durationValue struct{ flag.Value }

func (d durationValue) Set(s string) error {
	if _, err := time.ParseDuration(s); err != nil {
		if durationForm.MatchString(s) {
			return errDurationRange
		}
		return errNotDuration
	}
	return d.Value.Set(s)
}

// explainDurations puts a durationValue around each duration flag of fs
// and returns what takes them off again.
func explainDurations(fs *flag.FlagSet) (restore func()) {
	own := map[*flag.Flag]flag.Value{}
	fs.VisitAll(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); ok {
			if _, ok := g.Get().(time.Duration); ok {
				own[f] = f.Value
				f.Value = durationValue{f.Value}
			}
		}
	})
	return func() {
		for f, v := range own {
			f.Value = v
		}
	}
}

// Endpoints splits a comma-separated list of endpoints, dropping blanks.
func Endpoints(list string) []string {
	var out []string
	for _, e := range strings.Split(list, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// EtcdEndpoints reads the value of --etcd-endpoints (or of its variable,
// GRAVELER_ETCD_ENDPOINTS). An empty value gives no endpoints and no error;
// a value that names no endpoint (" ", ",") is refused, naming the flag:
// it is a mistake, as a mis-templated variable, not a request for none.
func EtcdEndpoints(list string) ([]string, error) {
	out := Endpoints(list)
	if list != "" && len(out) == 0 {
		return nil, fmt.Errorf("--etcd-endpoints (or %s) %q names no endpoint", Name("etcd-endpoints"), list)
	}
	for _, e := range out {
		if err := checkEndpoint(e); err != nil {
			return nil, fmt.Errorf("--etcd-endpoints (or %s): endpoint %q: %v", Name("etcd-endpoints"), e, err)
		}
	}
	return out, nil
}

// checkEndpoint checks the shape of one etcd endpoint, as the etcd client
// reads it: http://host:port, https://host:port, host:port, or a unix
// socket (unix://path, unixs://path). Whether anything answers there is
// found only when it is dialled.
func checkEndpoint(e string) error {
	lower := strings.ToLower(e)
	for _, scheme := range []string{"unix:", "unixs:"} {
		if strings.HasPrefix(lower, scheme) {
			if strings.TrimLeft(e[len(scheme):], "/") == "" {
				return errors.New("a unix socket endpoint needs a path")
			}
			return nil
		}
	}
	hostPort := e
	if i := strings.Index(e, "://"); i >= 0 {
		u, err := url.Parse(e)
		if err != nil {
			return err
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return fmt.Errorf("unknown scheme %q (want http://, https://, unix:// or unixs://, or host:port)", u.Scheme)
		}
		if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
			return errors.New("an endpoint is scheme://host:port, without a path, query or user")
		}
		hostPort = u.Host
	}
	host, _, err := hostport.Split(hostPort, 1)
	if err != nil {
		return err
	}
	if host == "" {
		return errors.New("no host")
	}
	return nil
}

// EtcdPrefix checks the value of --etcd-prefix: it must start with '/' and
// name more than slashes, since the store drops trailing slashes and etcd's
// root ("/") is no prefix of its own.
func EtcdPrefix(prefix string) error {
	if !strings.HasPrefix(prefix, "/") || strings.TrimRight(prefix, "/") == "" {
		return fmt.Errorf("--etcd-prefix %q must start with '/' and name more than '/' (as the default, %q)", prefix, etcdkv.DefaultPrefix)
	}
	return nil
}

// EtcdTLS checks that etcd TLS files (--etcd-ca, --etcd-cert, --etcd-key)
// go with endpoints that use TLS: the etcd client talks plaintext to an
// http:// endpoint whatever the files say, so the pair is refused, naming
// the flags given and the endpoint. An https:// endpoint without the files
// is fine (the client verifies the server against the system's roots), and
// so is one without a scheme (the files decide).
func EtcdTLS(endpoints []string, caFile, certFile, keyFile string) error {
	var given []string
	for _, f := range []struct{ name, path string }{{"--etcd-ca", caFile}, {"--etcd-cert", certFile}, {"--etcd-key", keyFile}} {
		if f.path != "" {
			given = append(given, f.name)
		}
	}
	if len(given) == 0 {
		return nil
	}
	for _, e := range endpoints {
		if strings.HasPrefix(strings.ToLower(e), "http://") {
			return fmt.Errorf("%s given with the plaintext etcd endpoint %q in --etcd-endpoints: the etcd client would not use TLS for it (use https://)", strings.Join(given, ", "), e)
		}
	}
	return nil
}

// EtcdFlags registers the connection flags the cleaner and gravelerfsck
// share on fs, writing into cfg (--etcd-endpoints, --etcd-prefix, TLS,
// user and password). Call the function it returns after Parse: it sets
// cfg.Endpoints and checks the flags, naming each one at fault.
func EtcdFlags(fs *flag.FlagSet, cfg *etcdkv.Config) func() error {
	var endpoints string
	fs.StringVar(&endpoints, "etcd-endpoints", "", "comma-separated etcd endpoints (required)")
	fs.StringVar(&cfg.Prefix, "etcd-prefix", etcdkv.DefaultPrefix, "root prefix of every key in etcd (gravelerd's)")
	fs.StringVar(&cfg.TLS.CAFile, "etcd-ca", "", "etcd CA certificate file")
	fs.StringVar(&cfg.TLS.CertFile, "etcd-cert", "", "etcd client certificate file")
	fs.StringVar(&cfg.TLS.KeyFile, "etcd-key", "", "etcd client key file")
	fs.StringVar(&cfg.Username, "etcd-username", "", "etcd username")
	fs.StringVar(&cfg.Password, "etcd-password", "", "etcd password (prefer the environment variable)")
	return func() error {
		var errs []error
		var err error
		switch cfg.Endpoints, err = EtcdEndpoints(endpoints); {
		case err != nil:
			errs = append(errs, err)
		case len(cfg.Endpoints) == 0:
			errs = append(errs, errors.New("--etcd-endpoints is required"))
		default:
			errs = append(errs, EtcdTLS(cfg.Endpoints, cfg.TLS.CAFile, cfg.TLS.CertFile, cfg.TLS.KeyFile))
		}
		errs = append(errs, EtcdPrefix(cfg.Prefix))
		switch {
		case cfg.TLS.CertFile != "" && cfg.TLS.KeyFile == "":
			errs = append(errs, fmt.Errorf("--etcd-cert=%q given without --etcd-key", cfg.TLS.CertFile))
		case cfg.TLS.KeyFile != "" && cfg.TLS.CertFile == "":
			errs = append(errs, fmt.Errorf("--etcd-key=%q given without --etcd-cert", cfg.TLS.KeyFile))
		}
		switch {
		case cfg.Username != "" && cfg.Password == "":
			errs = append(errs, fmt.Errorf("--etcd-username=%q given without --etcd-password", cfg.Username))
		case cfg.Password != "" && cfg.Username == "":
			// Not the value: it is a secret.
			errs = append(errs, errors.New("--etcd-password given without --etcd-username"))
		}
		return errors.Join(errs...)
	}
}
