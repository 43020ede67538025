package otelredislock_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/seed5e0b76d9/redislock"
	"github.com/seed5e0b76d9/redislock/otelredislock"
)

// telemetry is an SDK MeterProvider with a manual reader and an SDK
// TracerProvider with a span recorder: what the hooks recorded, read back.
type telemetry struct {
	reader *sdkmetric.ManualReader
	mp     *sdkmetric.MeterProvider
	spans  *tracetest.SpanRecorder
	tp     *sdktrace.TracerProvider
}

func newTelemetry(t testing.TB) *telemetry {
	tel := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	t.Cleanup(func() {
		_ = tel.mp.Shutdown(context.Background())
		_ = tel.tp.Shutdown(context.Background())
	})
	return tel
}

// hooks returns otelredislock's Hooks on tel's MeterProvider, with opts.
func (tel *telemetry) hooks(t testing.TB, opts ...otelredislock.Option) redislock.Hooks {
	t.Helper()
	h, err := otelredislock.New(append([]otelredislock.Option{otelredislock.WithMeterProvider(tel.mp)}, opts...)...)
	require.NoError(t, err)
	return h
}

// metrics is one collection of tel's metrics.
type metrics struct {
	t  testing.TB
	rm metricdata.ResourceMetrics
}

func (tel *telemetry) collect(t testing.TB) metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, tel.reader.Collect(context.Background(), &rm))
	return metrics{t, rm}
}

// find returns the metric name, checking its scope and unit.
func (m metrics) find(name string) (metricdata.Metrics, bool) {
	for _, sm := range m.rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			if mt.Name == name {
				assert.Equal(m.t, otelredislock.ScopeName, sm.Scope.Name)
				return mt, true
			}
		}
	}
	return metricdata.Metrics{}, false
}

// sum returns the value of the counter or UpDownCounter name for exactly
// attrs (0 when there is no such data point).
func (m metrics) sum(name string, attrs ...attribute.KeyValue) int64 {
	m.t.Helper()
	mt, ok := m.find(name)
	if !ok {
		return 0
	}
	data, ok := mt.Data.(metricdata.Sum[int64])
	require.True(m.t, ok, "%s is a %T", name, mt.Data)
	set := attribute.NewSet(attrs...)
	for _, dp := range data.DataPoints {
		if dp.Attributes.Equals(&set) {
			return dp.Value
		}
	}
	return 0
}

// total returns the value of the counter name summed over its attributes.
func (m metrics) total(name string) int64 {
	m.t.Helper()
	mt, ok := m.find(name)
	if !ok {
		return 0
	}
	var n int64
	for _, dp := range mt.Data.(metricdata.Sum[int64]).DataPoints {
		n += dp.Value
	}
	return n
}

// hist returns the data point of the histogram name for exactly attrs (a
// zero one, Count 0, when there is none).
func (m metrics) hist(name string, attrs ...attribute.KeyValue) metricdata.HistogramDataPoint[float64] {
	m.t.Helper()
	mt, ok := m.find(name)
	if !ok {
		return metricdata.HistogramDataPoint[float64]{}
	}
	data, ok := mt.Data.(metricdata.Histogram[float64])
	require.True(m.t, ok, "%s is a %T", name, mt.Data)
	set := attribute.NewSet(attrs...)
	for _, dp := range data.DataPoints {
		if dp.Attributes.Equals(&set) {
			return dp
		}
	}
	return metricdata.HistogramDataPoint[float64]{}
}

// attrSets returns every attribute set recorded, for any metric.
func (m metrics) attrSets() []attribute.Set {
	var sets []attribute.Set
	for _, sm := range m.rm.ScopeMetrics {
		for _, mt := range sm.Metrics {
			switch data := mt.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			case metricdata.Histogram[float64]:
				for _, dp := range data.DataPoints {
					sets = append(sets, dp.Attributes)
				}
			}
		}
	}
	return sets
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

