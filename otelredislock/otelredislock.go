// Package otelredislock records the events of redislock's locks as
// OpenTelemetry metrics and, optionally, spans.
//
// New returns redislock.Hooks; give them to a Locker with redislock.WithHooks:
//
//	hooks, err := otelredislock.New() // the global MeterProvider
//	if err != nil {
//		return err
//	}
//	locker := redislock.New(rdb, redislock.WithHooks(hooks))
//
// The metrics (see the README for the table):
//
//	redislock.obtain.duration   histogram      s          redislock.outcome
//	redislock.obtains           counter        {obtain}   redislock.outcome
//	redislock.hold.duration     histogram      s          redislock.outcome (of the release)
//	redislock.renewals          counter        {renewal}  redislock.outcome, redislock.hedge
//	redislock.renewal.duration  histogram      s          redislock.outcome, redislock.hedge
//	redislock.locks.held        updowncounter  {lock}
//	redislock.leases.lost       counter        {lease}
//	redislock.handoffs          counter        {handoff}  redislock.local
//
// Lock keys are not metric attributes unless WithKeyAttribute says how: a
// key per order or per message would make one time series each.
//
// With WithSpans (or WithTracerProvider), each Obtain, TryObtain and
// WithLock also makes a span "redislock.obtain", and a lost lock adds an
// event "redislock.lost" to the span of the context KeepAlive was given.
package otelredislock

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed5e0b76d9/redislock"
)

// ScopeName is the instrumentation scope of the Meter and the Tracer.
const ScopeName = "github.com/seed5e0b76d9/redislock/otelredislock"

// The attributes this package sets.
const (
	AttrOutcome  = attribute.Key("redislock.outcome")  // the event's redislock.Outcome: acquired, not_obtained, renewed, ...
	AttrHedge    = attribute.Key("redislock.hedge")    // a renewal sent while an earlier one of the lease was unanswered
	AttrLocal    = attribute.Key("redislock.local")    // a hand-off to an Obtain of the same Locker (no round trip)
	AttrKey      = attribute.Key("redislock.key")      // the lock key (spans; metrics only with WithKeyAttribute)
	AttrAttempts = attribute.Key("redislock.attempts") // acquire commands an Obtain sent (span)
	AttrFence    = attribute.Key("redislock.fence")    // the fencing token of an acquisition WithFencing (span)
	AttrJoined   = attribute.Key("redislock.joined")   // an Obtain that joined a lock its ctx carries (span)
	AttrHeld     = attribute.Key("redislock.held")     // seconds from the acquisition to the loss (event redislock.lost)
)

// An Option configures New.
type Option func(*config)

type config struct {
	mp      metric.MeterProvider
	tp      trace.TracerProvider
	spans   bool
	keyAttr func(key string) (attribute.KeyValue, bool)
	err     error
}

func (c *config) invalid(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: otelredislock: %s", redislock.ErrInvalidOption, fmt.Sprintf(format, args...))
	}
}

// WithMeterProvider records the metrics with mp's Meter. The default is
// the global MeterProvider (otel.GetMeterProvider), which delegates: Hooks
// made before the program calls otel.SetMeterProvider record there once it
// has.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) {
		if mp == nil {
			c.invalid("WithMeterProvider(nil)")
		}
		c.mp = mp
	}
}

// WithTracerProvider turns spans on (see WithSpans) and makes them with
// tp's Tracer.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) {
		if tp == nil {
			c.invalid("WithTracerProvider(nil)")
		}
		c.tp, c.spans = tp, true
	}
}

