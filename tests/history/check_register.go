package history

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// A fenced register is the resource a lock protects: SetFenced writes a
// value with a fence, and the register refuses a fence lower than the
// highest it has taken; a plain read returns the value and the fence of
// the latest write it took.
type registerState struct {
	Value string
	Fence int64
}

type registerInput struct {
	Write bool
	Value string // Write
	Fence int64  // Write
}

type registerOutput struct {
	Outcome string // OutOK, OutRejected, or OutError (unknown: it may have been taken, or not)
	Value   string // a read's
	Fence   int64  // a read's
}

// RegisterModel is the sequential specification of a fenced register, for
// porcupine. A write whose outcome is unknown (a network error, a deadline)
// does what the register would have done, had it arrived: it can be
// placed anywhere after its call, since its return is at the end of time.
var RegisterModel = porcupine.Model{
	Init: func() any { return registerState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(registerState), input.(registerInput), output.(registerOutput)
		if !in.Write {
			return out.Value == s.Value && out.Fence == s.Fence, s
		}
		taken := in.Fence >= s.Fence
		switch out.Outcome {
		case OutOK:
			return taken, registerState{in.Value, in.Fence}
		case OutRejected:
			return !taken, s
		}
		if taken {
			return true, registerState{in.Value, in.Fence}
		}
		return true, s
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(registerInput), output.(registerOutput)
		if in.Write {
			return fmt.Sprintf("write(%s, fence %d) -> %s", in.Value, in.Fence, out.Outcome)
		}
		return fmt.Sprintf("read() -> %q fence %d", out.Value, out.Fence)
	},
	DescribeState: func(state any) string {
		s := state.(registerState)
		return fmt.Sprintf("%q fence %d", s.Value, s.Fence)
	},
}

// registerTimeout bounds porcupine's search per resource; a search that
// runs out is reported as a violation (it proves nothing).
const registerTimeout = 2 * time.Minute

// ArtifactDir is where porcupine's visualizations of illegal histories are
// written ("" for the system's temporary directory).
var ArtifactDir = ""

// CheckRegister checks, per resource, that the history of SetFenced writes
// and plain reads is linearizable for RegisterModel (porcupine). Reads
// that failed observe nothing and are left out; writes that failed with
// another error than ErrFenceRejected may or may not have been taken, and
// are given a return at the end of time.
//
// It also checks the fencing promise itself (PropFencing): no two
// acquisitions wrote the resource with the same fence. Under the model,
// writes are taken in the order of their fences, so with distinct fences
// the writes of two holders never interleave: once a holder's write is
// taken, every write of an older holder is refused. A repeated fence is
// explained only as the repeated fence itself is (explainFences).
func CheckRegister(h *History) ([]Violation, map[string]string, []string) {
	var out []Violation
	verdicts := map[string]string{}
	var files []string
	ops := map[string][]porcupine.Operation{}
	clients := map[string]int{}
	client := func(e Event) int {
		id := fmt.Sprintf("p%dw%d", e.Proc, e.Worker)
		if _, ok := clients[id]; !ok {
			clients[id] = len(clients)
		}
		return clients[id]
	}
	for _, e := range h.Writes {
		op := porcupine.Operation{ClientId: client(e), Input: registerInput{true, e.Value, e.Fence},
			Call: e.Invoke, Output: registerOutput{Outcome: e.Outcome}, Return: e.Return, Metadata: holdID(e)}
		if e.Outcome == OutError {
			op.Return = math.MaxInt64
		}
		ops[e.Key] = append(ops[e.Key], op)
	}
	for _, e := range h.Reads {
		if e.Outcome != OutOK {
			continue
		}
		ops[e.Key] = append(ops[e.Key], porcupine.Operation{ClientId: client(e), Input: registerInput{},
			Call: e.Invoke, Output: registerOutput{Outcome: OutOK, Value: e.Value, Fence: e.Fence}, Return: e.Return,
			Metadata: holdID(e)})
	}
	for _, key := range sortedKeys(ops) {
		res, info := porcupine.CheckOperationsVerbose(RegisterModel, ops[key], registerTimeout)
		switch res {
		case porcupine.Ok:
			verdicts[key] = "ok"
			continue
		case porcupine.Unknown:
			verdicts[key] = "unknown"
		default:
			verdicts[key] = "illegal"
		}
		file := filepath.Join(artifactDir(), fmt.Sprintf("register-%s-%d.html", sanitize(key), time.Now().UnixNano()))
		if err := porcupine.VisualizePath(RegisterModel, info, file); err == nil {
			files = append(files, file)
		}
		out = append(out, Violation{Property: PropRegister, Key: key, At: registerAt(info),
			Evidence: fmt.Sprintf("porcupine: %s (%d operations); %s; visualization: %s",
				verdicts[key], len(ops[key]), registerEvidence(info), file)})
	}
	out = append(out, sameFenceWriters(h)...)
	return out, verdicts, files
}

