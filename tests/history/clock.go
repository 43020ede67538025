package history

import (
	"time"

	"golang.org/x/sys/unix"
)

// Now returns the host's CLOCK_MONOTONIC in nanoseconds. Every time in a
// history is taken with it, in the parent and in every worker process: on
// Linux that clock is one for the whole host (it counts from boot and is
// never set), so times taken in different processes compare directly. It
// is the clock Go's time package reads for its monotonic readings too.
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // CLOCK_MONOTONIC always exists on Linux
	}
	return ts.Nano()
}

// Mono converts t, a time with a monotonic reading (such as Lock.Until),
// to the Now clock: the distance from now to t on Go's monotonic clock,
// added to Now. The two readings are taken a few hundred nanoseconds apart;
// t is exact to that.
func Mono(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return Now() + int64(time.Until(t))
}

// ms formats a duration in nanoseconds as milliseconds with 3 decimals.
func ms(ns int64) string {
	return time.Duration(ns).Round(time.Microsecond).String()
}