var (
	acquired    = otelredislock.AttrOutcome.String(string(redislock.OutcomeAcquired))
	notObtained = otelredislock.AttrOutcome.String(string(redislock.OutcomeNotObtained))
	failed      = otelredislock.AttrOutcome.String(string(redislock.OutcomeError))
	released    = otelredislock.AttrOutcome.String(string(redislock.OutcomeReleased))
	notHeld     = otelredislock.AttrOutcome.String(string(redislock.OutcomeNotHeld))
	renewed     = otelredislock.AttrOutcome.String(string(redislock.OutcomeRenewed))
	lostOutcome = otelredislock.AttrOutcome.String(string(redislock.OutcomeLost))
	notHedge    = otelredislock.AttrHedge.Bool(false)
	hedge       = otelredislock.AttrHedge.Bool(true)
)

// An uncontended Obtain and its Release: one obtain, acquired, with its
// wait; one lock held, then none; one hold time, released. No metric has
// the key as an attribute.
func TestMetrics_ObtainRelease(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	tel := newTelemetry(t)
	locker := redislock.New(client(t, startRedis(t)), redislock.WithHooks(tel.hooks(t)))

	lk, err := locker.Obtain(ctx, "order:42", time.Minute)
	require.NoError(t, err)
	m := tel.collect(t)
	assert.EqualValues(t, 1, m.sum("redislock.obtains", acquired))
	wait := m.hist("redislock.obtain.duration", acquired)
	assert.EqualValues(t, 1, wait.Count)
	assert.Positive(t, wait.Sum)
	assert.Less(t, wait.Sum, 1.0)
	assert.EqualValues(t, 1, m.sum("redislock.locks.held"))

	time.Sleep(50 * time.Millisecond)
	require.NoError(t, lk.Release(ctx))
	m = tel.collect(t)
	assert.EqualValues(t, 0, m.sum("redislock.locks.held"))
	hold := m.hist("redislock.hold.duration", released)
	assert.EqualValues(t, 1, hold.Count)
	assert.GreaterOrEqual(t, hold.Sum, 0.05)
	assert.Zero(t, m.total("redislock.handoffs"))
	for _, set := range m.attrSets() {
		for _, kv := range set.ToSlice() {
			assert.NotContains(t, kv.Value.Emit(), "order:42", "key in %v", kv)
		}
	}

	mt, ok := m.find("redislock.obtain.duration")
	require.True(t, ok)
	assert.Equal(t, "s", mt.Unit)
	mt, ok = m.find("redislock.locks.held")
	require.True(t, ok)
	assert.Equal(t, "{lock}", mt.Unit)
	assert.False(t, mt.Data.(metricdata.Sum[int64]).IsMonotonic)
}

// A Release whose ctx has ended goes on in the background: the
// acquisition is over, so it is no longer counted held.
func TestMetrics_BackgroundRelease(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	tel := newTelemetry(t)
	locker := redislock.New(client(t, startRedis(t)), redislock.WithHooks(tel.hooks(t)))

	lk, err := locker.Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	done, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, lk.Release(done), context.Canceled)
	m := tel.collect(t)
	assert.EqualValues(t, 0, m.sum("redislock.locks.held"))
	assert.EqualValues(t, 1, m.hist("redislock.hold.duration", otelredislock.AttrOutcome.String(string(redislock.OutcomeBackground))).Count)
}

// A contended Obtain records the time it waited for the holder, and the
// holder's Release the hand-off to it (through Redis: another Locker).
func TestMetrics_ContendedObtain(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	tel := newTelemetry(t)
	addr := startRedis(t)
	hooks := tel.hooks(t)
	holder := redislock.New(client(t, addr), redislock.WithHooks(hooks))
	waiter := redislock.New(client(t, addr), redislock.WithHooks(hooks))

	lk, err := holder.Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	got := make(chan *redislock.Lock, 1)
	go func() {
		lk, err := waiter.Obtain(ctx, "k", time.Minute)
		assert.NoError(t, err)
		got <- lk
	}()
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, lk.Release(ctx))
	wlk := <-got
	require.NotNil(t, wlk)

	m := tel.collect(t)
	wait := m.hist("redislock.obtain.duration", acquired)
	assert.EqualValues(t, 2, wait.Count)
	maxWait, ok := wait.Max.Value()
	require.True(t, ok)
	assert.GreaterOrEqual(t, maxWait, 0.2)
	assert.EqualValues(t, 2, m.sum("redislock.obtains", acquired))
	assert.EqualValues(t, 1, m.sum("redislock.handoffs", otelredislock.AttrLocal.Bool(false)))
	assert.EqualValues(t, 1, m.sum("redislock.locks.held"))
	require.NoError(t, wlk.Release(ctx))
	assert.EqualValues(t, 0, tel.collect(t).sum("redislock.locks.held"))
}