// WithSpans turns spans on, made with the global TracerProvider
// (otel.GetTracerProvider, which delegates as the global MeterProvider
// does) unless WithTracerProvider gives another. They are off by default.
//
// Each Obtain, TryObtain and WithLock makes one span "redislock.obtain",
// a child of the span in the call's ctx, made when the call returns: it
// starts when the call began and ends Wait later, when the call was done
// (whatever other hooks ran before this one). Its
// attributes are the key (always: a span is not a time series), the
// outcome, the acquire commands sent and the fence (when not 0); the call's
// error is recorded on it, and its status is Error for the outcome error
// (not for not_obtained: contention is not a failure). Since the span is
// made afterwards, spans started during the call (a traced Redis client's)
// are not its children but its siblings.
//
// A lock found lost adds an event "redislock.lost" (the key, the seconds
// it was held, and the cause as error.message) to the span of the ctx given
// to KeepAlive or WithLock, if that span is still recording.
func WithSpans() Option {
	return func(c *config) { c.spans = true }
}

// WithKeyAttribute adds an attribute made from the lock key to every
// metric, when f returns true for the key. The default is none: keys such as
// "order:42" would make a time series each. f should map many keys to few
// values, e.g. the key's prefix up to its first colon:
//
//	otelredislock.WithKeyAttribute(func(key string) (attribute.KeyValue, bool) {
//		prefix, _, ok := strings.Cut(key, ":")
//		return attribute.String("redislock.key.prefix", prefix), ok
//	})
//
// f is called for each measurement, from many goroutines at once, and must
// give a key the same answer every time (redislock.locks.held adds and
// subtracts under it).
func WithKeyAttribute(f func(key string) (attribute.KeyValue, bool)) Option {
	return func(c *config) {
		if f == nil {
			c.invalid("WithKeyAttribute(nil)")
		}
		c.keyAttr = f
	}
}

// Bucket boundaries, in seconds, advised to the SDK for the histograms (a
// View can replace them). The SDK's default boundaries (0, 5, 10, ...,
// 10000) suit milliseconds; in seconds they would put every uncontended
// Obtain, a few hundred microseconds, in one bucket.
var (
	// latencyBuckets: an uncontended Obtain or a renewal takes a round
	// trip (0.1-1 ms on a LAN); waits for a holder last as long as its
	// critical sections, and up to the Obtain's deadline.
	latencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}
	// holdBuckets: critical sections run from a millisecond to jobs of
	// an hour kept alive by WithLock.
	holdBuckets = []float64{0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 600, 1800, 3600}
)

