package history

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// The checkers on small made-up histories: each reports what it must, and
// explains a violation by a documented limit only where the rule says.
// Times are in milliseconds.

const msec = int64(time.Millisecond)

// hist is a history of a 1 s ttl and a 100 ms margin on keys "x" and "y"
// (locks), "rw" and "rw2" (read-write) and "s" (semaphore of 2), healed at
// 0, stopped at 60 s. Its holds are in order of Acquired, as Assemble's.
func hist(holds ...*Hold) *History {
	slices.SortStableFunc(holds, func(a, b *Hold) int { return cmp64(a.Acquired, b.Acquired) })
	return &History{
		Meta: Meta{TTL: 1000 * msec, Margin: 100 * msec, Bound: 5000 * msec, Heal: 0, Stop: 60000 * msec,
			Keys: []KeySpec{{Name: "x", Kind: KindLock}, {Name: "rw", Kind: KindRW}, {Name: "s", Kind: KindSemaphore, Permits: 2},
				{Name: "y", Kind: KindLock}, {Name: "rw2", Kind: KindRW}}},
		Holds: holds,
	}
}

// mkSet makes the holds of a set of keys in mode, as Assemble does: one
// per key, with the set's times and lease and that key's fence.
func mkSet(id string, proc int, keys []string, mode string, acq, end, until int64, fences ...int64) []*Hold {
	var out []*Hold
	for i, key := range keys {
		hd := mkHold(id, proc, key, mode, acq, end, until, fences[i])
		hd.Set, hd.Call = keys, CallObtainMulti
		out = append(out, hd)
	}
	return out
}

// mkHold makes a hold of proc on key in mode, acquired at acq and ended at
// end (ms), with its lease's end at until (ms) and fence.
func mkHold(id string, proc int, key, mode string, acq, end, until, fence int64) *Hold {
	return &Hold{ID: id, Proc: proc, Key: key, Mode: mode, Call: CallObtain, Invoke: acq*msec - msec, Acquired: acq * msec,
		Return: acq * msec, Until: until * msec, End: end * msec, EndBy: "release", Fence: fence}
}

func props(vs []Violation) (anomalies, expected []string) {
	for _, v := range vs {
		if v.Limit == "" {
			anomalies = append(anomalies, v.Property)
		} else {
			expected = append(expected, v.Property)
		}
	}
	return anomalies, expected
}

// Two holders of a lock at once are an anomaly; one after the other is
// fine, also when the second acquires the instant the first's right ends.
func TestCheckExclusion_TwoHolders(t *testing.T) {
	a := mkHold("A", 0, "x", ModeExclusive, 0, 500, 1000, 1)
	b := mkHold("B", 1, "x", ModeExclusive, 400, 600, 1400, 2)
	vs := CheckExclusion(hist(a, b))
	if an, _ := props(vs); len(an) != 1 {
		t.Fatalf("want one anomaly, got %v", vs)
	}
	if !strings.Contains(vs[0].Evidence, "before A's Until") {
		t.Errorf("the evidence does not say the key was given during A's lease:\n%s", vs[0].Evidence)
	}
	c := mkHold("C", 1, "x", ModeExclusive, 500, 600, 1500, 2)
	if vs := CheckExclusion(hist(a, c)); len(vs) != 0 {
		t.Errorf("back to back holders reported: %v", vs)
	}
}

// Readers together are fine; a writer beside a reader is not; a semaphore
// of 2 takes 2 holders at once, not 3.
func TestCheckExclusion_ReadersWritersPermits(t *testing.T) {
	r1 := mkHold("R1", 0, "rw", ModeReader, 0, 500, 1000, 1)
	r2 := mkHold("R2", 1, "rw", ModeReader, 100, 500, 1100, 2)
	if vs := CheckExclusion(hist(r1, r2)); len(vs) != 0 {
		t.Errorf("two readers reported: %v", vs)
	}
	w := mkHold("W", 2, "rw", ModeWriter, 200, 300, 1200, 3)
	if an, _ := props(CheckExclusion(hist(r1, r2, w))); len(an) != 2 {
		t.Errorf("a writer beside two readers: want 2 anomalies, got %v", an)
	}
	p1 := mkHold("P1", 0, "s", ModePermit, 0, 500, 1000, 1)
	p2 := mkHold("P2", 1, "s", ModePermit, 100, 500, 1100, 2)
	if vs := CheckExclusion(hist(p1, p2)); len(vs) != 0 {
		t.Errorf("2 permits of 2 reported: %v", vs)
	}
	p3 := mkHold("P3", 2, "s", ModePermit, 200, 300, 1200, 3)
	if an, _ := props(CheckExclusion(hist(p1, p2, p3))); len(an) != 1 {
		t.Errorf("3 permits of 2: want 1 anomaly, got %v", an)
	}
}