// A TryObtain of a held key is counted not_obtained; it holds no lock.
func TestMetrics_NotObtained(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	tel := newTelemetry(t)
	addr := startRedis(t)
	hooks := tel.hooks(t)
	holder := redislock.New(client(t, addr), redislock.WithHooks(hooks))
	other := redislock.New(client(t, addr), redislock.WithHooks(hooks))

	lk, err := holder.Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	_, err = other.TryObtain(ctx, "k", time.Minute)
	require.ErrorIs(t, err, redislock.ErrNotObtained)

	m := tel.collect(t)
	assert.EqualValues(t, 1, m.sum("redislock.obtains", notObtained))
	assert.EqualValues(t, 1, m.hist("redislock.obtain.duration", notObtained).Count)
	assert.EqualValues(t, 1, m.sum("redislock.locks.held"))
	require.NoError(t, lk.Release(ctx))
}

// An Obtain that failed on Redis (nothing listening) is counted error, and
// holds no lock.
func TestMetrics_ObtainError(t *testing.T) {
	tel := newTelemetry(t)
	locker := redislock.New(deadClient(t), redislock.WithHooks(tel.hooks(t)))
	_, err := locker.TryObtain(context.Background(), "k", time.Minute)
	require.Error(t, err)
	require.NotErrorIs(t, err, redislock.ErrNotObtained)

	m := tel.collect(t)
	assert.EqualValues(t, 1, m.sum("redislock.obtains", failed))
	assert.EqualValues(t, 0, m.sum("redislock.locks.held"))
}

// deadClient returns a client of a loopback port nobody listens on.
func deadClient(t testing.TB) *redis.Client {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// Renewals of a kept lease are counted by outcome (renewed) and hedge, each
// with its latency.
func TestMetrics_Renewals(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	tel := newTelemetry(t)
	locker := redislock.New(client(t, startRedis(t)), redislock.WithHooks(tel.hooks(t)))

	lk, err := locker.Obtain(ctx, "k", 300*time.Millisecond)
	require.NoError(t, err)
	lctx := lk.KeepAlive(ctx)
	time.Sleep(time.Second) // a renewal every 100 ms
	require.NoError(t, lctx.Err())
	require.NoError(t, lk.Release(ctx))

	m := tel.collect(t)
	n := m.sum("redislock.renewals", renewed, notHedge) + m.sum("redislock.renewals", renewed, hedge)
	assert.GreaterOrEqual(t, n, int64(3))
	assert.Equal(t, n, m.total("redislock.renewals"), "all renewed")
	latency := m.hist("redislock.renewal.duration", renewed, notHedge)
	assert.EqualValues(t, m.sum("redislock.renewals", renewed, notHedge), latency.Count)
	assert.Positive(t, latency.Sum)
	mt, ok := m.find("redislock.renewals")
	require.True(t, ok)
	assert.Equal(t, "{renewal}", mt.Unit)
}

// A kept lock whose key is deleted: the renewal that finds it gone is
// counted lost, the lease lost once; its Release finds it not held, and it
// is no longer counted held.
func TestMetrics_LostLock(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	tel := newTelemetry(t)
	addr := startRedis(t)
	locker := redislock.New(client(t, addr), redislock.WithHooks(tel.hooks(t)))

	lk, err := locker.Obtain(ctx, "k", 600*time.Millisecond)
	require.NoError(t, err)
	lctx := lk.KeepAlive(ctx)
	require.NoError(t, client(t, addr).Del(ctx, "k").Err())
	<-lctx.Done()
	require.ErrorIs(t, context.Cause(lctx), redislock.ErrLockLost)
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m := tel.collect(t)
		assert.EqualValues(c, 1, m.sum("redislock.leases.lost"))
		// One renewal or more (one sent before the first answer came
		// back) found the key gone; the lease is lost once.
		assert.Positive(c, m.sum("redislock.renewals", lostOutcome, notHedge)+m.sum("redislock.renewals", lostOutcome, hedge))
	}, 5*time.Second, 10*time.Millisecond)
	assert.EqualValues(t, 1, tel.collect(t).sum("redislock.locks.held"), "held until released")

	require.ErrorIs(t, lk.Release(ctx), redislock.ErrNotHeld)
	m := tel.collect(t)
	assert.EqualValues(t, 0, m.sum("redislock.locks.held"))
	assert.EqualValues(t, 1, m.hist("redislock.hold.duration", notHeld).Count)
	assert.EqualValues(t, 1, m.sum("redislock.leases.lost"))
}