// New returns Hooks that record the events of a Locker's locks as the
// metrics listed in the package doc, and as spans with WithSpans. An
// invalid option returns an error wrapping redislock.ErrInvalidOption; an
// instrument the MeterProvider refuses returns its error.
//
// The Hooks may be given to several Lockers: their events add up in the
// same instruments. They are safe for concurrent use. With the
// OpenTelemetry SDK and no key attribute, they allocate nothing: an Obtain
// and its Release (four measurements) cost about 1.5 µs on a 2-core VM
// (BenchmarkHooks_ObtainRelease), beside the 150 µs of the two round trips.
func New(opts ...Option) (redislock.Hooks, error) {
	var c config
	for _, o := range opts {
		if o == nil {
			c.invalid("nil Option")
			continue
		}
		o(&c)
	}
	if c.err != nil {
		return redislock.Hooks{}, c.err
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	r, err := newRecorder(c)
	if err != nil {
		return redislock.Hooks{}, err
	}
	return redislock.Hooks{
		Obtain:  r.obtain,
		HandOff: r.handOff,
		Renew:   r.renew,
		Lost:    r.lost,
		Release: r.release,
	}, nil
}

// A recorder turns events into measurements (and spans).
type recorder struct {
	keyAttr func(string) (attribute.KeyValue, bool) // nil: no key attribute
	tracer  trace.Tracer                            // nil: no spans

	obtainDuration  metric.Float64Histogram
	obtains         metric.Int64Counter
	holdDuration    metric.Float64Histogram
	renewals        metric.Int64Counter
	renewalDuration metric.Float64Histogram
	locksHeld       metric.Int64UpDownCounter
	leasesLost      metric.Int64Counter
	handoffs        metric.Int64Counter

	// Attributes made once, so that an event allocates nothing (without
	// a key attribute). Read-only after newRecorder.
	outcomes map[redislock.Outcome]attrs
	renewed  map[renewalKind]attrs
	local    [2]attrs // by HandOffEvent.Local: [0] false, [1] true
	none     attrs
}

type renewalKind struct {
	outcome redislock.Outcome
	hedge   bool
}

// attrs is an attribute set with the options that record it, made once:
// an option made per call would cost allocations.
type attrs struct {
	set    attribute.Set
	add    []metric.AddOption
	record []metric.RecordOption
}

func newAttrs(kvs ...attribute.KeyValue) attrs {
	set := attribute.NewSet(kvs...)
	opt := metric.WithAttributeSet(set)
	return attrs{set: set, add: []metric.AddOption{opt}, record: []metric.RecordOption{opt}}
}

func newRecorder(c config) (*recorder, error) {
	m := c.mp.Meter(ScopeName)
	r := &recorder{keyAttr: c.keyAttr, outcomes: map[redislock.Outcome]attrs{}, renewed: map[renewalKind]attrs{}, none: newAttrs()}
	if c.spans {
		tp := c.tp
		if tp == nil {
			tp = otel.GetTracerProvider()
		}
		r.tracer = tp.Tracer(ScopeName)
	}
	for _, o := range []redislock.Outcome{redislock.OutcomeAcquired, redislock.OutcomeNotObtained, redislock.OutcomeReleased,
		redislock.OutcomeNotHeld, redislock.OutcomeBackground, redislock.OutcomeError} {
		r.outcomes[o] = newAttrs(AttrOutcome.String(string(o)))
	}
	for _, o := range []redislock.Outcome{redislock.OutcomeRenewed, redislock.OutcomeSuperseded, redislock.OutcomeLost, redislock.OutcomeError} {
		for _, hedge := range []bool{false, true} {
			r.renewed[renewalKind{o, hedge}] = newAttrs(AttrOutcome.String(string(o)), AttrHedge.Bool(hedge))
		}
	}
	r.local = [2]attrs{newAttrs(AttrLocal.Bool(false)), newAttrs(AttrLocal.Bool(true))}

	var errs [8]error
	r.obtainDuration, errs[0] = m.Float64Histogram("redislock.obtain.duration", metric.WithUnit("s"),
		metric.WithDescription("Time an Obtain, TryObtain or WithLock took to acquire the lock or give up: the wait for the lock."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	r.obtains, errs[1] = m.Int64Counter("redislock.obtains", metric.WithUnit("{obtain}"),
		metric.WithDescription("Obtain, TryObtain and WithLock calls, by outcome."))
	r.holdDuration, errs[2] = m.Float64Histogram("redislock.hold.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from an acquisition to its release, by the release's outcome."),
		metric.WithExplicitBucketBoundaries(holdBuckets...))
	r.renewals, errs[3] = m.Int64Counter("redislock.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Renewals of kept leases (KeepAlive, WithLock), by outcome."))
	r.renewalDuration, errs[4] = m.Float64Histogram("redislock.renewal.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from sending a renewal to its outcome."),
		metric.WithExplicitBucketBoundaries(latencyBuckets...))
	r.locksHeld, errs[5] = m.Int64UpDownCounter("redislock.locks.held", metric.WithUnit("{lock}"),
		metric.WithDescription("Acquisitions not yet released (lost ones count until their Release)."))
	r.leasesLost, errs[6] = m.Int64Counter("redislock.leases.lost", metric.WithUnit("{lease}"),
		metric.WithDescription("Acquisitions found lost: the key gone or another owner's, or no renewal answered in time."))
	r.handoffs, errs[7] = m.Int64Counter("redislock.handoffs", metric.WithUnit("{handoff}"),
		metric.WithDescription("Waiters a Release handed the key to directly."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, fmt.Errorf("otelredislock: %w", err)
	}
	return r, nil
}

// with returns a with the attribute of key added, when WithKeyAttribute
// gives one.
func (r *recorder) with(a attrs, key string) attrs {
	if r.keyAttr == nil {
		return a
	}
	kv, ok := r.keyAttr(key)
	if !ok {
		return a
	}
	return newAttrs(append(a.set.ToSlice(), kv)...)
}

func (r *recorder) outcome(o redislock.Outcome) attrs {
	if a, ok := r.outcomes[o]; ok {
		return a
	}
	return newAttrs(AttrOutcome.String(string(o)))
}

func (r *recorder) obtain(ctx context.Context, e redislock.ObtainEvent) {
	a := r.with(r.outcome(e.Outcome), e.Key)
	r.obtainDuration.Record(ctx, e.Wait.Seconds(), a.record...)
	r.obtains.Add(ctx, 1, a.add...)
	if e.Outcome == redislock.OutcomeAcquired && !e.Joined {
		r.locksHeld.Add(ctx, 1, r.with(r.none, e.Key).add...)
	}
	if r.tracer != nil {
		r.obtainSpan(ctx, e)
	}
}

// obtainSpan makes the span of the Obtain e reports, which has just
// returned.
func (r *recorder) obtainSpan(ctx context.Context, e redislock.ObtainEvent) {
	start, end := e.Start, e.Start.Add(e.Wait) // not when this hook runs: another may have run first
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, AttrKey.String(e.Key), AttrOutcome.String(string(e.Outcome)), AttrAttempts.Int(e.Attempts))
	if e.Fence != 0 {
		attrs = append(attrs, AttrFence.Int64(e.Fence))
	}
	if e.Joined {
		attrs = append(attrs, AttrJoined.Bool(true))
	}
	_, span := r.tracer.Start(ctx, "redislock.obtain", trace.WithTimestamp(start),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	if e.Err != nil {
		span.RecordError(e.Err, trace.WithTimestamp(end))
		if e.Outcome == redislock.OutcomeError {
			span.SetStatus(codes.Error, e.Err.Error())
		}
	}
	span.End(trace.WithTimestamp(end))
}

func (r *recorder) handOff(ctx context.Context, e redislock.HandOffEvent) {
	a := r.local[0]
	if e.Local {
		a = r.local[1]
	}
	r.handoffs.Add(ctx, int64(e.To), r.with(a, e.Key).add...)
}

func (r *recorder) renew(ctx context.Context, e redislock.RenewEvent) {
	a, ok := r.renewed[renewalKind{e.Outcome, e.Hedge}]
	if !ok {
		a = newAttrs(AttrOutcome.String(string(e.Outcome)), AttrHedge.Bool(e.Hedge))
	}
	a = r.with(a, e.Key)
	r.renewals.Add(ctx, 1, a.add...)
	r.renewalDuration.Record(ctx, e.Latency.Seconds(), a.record...)
}

func (r *recorder) lost(ctx context.Context, e redislock.LostEvent) {
	r.leasesLost.Add(ctx, 1, r.with(r.none, e.Key).add...)
	if r.tracer == nil {
		return
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		attrs := []attribute.KeyValue{AttrKey.String(e.Key), AttrHeld.Float64(e.Held.Seconds())}
		if e.Err != nil {
			attrs = append(attrs, attribute.String("error.message", e.Err.Error()))
		}
		span.AddEvent("redislock.lost", trace.WithAttributes(attrs...))
	}
}

func (r *recorder) release(ctx context.Context, e redislock.ReleaseEvent) {
	r.holdDuration.Record(ctx, e.Held.Seconds(), r.with(r.outcome(e.Outcome), e.Key).record...)
	switch e.Outcome {
	case redislock.OutcomeReleased, redislock.OutcomeNotHeld, redislock.OutcomeBackground:
		// The acquisition is over. After an error it is not: Release
		// may be called again.
		r.locksHeld.Add(ctx, -1, r.with(r.none, e.Key).add...)
	}
}
