package etcdkv

import (
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// clientLogTick is the period in which the etcd client's logger lets
// through one line of each message.
const clientLogTick = 10 * time.Second

// clientLogger is the etcd client's own logger, derived from the store's.
// The client warns on every failed attempt of every request ("retrying of
// unary invoker failed"), so a stalled member would print a line per
// request; the store already counts those failures (graveler_kv_* metrics)
// and returns them. So the client's lines are kept from warn up only, and
// of each message the first in every clientLogTick: enough to see that
// something is wrong and what.
func clientLogger(l *zap.Logger) *zap.Logger {
	return l.Named("etcd-client").WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		// NewIncreaseLevelCore refuses to lower a level: a store logger
		// already at error stays there.
		if warn, err := zapcore.NewIncreaseLevelCore(c, zapcore.WarnLevel); err == nil {
			c = warn
		}
		return zapcore.NewSamplerWithOptions(c, clientLogTick, 1, 0)
	}))
}
