package main

import (
	"context"
	"fmt"
	"maps"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// renderReport formats the results as markdown: a header, the uncontended
// cycles, one table per setup, the ratios of ours to the best peer and notes
// per configuration.
func renderReport(ctx context.Context, f flags, admin *redis.Client, owned bool, res *results) string {
	var b strings.Builder
	writeHeader(ctx, &b, f, admin, owned, res.setups)
	writeSolo(&b, res)
	sums := make(map[string][]summary)
	for _, s := range res.setups {
		sums[s.name] = make([]summary, len(res.cfgs))
		for i := range res.cfgs {
			sums[s.name][i] = summarize(res.runs[s.name][i])
		}
		writeSetup(&b, f, s, res, sums[s.name])
	}
	writeRatios(&b, res, sums)
	writeNotes(&b, res, sums)
	writeManyKeys(&b, f, res)
	if res.skipped != "" {
		b.WriteString("\n" + res.skipped + "\n")
	}
	if !owned {
		b.WriteString("\nThe Redis server was given with -redis: its CPU and the commands of other clients in the same windows are counted too.\n")
	}
	return b.String()
}

// writeHeader writes the title, the versions and what a contended run and
// a run of a set setup do, if any ran.
func writeHeader(ctx context.Context, b *strings.Builder, f flags, admin *redis.Client, owned bool, setups []setup) {
	contended := slices.ContainsFunc(setups, func(s setup) bool { return s.set == nil })
	sets := slices.ContainsFunc(setups, func(s setup) bool { return s.set != nil })
	fmt.Fprintf(b, "## redislock benchmark\n\n")
	fmt.Fprintf(b, "%s; %s; %s (%s); %d CPUs, %s.\n",
		strings.Join(moduleVersions(), ", "), runtime.Version(), serverVersion(ctx, admin),
		map[bool]string{true: "started by the harness", false: "given by -redis"}[owned], runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH)
	if contended {
		fmt.Fprintf(b, "Each contended run: workers fight for one lock key for %v; critical section = GET counter, GET check, [sleep %v], SET counter n+1, SET check n+1 on a data client of its own; lease %v; an acquisition is given up after %v.\n",
			f.duration, f.cs, leaseTTL, f.bound)
	}
	if sets {
		fmt.Fprintf(b, "Each run of a set setup lasts %v: every cycle a worker locks a set of keys as one lock (ours: Locker.ObtainMulti, default options; bsm: Client.ObtainMulti with the configuration's retry strategy; redsync has none), then, on a data client of its own, GETs counter:k and check:k of each key k in one pipeline and SETs both to n+1 in another; lease %v; an acquisition is given up after %v.\n",
			f.duration, leaseTTL, f.bound)
	}
	if f.repeat > 1 {
		fmt.Fprintf(b, "Every run repeated %d times: medians, spread = (max - min) / median; counts are totals.\n", f.repeat)
	}
	b.WriteString("See README.md for the columns.\n")
}

// writeSolo writes the table of the uncontended cycles, which also says
// what each configuration is.
func writeSolo(b *strings.Builder, res *results) {
	if len(res.cfgs) == 0 {
		return
	}
	b.WriteString("\n### Uncontended\n\n")
	table := [][]string{{"impl", "solo µs", "allocs/cycle", "what"}}
	for i, c := range res.cfgs {
		table = append(table, []string{c.name, fmt.Sprintf("%.0f", float64(res.solo[i].perCycle)/float64(time.Microsecond)),
			fmt.Sprintf("%.1f", res.solo[i].allocs), c.desc})
	}
	writeTable(b, table)
}

// writeSetup writes a setup's heading, its critical section alone and its
// table.
func writeSetup(b *strings.Builder, f flags, s setup, res *results, sums []summary) {
	a := summarizeAlone(res.alone[s.name])
	fmt.Fprintf(b, "\n### %s: %s\n\n", s.name, s.describe())
	if s.set != nil {
		fmt.Fprintf(b, "Critical sections alone (%d goroutines drawing sets as the workers do, no lock): %.0f CS/s, redis-server CPU %s µs per CS.", s.procs*s.workers, a.perSec, us(a.cpuPerCS))
	} else {
		fmt.Fprintf(b, "Critical section alone (one goroutine, no lock): %.0f CS/s, redis-server CPU %s µs per CS.", a.perSec, us(a.cpuPerCS))
	}
	if med, most, ok := res.othersLoad(s); ok {
		fmt.Fprintf(b, " Other programs on the machine used %s of a core during these runs (median; at most %s).", percent(max(med, 0)), percent(max(most, 0)))
	}
	b.WriteString("\n\n")
	spreads := f.repeat > 1
	if s.set != nil {
		writeSetTable(b, s, res.cfgs, sums, a, spreads)
		return
	}
	table := [][]string{{"impl", spreadHead("CS/s", spreads), "÷ alone", "lock cmds/acq", "srv cmds/acq", "srv CPU µs/acq", spreadHead("srv CPU µs/acq raw", spreads),
		"fair", "hand-off p50/p99 ms", "wait p99/max ms", "timeouts", "gave up", "lost"}}
	for i, c := range res.cfgs {
		table = append(table, setupRow(c, sums[i], a, spreads))
	}
	writeTable(b, table)
}

// writeSetTable writes the table of a set setup: as a contended setup's,
// with the median wait and the p99 wait of each set size in place of the
// hand-offs, and without the configurations that did not run in it.
func writeSetTable(b *strings.Builder, s setup, cfgs []config, sums []summary, a aloneSummary, spreads bool) {
	var sizes []string
	for n := s.set.min; n <= s.set.max; n++ {
		sizes = append(sizes, fmt.Sprint(n))
	}
	table := [][]string{{"impl", spreadHead("CS/s", spreads), "÷ alone", "lock cmds/acq", "srv cmds/acq", "srv CPU µs/acq", spreadHead("srv CPU µs/acq raw", spreads),
		"fair", "wait p50/p99/max ms", "wait p99 ms by keys " + strings.Join(sizes, "/"), "timeouts", "gave up", "lost"}}
	for i, c := range cfgs {
		sm := sums[i]
		if sm.runs == 0 {
			continue
		}
		var bySize []string
		for n := s.set.min; n <= s.set.max; n++ {
			if v, ok := sm.waitBySize[n]; ok {
				bySize = append(bySize, ms(v))
			} else {
				bySize = append(bySize, "-")
			}
		}
		table = append(table, []string{
			c.name,
			withSpread(fmt.Sprintf("%.0f", sm.perSec), sm.perSecSpread, spreads),
			ratio(sm.perSec, a.perSec),
			fmt.Sprintf("%.2f", sm.lockPerAcq),
			fmt.Sprintf("%.2f", sm.srvPerAcq),
			us(sm.cpuPerAcq - a.cpuPerCS),
			withSpread(us(sm.cpuPerAcq), sm.cpuSpread, spreads),
			fmt.Sprintf("%.2f", sm.fairness),
			fmt.Sprintf("%s / %s / %s", ms(sm.waitP50), ms(sm.waitP99), ms(sm.waitMax)),
			strings.Join(bySize, " / "),
			fmt.Sprint(sm.timeouts),
			fmt.Sprint(sm.gaveUp),
			fmt.Sprint(sm.lost),
		})
	}
	writeTable(b, table)
}

// setupRow is a configuration's row in a setup's table (see writeSetup).
func setupRow(c config, sm summary, a aloneSummary, spreads bool) []string {
	return []string{
		c.name,
		withSpread(fmt.Sprintf("%.0f", sm.perSec), sm.perSecSpread, spreads),
		ratio(sm.perSec, a.perSec),
		fmt.Sprintf("%.2f", sm.lockPerAcq),
		fmt.Sprintf("%.2f", sm.srvPerAcq),
		us(sm.cpuPerAcq - a.cpuPerCS),
		withSpread(us(sm.cpuPerAcq), sm.cpuSpread, spreads),
		fmt.Sprintf("%.2f", sm.fairness),
		fmt.Sprintf("%s / %s", ms(sm.handoffP50), ms(sm.handoffP99)),
		fmt.Sprintf("%s / %s", ms(sm.waitP99), ms(sm.waitMax)),
		fmt.Sprint(sm.timeouts),
		fmt.Sprint(sm.gaveUp),
		fmt.Sprint(sm.lost),
	}
}

// spreadHead is a column's heading, saying that the column carries spreads
// if it does.
func spreadHead(head string, spreads bool) string {
	if !spreads {
		return head
	}
	return head + " (spread)"
}

// withSpread appends the spread in brackets to v, if spreads are shown.
func withSpread(v string, spread float64, spreads bool) string {
	if !spreads {
		return v
	}
	return v + " (" + percent(spread) + ")"
}

// writeRatios writes, per setup, each of our configurations' throughput and
// server CPU per acquisition divided by the best peer's.
func writeRatios(b *strings.Builder, res *results, sums map[string][]summary) {
	var ours []int
	for i, c := range res.cfgs {
		if c.ours() && res.ranAny(c) {
			ours = append(ours, i)
		}
	}
	if len(ours) == 0 {
		return
	}
	head := []string{"setup", "best peer"}
	for _, i := range ours {
		head = append(head, res.cfgs[i].name+" CS/s", res.cfgs[i].name+" srv CPU/acq")
	}
	table := [][]string{head}
	for _, s := range res.setups {
		ss, a := sums[s.name], summarizeAlone(res.alone[s.name])
		best := bestPeer(res.cfgs, ss)
		if best < 0 {
			continue // no peer ran in this setup
		}
		row := []string{s.name, res.cfgs[best].name}
		for _, i := range ours {
			if ss[i].runs == 0 {
				row = append(row, "-", "-")
				continue
			}
			row = append(row, ratio(ss[i].perSec, ss[best].perSec),
				fmt.Sprintf("%s (%s)", ratio(ss[i].cpuPerAcq-a.cpuPerCS, ss[best].cpuPerAcq-a.cpuPerCS), ratio(ss[i].cpuPerAcq, ss[best].cpuPerAcq)))
		}
		table = append(table, row)
	}
	if len(table) == 1 {
		return // no setup ran ours and a peer
	}
	b.WriteString("\n### Ratios: ours ÷ best peer\n\n")
	b.WriteString("Best peer: the peer configuration with the most CS/s in the setup. CS/s: above 1 is better. " +
		"Server CPU per acquisition, the lock's share (raw in brackets): below 1 is better.\n\n")
	writeTable(b, table)
}

// writeNotes writes, per configuration and setup, the acquisitions, the
// server's command mix and anything that went wrong.
func writeNotes(b *strings.Builder, res *results, sums map[string][]summary) {
	if len(res.setups) == 0 {
		return
	}
	b.WriteString("\n### Notes\n\nPer configuration and setup: acquisitions (all repetitions), the share re-acquired by the previous holder, hand-offs measured, " +
		"the share of a core other programs used during the run (median), " +
		"and commandstats calls per acquisition (Lua-internal calls included, the critical sections' GETs and SETs removed). " +
		"In the set setups, the mean keys per set in place of the re-acquisitions and hand-offs.\n\n")
	for i, c := range res.cfgs {
		if !res.ranAny(c) {
			continue
		}
		fmt.Fprintf(b, "- **%s**\n", c.name)
		for _, s := range res.setups {
			sm := sums[s.name][i]
			if sm.runs == 0 {
				continue
			}
			if s.set != nil {
				fmt.Fprintf(b, "  - %s: %d acquisitions, %.2f keys per set, others' CPU %s; %s.%s\n",
					s.name, sm.acquired, sm.keysPerAcq, percent(max(sm.others, 0)), formatMix(sm.mix), problems(sm))
				continue
			}
			fmt.Fprintf(b, "  - %s: %d acquisitions, %s re-acquired, %d hand-offs, others' CPU %s; %s.%s\n",
				s.name, sm.acquired, pct(sm.reacquired, sm.acquired), sm.handoffs, percent(max(sm.others, 0)), formatMix(sm.mix), problems(sm))
		}
	}
}

// problems describes what went wrong in a summary, if anything.
func problems(sm summary) string {
	var out string
	if sm.releaseErrs > 0 {
		out += fmt.Sprintf(" Release errors: %d.", sm.releaseErrs)
	}
	if sm.overlaps > 0 {
		out += fmt.Sprintf(" OVERLAPPING HOLDERS seen in timestamps: %d.", sm.overlaps)
	}
	if sm.torn > 0 {
		out += fmt.Sprintf(" TORN critical sections (counter and check out of step): %d.", sm.torn)
	}
	return out + errorsSeen(sm.errors)
}

// errorsSeen lists errors, sorted, as a sentence; "" for none.
func errorsSeen(errs []string) string {
	if len(errs) == 0 {
		return ""
	}
	errs = slices.Clone(errs)
	slices.Sort(errs)
	return fmt.Sprintf(" Errors seen: %q.", errs)
}

// writeTable writes a markdown table with padded columns.
func writeTable(b *strings.Builder, rows [][]string) {
	widths := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], len([]rune(c)))
		}
	}
	line := func(cells []string) {
		b.WriteString("|")
		for i, c := range cells {
			fmt.Fprintf(b, " %s%s |", c, strings.Repeat(" ", widths[i]-len([]rune(c))))
		}
		b.WriteString("\n")
	}
	line(rows[0])
	sep := make([]string, len(widths))
	for i, w := range widths {
		sep[i] = strings.Repeat("-", w)
	}
	line(sep)
	for _, r := range rows[1:] {
		line(r)
	}
}

