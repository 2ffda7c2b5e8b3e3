package cli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"graveler/cmd/gravelerctl/cli"
)

type ctl struct {
	t    *testing.T
	base []string
}

// run runs gravelerctl in-process and returns its exit code and output.
func (c ctl) run(stdin string, args ...string) (int, string, string) {
	c.t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Main(context.Background(), append(append([]string{}, c.base...), args...),
		cli.Streams{In: strings.NewReader(stdin), Out: &out, Err: &errOut})
	return code, out.String(), errOut.String()
}

// ok runs a command that must succeed and returns its stdout.
func (c ctl) ok(args ...string) string {
	c.t.Helper()
	code, out, errOut := c.run("", args...)
	if code != 0 {
		c.t.Fatalf("gravelerctl %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errOut)
	}
	return out
}

func (c ctl) fails(want int, args ...string) string {
	c.t.Helper()
	code, out, errOut := c.run("", args...)
	if code != want {
		c.t.Fatalf("gravelerctl %v: exit %d, want %d\nstdout: %s\nstderr: %s", args, code, want, out, errOut)
	}
	return errOut
}
