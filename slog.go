package redislock

import (
	"context"
	"log/slog"
)

// SlogHooks returns Hooks that write the events of a Locker's locks to
// logger, with the key and what happened as attributes:
//
//   - Error: a lock lost (the key, how long it was held, the cause: which
//     includes the last renewal's error, e.g. a closed client).
//   - Warn: an Obtain or a Release that failed on Redis or the network, a
//     renewal that failed, a Release that found the lock no longer held.
//   - Info: a Release that goes on in the background.
//   - Debug: every acquisition, hand-off, renewal and release, and an
//     Obtain or TryObtain that did not get a key another owner held
//     (contention: a cron fleet's skipped ticks are no news). A renewal
//     that found the lock lost is at DEBUG too: the loss itself is logged
//     at ERROR.
//
// Events below the logger's level cost a call to its handler's Enabled.
//
//	locker := redislock.New(rdb, redislock.WithHooks(redislock.SlogHooks(slog.Default())))
func SlogHooks(logger *slog.Logger) Hooks {
	log := func(ctx context.Context, level slog.Level, msg string, attrs func() []slog.Attr) {
		if logger.Enabled(ctx, level) {
			logger.LogAttrs(ctx, level, msg, attrs()...)
		}
	}
	return Hooks{
		Obtain: func(ctx context.Context, e ObtainEvent) {
			log(ctx, levelOf(e.Outcome), "redislock: obtain", func() []slog.Attr {
				return withErr([]slog.Attr{slog.String("key", e.Key), slog.String("outcome", string(e.Outcome)),
					slog.Duration("wait", e.Wait), slog.Int("attempts", e.Attempts), slog.Int64("fence", e.Fence)}, e.Err)
			})
		},
		HandOff: func(ctx context.Context, e HandOffEvent) {
			log(ctx, slog.LevelDebug, "redislock: hand-off", func() []slog.Attr {
				return []slog.Attr{slog.String("key", e.Key), slog.Bool("local", e.Local), slog.Int("to", e.To)}
			})
		},
		Renew: func(ctx context.Context, e RenewEvent) {
			log(ctx, levelOf(e.Outcome), "redislock: renewal", func() []slog.Attr {
				return withErr([]slog.Attr{slog.String("key", e.Key), slog.String("outcome", string(e.Outcome)),
					slog.Duration("latency", e.Latency), slog.Bool("hedge", e.Hedge)}, e.Err)
			})
		},
		Lost: func(ctx context.Context, e LostEvent) {
			log(ctx, slog.LevelError, "redislock: lock lost", func() []slog.Attr {
				return withErr([]slog.Attr{slog.String("key", e.Key), slog.Duration("held", e.Held)}, e.Err)
			})
		},
		Release: func(ctx context.Context, e ReleaseEvent) {
			log(ctx, levelOf(e.Outcome), "redislock: release", func() []slog.Attr {
				return withErr([]slog.Attr{slog.String("key", e.Key), slog.String("outcome", string(e.Outcome)),
					slog.Duration("held", e.Held)}, e.Err)
			})
		},
	}
}

// levelOf is the level SlogHooks logs an outcome at: failures (and a
// Release that found the lock lost before) at WARN, releases that go on in
// the background at INFO, the rest (contention included) at DEBUG.
func levelOf(o Outcome) slog.Level {
	switch o {
	case OutcomeError, OutcomeNotHeld:
		return slog.LevelWarn
	case OutcomeBackground:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// withErr appends err to attrs, as "err", when there is one.
func withErr(attrs []slog.Attr, err error) []slog.Attr {
	if err != nil {
		attrs = append(attrs, slog.String("err", err.Error()))
	}
	return attrs
}
