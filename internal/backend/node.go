// Package backend is the layer of redislock that knows where locks live:
// a Node is one Redis deployment reached through one go-redis client (a
// single node, a Sentinel's primary, or a Cluster, whose sets across hash
// slots it takes slot by slot); a Quorum is a majority of independent
// masters, each reached as a scripts.Redis. Both are a lease.Store (what a
// hold needs: renew, release) and take a lease.Request to acquire; the
// root package picks one per Locker and never asks which.
package backend

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seed5e0b76d9/redislock/internal/lease"
	"github.com/seed5e0b76d9/redislock/internal/line"
	"github.com/seed5e0b76d9/redislock/internal/scripts"
)

// HandOffs reports hand-offs: of key to n waiters, by a release through
// Redis or, with local, by a pass within this process.
type HandOffs func(ctx context.Context, key string, local bool, n int)

// A Node is one deployment: its client (scripts.Redis), the holds of its
// Locker (lease.Env) and the Locker's lines on it. Its Locker waits in line
// for keys held by others (see the line layer); a plain lock is one key,
// taken by take.lua and dropped by drop.lua.
type Node struct {
	R        *scripts.Redis
	Env      *lease.Env
	Lines    *line.Lines
	HandOffs HandOffs
}

// NewNode returns the Node of client for a Locker whose id names its wake
// channels, with keys under ns; env.Store becomes the Node.
func NewNode(client redis.UniversalClient, ns, id string, env *lease.Env, h HandOffs) *Node {
	r := scripts.NewRedis(client, ns)
	n := &Node{R: r, Env: env, Lines: line.New(r, env, id), HandOffs: h}
	env.Store, env.ReleaseBound = n, r.ReleaseBound()
	return n
}

// Check refuses, before anything is sent, a request the Node cannot serve:
// a WithReplicas timeout that the client's ReadTimeout would cut short.
func (n *Node) Check(r *lease.Request) error {
	read := n.R.Timing.Read
	if r.Replicas.N > 0 && read > 0 && r.Replicas.Timeout > read-scripts.WaitSlack(read) {
		return fmt.Errorf("%w: WithReplicas timeout %v: must leave %v of the client's ReadTimeout (%v): Redis answers a WAIT that timed out up to 100ms late, and go-redis would stop reading first",
			scripts.ErrInvalidOption, r.Replicas.Timeout, scripts.WaitSlack(read), read)
	}
	return nil
}

// Batch returns the address of the Redis node that serves h's keys, for a
// ClusterClient, or "" (one node for all keys) for other clients: the
// keeper renews the leases of one node in one pipeline. When the
// ClusterClient cannot tell (its slot map is being reloaded), it returns
// the key's slot instead: the renewals of one slot are served by one node,
// so a pipeline never waits on two. A hold across slots has a pipeline of
// its own.
func (n *Node) Batch(h *lease.Hold) string {
	c, ok := n.R.Client.(*redis.ClusterClient)
	switch {
	case !ok:
		return ""
	case len(h.Parts) > 1:
		return "set " + h.Token
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	node, err := c.MasterForKey(ctx, n.R.Keys.Lock(h.Keys[0]))
	if err != nil {
		return "slot " + strconv.Itoa(int(scripts.Slot(scripts.HashPart(n.R.Keys.Lock(h.Keys[0])))))
	}
	return node.Options().Addr
}

// PTTL returns h's lease left as Redis sees it (the shortest of its
// parts'), scripts.LeaseNotHeld when h does not hold every key.
func (n *Node) PTTL(ctx context.Context, h *lease.Hold) (time.Duration, error) {
	left := time.Duration(-1)
	for _, part := range h.Parts {
		d, err := n.R.PTTL(ctx, part, h.Token, h.Mode)
		switch {
		case err != nil:
			return 0, err
		case d == scripts.LeaseNotHeld:
			return d, nil
		case left < 0 || d < left:
			left = d
		}
	}
	return left, nil
}

// Inspect reports who holds key.
func (n *Node) Inspect(ctx context.Context, key string) (scripts.Info, error) {
	return n.R.Inspect(ctx, key)
}

// Shutdown waits until the Node's subscriptions have ended, or ctx ends.
func (n *Node) Shutdown(ctx context.Context) error { return n.Lines.Shutdown(ctx) }
