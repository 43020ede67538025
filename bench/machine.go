package main

import (
	"math"
	"time"
)

// cpuMark is a moment's CPU counters, to tell how busy the rest of the
// machine was during a run: the machine's busy time over all cores and this
// process's own (with its reaped children, such as the child processes of a
// multi-process run).
type cpuMark struct {
	at   time.Time
	busy time.Duration // all cores: user, nice, system, irq and softirq time
	own  time.Duration // this process and its reaped children: user + system
	ok   bool          // the counters could be read (Linux)
}

// markCPU reads the counters now.
func markCPU() cpuMark {
	m := cpuMark{at: time.Now()}
	m.busy, m.own, m.ok = readCPU()
	return m
}

// othersShare returns how much of one core the machine spent between a and
// b on anything but this process, its children and the redis-server, which
// used redisCPU seconds meanwhile: the load of other programs (and of the
// kernel on their behalf). NaN if unknown.
func othersShare(a, b cpuMark, redisCPU float64) float64 {
	wall := b.at.Sub(a.at).Seconds()
	if !a.ok || !b.ok || wall <= 0 {
		return math.NaN()
	}
	return ((b.busy - a.busy - (b.own - a.own)).Seconds() - redisCPU) / wall
}
