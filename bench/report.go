package main

import (
	"context"
	"fmt"
	"maps"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// renderReport formats the results as markdown: a header with the setup,
// the table, and notes per configuration.
func renderReport(ctx context.Context, f flags, admin *redis.Client, owned bool, rows []row) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## redislock benchmark\n\n")
	fmt.Fprintf(&b, "%s; %s; redis-server %s (%s); %d CPUs, %s.\n",
		strings.Join(moduleVersions(), ", "), runtime.Version(), redisVersion(ctx, admin),
		map[bool]string{true: "started by the harness", false: "given by -redis"}[owned], runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH)
	fmt.Fprintf(&b, "Contended runs: %v each, critical section = GET counter, sleep %v, SET counter+1; lease %v; an acquisition is given up after %v.\n",
		f.duration, f.cs, leaseTTL, f.bound)
	fmt.Fprintf(&b, "1p = %d goroutines in one process; %dp = %d processes x %d goroutines. Pairs a / b read 1p / %dp unless the header says otherwise. See README.md for the columns.\n\n",
		f.workers, f.procs, f.procs, f.procWorkers, f.procs)

	header := []string{"impl", "solo µs", "CS/s 1p", fmt.Sprintf("CS/s %dp", f.procs), "fair 1p/" + fmt.Sprint(f.procs) + "p",
		"hand-off p50/p99 ms 1p", fmt.Sprintf("hand-off p50/p99 ms %dp", f.procs), "wait p99/max ms 1p", fmt.Sprintf("wait p99/max ms %dp", f.procs),
		"cmds/acq srv", "cmds/acq sent", "timeouts", "gave up", "lost updates"}
	table := [][]string{header}
	for _, r := range rows {
		table = append(table, []string{
			r.cfg.name,
			fmt.Sprintf("%.0f", float64(r.solo)/float64(time.Microsecond)),
			fmt.Sprintf("%.0f", r.one.perSec),
			fmt.Sprintf("%.0f", r.multi.perSec),
			fmt.Sprintf("%.2f / %.2f", r.one.fairness, r.multi.fairness),
			fmt.Sprintf("%s / %s", ms(r.one.handoffP50), ms(r.one.handoffP99)),
			fmt.Sprintf("%s / %s", ms(r.multi.handoffP50), ms(r.multi.handoffP99)),
			fmt.Sprintf("%s / %s", ms(r.one.waitP99), ms(r.one.waitMax)),
			fmt.Sprintf("%s / %s", ms(r.multi.waitP99), ms(r.multi.waitMax)),
			fmt.Sprintf("%.2f", r.srvPerAcq),
			fmt.Sprintf("%.2f", r.sentPerAcq),
			fmt.Sprintf("%d / %d", r.one.timeouts, r.multi.timeouts),
			fmt.Sprintf("%d / %d", r.one.gaveUp, r.multi.gaveUp),
			fmt.Sprintf("%d / %d", r.lostOne, r.lostMulti),
		})
	}
	writeTable(&b, table)

	fmt.Fprintf(&b, "\nNotes per configuration (1p command mix is commandstats calls per acquisition, Lua-internal calls included, the harness's GET/SET removed):\n\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "- **%s**: %s. Acquisitions %d / %d, of which re-acquired by the previous holder %s / %s; hand-offs measured %d / %d; 1p mix: %s.",
			r.cfg.name, r.cfg.desc, r.one.acquired, r.multi.acquired, pct(r.one.reacquired, r.one.acquired), pct(r.multi.reacquired, r.multi.acquired),
			r.one.handoffs, r.multi.handoffs, formatMix(r.mix))
		if n := r.one.releaseErrs + r.multi.releaseErrs; n > 0 {
			fmt.Fprintf(&b, " Release errors: %d / %d.", r.one.releaseErrs, r.multi.releaseErrs)
		}
		if n := r.one.overlaps + r.multi.overlaps; n > 0 {
			fmt.Fprintf(&b, " OVERLAPPING HOLDERS seen in timestamps: %d / %d.", r.one.overlaps, r.multi.overlaps)
		}
		if errs := append(slices.Clone(r.one.errors), r.multi.errors...); len(errs) > 0 {
			slices.Sort(errs)
			fmt.Fprintf(&b, " Errors seen: %q.", slices.Compact(errs))
		}
		b.WriteString("\n")
	}
	if !owned {
		b.WriteString("\nThe Redis server was given with -redis: commands of other clients in the same window are counted too.\n")
	}
	return b.String()
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

func pct(n, of int) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(n)/float64(of))
}

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

func redisVersion(ctx context.Context, rdb *redis.Client) string {
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}
