package backend

import (
	"context"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock/internal/lease"
	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// Renew runs renew.lua (renew_shared.lua) for each part of each of sets, in
// one pipeline (per part, when replicas must acknowledge the writes of a
// hold across slots: each part's on its own master), and returns a reply
// per set: set when every part was set, lost when a part was not held (its
// first key not held named), else superseded, or the first error.
//
// With replicas on a Cluster whose slot moved (a failover), the renewals the
// old master answered MOVED ran nowhere (go-redis does not follow MOVED for
// one master's client): they are sent once more, when the slot map names
// the new master (see writer).
func (n *Node) Renew(ctx context.Context, sets []lease.Set) []lease.Reply {
	type call struct {
		set  int
		keys []string
	}
	var calls []call
	for i, s := range sets {
		for _, part := range s.H.Parts {
			calls = append(calls, call{i, part})
		}
	}
	rep := sets[0].H.Replicas
	group := [][]call{calls}
	if rep.N > 0 && len(sets[0].H.Parts) > 1 {
		group = nil
		for _, c := range calls {
			group = append(group, []call{c})
		}
	}
	replies := make([]lease.Reply, len(sets))
	for i, s := range sets {
		replies[i] = lease.Reply{Code: scripts.ReplyOK, Fences: make([]int64, len(s.H.Keys))}
	}
	for _, g := range group {
		run := make([]scripts.Call, len(g))
		for j, c := range g {
			a := sets[c.set].Args
			a.Keys = c.keys
			run[j] = a.Call(n.R.Keys)
		}
		for j, r := range n.renewOn(ctx, n.R.Keys.Lock(g[0].keys[0]), run, rep, rep.N > 0) {
			c := g[j]
			merge(&replies[c.set], sets[c.set].H.Keys, c.keys, r, rep, sets[c.set].Args.Keys[0])
		}
	}
	return replies
}

// merge adds to out, the reply for a hold of keys, the reply r of the
// renewal of its part (acknowledged by acked replicas).
func merge(out *lease.Reply, keys, part []string, r renewed, rep scripts.Replicas, key string) {
	switch {
	case out.Lost():
		return
	case r.err != nil:
		out.Err = scripts.Failed("renew", key, r.err)
	case r.code == scripts.ReplyOK && int(r.acked) < rep.N:
		out.Err = scripts.Failed("renew", key, scripts.NotReplicated(rep, r.acked, "the renewal does not count"))
	case r.code == scripts.ReplyNotOurs:
		*out = lease.Reply{Code: r.code}
		if r.missing > 0 {
			out.Missing = slices.Index(keys, part[r.missing-1]) + 1
		}
	case r.code != scripts.ReplyOK:
		if out.Err == nil {
			out.Code = r.code
		}
	default:
		for i, f := range r.fences {
			out.Fences[slices.Index(keys, part[i])] = f
		}
	}
}

// renewed is one renewal's reply.
type renewed struct {
	code    int64
	fences  []int64
	missing int
	acked   int64
	err     error
}

// renewOn runs calls, whose keys are all served by the node of rkey, in
// one pipeline acknowledged by rep's replicas; it sends the renewals
// answered MOVED again when reroute is true.
func (n *Node) renewOn(ctx context.Context, rkey string, calls []scripts.Call, rep scripts.Replicas, reroute bool) []renewed {
	out := make([]renewed, len(calls))
	c, err := n.writer(ctx, rkey, rep)
	if err != nil {
		for i := range out {
			out[i].err = err
		}
		return out
	}
	cmds, acked, err := scripts.Pipeline(ctx, c, calls, rep)
	n.R.NoteErr(err)
	var again []scripts.Call
	var at []int
	for i, cmd := range cmds {
		if reroute && scripts.Moved(cmd.Err()) {
			again, at = append(again, calls[i]), append(at, i)
			continue
		}
		out[i].code, out[i].fences, out[i].missing, out[i].err = scripts.ParseRefresh(cmd)
		out[i].acked = acked
	}
	if len(again) > 0 {
		n.R.NoteErr(cmds[at[0]].Err()) // err may be another command's
		n.rerouted(ctx, rkey, c)
		for j, r := range n.renewOn(ctx, rkey, again, rep, false) {
			out[at[j]] = r
		}
	}
	return out
}

// writer returns the client that writes the key rkey: the Locker's client,
// or, when replicas must acknowledge the write on a Cluster, the client of
// the key's master, so that WAIT goes to the node that ran the write.
func (n *Node) writer(ctx context.Context, rkey string, r scripts.Replicas) (redis.Cmdable, error) {
	c, ok := n.R.Client.(*redis.ClusterClient)
	if !ok || r.N == 0 {
		return n.R.Client, nil
	}
	return c.MasterForKey(ctx, rkey)
}

// acked runs call on the writer of rkey, followed by WAIT for r's
// replicas, and returns how many acknowledged. A write that the key's old
// master answered MOVED (a failover moved the slot) ran nowhere: it is sent
// once more, when the slot map names the new master.
func (n *Node) acked(ctx context.Context, rkey string, call scripts.Call, r scripts.Replicas) (*redis.Cmd, int64, error) {
	for try := 0; ; try++ {
		c, err := n.writer(ctx, rkey, r)
		if err != nil {
			return nil, 0, err
		}
		cmds, acked, err := scripts.Pipeline(ctx, c, []scripts.Call{call}, r)
		if try == 0 && scripts.Moved(err) {
			n.R.NoteErr(err)
			n.rerouted(ctx, rkey, c)
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		return cmds[0], acked, nil
	}
}

// rerouted waits, a second at most, until the Cluster's slot map names
// another master for key than old.
func (n *Node) rerouted(ctx context.Context, key string, old redis.Cmdable) {
	cc, ok := n.R.Client.(*redis.ClusterClient)
	if !ok {
		return
	}
	for end := time.Now().Add(time.Second); time.Now().Before(end); {
		if m, err := cc.MasterForKey(ctx, key); err == nil && redis.Cmdable(m) != old {
			return
		}
		if scripts.Sleep(ctx, nil, 20*time.Millisecond) != nil {
			return
		}
	}
}

// attemptAcked runs the single attempt a, acknowledged by r's replicas when
// r.N > 0: ErrNotReplicated when fewer acknowledged it in time.
func (n *Node) attemptAcked(ctx context.Context, a scripts.AttemptArgs, r scripts.Replicas) (scripts.AttemptResult, error) {
	if r.N == 0 {
		return n.R.Attempt(ctx, a)
	}
	start := time.Now()
	cmd, acked, err := n.acked(ctx, n.R.Keys.Lock(a.Keys[0]), a.Call(n.R.Keys), r)
	resent := n.R.Timing.MayResend(time.Since(start))
	if err != nil {
		return scripts.AttemptResult{Resent: resent}, err
	}
	res, err := scripts.ParseAttempt(a, cmd)
	res.Resent = resent
	if err == nil && res.Ours && int(acked) < r.N {
		return res, scripts.NotReplicated(r, acked, "the write does not count")
	}
	return res, err
}