// A holder paused (SIGSTOP) past its lease explains an overlap that starts
// after its lease's end by its own clock, and not one that starts before:
// a pause does not shorten the lease in Redis.
func TestCheckExclusion_PausedHolder(t *testing.T) {
	a := mkHold("A", 0, "x", ModeExclusive, 0, 2500, 1000, 1)
	pause := Fault{Kind: FaultPauseClient, Proc: 0, Start: 500 * msec, End: 2500 * msec}
	after := mkHold("B", 1, "x", ModeExclusive, 1100, 1200, 2100, 2)
	h := hist(a, after)
	h.Faults = []Fault{pause}
	if an, ex := props(CheckExclusion(h)); len(an) != 0 || len(ex) != 1 {
		t.Errorf("after A's Until: want 1 expected, got anomalies %v, expected %v", an, ex)
	}
	before := mkHold("B", 1, "x", ModeExclusive, 900, 1200, 1900, 2)
	h = hist(a, before)
	h.Faults = []Fault{pause}
	if an, _ := props(CheckExclusion(h)); len(an) != 1 {
		t.Errorf("before A's Until: want 1 anomaly, got %v", an)
	}
	h = hist(a, after) // no pause: A was not told in time
	if an, _ := props(CheckExclusion(h)); len(an) != 1 {
		t.Errorf("no pause: want 1 anomaly, got %v", an)
	}
	h = hist(a, after) // a pause over before A's lost-lock timer was due (at 890 ms)
	h.Faults = []Fault{{Kind: FaultPauseClient, Proc: 0, Start: 100 * msec, End: 800 * msec}}
	if an, _ := props(CheckExclusion(h)); len(an) != 1 {
		t.Errorf("a pause over before the timer was due: want 1 anomaly, got %v", an)
	}
	h.Faults[0].Start, h.Faults[0].End = 995*msec, 2500*msec // a pause from after the signal's deadline (990 ms)
	if an, _ := props(CheckExclusion(h)); len(an) != 1 {
		t.Errorf("a pause after the signal's deadline: want 1 anomaly, got %v", an)
	}
}

// A stall of the holder's process explains a late signal only when it is
// at least the safety margin long, and the process was stalled when the
// lost-lock timer had to fire (due at 890 ms, by 990 ms).
func TestCheckExclusion_Stall(t *testing.T) {
	a := mkHold("A", 0, "x", ModeExclusive, 0, 1300, 1000, 1)
	b := mkHold("B", 1, "x", ModeExclusive, 1100, 1200, 2100, 2)
	for _, c := range []struct {
		from, to int64
		explains bool
	}{
		{850, 1250, true},  // from before the timer was due (at 880) past B's acquisition
		{900, 960, false},  // shorter than the margin
		{100, 400, false},  // long before the timer was due
		{995, 1290, false}, // from after the signal's deadline
	} {
		h := hist(a, b)
		h.Stalls = []Event{{Type: EvStall, Proc: 0, Invoke: c.from * msec, At: c.to * msec}}
		an, ex := props(CheckExclusion(h))
		if got := len(ex) == 1 && len(an) == 0; got != c.explains {
			t.Errorf("stall %d-%d ms: explained %v, want %v (anomalies %v)", c.from, c.to, got, c.explains, an)
		}
	}
}

