package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// A Child is a worker process: the test binary run again with $ChildEnv.
type Child struct {
	Proc   int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	read   chan struct{} // closed when its standard output is read to the end

	mu     sync.Mutex
	events []Event
	bad    []string // lines that are not events
}

// StartChild starts a worker process with cfg. It dies with the test
// process (SIGKILL as the parent-death signal), and is killed (after a
// SIGCONT, should it be stopped) in t.Cleanup.
func StartChild(t testing.TB, cfg ChildConfig) *Child {
	t.Helper()
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := &Child{Proc: cfg.Proc, read: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = append(os.Environ(), ChildEnv+"="+string(js))
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	c.cmd.Stderr = &c.stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go c.readEvents(out)
	t.Cleanup(func() {
		c.signal(syscall.SIGCONT)
		_ = c.cmd.Process.Kill()
		<-c.read
		_ = c.cmd.Wait()
	})
	return c
}

// readEvents reads the child's events until its standard output closes.
func (c *Child) readEvents(out io.Reader) {
	defer close(c.read)
	r := bufio.NewReaderSize(out, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var e Event
			c.mu.Lock()
			if jerr := json.Unmarshal(line, &e); jerr != nil {
				c.bad = append(c.bad, string(line))
			} else {
				c.events = append(c.events, e)
			}
			c.mu.Unlock()
		}
		if err != nil {
			return
		}
	}
}

// signal sends sig to the child, if it still runs.
func (c *Child) signal(sig syscall.Signal) {
	if c.cmd.Process != nil {
		_ = c.cmd.Process.Signal(sig)
	}
}

// ready reports whether the child has started working.
func (c *Child) ready() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.events {
		if e.Type == EvReady {
			return true
		}
	}
	return false
}

// Stop tells the child to stop (its standard input closes), and waits for
// it to exit, at most timeout; then kills it. It returns the child's
// events and what went wrong with it.
func (c *Child) Stop(timeout time.Duration) ([]Event, []string) {
	_ = c.stdin.Close()
	var problems []string
	select {
	case <-c.read:
	case <-time.After(timeout):
		problems = append(problems, fmt.Sprintf("proc %d did not exit within %v: killed", c.Proc, timeout))
		_ = c.cmd.Process.Kill()
		<-c.read
	}
	if err := c.cmd.Wait(); err != nil {
		problems = append(problems, fmt.Sprintf("proc %d: %v", c.Proc, err))
	}
	if s := strings.TrimSpace(c.stderr.String()); s != "" {
		problems = append(problems, fmt.Sprintf("proc %d stderr:\n%s", c.Proc, s))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, b := range c.bad {
		problems = append(problems, fmt.Sprintf("proc %d wrote a line that is no event: %q", c.Proc, b))
	}
	exited := false
	for _, e := range c.events {
		if e.Type == EvExit {
			exited = true
			if e.Err != "" {
				problems = append(problems, fmt.Sprintf("proc %d: %s", c.Proc, e.Err))
			}
		}
	}
	if !exited {
		problems = append(problems, fmt.Sprintf("proc %d did not report its exit", c.Proc))
	}
	return c.events, problems
}

// An Episode is one stretch of a run: worker processes use the locks of
// one deployment while the nemesis injects faults of some kinds, then the
// faults heal and the workers go on for a calm period, then they stop and
// the history is checked.
type Episode struct {
	Deploy  *Deployment
	Faults  []string
	Window  time.Duration // faults are injected for this long
	Calm    time.Duration // after the heal; at least the deployment's Bound
	Procs   int
	Workers int
	Margin  time.Duration // WithSafetyMargin
}

// RunEpisode runs ep, named n in the run of seed, and checks its history.
// The resource lives on the Redis at resource.
func RunEpisode(t testing.TB, ep Episode, n int, seed uint64, resource string) *Result {
	t.Helper()
	d := ep.Deploy
	prefix := fmt.Sprintf("h%de%d:", seed, n)
	keys := keySpecs(prefix, d.Kinds, d.Sets)
	base := ChildConfig{
		Seed: seed*1000 + uint64(n), Deploy: d.Config, Resource: resource, Keys: keys, Sets: d.Sets,
		Workers: ep.Workers, TTL: d.TTL, Wait: d.Bound + 5*time.Second, Margin: ep.Margin,
		HoldMax: 15 * time.Millisecond, ThinkMax: 20 * time.Millisecond,
	}
	var children []*Child
	for p := range ep.Procs {
		cfg := base
		cfg.Proc = p
		children = append(children, StartChild(t, cfg))
	}
	deadline := time.Now().Add(60 * time.Second)
	for _, c := range children {
		for !c.ready() {
			if time.Now().After(deadline) {
				_, problems := c.Stop(5 * time.Second)
				t.Fatalf("proc %d did not start: %v", c.Proc, problems)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	start := Now()
	nem := NewNemesis(t, d, children, keys, base.Seed)
	nem.Run(ep.Faults, ep.Window)
	d.Heal(t)
	heal := Now()
	time.Sleep(ep.Calm)
	stop := Now()
	var events []Event
	var problems []string
	for _, c := range children {
		evs, ps := c.Stop(60 * time.Second)
		events = append(events, evs...)
		problems = append(problems, ps...)
	}
	meta := Meta{
		Deploy: d.Name, FaultKinds: ep.Faults, TTL: int64(d.TTL), Margin: int64(ep.Margin), Bound: int64(d.Bound),
		Wait: int64(base.Wait), Unfair: d.Unfair, Procs: ep.Procs, Start: start, Heal: heal, Stop: stop, Keys: keys,
	}
	if EventsDir != "" {
		if err := SaveEpisode(filepath.Join(EventsDir, fmt.Sprintf("episode-%d-%d.json", seed, n)), meta, nem.Faults, events); err != nil {
			t.Errorf("save the history: %v", err)
		}
	}
	h := Assemble(events, meta, nem.Faults)
	r := Check(h)
	r.Problems = append(r.Problems, problems...)
	return r
}

// EventsDir, when set, is where RunEpisode saves every episode's recorded
// history (SaveEpisode), to be checked again with LoadEpisode.
var EventsDir = ""

// A savedEpisode is an episode's history as recorded: what Assemble takes.
type savedEpisode struct {
	Meta   Meta
	Faults []Fault
	Events []Event
}

// SaveEpisode writes an episode's recorded history to file as JSON.
func SaveEpisode(file string, meta Meta, faults []Fault, events []Event) error {
	js, err := json.Marshal(savedEpisode{meta, faults, events})
	if err != nil {
		return err
	}
	return os.WriteFile(file, js, 0o644)
}

// LoadEpisode reads a history SaveEpisode wrote and assembles it.
func LoadEpisode(file string) (*History, error) {
	js, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var s savedEpisode
	if err := json.Unmarshal(js, &s); err != nil {
		return nil, err
	}
	s.Meta.Unfair = s.Meta.Unfair || s.Meta.Deploy == DeployQuorum // NewQuorum's waiting is not fair (older files lack the field)
	return Assemble(s.Events, s.Meta, s.Faults), nil
}