// An Obtain that joined the lock its ctx carries is counted, but holds no
// second lock: only the release of the last handle ends the acquisition.
func TestMetrics_JoinedObtain(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	tel := newTelemetry(t)
	locker := redislock.New(client(t, startRedis(t)), redislock.WithHooks(tel.hooks(t)))

	lk, err := locker.Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	joined, err := locker.Obtain(lk.Context(ctx), "k", time.Minute)
	require.NoError(t, err)
	m := tel.collect(t)
	assert.EqualValues(t, 2, m.sum("redislock.obtains", acquired))
	assert.EqualValues(t, 1, m.sum("redislock.locks.held"))
	require.NoError(t, joined.Release(ctx))
	require.NoError(t, lk.Release(ctx))
	m = tel.collect(t)
	assert.EqualValues(t, 0, m.sum("redislock.locks.held"))
	assert.EqualValues(t, 1, m.hist("redislock.hold.duration", released).Count)
}

// WithKeyAttribute adds the attribute it makes of a key to every metric
// (here the key's prefix); keys it declines get none.
func TestMetrics_KeyAttribute(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	tel := newTelemetry(t)
	prefix := otelredislock.WithKeyAttribute(func(key string) (attribute.KeyValue, bool) {
		p, _, ok := strings.Cut(key, ":")
		return attribute.String("redislock.key.prefix", p), ok
	})
	locker := redislock.New(client(t, startRedis(t)), redislock.WithHooks(tel.hooks(t, prefix)))
	order := attribute.String("redislock.key.prefix", "order")

	lk, err := locker.Obtain(ctx, "order:42", time.Minute)
	require.NoError(t, err)
	plain, err := locker.Obtain(ctx, "plain", time.Minute)
	require.NoError(t, err)
	m := tel.collect(t)
	assert.EqualValues(t, 1, m.sum("redislock.obtains", acquired, order))
	assert.EqualValues(t, 1, m.sum("redislock.obtains", acquired))
	assert.EqualValues(t, 1, m.sum("redislock.locks.held", order))
	assert.EqualValues(t, 1, m.sum("redislock.locks.held"))
	require.NoError(t, lk.Release(ctx))
	require.NoError(t, plain.Release(ctx))
	m = tel.collect(t)
	assert.EqualValues(t, 0, m.sum("redislock.locks.held", order))
	assert.EqualValues(t, 1, m.hist("redislock.hold.duration", released, order).Count)
}

