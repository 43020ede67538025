package main

import (
	"fmt"
	"strings"
	"time"
)

// mkSummary is one many-keys configuration over the repetitions: medians
// of the rates, latencies and costs, the most keys left, totals of the
// counts. Rates and costs are per successful cycle.
type mkSummary struct {
	perSec, perSecSpread   float64 // cycles per second; (max-min)/median
	cpuPerCycle, cpuSpread float64 // redis-server CPU seconds per cycle; (max-min)/median
	clientPerCycle         float64 // the bench process's CPU seconds per cycle (NaN: unknown)
	p50, p99               time.Duration
	lockPerCycle           float64 // commands the lock client sent
	writesPerCycle         float64 // the lock client's writes (see sentCounter)
	srvPerCycle            float64 // commandstats calls
	left, leftLater        int64   // keys left: the most over the repetitions
	others                 float64 // share of a core other programs used (NaN: unknown)

	cycles, notObtained, failed int
	mix                         map[string]float64 // pooled commandstats calls per cycle by command
	errors                      []string
}

// summarizeMK takes the medians, maxima and totals of one many-keys
// configuration's runs.
func summarizeMK(ss []mkSample) mkSummary {
	rate := func(s mkSample) float64 { return float64(s.inWindow) / s.window.Seconds() }
	cpu := func(s mkSample) float64 { return perAcq(s.cpu, s.cycles) }
	perCycle := func(count func(mkSample) int64) func(mkSample) float64 {
		return func(s mkSample) float64 { return perAcq(float64(count(s)), s.cycles) }
	}
	sm := mkSummary{
		perSec:         median(ss, rate),
		cpuPerCycle:    median(ss, cpu),
		clientPerCycle: median(ss, func(s mkSample) float64 { return perAcq(s.clientCPU, s.cycles) }),
		p50:            median(ss, func(s mkSample) time.Duration { return s.p50 }),
		p99:            median(ss, func(s mkSample) time.Duration { return s.p99 }),
		lockPerCycle:   median(ss, perCycle(func(s mkSample) int64 { return s.lockCmds })),
		writesPerCycle: median(ss, perCycle(func(s mkSample) int64 { return s.writes })),
		srvPerCycle:    median(ss, perCycle(func(s mkSample) int64 { return sumCalls(s.srvCmds) })),
		others:         median(ss, func(s mkSample) float64 { return s.others }),
	}
	sm.perSecSpread = spread(ss, sm.perSec, rate)
	sm.cpuSpread = spread(ss, sm.cpuPerCycle, cpu)
	sm.addCounts(ss)
	return sm
}

// addCounts totals the counts of the samples, keeps the most keys left and
// pools their command mix.
func (sm *mkSummary) addCounts(ss []mkSample) {
	calls := make(map[string]int64)
	for _, s := range ss {
		sm.cycles += s.cycles
		sm.notObtained += s.notObtained
		sm.failed += s.failed
		sm.left, sm.leftLater = max(sm.left, s.left), max(sm.leftLater, s.leftLater)
		addCalls(calls, s.srvCmds)
		for _, e := range s.errors {
			sm.errors = keepError(sm.errors, e, 5)
		}
	}
	sm.mix = mixOf(calls, sm.cycles)
}

// writeManyKeys writes the many-keys section: its table, the ratios of ours
// to the best peers and notes per configuration.
func writeManyKeys(b *strings.Builder, f flags, res *results) {
	if len(res.mkCfgs) == 0 {
		return
	}
	sums := make([]mkSummary, len(res.mkCfgs))
	for i := range res.mkCfgs {
		sums[i] = summarizeMK(res.mk[i])
	}
	fmt.Fprintf(b, "\n### %s: %d goroutines, each taking and releasing the lock on a random key out of %d\n\n", manyKeysSetup, f.mkWorkers, f.mkKeys)
	fmt.Fprintf(b, "Each run %v; lease %v; a cycle is given up after %v. plain: a *redis.Client, default options; auto: its AutoPipeliner (client.AutoPipeline(), default options).\n\n",
		f.duration, leaseTTL, f.bound)
	writeMKImpls(b, res.mkCfgs)
	writeMKTable(b, f.repeat > 1, res.mkCfgs, sums)
	writeMKRatios(b, res.mkCfgs, sums)
	writeMKNotes(b, res.mkCfgs, sums)
}

// writeMKImpls says what each implementation in cfgs does.
func writeMKImpls(b *strings.Builder, cfgs []mkConfig) {
	seen := make(map[string]bool)
	for _, c := range cfgs {
		if !seen[c.impl.name] {
			seen[c.impl.name] = true
			fmt.Fprintf(b, "- %s: %s\n", c.impl.name, c.impl.desc)
		}
	}
	b.WriteString("\n")
}

