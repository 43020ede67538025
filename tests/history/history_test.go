package history

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

var (
	seedFlag   = flag.Uint64("history.seed", 20251125, "the seed of the run (the nemesis's choices and the workers')")
	longFlag   = flag.Bool("history.long", false, "TestHistory_Long: run every deployment and fault for -history.duration")
	duration   = flag.Duration("history.duration", 12*time.Minute, "TestHistory_Long: how long to run at least")
	minOps     = flag.Int("history.ops", 100_000, "TestHistory_Long: how many operations to check at least")
	reportFlag = flag.String("history.report", "", "write the run's table and details to this file")
	eventsFlag = flag.String("history.events", "", "save every episode's recorded history in this directory")
	recheck    = flag.String("history.recheck", "", "TestHistory_Recheck: check the histories saved in these files (a glob) again")
	onlyFlag   = flag.String("history.only", "", "TestHistory_Long: run only the episodes whose \"deployment/fault+fault\" matches this regular expression")
)

// TestMain runs a worker process when $REDISLOCK_HISTORY_CHILD is set, and
// otherwise the tests, under goleak: no goroutine outlives them. Every
// redis-server the tests start dies with the test process (see
// withParentDeathSignal).
func TestMain(m *testing.M) {
	if os.Getenv(ChildEnv) != "" {
		os.Exit(ChildMain())
	}
	flag.Parse()
	EventsDir = *eventsFlag
	undo := withParentDeathSignal()
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		undo()
		os.Exit(code)
	}))
}

// withParentDeathSignal makes the redis-server processes that
// internal/redistest starts die with the test process, also when it is
// killed and cannot run its cleanups: it points $REDIS_SERVER_BIN at a
// script that execs redis-server with SIGKILL as its parent-death signal
// (setpriv --pdeathsig, util-linux). The script execs, so the server keeps
// the pid that redistest signals. It returns a function that removes the
// script. Without setpriv, or with $REDIS_SERVER_BIN already set, it does
// nothing.
func withParentDeathSignal() func() {
	if os.Getenv("REDIS_SERVER_BIN") != "" {
		return func() {}
	}
	setpriv, err1 := exec.LookPath("setpriv")
	server, err2 := exec.LookPath("redis-server")
	if err1 != nil || err2 != nil {
		return func() {}
	}
	dir, err := os.MkdirTemp("", "redislock-history-bin-")
	if err != nil {
		return func() {}
	}
	script := filepath.Join(dir, "redis-server")
	body := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL %s \"$@\"\n", setpriv, server)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		_ = os.RemoveAll(dir)
		return func() {}
	}
	_ = os.Setenv("REDIS_SERVER_BIN", script)
	return func() { _ = os.RemoveAll(dir) }
}

// The short run: a fixed seed, every lock kind, the deployments and faults
// below, in under a minute. It specifies that no history shows an anomaly:
// every violation of exclusion, of the lost-lock signal, of fence order, of
// the fenced register's linearizability, of fencing or of liveness that it
// records is the expected consequence of a documented limit (and then
// fencing still holds), and the recording itself is sound (every worker
// exited cleanly, without leaked goroutines or data races).
func TestHistory_Short(t *testing.T) {
	if *longFlag {
		t.Skip("-history.long: TestHistory_Long runs instead")
	}
	seed := *seedFlag
	t.Logf("seed %d (reproduce: go test -race -run '^TestHistory_Short$' ./history -args -history.seed=%d)", seed, seed)
	started := time.Now()
	resource := StartResource(t)
	var single, quorum, sentinel, cluster *Deployment
	parallel(t,
		func() { single = StartSingle(t) },
		func() { quorum = StartQuorum(t) },
		func() { sentinel = StartSentinel(t) },
		func() { cluster = StartCluster(t) },
	)
	margin := 100 * time.Millisecond
	ep := func(d *Deployment, window time.Duration, workers int, faults ...string) Episode {
		return Episode{Deploy: d, Window: window, Calm: d.Bound + time.Second, Procs: 3, Workers: workers, Margin: margin, Faults: faults}
	}
	// Two lanes run at once: the Sentinel failover mostly waits for the
	// deployment to settle again.
	lanes := [][]Episode{{
		ep(single, 9*time.Second, 3, FaultFreeze, FaultHold, FaultReset, FaultLatency, FaultScriptFlush, FaultClientKill,
			FaultRestartAOF, FaultPauseClient),
		ep(single, time.Second, 3, FaultRestartEmpty),
		ep(cluster, time.Second, 2, FaultKillMaster),
	}, {
		ep(quorum, 4*time.Second, 2, FaultRestartAOF, FaultFreeze, FaultPauseClient),
		ep(sentinel, time.Second, 2, FaultFailover),
	}}
	report := runLanes(t, seed, resource, lanes)
	report.Wall = time.Since(started)
	finish(t, report)
}

