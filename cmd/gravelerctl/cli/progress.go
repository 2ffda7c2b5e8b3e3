package cli

import (
	"fmt"
	"io"
	"time"
)

// progress is a small stderr counter for long operations: it redraws at
// most every 100ms, and prints nothing when progress is off.
type progress struct {
	w     io.Writer
	label string
	unit  string
	total int64
	last  time.Time
	cur   int64
}

func (a *app) newProgress(label, unit string, total int64) *progress {
	if !a.progress {
		return &progress{}
	}
	return &progress{w: a.streams.Err, label: label, unit: unit, total: total}
}

func (p *progress) draw() {
	if p.total > 0 {
		fmt.Fprintf(p.w, "\r%s: %d/%d %s (%d%%)", p.label, p.cur, p.total, p.unit, p.cur*100/p.total)
	} else {
		fmt.Fprintf(p.w, "\r%s: %d %s", p.label, p.cur, p.unit)
	}
}

func (p *progress) set(n int64) {
	if p.w == nil {
		return
	}
	p.cur = n
	if time.Since(p.last) >= 100*time.Millisecond {
		p.last = time.Now()
		p.draw()
	}
}

func (p *progress) done() {
	if p.w == nil {
		return
	}
	p.draw()
	fmt.Fprintln(p.w)
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}
