package etcdkv

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

type fixedClock struct{ t time.Time }

func (c *fixedClock) Now() time.Time                         { return c.t }
func (c *fixedClock) NewTicker(d time.Duration) *time.Ticker { return time.NewTicker(d) }

// TestClientLoggerQuiet: the etcd client's per-attempt warnings come out
// once per message and tick, and its info lines not at all.
func TestClientLoggerQuiet(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	clock := &fixedClock{t: time.Unix(1_000_000, 0)}
	log := clientLogger(zap.New(core, zap.WithClock(clock)))
	for range 50 {
		log.Warn("retrying of unary invoker failed", zap.String("target", "etcd-endpoints://x"))
		log.Info("some client chatter")
	}
	log.Error("another message")
	if logs.Len() != 2 || logs.FilterMessage("retrying of unary invoker failed").Len() != 1 || logs.FilterMessage("another message").Len() != 1 {
		t.Fatalf("%d lines: %v", logs.Len(), logs.All())
	}
	if name := logs.All()[0].LoggerName; name != "etcd-client" {
		t.Fatalf("logger name %q", name)
	}
	// The next tick lets the message through again.
	clock.t = clock.t.Add(clientLogTick)
	log.Warn("retrying of unary invoker failed")
	if logs.Len() != 3 {
		t.Fatalf("after a tick: %d lines", logs.Len())
	}

	// A store logger at error keeps the client's warnings out.
	core, logs = observer.New(zapcore.ErrorLevel)
	log = clientLogger(zap.New(core))
	log.Warn("retrying of unary invoker failed")
	if logs.Len() != 0 {
		t.Fatalf("warn through an error-level logger: %v", logs.All())
	}
}