// The harness sees anomalies: when another client deletes the lock keys
// behind the holders' backs (no fault the library claims to survive), the
// checkers report exclusion anomalies, and fencing still holds (fences
// keep increasing, the resource stays a linearizable fenced register). A
// checker that reported nothing here would be blind.
func TestHistory_SeesAnomalies(t *testing.T) {
	if *longFlag {
		t.Skip("-history.long: TestHistory_Long runs instead")
	}
	resource := StartResource(t)
	single := StartSingle(t)
	r := RunEpisode(t, Episode{Deploy: single, Window: time.Second, Calm: time.Second, Procs: 3, Workers: 3,
		Margin: 100 * time.Millisecond, Faults: []string{FaultRogueDelete}}, 0, *seedFlag, resource)
	var buf bytes.Buffer
	rep := &Report{Seed: *seedFlag, Results: []*Result{r}}
	rep.WriteTable(&buf)
	rep.WriteDetails(&buf, 2)
	t.Log("\n" + buf.String())
	if a, _ := r.Count(PropExclusion); a == 0 {
		t.Errorf("no exclusion anomaly reported while the lock keys were deleted")
	}
	for _, p := range []string{PropFenceOrder, PropRegister, PropFencing} {
		if a, e := r.Count(p); a+e > 0 {
			t.Errorf("%s: %d anomalies, %d expected: fencing must hold", p, a, e)
		}
	}
	for _, p := range r.Problems {
		t.Errorf("recording problem: %s", p)
	}
}

// The long run: every deployment and fault, one fault kind per episode,
// round and round until -history.duration has passed and -history.ops
// operations were checked. It specifies what TestHistory_Short does, over
// far more operations and faults.
//
//	go test -race -run '^TestHistory_Long$' -timeout 0 ./history -args -history.long -history.report /tmp/long.txt
func TestHistory_Long(t *testing.T) {
	if !*longFlag {
		t.Skip("the long run: -history.long")
	}
	seed := *seedFlag
	t.Logf("seed %d (reproduce: go test -race -run '^TestHistory_Long$' -timeout 0 ./history -args -history.long -history.seed=%d)", seed, seed)
	started := time.Now()
	resource := StartResource(t)
	var single, quorum, sentinel, cluster *Deployment
	parallel(t,
		func() { single = StartSingle(t) },
		func() { quorum = StartQuorum(t) },
		func() { sentinel = StartSentinel(t) },
		func() { cluster = StartCluster(t) },
	)
	margin := 100 * time.Millisecond
	ep := func(d *Deployment, window time.Duration, faults ...string) Episode {
		workers := 3
		if d == quorum {
			workers = 2
		}
		return Episode{Deploy: d, Window: window, Calm: d.Bound + 3*time.Second, Procs: 4, Workers: workers, Margin: margin, Faults: faults}
	}
	round := []Episode{
		ep(single, 10*time.Second, FaultFreeze),
		ep(single, 10*time.Second, FaultHold),
		ep(single, 10*time.Second, FaultReset),
		ep(single, 10*time.Second, FaultLatency),
		ep(single, 10*time.Second, FaultScriptFlush),
		ep(single, 10*time.Second, FaultClientKill),
		ep(single, 10*time.Second, FaultRestartAOF),
		ep(single, 10*time.Second, FaultPauseClient),
		ep(single, 4*time.Second, FaultRestartEmpty),
		ep(quorum, 10*time.Second, FaultRestartAOF),
		ep(quorum, 10*time.Second, FaultFreeze),
		ep(quorum, 10*time.Second, FaultRestartEmpty),
		ep(quorum, 10*time.Second, FaultPauseClient),
		ep(quorum, 10*time.Second, FaultScriptFlush, FaultClientKill),
		ep(single, 15*time.Second, FaultFreeze, FaultHold, FaultReset, FaultLatency, FaultScriptFlush, FaultClientKill,
			FaultRestartAOF, FaultPauseClient),
		ep(quorum, 15*time.Second, FaultRestartAOF, FaultFreeze, FaultPauseClient, FaultScriptFlush, FaultClientKill),
		ep(sentinel, time.Second, FaultFailover),
		ep(sentinel, time.Second, FaultKillPrimary),
		ep(sentinel, 10*time.Second, FaultPauseClient),
		ep(cluster, time.Second, FaultKillMaster),
		ep(cluster, time.Second, FaultShardMove),
		ep(cluster, 10*time.Second, FaultPauseClient),
		ep(cluster, 10*time.Second, FaultScriptFlush, FaultClientKill),
	}
	only, err := regexp.Compile(*onlyFlag)
	if err != nil {
		t.Fatalf("-history.only: %v", err)
	}
	round = slices.DeleteFunc(round, func(e Episode) bool { return !only.MatchString(e.Deploy.Name + "/" + strings.Join(e.Faults, "+")) })
	if len(round) == 0 {
		t.Fatalf("-history.only %q matches no episode", *onlyFlag)
	}
	report := &Report{Seed: seed, Started: started}
	for n := 0; time.Since(started) < *duration || report.Ops() < *minOps || n < len(round); n++ {
		e := round[n%len(round)]
		res := RunEpisode(t, e, n, seed, resource)
		report.Results = append(report.Results, res)
		a, _ := res.Count(PropExclusion)
		t.Logf("episode %d %s %s: %d operations, %d anomalies (%d exclusion); total %d operations, %v",
			n, e.Deploy.Name, strings.Join(e.Faults, "+"), res.History.Ops, len(res.Anomalies()), a, report.Ops(), time.Since(started).Round(time.Second))
		if t.Failed() {
			break
		}
	}
	report.Wall = time.Since(started)
	finish(t, report)
}