// A Redis restarted empty between A's call and B's acquisition explains
// an overlap, also one during A's lease; one before A's call does not.
func TestCheckExclusion_RestartEmpty(t *testing.T) {
	a := mkHold("A", 0, "x", ModeExclusive, 100, 2000, 3000, 5)
	b := mkHold("B", 1, "x", ModeExclusive, 600, 700, 1600, 1)
	h := hist(a, b)
	h.Faults = []Fault{{Kind: FaultRestartEmpty, Loses: LosesLocks, Start: 300 * msec, End: 500 * msec}}
	if an, ex := props(CheckExclusion(h)); len(an) != 0 || len(ex) != 1 {
		t.Errorf("want 1 expected, got anomalies %v, expected %v", an, ex)
	}
	h.Faults[0].Start, h.Faults[0].End = 0, 50*msec
	if an, _ := props(CheckExclusion(h)); len(an) != 1 {
		t.Errorf("a restart before A: want 1 anomaly, got %v", an)
	}
	h.Faults = []Fault{{Kind: FaultRestartEmpty, Loses: LosesFences, Start: 300 * msec, End: 500 * msec}}
	if an, _ := props(CheckExclusion(h)); len(an) != 1 {
		t.Errorf("a quorum master's counter lost (the restart rule kept): want 1 anomaly, got %v", an)
	}
}

// A right that outlives the lease's end by the holder's own clock is a
// late lost-lock signal; the evidence names who took the key meanwhile.
func TestCheckLostSignal(t *testing.T) {
	a := mkHold("A", 0, "x", ModeExclusive, 0, 1200, 1000, 1)
	b := mkHold("B", 1, "x", ModeExclusive, 1100, 1150, 2100, 2)
	vs := CheckLostSignal(hist(a, b))
	if an, _ := props(vs); len(an) != 1 || !strings.Contains(vs[0].Evidence, "B took the key") {
		t.Fatalf("want one anomaly naming B, got %v", vs)
	}
	ok := mkHold("A", 0, "x", ModeExclusive, 0, 990, 1000, 1)
	if vs := CheckLostSignal(hist(ok)); len(vs) != 0 {
		t.Errorf("a right ended before the lease's end reported: %v", vs)
	}
	unknown := mkHold("A", 0, "x", ModeExclusive, 0, 5000, 0, 1)
	if vs := CheckLostSignal(hist(unknown)); len(vs) != 0 {
		t.Errorf("a hold whose Until is unknown reported: %v", vs)
	}
}

// Fences must increase from an acquisition to the next one called after
// it, and never repeat; acquisitions called at once may get theirs in
// either order.
func TestCheckFences(t *testing.T) {
	a := mkHold("A", 0, "x", ModeExclusive, 0, 100, 1000, 5)
	b := mkHold("B", 1, "x", ModeExclusive, 200, 300, 1200, 4)
	if an, _ := props(CheckFences(hist(a, b))); len(an) != 1 {
		t.Errorf("a lower fence after: want 1 anomaly, got %v", an)
	}
	c := mkHold("C", 1, "x", ModeExclusive, 200, 300, 1200, 5)
	if an, _ := props(CheckFences(hist(a, c))); len(an) != 1 {
		t.Errorf("a repeated fence: want 1 anomaly, got %v", an)
	}
	r1 := mkHold("R1", 0, "rw", ModeReader, 100, 500, 1100, 7)
	r2 := mkHold("R2", 1, "rw", ModeReader, 101, 500, 1101, 6)
	r2.Invoke = 50 * msec // called before R1 acquired
	if vs := CheckFences(hist(r1, r2)); len(vs) != 0 {
		t.Errorf("concurrent acquisitions reported: %v", vs)
	}
	h := hist(a, b)
	h.Faults = []Fault{{Kind: FaultRestartEmpty, Loses: LosesFences, Start: 120 * msec, End: 150 * msec}}
	if an, ex := props(CheckFences(h)); len(an) != 0 || len(ex) != 1 {
		t.Errorf("a counter lost in between: want 1 expected, got anomalies %v, expected %v", an, ex)
	}
}

// write and read make resource operations of hold id on "res:x", in ms.
func write(id string, proc, worker int, call, ret, fence int64, value, outcome string) Event {
	return Event{Type: EvWrite, Proc: proc, Worker: worker, Hold: 1, Key: "res:x", Invoke: call * msec, Return: ret * msec,
		Fence: fence, Value: value, Outcome: outcome}
}