// With spans on, a contended Obtain makes one span redislock.obtain, a
// child of the span in its ctx, that lasts exactly the wait it recorded,
// with the key, outcome, attempts and fence.
func TestSpans_Obtain(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	tel := newTelemetry(t)
	addr := startRedis(t)
	hooks := tel.hooks(t, otelredislock.WithTracerProvider(tel.tp))
	holder := redislock.New(client(t, addr))
	waiter := redislock.New(client(t, addr), redislock.WithHooks(hooks))

	lk, err := holder.Obtain(ctx, "order:42", time.Minute)
	require.NoError(t, err)
	pctx, parent := tel.tp.Tracer("test").Start(ctx, "request")
	got := make(chan *redislock.Lock, 1)
	go func() {
		lk, err := waiter.Obtain(pctx, "order:42", time.Minute, redislock.WithFencing())
		assert.NoError(t, err)
		got <- lk
	}()
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, lk.Release(ctx))
	wlk := <-got
	require.NotNil(t, wlk)
	require.NoError(t, wlk.Release(ctx))
	parent.End()

	span := endedSpan(t, tel, "redislock.obtain")
	assert.Equal(t, parent.SpanContext().SpanID(), span.Parent().SpanID())
	assert.Equal(t, parent.SpanContext().TraceID(), span.SpanContext().TraceID())
	assert.Equal(t, trace.SpanKindInternal, span.SpanKind())
	assert.Equal(t, otelredislock.ScopeName, span.InstrumentationScope().Name)
	attrs := attribute.NewSet(span.Attributes()...)
	assertAttr(t, attrs, otelredislock.AttrKey.String("order:42"))
	assertAttr(t, attrs, acquired)
	assertAttr(t, attrs, otelredislock.AttrFence.Int64(wlk.Fence()))
	attempts, ok := attrs.Value(otelredislock.AttrAttempts)
	assert.True(t, ok)
	assert.Positive(t, attempts.AsInt64())
	assert.Equal(t, codes.Unset, span.Status().Code)

	took := span.EndTime().Sub(span.StartTime())
	assert.GreaterOrEqual(t, took, 200*time.Millisecond)
	wait, ok := tel.collect(t).hist("redislock.obtain.duration", acquired).Max.Value()
	require.True(t, ok)
	assert.InDelta(t, wait, took.Seconds(), 1e-6, "the span lasts the wait")
}

// A TryObtain that was not obtained records its error on its span, but
// contention is no error status; an Obtain that failed on Redis sets the
// status Error.
func TestSpans_ObtainFailures(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	tel := newTelemetry(t)
	addr := startRedis(t)
	hooks := tel.hooks(t, otelredislock.WithTracerProvider(tel.tp))

	lk, err := redislock.New(client(t, addr)).Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	_, err = redislock.New(client(t, addr), redislock.WithHooks(hooks)).TryObtain(ctx, "k", time.Minute)
	require.ErrorIs(t, err, redislock.ErrNotObtained)
	require.NoError(t, lk.Release(ctx))
	span := endedSpan(t, tel, "redislock.obtain")
	assertAttr(t, attribute.NewSet(span.Attributes()...), notObtained)
	assert.Equal(t, codes.Unset, span.Status().Code)
	require.Len(t, span.Events(), 1)
	assert.Equal(t, "exception", span.Events()[0].Name)

	tel.spans.Reset()
	_, err = redislock.New(deadClient(t), redislock.WithHooks(hooks)).TryObtain(ctx, "k", time.Minute)
	require.Error(t, err)
	span = endedSpan(t, tel, "redislock.obtain")
	assertAttr(t, attribute.NewSet(span.Attributes()...), failed)
	assert.Equal(t, codes.Error, span.Status().Code)
	assert.Equal(t, err.Error(), span.Status().Description)
}

// With spans on, a lock found lost adds the event redislock.lost to the
// span of the ctx given to KeepAlive.
func TestSpans_Lost(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	tel := newTelemetry(t)
	addr := startRedis(t)
	locker := redislock.New(client(t, addr), redislock.WithHooks(tel.hooks(t, otelredislock.WithTracerProvider(tel.tp))))

	pctx, parent := tel.tp.Tracer("test").Start(ctx, "job")
	lk, err := locker.Obtain(pctx, "k", 600*time.Millisecond)
	require.NoError(t, err)
	lctx := lk.KeepAlive(pctx)
	require.NoError(t, client(t, addr).Del(ctx, "k").Err())
	<-lctx.Done()
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.EqualValues(c, 1, tel.collect(t).sum("redislock.leases.lost"))
	}, 5*time.Second, 10*time.Millisecond)
	require.ErrorIs(t, lk.Release(ctx), redislock.ErrNotHeld)
	parent.End()

	job := endedSpan(t, tel, "job")
	var events []sdktrace.Event
	for _, e := range job.Events() {
		if e.Name == "redislock.lost" {
			events = append(events, e)
		}
	}
	require.Len(t, events, 1)
	attrs := attribute.NewSet(events[0].Attributes...)
	assertAttr(t, attrs, otelredislock.AttrKey.String("k"))
	held, ok := attrs.Value(otelredislock.AttrHeld)
	assert.True(t, ok)
	assert.Positive(t, held.AsFloat64())
	msg, ok := attrs.Value("error.message")
	assert.True(t, ok)
	assert.Contains(t, msg.AsString(), redislock.ErrLockLost.Error())
}

