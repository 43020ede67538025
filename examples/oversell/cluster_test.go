package main

import (
	"context"
	"testing"
	"time"

	"github.com/seed5e0b76d9/redislock/internal/redistest"
)

// The demo runs its sale on a real Cluster and a Sentinel-managed primary,
// given their URLs, and the locked run sells exactly the stock.
func TestSaleOnClusterAndSentinel(t *testing.T) {
	cluster := redistest.StartCluster(t)
	sentinel := redistest.StartSentinel(t)
	for name, url := range map[string]string{
		"cluster":  "redis+cluster://" + cluster.Addrs()[0],
		"sentinel": "redis+sentinel://" + sentinel.SentinelAddrs()[0] + "?master_name=" + sentinel.MasterName(),
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := sale(ctx, url, testConfig(true)); err != nil {
				t.Fatal(err)
			}
		})
	}
}