func read(proc, worker int, call, ret, fence int64, value string) Event {
	return Event{Type: EvRead, Proc: proc, Worker: worker, Hold: 1, Key: "res:x", Invoke: call * msec, Return: ret * msec,
		Fence: fence, Value: value, Outcome: OutOK}
}

// The fenced register: writes taken in fence order and reads of the latest
// are linearizable; a stale write taken after a newer one, a read of a
// value overwritten before it began, or a write refused though its fence
// was the highest are not. A write whose outcome is unknown may have been
// taken, or not.
func TestCheckRegister(t *testing.T) {
	ArtifactDir = t.TempDir()
	for _, c := range []struct {
		name  string
		ops   []Event
		legal bool
	}{
		{"in order", []Event{write("A", 0, 0, 0, 1, 1, "a", OutOK), read(0, 0, 2, 3, 1, "a"),
			write("B", 1, 0, 4, 5, 2, "b", OutOK), write("A", 0, 0, 6, 7, 1, "a2", OutRejected), read(1, 0, 8, 9, 2, "b")}, true},
		{"stale write taken", []Event{write("B", 1, 0, 0, 1, 2, "b", OutOK), write("A", 0, 0, 2, 3, 1, "a", OutOK)}, false},
		{"stale read", []Event{write("A", 0, 0, 0, 1, 1, "a", OutOK), write("B", 1, 0, 2, 3, 2, "b", OutOK),
			read(0, 0, 4, 5, 1, "a")}, false},
		{"refused wrongly", []Event{write("A", 0, 0, 0, 1, 1, "a", OutOK), write("B", 1, 0, 2, 3, 2, "b", OutRejected)}, false},
		{"unknown, taken", []Event{write("A", 0, 0, 0, 1, 1, "a", OutError), read(0, 0, 4, 5, 1, "a")}, true},
		{"unknown, not taken", []Event{write("A", 0, 0, 0, 1, 1, "a", OutError), read(0, 0, 4, 5, 0, "")}, true},
	} {
		h := hist()
		for _, e := range c.ops {
			if e.Type == EvWrite {
				h.Writes = append(h.Writes, e)
			} else {
				h.Reads = append(h.Reads, e)
			}
		}
		vs, verdicts, _ := CheckRegister(h)
		if got := verdicts["res:x"] == "ok"; got != c.legal {
			t.Errorf("%s: verdict %s, want legal %v (%v)", c.name, verdicts["res:x"], c.legal, vs)
		}
	}
}

// Two holders whose writes with the same fence were both taken break
// fencing: the resource cannot tell them apart.
func TestCheckRegister_SameFence(t *testing.T) {
	h := hist(mkHold("p0w0h1", 0, "x", ModeExclusive, 0, 10, 1000, 3), mkHold("p1w0h1", 1, "x", ModeExclusive, 20, 30, 1000, 3))
	h.Writes = []Event{write("A", 0, 0, 1, 2, 3, "a", OutOK), write("B", 1, 0, 21, 22, 3, "b", OutOK)}
	vs, _, _ := CheckRegister(h)
	if an, _ := props(vs); len(an) != 1 || an[0] != PropFencing {
		t.Errorf("want one fencing anomaly, got %v", vs)
	}

	// A set writes each key's resource with that key's fence: its write of
	// res:y with its fence for y, and a holder of y's with the same fence.
	set := mkSet("p0w0h1", 0, []string{"x", "y"}, ModeExclusive, 0, 10, 1000, 3, 4)
	h = hist(append(set, mkHold("p1w0h1", 1, "y", ModeExclusive, 20, 30, 1000, 4))...)
	h.Faults = []Fault{{Kind: FaultRestartEmpty, Loses: LosesFences, Start: 12 * msec, End: 15 * msec}}
	wy := write("A", 0, 0, 2, 3, 4, "a", OutOK)
	wy.Key = "res:y"
	by := write("B", 1, 0, 21, 22, 4, "b", OutOK)
	by.Key = "res:y"
	h.Writes = []Event{write("A", 0, 0, 1, 2, 3, "a", OutOK), wy, by}
	vs, _, _ = CheckRegister(h)
	if an, ex := props(vs); len(an) != 0 || len(ex) != 1 || vs[0].Key != "res:y" {
		t.Errorf("a set's and a holder's writes of res:y with fence 4, a counter lost in between: want one expected on res:y, got %v", vs)
	}
}

