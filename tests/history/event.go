package history

// An Event is one line of JSON a worker process writes to its standard
// output, at once, as the operation it records completes (so the parent has
// everything a process did up to the moment it is paused or dies). Times are
// Now readings; an operation's interval is [Invoke, Return]: Invoke is read
// just before the call, Return just after it returned.
type Event struct {
	Type   string `json:"t"`           // one of the Ev* constants
	Proc   int    `json:"p"`           // the worker process
	Worker int    `json:"w"`           // the goroutine within it
	Hold   int64  `json:"h,omitempty"` // the acquisition attempt, numbered per worker from 1
	Key    string `json:"k,omitempty"` // the lock key (EvAcquire: a set's first key); the resource key (EvWrite, EvRead)
	Mode   string `json:"m,omitempty"` // Mode* constants (EvAcquire)
	Call   string `json:"c,omitempty"` // Call* constants (EvAcquire)
	// Keys are a set's keys (EvAcquire of a Call*Multi), in the order
	// given, Key the first; nil for one key.
	Keys []string `json:"ks,omitempty"`

	Invoke int64 `json:"i,omitempty"`
	Return int64 `json:"r,omitempty"`
	// At is, for EvAcquire, when the Obtain hook ran (before the call
	// returned, after Redis gave the lock: see Hold.Acquired); for EvDone,
	// when the lock's context was seen done; for EvStall, when the process
	// was seen running again.
	At int64 `json:"a,omitempty"`

	Outcome string `json:"o,omitempty"` // Out* constants
	Err     string `json:"e,omitempty"`
	Token   string `json:"tok,omitempty"`
	Fence   int64  `json:"f,omitempty"` // the lock's fence (EvAcquire: a set's first key's), the fence written or read (EvWrite, EvRead)
	// Fences are a set's fences (EvAcquire of a Call*Multi): Lock.Fences,
	// one per key of Keys, in the same order.
	Fences []int64 `json:"fs,omitempty"`
	// Until is the latest end of the lease the holder's Lock.Until reported
	// (on the Now clock), the largest of the readings taken up to this
	// event: when acquired, before each operation and at each renewal.
	Until  int64  `json:"u,omitempty"`
	Value  string `json:"v,omitempty"` // written or read (EvWrite, EvRead)
	Source string `json:"s,omitempty"` // how a done context was seen (Src* constants)
}

// Event types.
const (
	EvReady   = "ready"   // the process is set up and starts working
	EvAcquire = "acquire" // an Obtain, TryObtain or WithLock (or its Multi) returned (WithLock: fn was called, or it failed)
	EvDone    = "done"    // a held lock's context was seen done
	EvRelease = "release" // a Release (or WithLock's end) of a held lock
	EvWrite   = "write"   // SetFenced on the resource
	EvRead    = "read"    // a plain read of the resource (HMGET value fence)
	EvStall   = "stall"   // the process ran nothing for a while: Invoke..At
	EvExit    = "exit"    // the process stopped cleanly; Err says what it found wrong
)

// Modes of an acquisition. A set is exclusive (ModeExclusive: the writer
// of each read-write key in it) or shared (ModeReader: a reader of each
// key, all read-write keys).
const (
	ModeExclusive = "x" // a plain lock; an exclusive set
	ModeWriter    = "w" // the writer of a read-write lock (an exclusive acquisition of its key)
	ModeReader    = "r" // a reader (WithShared)
	ModePermit    = "p" // a permit of a semaphore (WithPermits)
)

// Calls that acquire.
const (
	CallObtain   = "obtain"
	CallTry      = "try"
	CallWithLock = "withlock"
	// A set of keys (Event.Keys), held as one lock.
	CallObtainMulti   = "obtainmulti"
	CallTryMulti      = "trymulti"
	CallWithLockMulti = "withlockmulti"
)

// keysOf returns the keys of an acquisition: a set's, or its one key.
func keysOf(e Event) []string {
	if e.Keys != nil {
		return e.Keys
	}
	return []string{e.Key}
}

// tries reports whether call makes a single attempt (TryObtain,
// TryObtainMulti): it may fail on contention, and never waits in line.
func tries(call string) bool { return call == CallTry || call == CallTryMulti }

// Outcomes.
const (
	OutOK          = "ok"           // acquired, released, written, read
	OutNotObtained = "not_obtained" // ErrNotObtained
	OutCanceled    = "canceled"     // the process was told to stop while it waited
	OutRejected    = "rejected"     // SetFenced: ErrFenceRejected (nothing written)
	OutNotHeld     = "not_held"     // Release: ErrNotHeld
	OutError       = "error"        // any other error: for a write, it may or may not have happened
)

// How a done lock context was seen. Each is a moment at or after the
// context was cancelled, so the earliest of them bounds the end of the
// holder's right from above.
const (
	SrcLostHook = "lost"  // Hooks.Lost, called by the goroutine that cancelled the context
	SrcWatch    = "watch" // a goroutine blocked on ctx.Done()
	SrcPoll     = "poll"  // ctx.Err() != nil, checked before an operation
)