// Histories saved with -history.events check again the same: the checkers
// are a function of the recorded history.
//
//	go test -run '^TestHistory_Recheck$' -v ./history -args -history.recheck '/tmp/h/episode-*.json'
func TestHistory_Recheck(t *testing.T) {
	if *recheck == "" {
		t.Skip("-history.recheck GLOB")
	}
	files, err := filepath.Glob(*recheck)
	if err != nil || len(files) == 0 {
		t.Fatalf("-history.recheck %q: no files (%v)", *recheck, err)
	}
	slices.SortFunc(files, func(a, b string) int { // episode-<seed>-<n>.json in the order of n
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return strings.Compare(a, b)
	})
	r := &Report{Seed: *seedFlag}
	for _, f := range files {
		h, err := LoadEpisode(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		r.Results = append(r.Results, Check(h))
	}
	finish(t, r)
}

// runLanes runs the lanes at once, the episodes of each one after the
// other. Episodes are numbered in the order they are listed, lane by lane.
func runLanes(t *testing.T, seed uint64, resource string, lanes [][]Episode) *Report {
	report := &Report{Seed: seed, Started: time.Now()}
	results := make([][]*Result, len(lanes))
	var fns []func()
	n := 0
	for i, lane := range lanes {
		first := n
		n += len(lane)
		fns = append(fns, func() {
			for j, e := range lane {
				results[i] = append(results[i], RunEpisode(t, e, first+j, seed, resource))
				if t.Failed() {
					return
				}
			}
		})
	}
	parallel(t, fns...)
	for _, rs := range results {
		report.Results = append(report.Results, rs...)
	}
	return report
}

// finish prints the run's summary and table, writes the report file, and
// fails the test on any anomaly or recording problem.
func finish(t *testing.T, r *Report) {
	var buf bytes.Buffer
	r.WriteSummary(&buf)
	buf.WriteString("\n")
	r.WriteTable(&buf)
	t.Log("\n" + buf.String())
	var details bytes.Buffer
	r.WriteDetails(&details, 3)
	if *reportFlag != "" {
		if err := os.WriteFile(*reportFlag, append(buf.Bytes(), details.Bytes()...), 0o644); err != nil {
			t.Errorf("write the report: %v", err)
		}
	}
	anomalies, problems := r.Anomalies()
	if len(anomalies) > 0 || len(problems) > 0 || testing.Verbose() {
		t.Log("\n" + details.String())
	}
	for _, p := range problems {
		t.Errorf("recording problem: %s", p)
	}
	if len(anomalies) > 0 {
		t.Errorf("seed %d: %d anomalies (see above); reproduce with -args -history.seed=%d", r.Seed, len(anomalies), r.Seed)
	}
}

// parallel runs fns at once and waits for them; a t.Fatal in one ends the
// test once all have returned.
func parallel(t *testing.T, fns ...func()) {
	var wg sync.WaitGroup
	for _, fn := range fns {
		wg.Go(fn)
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}