// registerEvidence describes where linearization got stuck: the longest
// linearizable prefix found, ending with its last operations.
func registerEvidence(info porcupine.LinearizationInfo) string {
	var best []porcupine.Operation
	for _, partition := range info.PartialLinearizationsOperations() {
		for _, lin := range partition {
			if len(lin) > len(best) {
				best = lin
			}
		}
	}
	if len(best) == 0 {
		return "no operation could be linearized"
	}
	var lines []string
	for _, op := range best[max(0, len(best)-4):] {
		lines = append(lines, fmt.Sprintf("%s [%s, %s] %s", op.Metadata, ms(op.Call), ms(op.Return),
			RegisterModel.DescribeOperation(op.Input, op.Output)))
	}
	return fmt.Sprintf("the longest linearizable prefix has %d operations, ending with:\n%s", len(best), strings.Join(lines, "\n"))
}

// registerAt is the latest call among the operations linearized: about
// where linearization failed.
func registerAt(info porcupine.LinearizationInfo) int64 {
	var at int64
	for _, partition := range info.PartialLinearizationsOperations() {
		for _, lin := range partition {
			for _, op := range lin {
				at = max(at, op.Call)
			}
		}
	}
	return at
}

// sameFenceWriters reports acquisitions that wrote the same resource with
// the same fence and were both taken. A set writes the resource of each of
// its keys with that key's fence.
func sameFenceWriters(h *History) []Violation {
	type writer struct {
		hold string
		e    Event
	}
	first := map[string]map[int64]writer{}
	holds := map[[2]string]*Hold{} // by ID and resource: a set's Hold of the resource's key
	for _, hd := range h.Holds {
		holds[[2]string{hd.ID, resourceOf(hd.Key)}] = hd
	}
	var out []Violation
	writes := slices.Clone(h.Writes)
	slices.SortFunc(writes, func(a, b Event) int { return cmp64(a.Invoke, b.Invoke) })
	reported := map[[2]string]bool{}
	for _, e := range writes {
		if e.Outcome != OutOK {
			continue
		}
		if first[e.Key] == nil {
			first[e.Key] = map[int64]writer{}
		}
		id := holdID(e)
		w, ok := first[e.Key][e.Fence]
		if !ok {
			first[e.Key][e.Fence] = writer{id, e}
			continue
		}
		if w.hold == id || reported[[2]string{w.hold, id}] {
			continue
		}
		reported[[2]string{w.hold, id}] = true
		a, b := holds[[2]string{w.hold, e.Key}], holds[[2]string{id, e.Key}]
		limit := ""
		if a != nil && b != nil {
			limit = explainFences(h, a, b)
		}
		out = append(out, Violation{Property: PropFencing, Key: e.Key, At: e.Invoke, Limit: limit,
			Evidence: fmt.Sprintf("two holders wrote with fence %d and both writes were taken\nA: %s write %q [%s, %s]\nB: %s write %q [%s, %s]",
				e.Fence, w.hold, w.e.Value, ms(w.e.Invoke), ms(w.e.Return), id, e.Value, ms(e.Invoke), ms(e.Return))})
	}
	return out
}

func artifactDir() string {
	if ArtifactDir != "" {
		return ArtifactDir
	}
	return os.TempDir()
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, s)
}

// StaleWrites counts the writes made after the writer's right had ended
// (its lock's context was done, or it had called Release): how many the
// resource refused, and how many it took (no newer holder had written
// yet, which fencing allows).
func StaleWrites(h *History) (refused, taken int) {
	end := map[string]int64{}
	for _, hd := range h.Holds {
		end[hd.ID] = hd.End
	}
	for _, e := range h.Writes {
		if e.Invoke <= end[holdID(e)] {
			continue
		}
		switch e.Outcome {
		case OutRejected:
			refused++
		case OutOK:
			taken++
		}
	}
	return refused, taken
}