// writeMKTable writes the many-keys table.
func writeMKTable(b *strings.Builder, spreads bool, cfgs []mkConfig, sums []mkSummary) {
	table := [][]string{{"config", spreadHead("cycles/s", spreads), "÷ floor", "cycle p50/p99 µs", spreadHead("srv CPU µs/cycle", spreads), "client CPU µs/cycle", "lock cmds/cycle", "writes/cycle",
		"srv cmds/cycle", "keys left / 1 s later", "not obtained", "errors"}}
	for i, c := range cfgs {
		sm, floor := sums[i], floorRate(cfgs, sums, c.auto)
		table = append(table, []string{
			c.name(),
			withSpread(fmt.Sprintf("%.0f", sm.perSec), sm.perSecSpread, spreads),
			ratio(sm.perSec, floor),
			fmt.Sprintf("%s / %s", us(sm.p50.Seconds()), us(sm.p99.Seconds())),
			withSpread(us(sm.cpuPerCycle), sm.cpuSpread, spreads),
			us(sm.clientPerCycle),
			fmt.Sprintf("%.2f", sm.lockPerCycle),
			fmt.Sprintf("%.2f", sm.writesPerCycle),
			fmt.Sprintf("%.2f", sm.srvPerCycle),
			fmt.Sprintf("%d / %d", sm.left, sm.leftLater),
			fmt.Sprint(sm.notObtained),
			fmt.Sprint(sm.failed),
		})
	}
	writeTable(b, table)
}

// floorRate returns the cycles per second of the floor on the same client
// kind, 0 if it was not run.
func floorRate(cfgs []mkConfig, sums []mkSummary, auto bool) float64 {
	for i, c := range cfgs {
		if c.impl.name == "floor" && c.auto == auto {
			return sums[i].perSec
		}
	}
	return 0
}

// writeMKRatios writes, for each of our many-keys configurations and each
// client kind, its cycles per second, server CPU per cycle and p99 divided
// by those of the best peer on that kind of client.
func writeMKRatios(b *strings.Builder, cfgs []mkConfig, sums []mkSummary) {
	table := [][]string{{"ours", "best peer", "cycles/s", "srv CPU/cycle", "p99"}}
	for i, c := range cfgs {
		if !c.ours() {
			continue
		}
		for _, auto := range []bool{false, true} {
			best := bestMKPeer(cfgs, sums, auto)
			if best < 0 {
				continue
			}
			ours, peer := sums[i], sums[best]
			table = append(table, []string{c.name(), cfgs[best].name(), ratio(ours.perSec, peer.perSec),
				ratio(ours.cpuPerCycle, peer.cpuPerCycle), ratio(ours.p99.Seconds(), peer.p99.Seconds())})
		}
	}
	if len(table) == 1 {
		return
	}
	b.WriteString("\n#### many-keys: ours ÷ best peer\n\n")
	b.WriteString("Best peer: the peer configuration (not ours, not the floor, not " + nativeName + ") with the most cycles/s on that kind of client. " +
		"cycles/s: above 1 is better. Server CPU per cycle and p99: below 1 is better.\n\n")
	writeTable(b, table)
}

// bestMKPeer returns the index of the peer many-keys configuration with the
// most cycles per second on an AutoPipeliner (auto) or a plain client, or -1
// if none was run.
func bestMKPeer(cfgs []mkConfig, sums []mkSummary, auto bool) int {
	best := -1
	for i, c := range cfgs {
		if c.peer() && c.auto == auto && (best < 0 || sums[i].perSec > sums[best].perSec) {
			best = i
		}
	}
	return best
}

// writeMKNotes writes, per many-keys configuration, its cycles, the other
// programs' load, the server's command mix and the errors seen.
func writeMKNotes(b *strings.Builder, cfgs []mkConfig, sums []mkSummary) {
	b.WriteString("\n#### many-keys notes\n\n")
	b.WriteString("Per configuration: successful cycles (all repetitions), the share of a core other programs used while the workers ran (median), " +
		"and commandstats calls per cycle (Lua-internal calls included).\n\n")
	for i, c := range cfgs {
		sm := sums[i]
		fmt.Fprintf(b, "- **%s**: %d cycles, others' CPU %s; %s.%s\n",
			c.name(), sm.cycles, percent(max(sm.others, 0)), formatMix(sm.mix), errorsSeen(sm.errors))
	}
}