// After the heal, a waiter waits only while others hold the key (idle at
// most the bound in all), in its turn (at most a round of 17 per process
// called after it and served before it), and does not fail (a call made
// before the heal may fail within a ttl after it).
func TestCheckLiveness(t *testing.T) {
	base := func() *History {
		h := hist()
		h.Heal, h.Stop, h.Procs = 10000*msec, 30000*msec, 1
		return h
	}
	waiter := Event{Type: EvAcquire, Proc: 9, Call: CallObtain, Key: "x", Invoke: 9000 * msec, Return: 20000 * msec, Outcome: OutOK}

	h := base() // the key busy from 10 s to 20 s: fine
	for i := range int64(5) {
		h.Holds = append(h.Holds, mkHold(fmt.Sprint("B", i), 1, "x", ModeExclusive, 10000+2000*i, 12000+2000*i, 13000+2000*i, i+1))
		h.Holds[i].Invoke = 5000 * msec // called before the waiter
	}
	h.Attempts = []Event{waiter}
	if vs := CheckLiveness(h); len(vs) != 0 {
		t.Errorf("a waiter behind busy holders: %v", vs)
	}
	h.Holds = h.Holds[:2] // the key idle from 14 s to 20 s
	if an, _ := props(CheckLiveness(h)); len(an) != 1 {
		t.Errorf("an idle key: want 1 anomaly, got %v", an)
	}

	h = base() // 18 acquisitions called after the waiter and served before it
	for i := range int64(18) {
		hd := mkHold(fmt.Sprint("O", i), 1, "x", ModeExclusive, 10100+500*i, 10600+500*i, 11100+500*i, i+1)
		hd.Invoke = 10000*msec + 1 + i
		h.Holds = append(h.Holds, hd)
	}
	h.Attempts = []Event{waiter}
	if an, _ := props(CheckLiveness(h)); len(an) != 1 {
		t.Errorf("overtaken 18 times: want 1 anomaly, got %v", an)
	}
	h.Unfair = true
	if vs := CheckLiveness(h); len(vs) != 0 {
		t.Errorf("an unfair deployment, overtaken: %v", vs)
	}

	h = base()
	h.Attempts = []Event{
		{Type: EvAcquire, Call: CallObtain, Key: "x", Invoke: 11000 * msec, Return: 11001 * msec, Outcome: OutError, Err: "connection refused"},
		{Type: EvAcquire, Call: CallTry, Key: "x", Invoke: 11000 * msec, Return: 11001 * msec, Outcome: OutNotObtained},
		{Type: EvAcquire, Call: CallTryMulti, Key: "x", Keys: []string{"x", "y"}, Invoke: 11000 * msec, Return: 11001 * msec, Outcome: OutNotObtained},
		{Type: EvAcquire, Call: CallObtain, Key: "x", Invoke: 5000 * msec, Return: 6000 * msec, Outcome: OutError},
		{Type: EvAcquire, Call: CallObtain, Key: "x", Invoke: 5000 * msec, Return: 10500 * msec, Outcome: OutError, Err: "not acknowledged"},
	}
	if an, _ := props(CheckLiveness(h)); len(an) != 1 {
		t.Errorf("a failure after the heal: want 1 anomaly, got %v", an)
	}
}

