package otelredislock_test

import (
	"context"
	"fmt"
	"log"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/otelredislock"
)

// Wiring: metrics on the global MeterProvider (set up by the program's
// OpenTelemetry SDK), spans on the global TracerProvider, and the lock's
// key prefix (the part before ':') as a metric attribute.
func Example() {
	hooks, err := otelredislock.New(
		otelredislock.WithSpans(),
		otelredislock.WithKeyAttribute(func(key string) (attribute.KeyValue, bool) {
			prefix, _, ok := strings.Cut(key, ":")
			return attribute.String("redislock.key.prefix", prefix), ok
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	locker := redislock.New(rdb, redislock.WithHooks(hooks))

	ctx := context.Background()
	err = locker.WithLock(ctx, "order:42", func(ctx context.Context) error {
		return nil // the critical section
	})
	if err != nil {
		log.Print(err)
	}
}

// What the hooks record, read with an SDK ManualReader. The events are made
// up here; a Locker given the hooks with redislock.WithHooks sends them.
func ExampleNew_manualReader() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	hooks, err := otelredislock.New(otelredislock.WithMeterProvider(mp))
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	hooks.Obtain(ctx, redislock.ObtainEvent{Key: "order:42", Outcome: redislock.OutcomeAcquired, Wait: 250 * time.Millisecond, Attempts: 1})
	hooks.Release(ctx, redislock.ReleaseEvent{Key: "order:42", Outcome: redislock.OutcomeReleased, Held: 2 * time.Second})

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		log.Fatal(err)
	}
	outcome := func(attrs attribute.Set) string {
		if v, ok := attrs.Value(otelredislock.AttrOutcome); ok {
			return v.Emit()
		}
		return ""
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch data := m.Data.(type) {
		case metricdata.Histogram[float64]:
			for _, dp := range data.DataPoints {
				fmt.Printf("%s{%s}: %d sample, sum %g %s\n", m.Name, outcome(dp.Attributes), dp.Count, dp.Sum, m.Unit)
			}
		case metricdata.Sum[int64]:
			for _, dp := range data.DataPoints {
				fmt.Printf("%s{%s}: %d %s\n", m.Name, outcome(dp.Attributes), dp.Value, m.Unit)
			}
		}
	}
	// Output:
	// redislock.obtain.duration{acquired}: 1 sample, sum 0.25 s
	// redislock.obtains{acquired}: 1 {obtain}
	// redislock.hold.duration{released}: 1 sample, sum 2 s
	// redislock.locks.held{}: 0 {lock}
}
