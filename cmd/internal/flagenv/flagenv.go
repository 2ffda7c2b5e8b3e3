// Package flagenv gives every flag of the project's daemons a GRAVELER_*
// environment variable (flag --etcd-endpoints: GRAVELER_ETCD_ENDPOINTS),
// so that Kubernetes manifests can configure them with env entries. The
// functions are safe for concurrent use on distinct flag sets; errors name
// the variable and its value.
package flagenv

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// Name is the environment variable of a flag.
func Name(flagName string) string {
	return "GRAVELER_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Parse sets each flag of fs from its variable, except the flags named in
// skip, then parses args. The variables are read first, so a flag given
// on the command line wins, and a bad variable is reported even with
// --help (which the deploy checks run with the manifests' variables).
func Parse(fs *flag.FlagSet, args []string, getenv func(string) string, skip ...string) error {
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
	return fs.Parse(args)
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