// Assemble ends a hold's right at the earliest of its Release call and the
// moments its context was seen done, and marks it lost when the library
// said so.
func TestAssemble(t *testing.T) {
	evs := []Event{
		{Type: EvAcquire, Proc: 0, Worker: 0, Hold: 1, Key: "x", Mode: ModeExclusive, Call: CallObtain, Invoke: 1000, At: 1500, Return: 1600, Outcome: OutOK, Fence: 1, Until: 9000},
		{Type: EvDone, Proc: 0, Worker: 0, Hold: 1, At: 5000, Source: SrcWatch, Err: "redislock: lock lost", Until: 9500},
		{Type: EvDone, Proc: 0, Worker: 0, Hold: 1, At: 4000, Source: SrcLostHook, Err: "redislock: lock lost"},
		{Type: EvRelease, Proc: 0, Worker: 0, Hold: 1, Invoke: 6000, Return: 6100, Outcome: OutNotHeld},
	}
	h := Assemble(evs, Meta{Start: 1000}, nil)
	if len(h.Holds) != 1 {
		t.Fatalf("holds: %v", h.Holds)
	}
	hd := h.Holds[0]
	if hd.Acquired != 500 || hd.End != 3000 || hd.EndBy != SrcLostHook || !hd.Lost || hd.Until != 8500 {
		t.Errorf("hold %s", hd)
	}
	if h.Ops != 2 {
		t.Errorf("ops %d, want 2 (the acquisition and the release)", h.Ops)
	}
}

// A set holder is a holder of each of its keys: a set and a one-key holder
// that overlap on one key of the set are an anomaly on that key; a holder
// of a key outside the set, or one after the set, is not. An exclusive set
// is the writer of a read-write key in it; a reader set shares its keys
// with readers and with other reader sets.
func TestCheckExclusion_SetHolders(t *testing.T) {
	set := mkSet("S", 0, []string{"x", "y"}, ModeExclusive, 0, 500, 1000, 1, 1)
	b := mkHold("B", 1, "y", ModeExclusive, 400, 600, 1400, 2)
	vs := CheckExclusion(hist(append(set, b)...))
	if an, _ := props(vs); len(an) != 1 || vs[0].Key != "y" {
		t.Fatalf("a set and a one-key holder overlapping on y: want one anomaly on y, got %v", vs)
	}
	if !strings.Contains(vs[0].Evidence, "of the set [x y]") {
		t.Errorf("the evidence does not name the set:\n%s", vs[0].Evidence)
	}
	other := mkHold("B", 1, "rw", ModeWriter, 400, 600, 1400, 2)
	after := mkHold("C", 1, "x", ModeExclusive, 500, 600, 1500, 2)
	if vs := CheckExclusion(hist(append(set, other, after)...)); len(vs) != 0 {
		t.Errorf("holders of another key, or after the set: %v", vs)
	}
	two := mkSet("T", 2, []string{"y", "x"}, ModeExclusive, 300, 700, 1300, 2, 2)
	if an, _ := props(CheckExclusion(hist(append(set, two...)...))); len(an) != 2 {
		t.Errorf("two sets overlapping on x and y: want 2 anomalies (one per key), got %v", an)
	}

	readers := mkSet("R", 0, []string{"rw", "rw2"}, ModeReader, 0, 500, 1000, 1, 1)
	r := mkHold("R1", 1, "rw2", ModeReader, 100, 300, 1100, 2)
	readers2 := mkSet("R2", 2, []string{"rw2", "rw"}, ModeReader, 200, 400, 1200, 3, 3)
	if vs := CheckExclusion(hist(append(append(readers, r), readers2...)...)); len(vs) != 0 {
		t.Errorf("reader sets and a reader: %v", vs)
	}
	w := mkHold("W", 1, "rw", ModeWriter, 100, 300, 1100, 2)
	if an, _ := props(CheckExclusion(hist(append(readers, w)...))); len(an) != 1 {
		t.Errorf("a writer beside a reader set: want 1 anomaly, got %v", an)
	}
	writer := mkSet("X", 0, []string{"x", "rw"}, ModeExclusive, 0, 500, 1000, 1, 1)
	if an, _ := props(CheckExclusion(hist(append(writer, r, mkHold("R3", 1, "rw", ModeReader, 100, 300, 1100, 2))...))); len(an) != 1 {
		t.Errorf("a reader beside an exclusive set of its key: want 1 anomaly, got %v", an)
	}
}

