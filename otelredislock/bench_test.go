package otelredislock_test

import (
	"context"
	"testing"
	"time"

	"github.com/seed5e0b76d9/redislock"
)

// The cost of an Obtain and a Release event on the SDK, without spans:
// what the hooks add to an Obtain + Release (about 150 µs on loopback).
func BenchmarkHooks_ObtainRelease(b *testing.B) {
	hooks := newTelemetry(b).hooks(b)
	ctx := context.Background()
	obtain := redislock.ObtainEvent{Key: "order:42", Outcome: redislock.OutcomeAcquired, Wait: time.Millisecond, Attempts: 1}
	release := redislock.ReleaseEvent{Key: "order:42", Outcome: redislock.OutcomeReleased, Held: time.Millisecond}
	b.ReportAllocs()
	for range b.N {
		hooks.Obtain(ctx, obtain)
		hooks.Release(ctx, release)
	}
}
