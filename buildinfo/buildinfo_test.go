package buildinfo

import (
	"runtime"
	"testing"
)

func TestString(t *testing.T) {
	if Version == "" {
		t.Fatal("Version is empty: the default must name an unreleased build")
	}
	want := "gravelerd " + Version + " (" + runtime.Version() + ")"
	if got := String("gravelerd"); got != want {
		t.Fatalf("String: %q, want %q", got, want)
	}
}