// A set's fence for a key is checked against the other holders of that
// key: a set called after a one-key holder of y acquired, with a lower
// fence for y, is a fence-order anomaly on y (and its fence for x, a key
// nobody held before, is fine); and a one-key holder called after a set
// acquired needs a higher fence than the set's for its key.
func TestCheckFences_Set(t *testing.T) {
	a := mkHold("A", 0, "y", ModeExclusive, 0, 100, 1000, 9)
	set := mkSet("S", 1, []string{"x", "y"}, ModeExclusive, 200, 300, 1200, 5, 8)
	vs := CheckFences(hist(append(set, a)...))
	if an, _ := props(vs); len(an) != 1 || vs[0].Key != "y" {
		t.Fatalf("a set's fence for y lower than an earlier holder's: want one anomaly on y, got %v", vs)
	}
	ok := mkSet("S", 1, []string{"x", "y"}, ModeExclusive, 200, 300, 1200, 5, 10)
	if vs := CheckFences(hist(append(ok, a)...)); len(vs) != 0 {
		t.Errorf("a set's fences higher than every earlier holder's: %v", vs)
	}
	b := mkHold("B", 2, "x", ModeExclusive, 400, 500, 1400, 5)
	if an, _ := props(CheckFences(hist(append(ok, a, b)...))); len(an) != 1 {
		t.Errorf("a one-key holder after a set with the set's fence: want 1 anomaly, got %v", an)
	}
	again := mkSet("T", 2, []string{"y", "x"}, ModeExclusive, 400, 500, 1400, 11, 4)
	vs = CheckFences(hist(append(ok, append(again, a)...)...))
	if an, _ := props(vs); len(an) != 1 || vs[0].Key != "x" {
		t.Errorf("a set after a set, its fence for x going backwards: want one anomaly on x, got %v", vs)
	}
}

// A set has one lease and one context: a right that outlives it is one
// late signal, not one per key, and the evidence names whoever took any of
// its keys meanwhile.
func TestCheckLostSignal_Set(t *testing.T) {
	set := mkSet("S", 0, []string{"x", "y"}, ModeExclusive, 0, 1200, 1000, 1, 1)
	b := mkHold("B", 1, "y", ModeExclusive, 1100, 1150, 2100, 2)
	vs := CheckLostSignal(hist(append(set, b)...))
	if an, _ := props(vs); len(an) != 1 || !strings.Contains(vs[0].Evidence, "B took the key") {
		t.Fatalf("want one anomaly naming B, got %v", vs)
	}
	if vs := CheckLostSignal(hist(mkSet("S", 0, []string{"x", "y"}, ModeExclusive, 0, 990, 1000, 1, 1)...)); len(vs) != 0 {
		t.Errorf("a set's right ended before its lease's end: %v", vs)
	}
}

// After the heal, a set waits while any of its keys is held, not while
// all are free; a waiter behind a set that waits for its other keys may
// find its key free meanwhile (nobody overtakes the first in line), but
// not behind a set called long after it.
func TestCheckLiveness_Sets(t *testing.T) {
	base := func() *History {
		h := hist()
		h.Heal, h.Stop, h.Procs = 10000*msec, 30000*msec, 1
		return h
	}
	set := Event{Type: EvAcquire, Proc: 9, Call: CallObtainMulti, Key: "x", Keys: []string{"x", "y"},
		Invoke: 9000 * msec, Return: 20000 * msec, Outcome: OutOK}
	y := mkHold("Y", 1, "y", ModeExclusive, 9500, 19900, 21000, 1) // y held all along, x free

	h := base()
	h.Holds, h.Attempts = []*Hold{y}, []Event{set}
	if vs := CheckLiveness(h); len(vs) != 0 {
		t.Errorf("a set waiting for one of its keys: %v", vs)
	}
	h.Holds = nil
	if an, _ := props(CheckLiveness(h)); len(an) != 1 {
		t.Errorf("a set whose keys were all free: want 1 anomaly, got %v", an)
	}

	one := Event{Type: EvAcquire, Proc: 8, Call: CallObtain, Key: "x", Invoke: 9100 * msec, Return: 20000 * msec, Outcome: OutOK}
	h = base() // one waits for x behind the set, which waits for y
	h.Holds, h.Attempts = []*Hold{y}, []Event{set, one}
	if vs := CheckLiveness(h); len(vs) != 0 {
		t.Errorf("a waiter behind a set that waits: %v", vs)
	}
	late := set
	late.Invoke = one.Invoke + placeSlack
	h.Attempts = []Event{late, one}
	if vs := CheckLiveness(h); len(vs) != 1 || !strings.Contains(vs[0].Evidence, holdID(one)) {
		t.Errorf("a waiter whose key was free, with only a later set waiting: want 1 anomaly for it, got %v", vs)
	}

	h = base() // 18 called after the set and served before it on x
	for i := range int64(18) {
		hd := mkHold(fmt.Sprint("O", i), 1, "x", ModeExclusive, 10100+500*i, 10600+500*i, 11100+500*i, i+1)
		hd.Invoke = 10000*msec + 1 + i
		h.Holds = append(h.Holds, hd)
	}
	h.Attempts = []Event{set}
	if an, _ := props(CheckLiveness(h)); len(an) != 1 {
		t.Errorf("a set overtaken 18 times on x: want 1 anomaly, got %v", an)
	}
	h.Deploy = DeployCluster // x's slot (16287) is after y's (12222): the set waits in x's line only once it holds y
	if vs := CheckLiveness(h); len(vs) != 0 {
		t.Errorf("a set across Cluster slots, overtaken on its later slot's key: %v", vs)
	}
}