// Without WithSpans or WithTracerProvider, no span is made, even with a
// global TracerProvider; New uses the global MeterProvider, and WithSpans
// the global TracerProvider.
func TestNew_Globals(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	tel := newTelemetry(t)
	otel.SetMeterProvider(tel.mp)
	otel.SetTracerProvider(tel.tp)
	t.Cleanup(func() {
		otel.SetMeterProvider(metricnoop.NewMeterProvider())
		otel.SetTracerProvider(tracenoop.NewTracerProvider())
	})
	addr := startRedis(t)

	for _, spans := range []bool{false, true} {
		var opts []otelredislock.Option
		if spans {
			opts = append(opts, otelredislock.WithSpans())
		}
		hooks, err := otelredislock.New(opts...)
		require.NoError(t, err)
		lk, err := redislock.New(client(t, addr), redislock.WithHooks(hooks)).Obtain(ctx, "k", time.Minute)
		require.NoError(t, err)
		require.NoError(t, lk.Release(ctx))
		if !spans {
			assert.Empty(t, tel.spans.Ended())
		} else {
			assert.Len(t, tel.spans.Ended(), 1)
		}
	}
	assert.EqualValues(t, 2, tel.collect(t).sum("redislock.obtains", acquired))
}

// Invalid options are errors wrapping redislock.ErrInvalidOption.
func TestNew_InvalidOptions(t *testing.T) {
	for name, opt := range map[string]otelredislock.Option{
		"nil MeterProvider":  otelredislock.WithMeterProvider(nil),
		"nil TracerProvider": otelredislock.WithTracerProvider(nil),
		"nil key attribute":  otelredislock.WithKeyAttribute(nil),
		"nil Option":         nil,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := otelredislock.New(opt)
			assert.ErrorIs(t, err, redislock.ErrInvalidOption)
		})
	}
}

// endedSpan returns the one ended span called name.
func endedSpan(t testing.TB, tel *telemetry, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	var found []sdktrace.ReadOnlySpan
	for _, s := range tel.spans.Ended() {
		if s.Name() == name {
			found = append(found, s)
		}
	}
	require.Len(t, found, 1, "spans called %s", name)
	return found[0]
}

func assertAttr(t testing.TB, set attribute.Set, kv attribute.KeyValue) {
	t.Helper()
	v, ok := set.Value(kv.Key)
	if assert.True(t, ok, "no attribute %s in %v", kv.Key, set.ToSlice()) {
		assert.Equal(t, kv.Value, v, "attribute %s", kv.Key)
	}
}

// The obtain span starts when the call began and lasts its wait, also when
// a hook that runs before otelredislock's is slow (here 200 ms).
func TestSpans_StartIsWhenTheCallBegan(t *testing.T) {
	ctx := ctxT(t, 10*time.Second)
	tel := newTelemetry(t)
	addr := startRedis(t)
	slow := redislock.Hooks{Obtain: func(context.Context, redislock.ObtainEvent) { time.Sleep(200 * time.Millisecond) }}
	locker := redislock.New(client(t, addr), redislock.WithHooks(slow), redislock.WithHooks(tel.hooks(t, otelredislock.WithTracerProvider(tel.tp))))
	before := time.Now()
	lk, err := locker.Obtain(ctx, "k", time.Minute)
	require.NoError(t, err)
	require.NoError(t, lk.Release(ctx))
	span := endedSpan(t, tel, "redislock.obtain")
	assert.False(t, span.StartTime().Before(before), "started before the call")
	assert.Less(t, span.StartTime().Sub(before), 50*time.Millisecond, "started after the call began")
	assert.Less(t, span.EndTime().Sub(before), 150*time.Millisecond, "ended after the call was done")
}