// pct formats n out of of as a whole percentage, "-" for none.
func pct(n, of int) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(n)/float64(of))
}

// ratio formats a/b, "-" if b is not positive.
func ratio(a, b float64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// percent formats a fraction as a whole percentage, "-" if unknown (NaN).
func percent(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*x)
}

// us formats seconds as microseconds, "-" if unknown (NaN).
func us(sec float64) string {
	if math.IsNaN(sec) {
		return "-"
	}
	return fmt.Sprintf("%.1f", sec*1e6)
}

// ms formats a duration in milliseconds with about 3 significant digits.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// formatMix lists a command mix, most frequent first.
func formatMix(mix map[string]float64) string {
	if len(mix) == 0 {
		return "-"
	}
	cmds := slices.Sorted(maps.Keys(mix))
	slices.SortStableFunc(cmds, func(a, b string) int {
		switch {
		case mix[a] > mix[b]:
			return -1
		case mix[a] < mix[b]:
			return 1
		}
		return 0
	})
	parts := make([]string, len(cmds))
	for i, c := range cmds {
		parts[i] = fmt.Sprintf("%s %.2f", c, mix[c])
	}
	return strings.Join(parts, ", ")
}

// moduleVersions names the versions of the compared libraries this binary
// was built with.
func moduleVersions() []string {
	want := []string{"github.com/bsm/redislock", "github.com/go-redsync/redsync/v4", "github.com/redis/go-redis/v9"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	var out []string
	for _, d := range info.Deps {
		if slices.Contains(want, d.Path) {
			out = append(out, d.Path+" "+d.Version)
		}
	}
	return out
}

// serverVersion names the server and its version: "redis-server 7.0.15",
// or "valkey-server 9.1.2" (Valkey's redis_version is a fixed 7.2.4; its
// own is valkey_version), "?" for what is unknown.
func serverVersion(ctx context.Context, rdb *redis.Client) string {
	name, version := "redis-server", "?"
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return name + " " + version
	}
	fields := make(map[string]string)
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	if v, ok := fields["redis_version"]; ok {
		version = v
	}
	if v, ok := fields["valkey_version"]; ok && fields["server_name"] == "valkey" {
		name, version = "valkey-server", v
	}
	return name + " " + version
}