// clusterSlot is Redis's CLUSTER KEYSLOT (values from redis-server 7.0).
func TestClusterSlot(t *testing.T) {
	for key, want := range map[string]uint16{"123456789": 12739, "foo": 12182, "bar": 5061, "x": 16287, "y": 12222,
		"h20251125e0:lock": 11301, "{h20251125e0:lock}:b": 11301, "{}x": 10595, "a{}b{c}": 7353} {
		if got := clusterSlot(key); got != want {
			t.Errorf("clusterSlot(%q) = %d, want %d", key, got, want)
		}
	}
}

// Assemble makes a Hold per key of a set, each with its key's fence and
// the set's times, Until and end; the set is one acquisition.
func TestAssemble_Set(t *testing.T) {
	evs := []Event{
		{Type: EvAcquire, Proc: 0, Worker: 0, Hold: 1, Key: "y", Keys: []string{"y", "x"}, Mode: ModeExclusive, Call: CallObtainMulti,
			Invoke: 1000, At: 1500, Return: 1600, Outcome: OutOK, Fence: 4, Fences: []int64{4, 7}, Until: 9000},
		{Type: EvDone, Proc: 0, Worker: 0, Hold: 1, At: 5000, Source: SrcLostHook, Err: "redislock: lock lost", Until: 9500},
		{Type: EvRelease, Proc: 0, Worker: 0, Hold: 1, Invoke: 6000, Return: 6100, Outcome: OutNotHeld},
		{Type: EvAcquire, Proc: 0, Worker: 0, Hold: 2, Key: "y", Keys: []string{"y", "x"}, Mode: ModeExclusive, Call: CallObtainMulti,
			Invoke: 7000, At: 7500, Return: 7600, Outcome: OutOK, Fence: 5},
	}
	h := Assemble(evs, Meta{Start: 1000}, nil)
	if len(h.Holds) != 2 {
		t.Fatalf("holds: %v", h.Holds)
	}
	fences := map[string]int64{}
	for _, hd := range h.Holds {
		fences[hd.Key] = hd.Fence
		if hd.ID != "p0w0h1" || hd.Acquired != 500 || hd.End != 4000 || !hd.Lost || hd.Until != 8500 || len(hd.Set) != 2 {
			t.Errorf("hold %s", hd)
		}
	}
	if fences["y"] != 4 || fences["x"] != 7 {
		t.Errorf("fences by key %v, want y 4, x 7", fences)
	}
	if n, sets := h.Acquisitions(); n != 1 || sets != 1 {
		t.Errorf("acquisitions %d, sets %d; want 1, 1", n, sets)
	}
	if h.Ops != 3 || len(h.Problems) != 1 || !strings.Contains(h.Problems[0], "p0w0h2") {
		t.Errorf("ops %d (want 3), problems %v (want the set acquired without its fences)", h.Ops, h.Problems)
	}
}
