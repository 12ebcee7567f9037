package edge

import (
	"context"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapToSlog returns a zap.Logger (what certmagic logs through) writing to
// log, so that the edge's lines land in the gateway's one log. certmagic's
// info lines (a lock acquired, a certificate loaded) are debug here: the
// edge logs what an operator acts on itself.
func zapToSlog(log *slog.Logger) *zap.Logger {
	return zap.New(&slogCore{h: log.Handler()})
}

type slogCore struct {
	h      slog.Handler
	fields []zapcore.Field
}

func level(l zapcore.Level) slog.Level {
	switch {
	case l >= zapcore.ErrorLevel:
		return slog.LevelWarn // certmagic's errors are mostly retried; the edge reports what sticks
	case l >= zapcore.WarnLevel:
		return slog.LevelWarn
	default:
		return slog.LevelDebug
	}
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	return c.h.Enabled(context.Background(), level(l))
}

func (c *slogCore) With(fs []zapcore.Field) zapcore.Core {
	return &slogCore{h: c.h, fields: append(append([]zapcore.Field(nil), c.fields...), fs...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fs {
		f.AddTo(enc)
	}
	r := slog.NewRecord(e.Time, level(e.Level), e.Message, 0)
	r.AddAttrs(slog.String("component", "certmagic"))
	if e.LoggerName != "" {
		r.AddAttrs(slog.String("logger", e.LoggerName))
	}
	for k, v := range enc.Fields {
		r.AddAttrs(slog.Any(k, v))
	}
	return c.h.Handle(context.Background(), r)
}

func (c *slogCore) Sync() error { return nil }
